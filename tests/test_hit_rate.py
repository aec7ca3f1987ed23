"""Hit statistics (POOL-8): query and hit tokens reported beside the counters are the engine's
matches summed, as the kit sums them; an engine that reports none is not judged on them."""

from __future__ import annotations

import random
from functools import partial

import pytest

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.cache.scenarios import SCENARIOS
from kvconf.conformance.cache.walk import CacheWalk, TraceHolder
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.mutants.cache import HitsCountHost
from kvconf.conformance.oracles import STEP_ORACLES, Violation
from kvconf.conformance.running.runner import play
from kvconf.conformance.runtime.memory import shadow_memory
from kvconf.reference import CacheConfig, PrefixCache


def _walk(factory, seed: int) -> CacheWalk:
    walk = CacheWalk(random.Random(seed), factory, EngineConfig(device_pages=16, host_pages=8),
                     TraceHolder(), memory=shadow_memory, oracles=STEP_ORACLES)
    walk.run(30)
    walk.finish()
    return walk


@pytest.mark.behaviours("POOL-8")
def test_the_reference_counts_every_query_and_its_device_hits_through_a_reset() -> None:
    cache = PrefixCache(CacheConfig(page_size=2, device_pages=8))
    cache.insert(0, [1, 2, 3, 4], cache.alloc(2))
    cache.match(0, [1, 2, 3, 4, 5])  # 5 asked, 4 served
    cache.match(1, [1, 2])  # another namespace: 2 asked, none served
    assert (cache.query_tokens, cache.hit_tokens) == (7, 4)
    assert cache.reset() is True
    cache.match(0, [1, 2, 3, 4])
    assert (cache.query_tokens, cache.hit_tokens) == (11, 4)


@pytest.mark.behaviours("POOL-8")
def test_the_walk_judges_the_reference_s_statistics_against_its_own_sums() -> None:
    for seed in range(6):
        walk = _walk(ReferenceCacheAdapter, seed)
        led = walk.driver.ledger
        assert "POOL-8" in walk.driver.judged()
        counts = walk.engine.counters()
        assert (counts["query_tokens"], counts["hit_tokens"]) == (led.queried, led.hits)
        assert led.queried >= led.hits


@pytest.mark.behaviours("POOL-8")
def test_host_hits_counted_as_hits_fail_pool_8() -> None:
    sc = next(s for s in SCENARIOS if s.name == "writeback-demote-loadback")
    with pytest.raises(Violation) as e:
        play(partial(ReferenceCacheAdapter, cache_cls=HitsCountHost), sc.trace(EngineConfig()))
    assert e.value.behaviours == ("POOL-8",) and "hit_tokens" in e.value.message


class _NoStatistics(ReferenceCacheAdapter):
    """Counters without hit statistics: legal, and POOL-8 is then not judged."""

    def counters(self) -> dict[str, int]:
        return self.cache.counters()


def test_counters_without_statistics_are_not_judged_on_them() -> None:
    walk = _walk(_NoStatistics, 0)
    judged = walk.driver.judged()
    assert "POOL-6" in judged and "POOL-8" not in judged
