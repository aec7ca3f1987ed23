"""Races at --profile ci: the cache generator biases its rules towards overlapping in-flight
operations on one prefix (a held-back copy, the caller's lock released before its ack, an
eviction on the copy's source tier), so a defect only such a race shows is found at ci."""

from __future__ import annotations

from functools import partial

import pytest

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.cache.generator import TraceHolder
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.mutants.cache import UnlockDropsTransferPin
from kvconf.conformance.oracles import Violation
from kvconf.conformance.running.profiles import Budget, get_profile
from kvconf.conformance.running.runner import run_fuzz


@pytest.mark.behaviours("HOST-3", "PIN-2")
@pytest.mark.parametrize("seed", [1, 2])
def test_fuzz_cache_finds_the_loadback_race_at_ci(seed: int) -> None:
    """E-21 survived fuzz-cache at ci with seeds 1 and 2 before the race rules; now found."""
    ci = get_profile("ci")
    holder = TraceHolder()
    with pytest.raises(Violation) as e:
        run_fuzz(partial(ReferenceCacheAdapter, cache_cls=UnlockDropsTransferPin),
                 EngineConfig(), holder, Budget(examples=ci.examples), ci.steps, seed)
    assert "HOST-3" in e.value.behaviours or "PIN-2" in e.value.behaviours, e.value


@pytest.mark.behaviours("HOST-3")
def test_the_generator_plays_races() -> None:
    ci = get_profile("ci")
    holder = TraceHolder()
    run_fuzz(ReferenceCacheAdapter, EngineConfig(), holder, Budget(examples=20), ci.steps, 0)
    assert holder.seen_ops.get("loadback:started", 0) and holder.seen_ops.get("ack", 0)
