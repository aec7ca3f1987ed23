"""The reference's snapshots reuse what did not change (``PrefixCache.snapshot``,
``Scheduler.snapshot``): every snapshot they hand out must equal, field by field, the one built
from nothing at the same moment, on many seeded walks of every shape the walk draws (splits,
evictions, unloads) and on the scheduler's fingerprinted workloads."""

from __future__ import annotations

import contextlib
import copy
import random

import pytest

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.cache.generator import TraceHolder, play_walk
from kvconf.conformance.engine.config import EngineConfig
from kvconf.reference import CacheConfig, CacheError, PrefixCache, Tier
from kvconf.reference.mamba import MambaCache
from kvconf.reference.pages import PagePool
from kvconf.reference.scheduler import Scheduler, SchedulerError, SchedulerSnapshot
from kvconf.reference.snapshot import CacheSnapshot

CONFIGS = (EngineConfig(), EngineConfig(device_pages=8, host_pages=6), EngineConfig(page_size=1))


def scratch(cache: PrefixCache) -> CacheSnapshot:
    """The snapshot of ``cache`` built from nothing: no view, order or part of an earlier one,
    its pools' included."""
    fresh = PrefixCache.__new__(PrefixCache)
    vars(fresh).update(vars(cache))
    fresh._forget_views()
    fresh.pools = {tier: unshown(pool) for tier, pool in cache.pools.items()}
    return fresh.snapshot()


def unshown(pool: PagePool) -> PagePool:
    """A copy of ``pool`` that made no view yet (``PagePool.view`` keeps its last one)."""
    twin = copy.copy(pool)
    twin._shown = None
    return twin


class Checked(PrefixCache):
    """A reference whose every snapshot is compared with the one built from nothing; one taken
    again with nothing done in between is the very same object."""

    taken = 0

    def snapshot(self) -> CacheSnapshot:
        snap = super().snapshot()
        assert snap == scratch(self)
        assert super().snapshot() is snap
        Checked.taken += 1
        return snap


@pytest.mark.parametrize("config", CONFIGS, ids=("default", "tight", "page1"))
def test_every_snapshot_equals_the_one_built_from_nothing(config):
    holder = TraceHolder()
    before = Checked.taken
    for seed in range(30):
        play_walk(lambda c: ReferenceCacheAdapter(c, cache_cls=Checked), config, holder, seed, 40)
    assert Checked.taken - before > 30 * 40  # about a snapshot a step, and the drain's


