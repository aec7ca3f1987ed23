"""Oracles that skip what they judged already (``Oracle.incremental``) give the very verdicts of
the full checks: on many seeded walks, against the reference and against every cache mutant,
each walk is played twice, incremental and full, and both must end the same way (passed, or the
same rule broken at the same step with the same message)."""

from __future__ import annotations

from functools import partial

import pytest

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.cache.generator import TraceHolder, play_walk
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.mutants.cache import PLANTED
from kvconf.conformance.oracles import Oracle, Violation

CONFIGS = (EngineConfig(), EngineConfig(device_pages=8, host_pages=6),
           EngineConfig(page_size=1))


def _verdict(factory, config: EngineConfig, seed: int, incremental: bool,
             monkeypatch: pytest.MonkeyPatch) -> tuple:
    """How one walk ends, and the trace it drew."""
    monkeypatch.setattr(Oracle, "incremental", incremental)
    holder = TraceHolder()
    try:
        play_walk(factory, config, holder, seed, 40)
        outcome: tuple = ("passed",)
    except Violation as v:
        outcome = (v.oracle, v.behaviours, v.message, v.step)
    assert holder.last is not None
    return outcome, holder.last.model_dump_json()


def _same_both_ways(factory, seeds, monkeypatch) -> list[tuple]:
    outcomes = []
    for config in CONFIGS:
        for seed in seeds:
            full = _verdict(factory, config, seed, False, monkeypatch)
            fast = _verdict(factory, config, seed, True, monkeypatch)
            assert fast == full, (config, seed)
            outcomes.append(full[0])
    return outcomes


def test_incremental_oracles_judge_the_reference_as_the_full_ones(monkeypatch):
    outcomes = _same_both_ways(ReferenceCacheAdapter, range(40), monkeypatch)
    assert all(o == ("passed",) for o in outcomes)


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_incremental_oracles_judge_each_cache_mutant_as_the_full_ones(name, monkeypatch):
    outcomes = _same_both_ways(partial(ReferenceCacheAdapter, cache_cls=PLANTED[name]),
                               range(6), monkeypatch)
    assert any(o != ("passed",) for o in outcomes), "the mutant escaped every walk"
