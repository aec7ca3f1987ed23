"""The L3 store (spec chapter l3_store): keys, the reference's prefetch and backup, the trace
fields. Planted defects are caught through the kit in ``test_sched_kit``."""

from __future__ import annotations

import hashlib

import pytest
from pydantic import ValidationError

from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter
from kvconf.conformance.scheduler.generator import play_sched
from kvconf.conformance.scheduler.l3_store import L3Store, l3_keys
from kvconf.conformance.scheduler.scenarios import SCHED_SCENARIOS
from kvconf.conformance.scheduler.trace import SchedTrace
from kvconf.reference.l3 import rolling_keys, seed_key
from kvconf.reference.plan import (
    Abort,
    BackupDone,
    ExtendResult,
    Finish,
    PrefetchDone,
    RequestSpec,
    WritebackDone,
)
from kvconf.reference.prefix_cache import CacheConfig, PrefixCache
from kvconf.reference.requests import TRANSITIONS, Event, State
from kvconf.reference.scheduler import Scheduler, SchedulerConfig, SchedulerError
from kvconf.reference.tiers import Tier

L3_SCENARIOS = [s for s in SCHED_SCENARIOS if s.name.startswith("sched-l3")]


def ref_keys(ns: int, tokens, p: int) -> list[str]:
    return [k.hex() for k in rolling_keys(seed_key(ns), tokens, p)]


@pytest.mark.behaviours("L3-1")
@pytest.mark.parametrize("ns", [0, 1, 7])
def test_reference_and_kit_compute_the_same_rolling_keys(ns: int) -> None:
    tokens = [3, 1, 4, 1, 5, 9, 2, 6, 5]
    keys = l3_keys(ns, tokens, 2)
    assert keys == ref_keys(ns, tokens, 2) and len(keys) == 4
    # Chained: the keys past a prefix, seeded from the prefix's last key, are the same keys.
    assert l3_keys(ns, tokens[4:], 2, keys[1]) == keys[2:]
    assert len(set(keys)) == len(keys)


@pytest.mark.behaviours("L3-1")
def test_base_model_keys_are_plain_chained_sha256_and_namespaces_differ() -> None:
    first = hashlib.sha256((7).to_bytes(4, "little") + (8).to_bytes(4, "little")).hexdigest()
    assert l3_keys(0, [7, 8], 2) == [first]
    assert l3_keys(1, [7, 8], 2) != [first]  # D268-7
    assert l3_keys(1, [7, 8], 2) != l3_keys(2, [7, 8], 2)


@pytest.mark.behaviours("L3-1")
def test_every_node_carries_its_keys_and_an_insert_backfills_them() -> None:
    c = PrefixCache(CacheConfig(page_size=2, device_pages=16, l3=True))
    toks = [1, 2, 3, 4, 5, 6]
    c.insert(0, toks[:4], c.alloc(2))
    c.match(0, toks[:2])  # splits the node after one page: both halves keep their keys
    for n in c.snapshot().nodes:
        if n.parent is not None:
            assert len(n.keys) == len(n.key) // 2
    node = next(x for x in c._nodes.values() if tuple(x.key) == (3, 4))
    node.keys = []  # as a node published without keys would be (D381-3)
    c.insert(0, toks, [*c.match(0, toks[:4]).device_pages, *c.alloc(1)])
    assert [k.hex() for k in node.keys] == ref_keys(0, toks, 2)[1:2]
    leaf = next(x for x in c._nodes.values() if tuple(x.key) == (5, 6))
    assert [k.hex() for k in leaf.keys] == ref_keys(0, toks, 2)[2:]


@pytest.mark.behaviours("L3-1")
def test_without_an_l3_store_nodes_carry_no_keys() -> None:
    c = PrefixCache(CacheConfig(page_size=2, device_pages=8))
    c.insert(0, [1, 2, 3, 4], c.alloc(2))
    assert all(not n.keys for n in c.snapshot().nodes)


def l3_sched(**kw) -> Scheduler:
    return Scheduler(SchedulerConfig(l3_store=True, **kw))


@pytest.mark.behaviours("L3-2", "L3-3")
def test_prefetch_lands_below_the_host_match_and_frees_what_did_not_land() -> None:
    s = l3_sched(host_pages=8)
    s.submit([RequestSpec("a", (1, 2, 3, 4, 5), l3_hits=2)])
    s.advance([])
    p = s.next_plan()
    (op,) = p.l3
    assert (op.kind, op.start, len(op.pages)) == ("prefetch", 0, 2)
    assert s.snapshot().requests[0].state is State.PREFETCHING
    s.advance([PrefetchDone(op.op_id, 1)])  # one of two pages landed
    snap = s.snapshot()
    owners = snap.cache.pools[Tier.HOST].owners
    assert owners[op.pages[1]] == "free" and owners[op.pages[0]].startswith("node:")
    assert snap.requests[0].state is State.PREFETCH_DONE and snap.requests[0].host_lock
    row = s.next_plan().rows[0]
    assert row.reused == 2 and s.snapshot().requests[0].host_lock is None


@pytest.mark.behaviours("L3-2")
def test_below_the_threshold_or_without_hits_there_is_no_prefetch() -> None:
    s = l3_sched(prefetch_threshold=3)
    s.submit([RequestSpec("a", (1, 2, 3, 4, 5), l3_hits=2), RequestSpec("b", (1, 2, 3))])
    plan = s.next_plan()
    assert not plan.l3 and {r.rid for r in plan.rows} == {"a", "b"}


