"""DET-1's replay of a cache walk's recorded calls gives the verdicts a second full play gave.

The second play of a walk used to be a whole driver (the kit's memory and ledger, no oracles)
whose log was compared with the first's; now a fresh engine gets the first play's calls
(``kvconf.conformance.cache.tape``) and each answer is compared. These tests play the old way and
the new way side by side on seeded walks, for the reference and every cache mutant: the same
verdict (the same oracle, rules and step, or none). Engines that answer differently the second
time are caught both ways; one that only names its nodes, handles and copies differently the
second time is caught by neither.
"""

from __future__ import annotations

import pytest
from other_end_pool import OtherEndPool

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.cache.driver import CacheDriver
from kvconf.conformance.cache.generator import TraceHolder, play_walk
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.protocol import CopyOp, Match
from kvconf.conformance.mutants import all_mutants
from kvconf.conformance.oracles import Violation
from kvconf.conformance.oracles.determinism import DeterminismOracle

CONFIGS = (EngineConfig(page_size=2, device_pages=24, host_pages=24),
           EngineConfig(page_size=1, device_pages=8, host_pages=6))
CACHE_MUTANTS = [m for m in all_mutants() if m.level == "cache"]


def _old_way(factory, config: EngineConfig, seed: int, steps: int) -> None:
    """The first play, then a second driver on a fresh engine, the two logs compared."""
    walk = play_walk(factory, config, TraceHolder(), seed, steps, determinism=False)
    again = CacheDriver(factory(config), config, oracles=(), clock="explicit")
    for i, s in enumerate(walk.trace.steps):
        again.step(i, s)
    DeterminismOracle().compare(walk.driver.log, again.log)


def _verdict(play) -> tuple | None:
    try:
        play()
    except Violation as v:
        return (v.oracle, v.behaviours, v.step)
    return None


def _compare(factory, seeds: range, steps: int = 40) -> int:
    """Asserts both ways agree on every walk; returns how many failed."""
    failed = 0
    for config in CONFIGS:
        for seed in seeds:
            old = _verdict(lambda c=config, s=seed: _old_way(factory, c, s, steps))
            new = _verdict(lambda c=config, s=seed: play_walk(factory, c, TraceHolder(), s,
                                                              steps))
            assert old == new, (factory, config, seed, old, new)
            failed += old is not None
    return failed


@pytest.mark.behaviours("DET-1")
def test_the_reference_passes_both_ways() -> None:
    assert _compare(ReferenceCacheAdapter, range(40)) == 0


@pytest.mark.behaviours("DET-1")
@pytest.mark.parametrize("mutant", CACHE_MUTANTS, ids=lambda m: m.name)
def test_every_cache_mutant_gets_the_same_verdict_both_ways(mutant) -> None:
    _compare(mutant.factory(), range(6))


class _SecondPicksOtherPages(ReferenceCacheAdapter):
    """Every second instance hands out free pages from the other end: its answers differ."""

    made = 0

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        type(self).made += 1
        if type(self).made % 2 == 0:
            self.cache.pools = {t: OtherEndPool(t, p.size) for t, p in self.cache.pools.items()}


class _SecondRenames(ReferenceCacheAdapter):
    """Every second instance names its nodes, lock handles and copies otherwise (offset by
    1000) and answers alike: no difference DET-1 may see."""

    made = 0

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        type(self).made += 1
        self.off = 1000 if type(self).made % 2 == 0 else 0

    def match(self, namespace, tokens) -> Match:
        m = super().match(namespace, tokens)
        return Match(m.device_len, m.host_len, m.device_pages, m.host_pages,
                     m.device_node + self.off, m.host_node + self.off)

    def lock(self, node, tier):
        return super().lock(node - self.off, tier) + self.off

    def unlock(self, handle) -> None:
        super().unlock(handle - self.off)

    def _op(self, t) -> CopyOp | None:
        return None if t is None else CopyOp(t.op_id + self.off, t.kind, tuple(t.pairs))

    def start_writeback(self, node):
        return super().start_writeback(node - self.off)

    def start_loadback(self, node):
        return super().start_loadback(node - self.off)

    def finish_transfer(self, op_id, success) -> None:
        super().finish_transfer(op_id - self.off, success)


@pytest.mark.behaviours("DET-1")
def test_an_engine_that_answers_otherwise_the_second_time_is_caught_both_ways() -> None:
    _SecondPicksOtherPages.made = 0
    found = []
    config = CONFIGS[0]
    for seed in range(8):
        old = _verdict(lambda s=seed: _old_way(_SecondPicksOtherPages, config, s, 40))
        new = _verdict(lambda s=seed: play_walk(_SecondPicksOtherPages, config, TraceHolder(),
                                                s, 40))
        assert old is not None and old[:2] == ("determinism", ("DET-1",)), old
        # The replay compares each call's answer, the old way each step's log: the same step,
        # or an earlier one where a call's answer differs before the log shows it.
        assert new is not None and new[:2] == old[:2] and new[2] <= old[2], (old, new)
        found.append(new)
    assert found


@pytest.mark.behaviours("DET-1")
def test_an_engine_that_only_names_things_otherwise_passes_both_ways() -> None:
    _SecondRenames.made = 0
    assert _compare(_SecondRenames, range(10)) == 0
