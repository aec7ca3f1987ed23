"""The accounting checks: copies in flight against the caller's (HOST-10), the rest state
(POOL-5) and the engine's own counters (POOL-6), at both levels, with and without a snapshot."""

from __future__ import annotations

import copy
import random
from functools import partial

import pytest

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter
from kvconf.conformance.cache.driver import CacheDriver
from kvconf.conformance.cache.scenarios import SCENARIOS
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.mutants.cache import EvictableOffByOne, WritebackNeverRetired
from kvconf.conformance.mutants.scheduler import AbortKeepsPin, AckAfterAbortDropped
from kvconf.conformance.oracles import Violation
from kvconf.conformance.oracles.accounting import (
    SCHED_COUNTERS,
    CounterOracle,
    RestOracle,
    TransferOracle,
    snapshot_counts,
)
from kvconf.conformance.running.runner import play
from kvconf.conformance.scheduler.driver import REST_RID
from kvconf.conformance.scheduler.generator import play_sched
from kvconf.conformance.scheduler.scenarios import SCHED_SCENARIOS
from kvconf.conformance.scheduler.trace import AbortAt, Arrival, SchedConfig, SchedTrace
from kvconf.conformance.trace import Trace
from kvconf.reference import CacheConfig, PrefixCache
from kvconf.reference.scheduler import Scheduler, SchedulerConfig
from kvconf.reference.tiers import Tier

BLIND = frozenset({Feature.SNAPSHOT})  # what a black-box variant leaves out


def cache_adapter(cls: type[PrefixCache] = PrefixCache, drop: frozenset[Feature] = frozenset()):
    """The reference adapter with ``cls`` planted, less the features ``drop`` names."""
    features = ReferenceCacheAdapter.features - drop
    return type("Variant", (ReferenceCacheAdapter,), {"features": features,
                                                      "__init__": _init(cls)})


def _init(cls):
    def __init__(self, config: EngineConfig) -> None:
        ReferenceCacheAdapter.__init__(self, config, cache_cls=cls)
    return __init__


def sched_adapter(cls: type[Scheduler] = Scheduler, drop: frozenset[Feature] = frozenset()):
    features = ReferenceSchedulerAdapter.features - drop
    variant = type("Variant", (ReferenceSchedulerAdapter,), {"features": features})
    return partial(variant, scheduler_cls=cls)


def scenario(name: str):
    return next(s for s in SCENARIOS if s.name == name)


def sched_scenario(name: str):
    return next(s for s in SCHED_SCENARIOS if s.name == name)


# ------------------------------------------------------------------------------ counters
def _evictable_by_evicting(cache: PrefixCache, tier: Tier) -> int:
    """What evicting ``tier`` to the bottom frees now, on a copy."""
    return copy.deepcopy(cache).evict(tier, 1 << 30)