@pytest.mark.behaviours("L3-2", "L3-5")
def test_abort_while_prefetching_and_backup_after_an_acknowledged_writeback() -> None:
    s = l3_sched()
    s.submit([RequestSpec("a", (1, 2, 3, 4, 5), l3_hits=2), RequestSpec("b", (2, 2, 1))])
    plan = s.next_plan()
    s.advance([Abort("a"), ExtendResult("b", 0), Finish("b")])
    s.advance([PrefetchDone(plan.l3[0].op_id, 2)])  # accepted after the abort
    wb = s.next_plan().writebacks[0]
    s.advance([WritebackDone(wb.op_id, True)])
    backup = s.next_plan().l3[0]
    assert backup.kind == "backup" and backup.keys == tuple(ref_keys(0, (2, 2), 2))
    assert any(lk.tier is Tier.HOST and lk.internal for lk in s.snapshot().cache.locks)
    s.advance([BackupDone(backup.op_id, True)])
    assert not s.snapshot().cache.locks


@pytest.mark.behaviours("L3-2")
def test_bad_l3_acknowledgements_are_rejected_and_change_nothing() -> None:
    s = l3_sched()
    s.submit([RequestSpec("a", (1, 2, 3, 4, 5), l3_hits=2)])
    op = s.next_plan().l3[0]
    before = s.snapshot()
    for bad in ([PrefetchDone(op.op_id, 3)], [PrefetchDone(op.op_id + 1, 0)],
                [BackupDone(op.op_id)], [PrefetchDone(op.op_id, 1), PrefetchDone(op.op_id, 1)]):
        with pytest.raises(SchedulerError):
            s.advance(bad)
        assert s.snapshot() == before
    with pytest.raises(SchedulerError, match="l3_hits"):
        s.submit([RequestSpec("b", (1,), l3_hits=-1)])


@pytest.mark.behaviours("L3-2")
def test_every_l3_table_entry_is_taken_by_the_l3_workloads() -> None:
    l3 = {(st, e) for st, e in TRANSITIONS if st in (State.PREFETCHING, State.PREFETCH_DONE)
          or e is Event.PREFETCH}
    taken: set[tuple[str, str]] = set()
    for sc in L3_SCENARIOS:
        taken |= play_sched(ReferenceSchedulerAdapter, sc.trace, determinism=False).exercised
    # Abort from PrefetchDone, and a last chunk straight from it, in a focused run.
    s = l3_sched(max_tokens=4)
    s.submit([RequestSpec("x", (1, 2, 3), l3_hits=1),
              RequestSpec("y", (1, 2, 3, 4, 5), l3_hits=2),
              RequestSpec("z", (2, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2), l3_hits=2)])
    ops = s.next_plan().l3
    s.advance([PrefetchDone(o.op_id, len(o.pages)) for o in ops])
    s.advance([Abort("y")])
    s.next_plan()
    taken |= {(a.value, e.value) for _r, a, e, _b in s.transitions}
    missing = {(st.value, e.value) for st, e in l3} - taken
    assert not missing, missing


@pytest.mark.behaviours("L3-1")
def test_the_kit_store_counts_leading_hits() -> None:
    store = L3Store()
    keys = l3_keys(0, [1, 2, 3, 4, 5, 6], 2)
    store.put(keys[0], (1, 2))
    store.put(keys[2], (5, 6))
    assert store.hits(keys) == 1 and store.get(keys[1]) is None


def test_l3_trace_fields_need_an_l3_store_and_name_the_field() -> None:
    with pytest.raises(ValidationError, match="l3_preload"):
        SchedTrace.model_validate({"l3_preload": [{"tokens": [1, 2]}]})
    with pytest.raises(ValidationError, match="l3_acks"):
        SchedTrace.model_validate({"config": {"l3_store": True}, "l3_acks": ["sometimes"]})
    t = SchedTrace.model_validate({"config": {"l3_store": True},
                                   "l3_preload": [{"ns": 1, "tokens": [1, 2]}]})
    assert t.l3_preload[0].ns == 1


@pytest.mark.behaviours("L3-4")
def test_a_prefetch_pins_its_host_match_before_evicting_for_room() -> None:
    c = PrefixCache(CacheConfig(page_size=2, device_pages=8, host_pages=3, l3=True))
    c.insert(0, [1, 2, 3, 4], c.alloc(2))
    m = c.match(0, [1, 2, 3, 4])
    t = c.start_writeback(m.device_node)
    assert t is not None
    c.finish_transfer(t.op_id, True)  # the host tier: 2 of 3 pages, one leaf
    p = c.start_prefetch(m.device_node, [5, 6, 7, 8], 2, 1)
    assert p is not None and len(p.pages) == 1 and p.start == 2  # the match was not evicted
    node = c.snapshot().node_map()[m.device_node]
    assert node.host is not None and node.host_ref == 1
    assert c.start_prefetch(m.device_node, [5, 6, 7, 8], 2, 1) is None  # no room left
    c.finish_prefetch(p.op_id, 1)
    assert c.snapshot().node_map()[m.device_node].host_ref == 0