def test_every_snapshot_equals_the_one_built_from_nothing_with_l3_keys():
    """The same with an L3 store, whose nodes carry keys (L3-1), under random calls: inserts,
    matches, locks, evictions on both tiers, writebacks, prefetches and backups."""
    rng = random.Random(0)
    taken = 0
    for _ in range(40):
        c = Checked(CacheConfig(page_size=2, device_pages=12, host_pages=10, l3=True))
        handles: list[int] = []
        ops: list = []
        for _ in range(60):
            tokens = rng.choices(range(3), k=2 * rng.randint(1, 4))
            ns, what = rng.randrange(2), rng.randrange(8)
            with contextlib.suppress(CacheError):
                if what == 0:
                    pages = c.alloc(len(tokens) // 2)
                    if pages is not None:
                        c.insert(ns, tokens, pages)
                elif what == 1:
                    m = c.match(ns, tokens)
                    handles.append(
                        c.lock(
                            m.device_node if rng.random() < 0.7 else m.host_node,
                            rng.choice((Tier.DEVICE, Tier.HOST)),
                        )
                    )
                elif what == 2 and handles:
                    c.unlock(handles.pop(rng.randrange(len(handles))))
                elif what == 3:
                    c.evict(rng.choice((Tier.DEVICE, Tier.HOST)), rng.randint(1, 4))
                elif what == 4:
                    t = c.start_writeback(c.match(ns, tokens).device_node)
                    if t is not None:
                        ops.append(("copy", t.op_id))
                elif what == 5:
                    m = c.match(ns, tokens)
                    t = c.start_prefetch(m.host_node, tokens, rng.randint(1, 3), 1)
                    if t is not None:
                        ops.append(("prefetch", t.op_id, len(t.pages)))
                elif what == 6:
                    t = c.start_backup(c.match(ns, tokens).host_node, rng.randint(1, 3))
                    if t is not None:
                        ops.append(("backup", t.op_id))
                elif ops:
                    op = ops.pop(rng.randrange(len(ops)))
                    if op[0] == "copy":
                        c.finish_transfer(op[1], rng.random() < 0.8)
                    elif op[0] == "prefetch":
                        c.finish_prefetch(op[1], rng.randint(0, op[2]))
                    else:
                        c.finish_backup(op[1])
                c.tick()
            c.snapshot()
            taken += 1
    assert any(n.keys for n in c.snapshot().nodes)  # the walk reached nodes with keys
    assert taken == 40 * 60


def test_a_snapshot_sees_a_changed_shape_and_keys_changed_in_place():
    """What the reference never does but a snapshot must still show: a key of another length
    with no node added or removed (the offsets below it move), and L3 keys changed in place."""
    c = Checked(CacheConfig(page_size=2, device_pages=12, l3=True))
    for tokens in ([1, 1, 2, 2], [1, 1, 3, 3]):
        c.insert(0, tokens, c.alloc(2))
    mid = next(n for n in c._nodes.values() if len(n.children) == 2)
    c.snapshot()
    mid.key = mid.key + mid.key  # its children now start two tokens further down
    assert {n.start for n in c.snapshot().nodes if n.parent == mid.id} == {4}
    mid.keys.append(mid.keys[0])  # in place: the same list
    assert len(next(n for n in c.snapshot().nodes if n.id == mid.id).keys) == 2


def scratch_scheduler(s: Scheduler) -> SchedulerSnapshot:
    """The snapshot of ``s`` built from nothing: no view or part of an earlier one, its cache's
    and its Mamba pools' included."""
    cache = PrefixCache.__new__(PrefixCache)
    vars(cache).update(vars(s.cache))
    cache._forget_views()
    cache.pools = {tier: unshown(pool) for tier, pool in s.cache.pools.items()}
    fresh = Scheduler.__new__(Scheduler)
    vars(fresh).update(vars(s))
    fresh.cache, fresh._views, fresh._snap = cache, {}, None
    if s.mamba is not None:
        fresh.mamba = MambaCache.__new__(MambaCache)
        vars(fresh.mamba).update(vars(s.mamba))
        fresh.mamba._entry_views, fresh.mamba._view = {}, None
    return fresh.snapshot()


class CheckedScheduler(Scheduler):
    """A reference scheduler whose every snapshot is compared with the one built from nothing,
    taken around each plan and each event list as well as when the workload asks; a snapshot
    taken again with nothing done in between (or only a rejected event list) is the very same
    object."""

    taken = 0

    def snapshot(self) -> SchedulerSnapshot:
        snap = super().snapshot()
        assert snap == scratch_scheduler(self)
        assert super().snapshot() is snap
        CheckedScheduler.taken += 1
        return snap

    def next_plan(self):
        plan = super().next_plan()
        self.snapshot()
        return plan

    def advance(self, events) -> None:
        before = self.snapshot()
        try:
            super().advance(events)
        except SchedulerError:  # a rejected list changes nothing: the snapshot is the last one
            assert self.snapshot() is before
            raise
        self.snapshot()


@pytest.mark.parametrize("part", range(4))
def test_every_scheduler_snapshot_equals_the_one_built_from_nothing(part, monkeypatch):
    """The scheduler's snapshot reuses each request's view and each part equal to the last
    one's (``Scheduler.snapshot``), and is the last one when all are: on the fingerprinted
    workloads (retraction, loadback, failed copies, L3, Mamba, windows, adapters, rejected
    event lists), every one equals the snapshot built from nothing at the same moment."""
    from test_scheduler_fingerprints import Player

    monkeypatch.setattr("test_scheduler_fingerprints.Scheduler", CheckedScheduler)
    before = CheckedScheduler.taken
    for seed in range(part, 48, 4):
        Player(seed).run(60)
    assert CheckedScheduler.taken - before > 12 * 60 * 3