@pytest.mark.behaviours("POOL-6")
def test_reference_counters_agree_with_its_state_through_random_calls() -> None:
    """The reference keeps its counts incrementally; after every call they equal what its
    snapshot shows, and the evictable count is what evicting the tier frees."""
    rng = random.Random(5)
    cache = PrefixCache(CacheConfig(page_size=2, device_pages=12, host_pages=8))
    locks: list[int] = []
    flying: list[int] = []
    for _ in range(400):
        op = rng.randrange(7)
        toks = [rng.randrange(3) for _ in range(2 * rng.randrange(1, 5))]
        if op == 0:
            pages = cache.alloc(len(toks) // 2)
            if pages is None:
                cache.evict(Tier.DEVICE, len(toks) // 2)
                pages = cache.alloc(len(toks) // 2)
            if pages is not None:
                cache.insert(0, toks, pages)
        elif op == 1:
            m = cache.match(0, toks)
            tier = rng.choice([Tier.DEVICE, Tier.HOST])
            node = m.device_node if tier is Tier.DEVICE else m.host_node
            locks.append(cache.lock(node, tier))
        elif op == 2 and locks:
            cache.unlock(locks.pop(rng.randrange(len(locks))))
        elif op == 3:
            cache.evict(rng.choice([Tier.DEVICE, Tier.HOST]), rng.randrange(1, 4))
        elif op == 4:
            m = cache.match(0, toks)
            t = (cache.start_writeback(m.device_node) if m.device_len
                 else cache.start_loadback(m.host_node) if m.host_len else None)
            if t is not None:
                flying.append(t.op_id)
        elif op == 5 and flying:
            cache.finish_transfer(flying.pop(0), rng.random() < 0.8)
        counts = cache.counters()
        assert counts == snapshot_counts(cache.snapshot())
        for tier in Tier:
            assert counts[f"evictable_{tier.value}"] == _evictable_by_evicting(cache, tier)


@pytest.mark.behaviours("POOL-6")
def test_reference_scheduler_reports_its_free_slots() -> None:
    driver = play_sched(ReferenceSchedulerAdapter, sched_scenario("sched-abort-everywhere").trace)
    counts = driver.engine.counters()
    assert set(counts) <= SCHED_COUNTERS
    assert counts["free_slots"] == SchedConfig().max_slots  # at rest, every slot is free


@pytest.mark.behaviours("POOL-6")
def test_a_wrong_evictable_count_is_caught_at_the_step_it_goes_wrong() -> None:
    with pytest.raises(Violation) as e:
        play(cache_adapter(EvictableOffByOne), scenario("lru-victim-order").trace(EngineConfig()))
    assert e.value.oracle == "counters" and e.value.behaviours == ("POOL-6",)
    assert "evictable_device" in e.value.message


class _MiscountsAllocs(PrefixCache):
    """Counts one page too few as free after every allocation: nothing else is wrong."""

    short = 0

    def alloc(self, n, tier=Tier.DEVICE):
        got = super().alloc(n, tier)
        if got:
            self.short = 1
        return got

    def counters(self):
        out = super().counters()
        out["available_device"] -= self.short
        return out


@pytest.mark.behaviours("POOL-6")
def test_without_a_snapshot_the_counts_must_add_up_to_the_pool() -> None:
    """Free, cached, held by the caller, landing from the copies in flight: the pool."""
    trace = scenario("match-longest-whole-pages").trace(EngineConfig())
    play(cache_adapter(drop=BLIND), trace)
    with pytest.raises(Violation) as e:
        play(cache_adapter(_MiscountsAllocs, BLIND), trace)
    assert e.value.oracle == "counters" and "add up to" in e.value.message


@pytest.mark.behaviours("POOL-6")
def test_counters_are_checked_for_shape() -> None:
    oracle = CounterOracle()
    with pytest.raises(Violation, match="none of the counters"):
        oracle.names({"free_pages": 3}, SCHED_COUNTERS, "here")
    with pytest.raises(Violation, match="not a count"):
        oracle.names({"free_slots": -1}, SCHED_COUNTERS, "here")
    with pytest.raises(Violation, match="not a mapping"):
        oracle.names([("free_slots", 1)], SCHED_COUNTERS, "here")


class _LeaksASlot(Scheduler):
    """Forgets to count a slot it gives back (its counter only: the slot list is right)."""

    def counters(self):
        out = super().counters()
        out["free_slots"] = min(out["free_slots"], self.config.max_slots - 1)
        return out


@pytest.mark.behaviours("POOL-6", "POOL-5")
def test_scheduler_counters_are_checked_with_a_snapshot_and_at_rest_without() -> None:
    trace = sched_scenario("sched-abort-everywhere").trace
    with pytest.raises(Violation) as e:
        play_sched(sched_adapter(_LeaksASlot), trace)
    assert (e.value.oracle, e.value.behaviours) == ("counters", ("POOL-6",))
    with pytest.raises(Violation) as e:
        play_sched(sched_adapter(_LeaksASlot, BLIND), trace)
    assert (e.value.oracle, e.value.behaviours) == ("at-rest", ("POOL-5",))
    assert "free request slots" in e.value.message


# ------------------------------------------------------------------------------ copies in flight
@pytest.mark.behaviours("HOST-10")
def test_a_writeback_never_retired_is_caught_at_its_acknowledgement() -> None:
    trace = scenario("writeback-demote-loadback").trace(EngineConfig())
    with pytest.raises(Violation) as e:
        play(cache_adapter(WritebackNeverRetired), trace)
    assert (e.value.oracle, e.value.behaviours) == ("transfers", ("HOST-10",))
    assert "which was acknowledged at step" in e.value.message


@pytest.mark.behaviours("HOST-10", "POOL-6")
def test_without_a_snapshot_the_counters_see_a_copy_never_retired() -> None:
    """Its host pages stay the transfer's after the caller acknowledged it: the counts no
    longer add up to the pool."""
    trace = scenario("writeback-demote-loadback").trace(EngineConfig())
    with pytest.raises(Violation) as e:
        play(cache_adapter(WritebackNeverRetired, BLIND), trace)
    assert e.value.oracle == "counters" and "host" in e.value.message


@pytest.mark.behaviours("HOST-10")
def test_a_transfer_the_caller_never_started_is_caught() -> None:
    """The cache's snapshot against the caller's ledger, both ways."""
    config = EngineConfig(page_size=2, device_pages=8, host_pages=8)
    engine = ReferenceCacheAdapter(config)
    driver = CacheDriver(engine, config)
    pages = engine.alloc(2)
    engine.insert(0, [1, 2, 3, 4], pages)
    node = engine.match(0, [1, 2, 3, 4]).device_node
    engine.start_writeback(node)  # behind the driver's back
    driver.ctx.after = engine.snapshot()
    with pytest.raises(Violation, match="which was never handed out"):
        TransferOracle().after_step(driver.ctx)


@pytest.mark.behaviours("HOST-10", "REQ-4")
def test_an_acknowledgement_lost_after_abort_is_caught_at_the_scheduler_level() -> None:
    with pytest.raises(Violation) as e:
        play_sched(sched_adapter(AckAfterAbortDropped),
                   sched_scenario("sched-abort-everywhere").trace)
    assert (e.value.oracle, e.value.behaviours) == ("transfers", ("HOST-10",))
    assert "the cache still lists writeback" in e.value.message


# ------------------------------------------------------------------------------ at rest
# A request whose published prompt (four pages of eight) is pinned when it is aborted mid-decode.
PINNED_ABORT = SchedTrace(
    name="pinned-abort", config=SchedConfig(device_pages=8, host_pages=8, max_tokens=8),
    arrivals=[Arrival(at=0, rid="a", tokens=[1, 2, 1, 2, 1, 2, 1, 2], new_tokens=5)],
    aborts=[AbortAt(at=2, rid="a")])


@pytest.mark.behaviours("POOL-5")
def test_reference_serves_a_request_of_the_whole_pool_at_rest() -> None:
    driver = play_sched(ReferenceSchedulerAdapter, PINNED_ABORT)
    assert any(entry[0] == "plan" and any(r[0] == REST_RID for r in entry[2])
               for entry in driver.log)


@pytest.mark.behaviours("POOL-5")
@pytest.mark.parametrize(("drop", "how"), [
    (frozenset(), "locks are still held"),  # the snapshot shows the lock
    (BLIND, "stay pinned at rest"),  # the counters show pages no eviction can free
    (BLIND | {Feature.COUNTERS}, "was not served"),  # only the request at rest shows it
])
def test_a_pin_leaked_at_abort_is_caught_at_rest(drop, how) -> None:
    with pytest.raises(Violation) as e:
        play_sched(sched_adapter(AbortKeepsPin, drop), PINNED_ABORT)
    assert (e.value.oracle, e.value.behaviours) == ("at-rest", ("POOL-5",))
    assert how in e.value.message
    play_sched(sched_adapter(drop=drop), PINNED_ABORT)  # the reference so is fine


class _KeepsALock(PrefixCache):
    """Takes a lock of its own on the first node inserted and never releases it."""

    def insert(self, namespace, tokens, pages):
        r = super().insert(namespace, tokens, pages)
        if not getattr(self, "kept", False):
            self.kept = True
            stats = self.query_tokens, self.hit_tokens  # its own walk is no caller's query
            self._locks.acquire(self._node(self.match(namespace, tokens).device_node),
                                Tier.DEVICE, internal=True)
            self.query_tokens, self.hit_tokens = stats
        return r


@pytest.mark.behaviours("POOL-5")
def test_a_lock_left_at_rest_is_caught_by_the_cache_drain() -> None:
    trace = scenario("match-longest-whole-pages").trace(EngineConfig())
    with pytest.raises(Violation) as e:
        play(cache_adapter(_KeepsALock), trace)
    assert (e.value.oracle, e.value.behaviours) == ("at-rest", ("POOL-5",))
    assert "the engine's own lock" in e.value.message


class _LeaksAPage(PrefixCache):
    """Reports a duplicate page freed but keeps it off the free list: the pool shrinks by one
    for good."""

    def insert(self, namespace, tokens, pages):
        r = super().insert(namespace, tokens, pages)
        if r.freed and not getattr(self, "leaked", False):
            self.leaked = True
            pool = self.pools[Tier.DEVICE]
            pool._free.remove(r.freed[0])
            pool._owner[r.freed[0]] = "caller"
        return r


@pytest.mark.behaviours("POOL-5")
def test_without_snapshot_or_counters_the_whole_pool_must_be_allocatable_at_rest() -> None:
    trace = Trace.model_validate({"config": {"page_size": 2, "device_pages": 8, "host_pages": 0},
                                  "steps": [{"op": "insert", "tokens": [1, 2, 3, 4]},
                                            {"op": "insert", "tokens": [1, 2, 3, 4]}]})
    blind = BLIND | {Feature.COUNTERS}
    play(cache_adapter(drop=blind), trace)
    with pytest.raises(Violation) as e:
        play(cache_adapter(_LeaksAPage, blind), trace)
    assert (e.value.oracle, e.value.behaviours) == ("at-rest", ("POOL-5",))
    assert "cannot all be allocated" in e.value.message


@pytest.mark.behaviours("POOL-5")
def test_rest_oracle_reads_every_pool_and_state_slot() -> None:
    """A copy in flight at rest (its pin), and a state slot left to a request, are leaks."""
    cache = PrefixCache(CacheConfig(page_size=2, device_pages=4, host_pages=4))
    cache.insert(0, [1, 2], cache.alloc(1))
    t = cache.start_writeback(cache.match(0, [1, 2]).device_node)
    assert t is not None
    with pytest.raises(Violation, match="the engine's own lock"):
        RestOracle().cache(cache.snapshot(), "here")
    cache.finish_transfer(t.op_id, True)
    RestOracle().cache(cache.snapshot(), "here")
    sched = Scheduler(SchedulerConfig(**SchedConfig(mamba=True).model_dump()))
    RestOracle().scheduler(sched.snapshot(), sched.config.max_slots, "here")
    assert sched.mamba is not None
    sched.mamba.alloc(Tier.DEVICE, "request:gone")
    with pytest.raises(Violation, match="state slot 0 is owned by request:gone"):
        RestOracle().scheduler(sched.snapshot(), sched.config.max_slots, "here")
