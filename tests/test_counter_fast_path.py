"""The counter oracle's fast path (``accounting._fine``) says "holds" only where its judge
(``CounterOracle._judge``) finds nothing: on every state of many seeded walks, with copies in
flight of both kinds, for an engine whose loadbacks are stream-ordered (HOST-11) and one whose
are not, and on each state with its reported counts broken one way or another."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.cache.generator import TraceHolder, play_walk
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.oracles import Ctx, Violation
from kvconf.conformance.oracles.accounting import CounterOracle, _fine, snapshot_counts

CONFIGS = (EngineConfig(), EngineConfig(device_pages=8, host_pages=6))


def _states(config: EngineConfig, seeds: range) -> list[tuple]:
    """(counts, shown, ledger copy) after every step of the walks of ``seeds``."""
    seen: list[tuple] = []
    real = CounterOracle.after_step

    def spy(self, ctx: Ctx) -> None:
        led = ctx.ledger
        copy = SimpleNamespace(
            transfers=dict(led.transfers),
            stranded=dict(led.stranded),
            held=set(led.held),
            sizes=dict(led.sizes),
        )
        seen.append((dict(ctx.counters), snapshot_counts(ctx.after), copy))
        real(self, ctx)

    CounterOracle.after_step = spy
    try:
        for seed in seeds:
            play_walk(ReferenceCacheAdapter, config, TraceHolder(), seed, 40)
    finally:
        CounterOracle.after_step = real
    return seen


def _broken(counts: dict, rng: random.Random) -> dict:
    out = dict(counts)
    key = rng.choice(sorted(out))
    kind = rng.randrange(5)
    if kind == 0:
        out[key] += rng.choice((-1, 1))
    elif kind == 1:
        out[key] = -1
    elif kind == 2:
        out[key] = bool(out[key])
    elif kind == 3:
        out["free_slots"] = 0
    else:
        del out[key]
    return out


def _judged(counts: dict, shown: dict, led, early: bool) -> bool:
    """Whether ``_judge`` finds nothing."""
    features = frozenset({Feature.STREAM_ORDERED_LOADBACK} if early else ())
    ctx = Ctx(0, "step", SimpleNamespace(features=features), led, counters=counts)
    try:
        CounterOracle()._judge(ctx, shown)
    except Violation:
        return False
    return True


@pytest.mark.parametrize("config", CONFIGS, ids=("default", "tight"))
def test_fast_path_holds_only_where_the_judge_finds_nothing(config):
    rng = random.Random(0)
    states = _states(config, range(25))
    loadbacks = sum(
        any(op.kind == "loadback" for op in led.transfers.values()) for _, _, led in states
    )
    assert loadbacks > 20  # the walks leave loadbacks in flight: the path they used to skip
    fine = 0
    for counts, shown, led in states:
        for early in (False, True):
            for got in (counts, _broken(counts, rng)):
                if _fine(got, shown, led, early):
                    fine += 1
                    assert _judged(got, shown, led, early), (got, shown, led, early)
    assert fine > len(states)  # the fast path is taken, not always declined


@pytest.mark.parametrize("config", CONFIGS, ids=("default", "tight"))
def test_counts_kept_part_by_part_are_the_snapshots_counts(config):
    """``CounterOracle._shown`` keeps each part of the counts while what it reads is the
    same: at every step they must be the counts read afresh from the snapshot."""
    checked = 0
    real = CounterOracle.after_step

    def spy(self, ctx: Ctx) -> None:
        nonlocal checked
        assert self._shown(ctx.after) == snapshot_counts(ctx.after), ctx.index
        checked += 1
        real(self, ctx)

    CounterOracle.after_step = spy
    try:
        for seed in range(25):
            play_walk(ReferenceCacheAdapter, config, TraceHolder(), seed, 40)
    finally:
        CounterOracle.after_step = real
    assert checked > 25 * 40
