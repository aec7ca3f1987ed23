"""Unit tests of the reference prefix cache, one behaviour family at a time.

Each test drives ``reference.PrefixCache`` directly (no kit in between) and checks the outcome on
the call results, the published events and the white-box ``snapshot()``. Which free page an
allocation returns is never asserted (POOL-3): expected pages are always the ones a previous call
actually returned.
"""

from __future__ import annotations

import subprocess
import sys
from array import array
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lock_counts import subtree_locks

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.oracles import Violation
from kvconf.conformance.running.runner import play
from kvconf.conformance.trace import InsertStep, MatchStep, Trace
from kvconf.reference import CacheConfig, CacheError, PrefixCache, Tier, block_hash
from kvconf.reference.kv_events import EventKind, KVEvent
from kvconf.reference.radix_tree import TOKEN
from kvconf.reference.snapshot import CacheSnapshot, NodeView

D, H = Tier.DEVICE, Tier.HOST
REPO = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------------- helpers
def make(page_size: int = 1, device: int = 16, host: int = 8, events: bool = True) -> PrefixCache:
    return PrefixCache(CacheConfig(page_size, device, host, events))


def put(c: PrefixCache, tokens: list[int], ns: int = 0) -> list[int]:
    """Allocate fresh pages for ``tokens`` and insert them; the pages the cache handed out."""
    pages = c.alloc(len(tokens) // c.page_size)
    assert pages is not None
    c.insert(ns, tokens, pages)
    return pages


def node_at(c: PrefixCache | CacheSnapshot, tokens: list[int], ns: int = 0) -> NodeView | None:
    """The node whose full prefix is exactly ``tokens`` in ``ns``, if any."""
    snap = c.snapshot() if isinstance(c, PrefixCache) else c
    for n in snap.nodes:
        if n.namespace == ns and n.parent is not None and snap.full_tokens(n.id) == tuple(tokens):
            return n
    return None


def check_pools(c: PrefixCache) -> CacheSnapshot:
    """POOL-1 / POOL-4 on a snapshot: one owner per page, records agree with the tree, conserved."""
    snap = c.snapshot()
    for tier, pool in snap.pools.items():
        assert len(pool.owners) == pool.size
        assert set(pool.free) == {i for i, o in enumerate(pool.owners) if o == "free"}
        assert len(set(pool.free)) == len(pool.free)
        from_tree: dict[int, str] = {}
        for n in snap.nodes:
            for pg in n.pages(tier) or ():
                assert pg not in from_tree, f"{tier} page {pg} in two nodes"
                from_tree[pg] = f"node:{n.id}"
        for pg, owner in enumerate(pool.owners):
            if owner.startswith("node:"):
                assert from_tree.get(pg) == owner
            else:
                assert pg not in from_tree
        dst = {
            d for t in snap.transfers if (t.kind == "writeback") == (tier is H) for _, d in t.pairs
        }
        assert {i for i, o in enumerate(pool.owners) if o.startswith("transfer:")} == dst
        kinds = Counter(o.split(":")[0] for o in pool.owners)
        assert kinds["free"] + kinds["caller"] + kinds["node"] + kinds["transfer"] == pool.size
    for n in snap.nodes:  # HOST-1: presence on a tier is closed under ancestors
        if n.parent is not None:
            parent = snap.node_map()[n.parent]
            for tier in (D, H):
                if n.pages(tier) is not None:
                    assert parent.pages(tier) is not None
    return snap


def tree_state(snap: CacheSnapshot) -> tuple[Any, ...]:
    """A snapshot without the free-list order (which pages get handed out next is POOL-3)."""
    pools = {t: (p.size, frozenset(p.free), p.owners) for t, p in snap.pools.items()}
    return snap.nodes, snap.roots, snap.locks, snap.transfers, pools


def assert_refs_match_locks(c: PrefixCache) -> None:
    snap = c.snapshot()
    counts = subtree_locks(snap)
    for n in snap.nodes:
        assert n.device_ref == counts[(n.id, D)] >= 0
        assert n.host_ref == counts[(n.id, H)] >= 0


def chain(parent: int | None, ns: int, tokens: tuple[int, ...], p: int) -> list[int]:
    out = []
    for i in range(0, len(tokens), p):
        parent = block_hash(parent, ns, tokens[i : i + p])
        out.append(parent)
    return out


def offload(c: PrefixCache, tokens: list[int], ns: int = 0) -> None:
    """Write the device path of ``tokens`` back to host and let go of everything."""
    m = c.match(ns, tokens)
    h = c.lock(m.device_node, D)
    t = c.start_writeback(m.device_node)
    assert t is not None
    c.finish_transfer(t.op_id, True)
    c.unlock(h)


class EventLog:
    """Applies drained events like a consumer and checks EVENT-1..EVENT-4, EVENT-6 as it goes."""

    def __init__(self, c: PrefixCache) -> None:
        self.c = c
        self.stored: set[int] = set()
        self.all: list[KVEvent] = []

    def absorb(self) -> list[KVEvent]:
        events = self.c.drain_events()
        for ev in events:
            if ev.kind is EventKind.REMOVED:
                for h in ev.block_hashes:
                    assert h in self.stored, "EVENT-2: removed a hash that is not stored"
                    self.stored.remove(h)
                continue
            assert ev.kind is EventKind.STORED
            assert ev.parent_hash is None or ev.parent_hash in self.stored, "EVENT-3"
            assert len(ev.tokens) == ev.block_size * len(ev.block_hashes)
            parent = ev.parent_hash
            for i, h in enumerate(ev.block_hashes):
                assert h not in self.stored, "EVENT-1: stored twice"
                toks = ev.tokens[i * ev.block_size : (i + 1) * ev.block_size]
                assert h == block_hash(parent, ev.namespace, toks), "EVENT-4"
                self.stored.add(h)
                parent = h
        held = {h for n in self.c.snapshot().nodes if n.device is not None for h in n.hashes}
        assert held == self.stored, "EVENT-6: stored hashes drifted from the device tier"
        self.all.extend(events)
        return events


# --------------------------------------------------------------------------------- pools
@pytest.mark.behaviours("POOL-1", "POOL-2", "POOL-3")
def test_alloc_returns_distinct_free_pages_owned_by_the_caller():
    c = make(device=8)
    free_before = set(c.snapshot().pools[D].free)
    pages = c.alloc(3)
    assert pages is not None and len(pages) == 3 == len(set(pages))
    assert set(pages) <= free_before  # any free pages will do (POOL-3), but only free ones
    snap = check_pools(c)
    assert all(snap.pools[D].owners[p] == "caller" for p in pages)
    assert set(snap.pools[D].free) == free_before - set(pages)
    more = c.alloc(5)
    assert more is not None and not set(more) & set(pages)
    assert c.alloc(0) == []
    assert c.available(D) == 0


@pytest.mark.behaviours("POOL-2", "FAULT-1")
def test_alloc_is_all_or_nothing():
    c = make(device=4)
    put(c, [1, 2])
    before = c.snapshot()
    assert c.alloc(3) is None  # two free pages: nothing is handed out
    assert c.snapshot() == before
    got = c.alloc(2)
    assert got is not None and len(got) == 2
    assert c.alloc(1) is None
    with pytest.raises(CacheError) as e:
        c.alloc(-1)
    assert e.value.code == "bad_count"
    check_pools(c)


@pytest.mark.behaviours("POOL-4", "POOL-1", "FAULT-1")
def test_double_free_and_foreign_free_are_rejected():
    c = make(device=6)
    tree = put(c, [1, 2])
    mine = c.alloc(2)
    assert mine is not None
    c.free(mine)
    for bad in ([mine[0]], [tree[0]], [99], [-1]):
        before = c.snapshot()
        with pytest.raises(CacheError) as e:
            c.free(bad)
        assert e.value.code == "bad_pages"
        assert c.snapshot() == before
    again = c.alloc(1)
    assert again is not None
    before = c.snapshot()
    with pytest.raises(CacheError):
        c.free([again[0], again[0]])  # the same page twice in one call: nothing moves
    assert c.snapshot() == before
    c.free(again)
    check_pools(c)
    assert c.available(D) == 4


@pytest.mark.behaviours("POOL-1", "POOL-4", "HOST-2")
def test_pages_are_conserved_through_a_life_cycle():
    c = make(device=10, host=6)
    held = c.alloc(2)
    put(c, [1, 2, 3])
    put(c, [1, 2, 4, 5])
    check_pools(c)
    m = c.match(0, [1, 2, 4, 5])
    h = c.lock(m.device_node, D)
    t = c.start_writeback(m.device_node)
    assert t is not None
    snap = check_pools(c)
    owners = Counter(o.split(":")[0] for o in snap.pools[H].owners)
    assert owners["transfer"] == len(t.pairs) == 4  # the whole path lacks a host copy
    c.finish_transfer(t.op_id, True)
    c.unlock(h)
    c.evict(D, 100)
    snap = check_pools(c)
    dev = Counter(o.split(":")[0] for o in snap.pools[D].owners)
    assert dev == Counter({"free": 8, "caller": 2})
    c.evict(H, 100)
    assert held is not None
    c.free(held)
    snap = check_pools(c)
    assert len(snap.pools[D].free) == 10 and len(snap.pools[H].free) == 6


# --------------------------------------------------------------------------------- match / tree
@pytest.mark.behaviours("TREE-1", "TREE-2")
def test_match_returns_the_longest_whole_page_prefix():
    c = make(page_size=2)
    a = [1, 2, 3, 4, 5, 6]
    pages = put(c, a)
    cases = [
        (a, 6, pages),
        (a + [7, 8], 6, pages),
        (a[:5], 4, pages[:2]),  # a trailing partial page never matches
        (a[:3] + [9, 9], 2, pages[:1]),
        ([1], 0, []),
        ([], 0, []),
        ([2, 1], 0, []),
    ]
    for query, want, want_pages in cases:
        m = c.match(0, query)
        assert m.device_len == want, query
        assert list(m.device_pages) == want_pages  # page i is the page inserted for prefix i
        assert m.device_len <= len(query) and m.device_len % 2 == 0
        assert m.host_len == 0 and m.host_pages == ()


@pytest.mark.behaviours("TREE-3", "PIN-1")
def test_match_reports_a_lockable_node_and_never_a_negative_length():
    c = make(page_size=2, host=0)
    put(c, [1, 1, 2, 2])
    for ns in (0, 1, 5):
        for query in ([], [1], [1, 1, 2], [3, 3], [1, 1, 2, 2, 3]):
            m = c.match(ns, query)
            assert m.device_len >= 0 and m.host_len >= 0
            if m.device_len == 0:
                assert m.device_node == c.snapshot().roots[ns]
            if m.host_len == 0:
                assert m.host_node == c.snapshot().roots[ns]
    m = c.match(0, [1, 1, 2])
    assert m.device_len == 2
    node = c.snapshot().node_map()[m.device_node]
    assert node.key == (1, 1) and node.device == m.device_pages
    c.lock(m.device_node, D)
    empty = c.match(3, [])
    c.lock(empty.device_node, D)
    c.lock(empty.host_node, H)  # a root can be locked on both tiers, even with no host pool
    assert_refs_match_locks(c)


@pytest.mark.behaviours("TREE-4", "TREE-6", "PIN-1", "PIN-2", "EVENT-1")
def test_split_on_divergence_keeps_identity_pages_hashes_and_pins():
    c = make()
    a = [1, 2, 3, 4, 5, 6]
    pages = put(c, a)
    c.drain_events()
    m = c.match(0, a)
    h = c.lock(m.device_node, D)
    before = c.snapshot()
    orig = before.node_map()[m.device_node]
    m2 = c.match(0, a[:3] + [9, 9])
    after = c.snapshot()
    assert c.drain_events() == []  # a split announces nothing: no block changed
    assert m2.device_len == 3 and list(m2.device_pages) == pages[:3]
    upper = after.node_map()[m2.device_node]
    lower = after.node_map()[orig.id]  # the old node keeps its id and the suffix
    assert upper.id != orig.id and lower.parent == upper.id
    assert (upper.key, upper.device, upper.hashes) == (tuple(a[:3]), tuple(pages[:3]),
                                                       orig.hashes[:3])
    assert (lower.key, lower.device, lower.hashes) == (tuple(a[3:]), tuple(pages[3:]),
                                                       orig.hashes[3:])
    assert upper.device_ref == lower.device_ref == 1  # the lock still covers the whole path
    assert_refs_match_locks(c)
    check_pools(c)
    # The matched half is a node of its own (TREE-6): locking it pins only its three pages.
    h2 = c.lock(m2.device_node, D)
    c.unlock(h)
    assert c.evict(D, 100) == 3
    assert node_at(c, a) is None and node_at(c, a[:3]) is not None
    c.unlock(h2)
    assert c.evict(D, 100) == 3


@pytest.mark.behaviours("TREE-5", "POOL-4")
def test_insert_frees_duplicate_caller_pages():
    c = make(device=20)
    a = [1, 2, 3, 4, 5, 6]
    p = put(c, a)
    q = c.alloc(6)
    assert q is not None
    r = c.insert(0, a, q)
    assert (r.cached_len, r.new_len) == (6, 0) and set(r.freed) == set(q)
    snap = check_pools(c)
    assert all(snap.pools[D].owners[x] == "free" for x in q)
    assert list(c.match(0, a).device_pages) == p
    s = c.alloc(6)
    assert s is not None
    r = c.insert(0, a[:3] + [7, 8, 9], s)  # shares three pages, three are new
    assert (r.cached_len, r.new_len) == (3, 3) and set(r.freed) == set(s[:3])
    assert list(c.match(0, a[:3] + [7, 8, 9]).device_pages) == p[:3] + s[3:]
    t = c.alloc(2)
    assert t is not None
    r = c.insert(0, a + [10, 11], p + t)  # handing back the tree's own pages is allowed
    assert (r.cached_len, r.freed) == (6, ())
    assert list(c.match(0, a + [10, 11]).device_pages) == p + t
    r = c.insert(0, a[:4], p[:4])  # ends inside a node: split, nothing new, nothing freed
    assert (r.cached_len, r.new_len, r.freed) == (4, 0, ())
    assert node_at(c, a[:4]) is not None
    check_pools(c)


@pytest.mark.behaviours("NS-1", "EVENT-5", "TREE-2")
def test_namespaces_never_share_pages_or_hashes():
    c = make()
    a = [1, 2, 3]
    p0 = put(c, a, ns=0)
    assert c.match(1, a).device_len == 0
    p1 = put(c, a, ns=1)
    assert not set(p0) & set(p1)
    assert list(c.match(0, a).device_pages) == p0
    assert list(c.match(1, a).device_pages) == p1  # reused within its own namespace
    n0, n1 = node_at(c, a, 0), node_at(c, a, 1)
    assert n0 is not None and n1 is not None and not set(n0.hashes) & set(n1.hashes)
    ev = [e for e in c.drain_events() if e.kind is EventKind.STORED]
    assert [e.namespace for e in ev] == [0, 1]
    assert not set(ev[0].block_hashes) & set(ev[1].block_hashes)
    assert block_hash(None, 0, (1,)) != block_hash(None, 1, (1,))
    assert block_hash(7, 0, (1, 2)) != block_hash(7, 2, (1, 2))


# --------------------------------------------------------------------------------- pins
@pytest.mark.behaviours("PIN-1")
def test_lock_pins_the_node_and_every_ancestor():
    c = make()
    put(c, [1, 2])
    put(c, [1, 2, 3])
    put(c, [1, 9])  # splits (1, 2) into (1) -> {(2) -> (3), (9)}
    deep = c.match(0, [1, 2, 3])
    side = c.match(0, [1, 9])
    h1 = c.lock(deep.device_node, D)
    c.lock(deep.device_node, D)
    c.lock(side.device_node, D)
    snap = c.snapshot()
    refs = {snap.full_tokens(n.id): n.device_ref for n in snap.nodes}
    assert refs == {(): 3, (1,): 3, (1, 2): 2, (1, 2, 3): 2, (1, 9): 1}
    assert all(n.host_ref == 0 for n in snap.nodes)
    assert_refs_match_locks(c)
    c.unlock(h1)
    refs = {c.snapshot().full_tokens(n.id): n.device_ref for n in c.snapshot().nodes}
    assert refs == {(): 2, (1,): 2, (1, 2): 1, (1, 2, 3): 1, (1, 9): 1}


@pytest.mark.behaviours("PIN-2", "EVICT-1")
def test_pinned_pages_are_never_evicted_or_handed_out():
    c = make(device=6)
    a, b = [1, 2, 3], [4, 5, 6]
    pa = put(c, a)
    put(c, b)
    h = c.lock(c.match(0, a).device_node, D)
    assert c.alloc(1) is None
    assert c.evict(D, 100) == 3  # only the unpinned branch goes
    assert c.alloc(4) is None
    got = c.alloc(3)
    assert got is not None and not set(got) & set(pa)
    snap = c.snapshot()
    assert all(snap.pools[D].owners[x].startswith("node:") for x in pa)
    c.free(got)
    c.match(0, [1, 9])  # a split below the lock moves pages between nodes, never frees them
    assert c.evict(D, 100) == 0
    assert list(c.match(0, a).device_pages) == pa
    c.unlock(h)
    assert c.evict(D, 100) == 3


@pytest.mark.behaviours("PIN-3", "FAULT-1")
def test_unbalanced_unlock_is_rejected_and_changes_nothing():
    c = make(host=4)
    put(c, [1, 2, 3])
    m = c.match(0, [1, 2, 3])
    h = c.lock(m.device_node, D)
    c.unlock(h)
    t = c.start_writeback(m.device_node)  # nothing locked by the caller: still allowed
    assert t is not None
    internal = [lk.handle for lk in c.snapshot().locks if lk.internal]
    assert internal
    for handle in (h, 0, 12345, internal[0]):
        before = c.snapshot()
        with pytest.raises(CacheError) as e:
            c.unlock(handle)
        assert e.value.code == "unbalanced_unlock"
        assert c.snapshot() == before
    assert all(n.device_ref >= 0 and n.host_ref >= 0 for n in c.snapshot().nodes)
    c.finish_transfer(t.op_id, True)
    assert_refs_match_locks(c)
    assert all(n.device_ref == 0 == n.host_ref for n in c.snapshot().nodes)


# --------------------------------------------------------------------------------- eviction
@pytest.mark.behaviours("EVICT-1", "EVICT-2")
def test_eviction_is_lru_over_unlocked_leaves():
    c = make()
    c.tick()
    put(c, [1, 1])
    c.tick()
    put(c, [2, 2])
    c.tick()
    put(c, [3, 3])
    c.tick()
    c.match(0, [1, 1])  # a use refreshes: [1, 1] is now the most recent
    h = c.lock(c.match(0, [3, 3]).device_node, D)  # and [3, 3] is pinned
    assert c.evict(D, 1) == 2
    assert node_at(c, [2, 2]) is None
    assert c.evict(D, 1) == 2
    assert node_at(c, [1, 1]) is None and node_at(c, [3, 3]) is not None
    assert c.evict(D, 1) == 0
    c.unlock(h)
    assert c.evict(D, 1) == 2


@pytest.mark.behaviours("EVICT-1", "EVICT-3")
def test_parent_is_evicted_only_after_its_children():
    c = make()
    put(c, [1])
    put(c, [1, 2])  # same clock: the parent is older by sequence number than its child
    snap = c.snapshot()
    parent, child = node_at(snap, [1]), node_at(snap, [1, 2])
    assert parent is not None and child is not None
    assert (parent.device_access, parent.seq) < (child.device_access, child.seq)
    assert c.evict(D, 1) == 1
    assert node_at(c, [1, 2]) is None and node_at(c, [1]) is not None
    assert c.evict(D, 1) == 1
    assert node_at(c, [1]) is None


@pytest.mark.behaviours("EVICT-3", "DET-1")
def test_equal_access_times_are_broken_by_sequence_number():
    c = make()
    assert c.tick() == 1
    for t in ([1, 1], [2, 2], [3, 3]):
        put(c, t)
    for t in ([3, 3], [2, 2], [1, 1]):  # used in reverse order, but within the same step
        c.match(0, t)
    assert {n.device_access for n in c.snapshot().nodes if n.parent is not None} == {1}
    gone = []
    for _ in range(3):
        before = {n.id: n for n in c.snapshot().nodes}
        assert c.evict(D, 1) == 2
        after = {n.id for n in c.snapshot().nodes}
        (victim,) = [before[i] for i in before if i not in after]
        gone.append(victim.key)
    assert gone == [(1, 1), (2, 2), (3, 3)]  # oldest node first, whatever the order of use
    assert c.tick() == 2  # only tick advances the clock


@pytest.mark.behaviours("EVICT-4")
def test_evict_frees_at_least_n_and_stops_at_the_first_victim_that_reaches_n():
    c = make(device=12)
    for i in range(3):
        c.tick()
        put(c, [i, i, i])
    assert c.evict(D, 0) == 0
    assert c.evict(D, 4) == 6  # two victims of three pages: the first alone is not enough
    assert node_at(c, [2, 2, 2]) is not None
    assert c.evict(D, 1) == 3
    assert c.evict(D, 5) == 0  # nothing left to take: frees what there is
    put(c, [7, 7])
    put(c, [8, 8])
    c.lock(c.match(0, [8, 8]).device_node, D)
    assert c.evict(D, 100) == 2  # every candidate, fewer than asked
    with pytest.raises(CacheError) as e:
        c.evict(D, -1)
    assert e.value.code == "bad_count"


@pytest.mark.behaviours("EVICT-5", "EVENT-2", "HOST-1")
def test_device_eviction_demotes_a_node_with_a_host_copy():
    c = make(host=8)
    a = [1, 2, 3]
    put(c, a)
    offload(c, a)
    log = EventLog(c)
    log.absorb()
    node = node_at(c, a)
    assert node is not None and node.host is not None
    assert c.evict(D, 3) == 3
    events = log.absorb()
    assert [(e.kind, e.block_hashes) for e in events] == [(EventKind.REMOVED, node.hashes)]
    demoted = node_at(c, a)
    assert demoted is not None and demoted.id == node.id
    assert demoted.device is None and demoted.host == node.host  # the host copy is kept
    m = c.match(0, a)
    assert (m.device_len, m.host_len, m.host_pages) == (0, 3, node.host)
    assert c.evict(H, 3) == 3
    assert log.absorb() == []  # host blocks are not announced
    assert node_at(c, a) is None  # no tier left: the node leaves the tree
    # The other way round: losing the host copy keeps the device one.
    put(c, a)
    offload(c, a)
    log.absorb()
    assert c.evict(H, 3) == 3
    kept = node_at(c, a)
    assert kept is not None and kept.host is None and kept.device is not None
    assert log.absorb() == []
    check_pools(c)


# --------------------------------------------------------------------------------- host tier
@pytest.mark.behaviours("HOST-1", "HOST-2", "PIN-1")
def test_writeback_copies_the_missing_device_pages_and_pins_its_source():
    c = make(host=8)
    pp = put(c, [1, 2, 3])
    pc = put(c, [1, 2, 3, 4, 5])[3:]  # the first three were duplicates, freed again
    offload(c, [1, 2, 3])
    m = c.match(0, [1, 2, 3, 4, 5])
    h = c.lock(m.device_node, D)
    t = c.start_writeback(m.device_node)
    assert t is not None and t.kind == "writeback"
    assert [s for s, _ in t.pairs] == pc  # only the part without a host copy is copied
    snap = check_pools(c)
    assert all(snap.pools[H].owners[d] == f"transfer:{t.op_id}" for _, d in t.pairs)
    child = node_at(snap, [1, 2, 3, 4, 5])
    assert child is not None and child.host is None and child.pending == t.op_id
    assert child.device_ref == 2  # the caller's lock and the transfer's own
    assert c.match(0, [1, 2, 3, 4, 5]).host_len == 3  # the copy is not visible yet
    parent = node_at(snap, [1, 2, 3])
    assert parent is not None and parent.host is not None and parent.host_ref == 1
    c.unlock(h)
    assert c.evict(D, 100) == 0  # the source stays pinned until the transfer completes
    assert c.evict(H, 100) == 0  # and so does the host copy the written pages will hang from
    assert_refs_match_locks(c)
    c.finish_transfer(t.op_id, True)
    child = node_at(c, [1, 2, 3, 4, 5])
    assert child is not None and child.host == tuple(d for _, d in t.pairs)
    assert child.pending is None and child.device_ref == 0
    assert all(n.host_ref == 0 for n in c.snapshot().nodes)
    m = c.match(0, [1, 2, 3, 4, 5])
    assert m.host_len == 5 and list(m.device_pages) == pp + pc
    check_pools(c)


@pytest.mark.behaviours("HOST-3", "HOST-1", "EVENT-3", "PIN-1")
def test_loadback_pages_belong_to_the_transfer_until_acknowledged():
    c = make(host=8)
    put(c, [1, 2])
    put(c, [1, 2, 3, 4])
    offload(c, [1, 2, 3, 4])
    assert c.evict(D, 2) == 2  # the child is demoted; its parent stays on both tiers
    log = EventLog(c)
    log.absorb()
    m = c.match(0, [1, 2, 3, 4])
    assert (m.device_len, m.host_len) == (2, 4)
    parent = node_at(c, [1, 2])
    child = node_at(c, [1, 2, 3, 4])
    assert parent is not None and child is not None and child.host is not None
    hl = c.lock(m.host_node, H)
    t = c.start_loadback(m.host_node)
    assert t is not None and t.kind == "loadback"
    assert [s for s, _ in t.pairs] == list(child.host)
    snap = check_pools(c)
    assert all(snap.pools[D].owners[d] == f"transfer:{t.op_id}" for _, d in t.pairs)
    assert log.absorb() == []  # nothing is announced before the copy lands
    assert c.match(0, [1, 2, 3, 4]).device_len == 2
    c.unlock(hl)
    nodes = c.snapshot().node_map()
    assert nodes[child.id].host_ref == 1  # the host source stays pinned
    assert nodes[parent.id].device_ref == 1  # and so does the device parent
    assert c.evict(D, 100) == 0 and c.evict(H, 100) == 0
    c.finish_transfer(t.op_id, True)
    events = log.absorb()
    assert [e.kind for e in events] == [EventKind.STORED]
    assert events[0].parent_hash == parent.hashes[-1]
    m = c.match(0, [1, 2, 3, 4])
    assert m.device_len == 4 and m.device_pages[2:] == tuple(d for _, d in t.pairs)
    assert_refs_match_locks(c)
    check_pools(c)


@pytest.mark.behaviours("HOST-4")
@pytest.mark.parametrize("kind", ["writeback", "loadback"])
def test_failed_transfer_frees_its_destination_and_leaves_the_tree_as_it_was(kind):
    c = make(host=8)
    a = [1, 2, 3]
    put(c, a)
    if kind == "loadback":
        offload(c, a)
        c.evict(D, 3)
    m = c.match(0, a)
    tier = D if kind == "writeback" else H
    node = m.device_node if tier is D else m.host_node
    c.lock(node, tier)
    before = c.snapshot()
    start = c.start_writeback if kind == "writeback" else c.start_loadback
    t = start(node)
    assert t is not None
    c.finish_transfer(t.op_id, False)
    after = check_pools(c)
    dst = H if kind == "writeback" else D
    assert all(after.pools[dst].owners[d] == "free" for _, d in t.pairs)
    assert tree_state(after) == tree_state(before)
    with pytest.raises(CacheError) as e:
        c.finish_transfer(t.op_id, True)  # it is over: a second ack is rejected
    assert e.value.code == "unknown_op"
    assert c.snapshot() == after


@pytest.mark.behaviours("HOST-5")
def test_declined_transfers_change_nothing():
    c = make(host=4)
    a, b = [1, 2, 3], [4, 5, 6, 7, 8]
    put(c, a)
    put(c, b)
    ma, mb = c.match(0, a), c.match(0, b)
    c.lock(ma.device_node, D)
    c.lock(mb.device_node, D)
    t = c.start_writeback(ma.device_node)
    assert t is not None
    for call in (
        lambda: c.start_writeback(ma.device_node),  # the path is already in flight
        lambda: c.start_writeback(mb.device_node),  # five pages, one host page free
    ):
        before = c.snapshot()
        assert call() is None
        assert c.snapshot() == before
    c.finish_transfer(t.op_id, True)
    before = c.snapshot()
    assert c.start_writeback(ma.device_node) is None  # already on host: nothing to copy
    hm = c.match(0, a)
    c.lock(hm.host_node, H)
    before = c.snapshot()
    assert c.start_loadback(hm.host_node) is None  # already on device
    assert c.snapshot() == before


@pytest.mark.behaviours("HOST-6", "EVICT-2")
def test_completed_writeback_refreshes_the_host_lru_position():
    c = make(host=8)
    c.tick()
    put(c, [1, 1])
    put(c, [2, 2])
    hx = c.lock(c.match(0, [1, 1]).device_node, D)
    hy = c.lock(c.match(0, [2, 2]).device_node, D)
    tx = c.start_writeback(c.match(0, [1, 1]).device_node)
    ty = c.start_writeback(c.match(0, [2, 2]).device_node)
    assert tx is not None and ty is not None
    c.finish_transfer(ty.op_id, True)
    c.tick()
    c.tick()
    c.finish_transfer(tx.op_id, True)  # lands two steps later
    c.unlock(hx)
    c.unlock(hy)
    x, y = node_at(c, [1, 1]), node_at(c, [2, 2])
    assert x is not None and y is not None
    assert x.host_access == c.clock.now == 3 and y.host_access == 1
    assert x.seq < y.seq  # without the refresh x would be the host victim
    assert c.evict(H, 1) == 2
    x, y = node_at(c, [1, 1]), node_at(c, [2, 2])
    assert x is not None and x.host is not None
    assert y is not None and y.host is None


# --------------------------------------------------------------------------------- events
@pytest.mark.behaviours("EVENT-1", "EVENT-2", "EVENT-6", "EVICT-5")
def test_events_follow_the_device_tier():
    c = make(host=8)
    log = EventLog(c)
    a = [1, 2, 3, 4]
    put(c, a)
    assert [e.kind for e in log.absorb()] == [EventKind.STORED]
    put(c, a)  # a duplicate insert stores nothing
    c.match(0, [1, 2, 9])  # a split stores nothing
    assert log.absorb() == []
    put(c, [1, 2, 7])
    (ev,) = log.absorb()
    assert len(ev.block_hashes) == 1
    offload(c, a)
    assert log.absorb() == []  # a host copy is not a stored block
    assert c.evict(D, 100) == 5
    removed = log.absorb()
    assert {e.kind for e in removed} == {EventKind.REMOVED}
    assert sum(len(e.block_hashes) for e in removed) == 5
    assert c.evict(H, 100) == 4
    assert log.absorb() == []  # removing host pages announces nothing
    put(c, a)  # stored again after its removal
    assert sum(len(e.block_hashes) for e in log.absorb()) == 4
    quiet = make(events=False)
    put(quiet, a)
    quiet.evict(D, 100)
    assert quiet.drain_events() == []


@pytest.mark.behaviours("EVENT-3", "EVENT-4", "EVENT-1")
def test_parent_hash_is_announced_first_and_hashes_are_recomputable():
    c = make(page_size=2)
    log = EventLog(c)
    a = [1, 2, 3, 4]
    put(c, a, ns=3)
    put(c, a + [5, 6], ns=3)
    put(c, [1, 2, 7, 7], ns=3)  # below a split
    e1, e2, e3 = log.absorb()
    assert e1.parent_hash is None and e1.block_size == 2 and e1.tokens == tuple(a)
    assert list(e1.block_hashes) == chain(None, 3, (1, 2, 3, 4), 2)
    assert e2.parent_hash == e1.block_hashes[-1]
    assert list(e2.block_hashes) == chain(e1.block_hashes[-1], 3, (5, 6), 2)
    assert e3.parent_hash == e1.block_hashes[0]
    assert list(e3.block_hashes) == chain(e1.block_hashes[0], 3, (7, 7), 2)
    for n in c.snapshot().nodes:
        if n.parent is not None:
            full = c.snapshot().full_tokens(n.id)
            assert list(n.hashes) == chain(None, 3, full, 2)[-len(n.hashes):]


@pytest.mark.behaviours("EVENT-5")
def test_block_hash_is_blake2b_of_its_inputs_spelled_out():
    """``block_hash`` packs its head in one call: the same bytes as the flag, parent, namespace
    and count spelled one by one, and a value out of range is rejected as they reject it."""
    from hashlib import blake2b

    def spelled(parent, ns, tokens):
        data = (bytes([parent is not None]) + (parent or 0).to_bytes(8, "little")
                + ns.to_bytes(8, "little", signed=True) + len(tokens).to_bytes(4, "little")
                + b"".join((t & 0xFFFFFFFF).to_bytes(4, "little") for t in tokens))
        return int.from_bytes(blake2b(data, digest_size=8).digest(), "little")

    for parent in (None, 0, 1, 2**64 - 1):
        for ns in (0, 5, -1, 2**63 - 1, -(2**63)):
            for tokens in ((), (7,), (1, 2**40 + 3, 2**32 - 1)):
                assert block_hash(parent, ns, tokens) == spelled(parent, ns, tokens)
    for parent, ns in ((2**64, 0), (-1, 0), (None, 2**63), (None, -(2**63) - 1)):
        with pytest.raises(OverflowError):
            block_hash(parent, ns, (1,))


# --------------------------------------------------------------------------------- determinism
def _script(c: PrefixCache) -> list[Any]:
    """A fixed history touching every operation; returns every result it saw."""
    out: list[Any] = []
    for step in range(3):
        c.tick()
        for ns in (0, 1):
            out.append(put(c, [step, 1, 2, 3, step], ns))
            out.append(c.match(ns, [step, 1, 9]))
    h = c.lock(c.match(0, [2, 1, 2, 3, 2]).device_node, D)
    t = c.start_writeback(c.match(0, [2, 1, 2, 3, 2]).device_node)
    assert t is not None
    out.append(t.pairs)
    c.tick()
    c.finish_transfer(t.op_id, True)
    c.unlock(h)
    out.append(c.evict(D, 7))
    out.append(c.evict(H, 2))
    out.append(c.drain_events())
    out.append(c.snapshot())
    return out


@pytest.mark.behaviours("DET-1", "EVICT-3")
def test_same_history_gives_the_same_outcome():
    assert _script(make(device=40, host=8)) == _script(make(device=40, host=8))


@pytest.mark.behaviours("DET-1")
def test_outcome_does_not_depend_on_the_process():
    """Two interpreters with different hash seeds agree on every result, event and snapshot."""
    code = (
        "import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]];"
        "import test_reference_cache as t; print(repr(t._script(t.make(device=40, host=8))))"
    )
    outs = []
    for hash_seed in ("1", "4242"):
        env = {"PYTHONHASHSEED": hash_seed, "PATH": ""}
        r = subprocess.run(
            [sys.executable, "-c", code, str(REPO), str(Path(__file__).parent)],
            capture_output=True, text=True, env=env, check=True, timeout=60,
        )
        outs.append(r.stdout)
    assert outs[0] == outs[1] and "CacheSnapshot" in outs[0]


# --------------------------------------------------------------------------------- faults
def _rejections() -> list[tuple[str, str, Callable[[PrefixCache, dict], Any]]]:
    return [
        ("alloc-negative", "bad_count", lambda c, s: c.alloc(-2)),
        ("free-not-held", "bad_pages", lambda c, s: c.free([s["free_page"]])),
        ("free-tree-page", "bad_pages", lambda c, s: c.free([s["tree"][0]])),
        ("free-outside", "bad_pages", lambda c, s: c.free([1000])),
        ("match-negative-token", "bad_tokens", lambda c, s: c.match(0, [1, -1])),
        ("match-non-int-token", "bad_tokens", lambda c, s: c.match(0, [1, "x"])),
        ("match-array-token-too-wide", "bad_tokens",
         lambda c, s: c.match(0, array(TOKEN, [1, 2**63]))),
        ("insert-array-token-too-wide", "bad_tokens",
         lambda c, s: c.insert(0, array(TOKEN, [5, 2**64 - 1]), s["held"][:1])),
        ("insert-partial-page", "bad_tokens", lambda c, s: c.insert(0, [1, 2, 3], s["held"])),
        ("insert-page-count", "bad_pages", lambda c, s: c.insert(0, [5, 5], s["held"])),
        ("insert-page-twice", "bad_pages",
         lambda c, s: c.insert(0, [5, 5, 6, 6], [s["held"][0]] * 2)),
        ("insert-free-page", "bad_pages",
         lambda c, s: c.insert(0, [5, 5, 6, 6], [s["held"][0], s["free_page"]])),
        ("insert-tree-page-elsewhere", "bad_pages",
         lambda c, s: c.insert(0, [5, 5, 6, 6], [s["held"][0], s["tree"][0]])),
        ("insert-after-valid-pages", "bad_pages",
         lambda c, s: c.insert(0, [1, 2, 3, 4, 9, 9], [*s["tree"], 1000])),
        ("lock-unknown-node", "unknown_node", lambda c, s: c.lock(10_000, D)),
        ("lock-not-on-tier", "not_on_tier", lambda c, s: c.lock(s["node"], H)),
        ("unlock-not-held", "unbalanced_unlock", lambda c, s: c.unlock(s["released"])),
        ("evict-negative", "bad_count", lambda c, s: c.evict(H, -1)),
        ("writeback-unknown-node", "unknown_node", lambda c, s: c.start_writeback(10_000)),
        ("loadback-not-on-host", "not_on_tier", lambda c, s: c.start_loadback(s["node"])),
        ("finish-unknown-op", "unknown_op", lambda c, s: c.finish_transfer(777, True)),
    ]


@pytest.mark.behaviours("FAULT-1", "POOL-4", "PIN-3")
@pytest.mark.parametrize(("code", "call"), [(c, f) for _, c, f in _rejections()],
                         ids=[n for n, _, _ in _rejections()])
def test_rejected_calls_raise_cache_error_and_change_nothing(code, call):
    c = make(page_size=2, device=8, host=4)
    tree = put(c, [1, 2, 3, 4])
    held = c.alloc(2)
    assert held is not None
    node = c.match(0, [1, 2, 3, 4]).device_node
    released = c.lock(node, D)
    c.unlock(released)
    c.lock(node, D)
    free_page = c.snapshot().pools[D].free[0]
    c.drain_events()
    state = {"tree": tree, "held": held, "node": node, "released": released,
             "free_page": free_page}
    before = c.snapshot()
    with pytest.raises(CacheError) as e:
        call(c, state)
    assert e.value.code == code
    assert str(e.value).startswith(f"{code}: ")
    assert c.snapshot() == before
    assert c.drain_events() == []


@pytest.mark.behaviours("FAULT-1")
def test_bad_config_is_rejected():
    for kw in ({"page_size": 0}, {"device_pages": -1}, {"host_pages": -3}):
        with pytest.raises(CacheError) as e:
            CacheConfig(**kw)
        assert e.value.code == "bad_config"


@pytest.mark.behaviours("FAULT-1")
def test_rejected_insert_in_a_new_namespace_changes_nothing():
    c = make()
    before = c.snapshot()
    with pytest.raises(CacheError):
        c.insert(5, [1], [0])  # page 0 is free, not the caller's
    assert c.snapshot() == before


@pytest.mark.behaviours("FAULT-1", "POOL-1")
def test_a_tier_given_by_its_value_is_that_tier_and_an_unknown_one_is_rejected():
    def build() -> PrefixCache:
        c = make(device=4, host=4)
        put(c, [1, 2])
        offload(c, [1, 2])
        return c

    c, ref = build(), build()
    freed = c.evict("device", 2)  # type: ignore[arg-type]
    assert freed == ref.evict(D, 2)
    assert c.snapshot() == ref.snapshot()
    check_pools(c)
    before = c.snapshot()
    for call in (lambda: c.evict("disk", 1), lambda: c.alloc(1, "disk")):  # type: ignore[arg-type]
        with pytest.raises(CacheError) as e:
            call()
        assert e.value.code == "bad_tier"
    assert c.snapshot() == before


@pytest.mark.behaviours("FAULT-1")
def test_a_page_that_is_not_an_int_is_rejected():
    c = make()
    put(c, [1, 2])
    before = c.snapshot()
    for call in (lambda: c.free([1.0]), lambda: c.insert(0, [7], ["x"]), lambda: c.free([True])):
        with pytest.raises(CacheError) as e:
            call()
        assert e.value.code == "bad_pages"
    assert c.snapshot() == before


class _CrashingMatch(PrefixCache):
    def match(self, namespace, tokens):
        if len(tokens) > 3:
            raise RuntimeError("boom")
        return super().match(namespace, tokens)


class _RejectsLegalMatch(PrefixCache):
    def match(self, namespace, tokens):
        if namespace == 1:
            raise CacheError("bad_tokens", "namespace 1 refused")
        return super().match(namespace, tokens)


@pytest.mark.behaviours("FAULT-2")
@pytest.mark.parametrize(
    ("cls", "ns", "words"),
    [(_CrashingMatch, 0, "match raised RuntimeError: boom"),
     (_RejectsLegalMatch, 1, "match rejected a legal call")],
)
def test_a_failure_on_a_legal_call_is_a_fault_2_violation(cls, ns, words):
    config = EngineConfig(page_size=1)
    trace = Trace(config=config, steps=[
        InsertStep(ns=ns, tokens=[1, 2]),
        MatchStep(ns=ns, tokens=[1, 2]),
        MatchStep(ns=ns, tokens=[1, 2, 3, 4]),
    ])

    def factory(cfg):
        return ReferenceCacheAdapter(cfg, cache_cls=cls)

    with pytest.raises(Violation) as e:
        play(factory, trace)
    v = e.value
    assert (v.oracle, v.behaviours) == ("faults", ("FAULT-2",))
    assert words in v.message
    assert v.step == (2 if cls is _CrashingMatch else 1)
    play(ReferenceCacheAdapter, trace)  # the clean engine plays the same trace


@pytest.mark.behaviours("NS-2", "PIN-2", "EVENT-2")
def test_unload_frees_what_nobody_holds_now_and_the_rest_on_release():
    c = PrefixCache(CacheConfig(page_size=1, device_pages=16, host_pages=8))
    for ns, toks in ((1, [1, 2, 3]), (1, [1, 2, 9]), (0, [1, 2, 3])):
        c.insert(ns, toks, c.alloc(len(toks)))
    handle = c.lock(c.match(1, [1, 2, 3]).device_node, Tier.DEVICE)
    c.drain_events()
    free_before = c.available()
    freed = c.unload(1)
    removed = [e for e in c.drain_events() if e.kind is EventKind.REMOVED]
    assert freed == 1 and c.available() == free_before + 1  # the unpinned [9] only
    # Every device block of the namespace ([1], [2], [3], [9]) is announced at once.
    assert sum(len(e.block_hashes) for e in removed) == 4
    assert 1 not in c.snapshot().roots
    assert c.match(1, [1, 2, 3]).device_len == 0  # a fresh, empty tree
    assert c.match(0, [1, 2, 3]).device_len == 3  # another namespace untouched
    c.unlock(handle)
    assert c.available() == free_before + 4  # the held path went when its lock did
    assert c.drain_events() == []  # and was not announced twice
    assert c.unload(7) == 0  # a namespace never used: nothing to do


@pytest.mark.behaviours("EVICT-2", "EVICT-4", "NS-2")
def test_an_unload_that_strips_a_held_node_of_its_children_leaves_it_evictable() -> None:
    """Found by a time-budgeted fuzz run: unloading a namespace swept a child of a node a
    loadback still held, and the node, a leaf now, never reached the eviction index, so a later
    evict freed nothing while a full scan would have taken it (EVICT-4)."""
    from kvconf.conformance.trace import parse_any_trace

    steps = [
        {"op": "extend", "ns": 0, "tokens": [2, 2]},
        {"op": "match", "ns": 0, "tokens": [2, 2], "lock": "device"},
        {"op": "writeback", "step": 1, "ack": "now", "success": True},
        {"op": "unlock", "step": 1},
        {"op": "evict", "tier": "device", "pages": 24},
        {"op": "match", "ns": 0, "tokens": [2, 2], "lock": "host"},
        {"op": "loadback", "step": 5, "ack": "later", "success": True},
        {"op": "extend", "ns": 0, "tokens": [2, 2, 2, 0, 2, 1, 2, 2]},
        {"op": "match", "ns": 0, "tokens": [2, 2, 2, 0], "lock": "device"},
        {"op": "unlock", "step": 8},
        {"op": "evict", "tier": "device", "pages": 2},
        {"op": "unload", "ns": 0},
        {"op": "evict", "tier": "device", "pages": 24},
    ]
    import json

    trace = parse_any_trace(json.dumps({"config": {"page_size": 2, "device_pages": 24,
                                                   "host_pages": 24}, "steps": steps}))
    play(ReferenceCacheAdapter, trace)  # raises the Violation if any oracle breaks


@pytest.mark.behaviours("FAULT-1")
def test_tokens_in_the_trees_own_array_form_are_taken_as_a_list_is():
    """A caller keeping its prompts as ``TOKEN`` arrays (no copy on the way in) gets the same
    answers as one passing lists, and a later change to its array does not reach the tree."""
    by_list, by_array = make(page_size=2, device=8), make(page_size=2, device=8)
    for c, form in ((by_list, list), (by_array, lambda t: array(TOKEN, t))):
        prompt = form([1, 2, 3, 4])
        pages = c.alloc(2)
        c.insert(0, prompt, pages)
        if isinstance(prompt, array):
            prompt[0] = 9
    for c in (by_list, by_array):
        assert c.match(0, [1, 2, 3, 4]).device_len == 4
        assert c.match(0, array(TOKEN, [1, 2, 3, 4])).device_len == 4
    assert by_list.snapshot() == by_array.snapshot()
