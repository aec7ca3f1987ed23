"""A Hypothesis state machine written straight against ``reference.PrefixCache``.

No kit in between: the machine makes the calls a serving loop makes (allocate, insert, match, lock,
evict, copy to and from host, acknowledge) and after every rule checks the spec's invariants on the
white-box snapshot and the published events, with its own bookkeeping of what the caller holds:

* ownership: every page of each pool has exactly one owner, the owner records agree with the
  tree's page lists, the caller holds exactly what it was given, transfers own exactly their
  destinations, and the four kinds add up to the pool size (POOL-1, POOL-2, POOL-4);
* pinning: reference counts equal the locks held on a node or below, the caller's locks are the
  engine's non-internal locks, and a locked page is never freed or handed out (PIN-1..PIN-3);
* eviction: the victims are unpinned leaves, no leaf that stays was older than a victim, and a
  victim with a copy on the other tier is demoted, not dropped (EVICT-1..EVICT-5);
* events: stored at most once, removed only when stored, parents first, recomputable hashes and
  the stored set equal to the device tier's blocks (EVENT-1..EVENT-6);
* determinism: at teardown the whole call history is replayed on a fresh cache and must give the
  same results, events and final snapshot (DET-1).
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from lock_counts import subtree_locks

from kvconf.reference import CacheConfig, CacheError, PrefixCache, Tier, block_hash
from kvconf.reference.kv_events import EventKind, KVEvent
from kvconf.reference.snapshot import CacheSnapshot

pytestmark = pytest.mark.behaviours(
    "POOL-1", "POOL-2", "POOL-4",
    "TREE-1", "TREE-2", "TREE-3", "TREE-4", "TREE-5", "TREE-6",
    "PIN-1", "PIN-2", "PIN-3",
    "EVICT-1", "EVICT-2", "EVICT-3", "EVICT-4", "EVICT-5",
    "HOST-1", "HOST-2", "HOST-3", "HOST-4", "HOST-5", "HOST-6",
    "EVENT-1", "EVENT-2", "EVENT-3", "EVENT-4", "EVENT-5", "EVENT-6",
    "NS-1", "DET-1", "FAULT-1",
)

D, H = Tier.DEVICE, Tier.HOST
ALPHABET = 3
NAMESPACES = 2
PICK = st.integers(0, 1 << 16)
TIERS = st.sampled_from([D, H])


@dataclass
class HeldLock:
    handle: int
    tier: Tier
    node: int
    ns: int
    tokens: tuple[int, ...]
    pages: tuple[int, ...]


@dataclass
class InFlight:
    op_id: int
    kind: str
    pairs: tuple[tuple[int, int], ...]
    node: int  # the node whose path is copied: pinned on the source tier
    anchor: int  # the parent the copied path hangs from: pinned on the destination tier


Blocks = dict[tuple[int, tuple[int, ...]], tuple[Any, ...]]


def blocks(snap: CacheSnapshot) -> Blocks:
    """(namespace, prefix up to the end of a page) -> (device page, host page, hash, refs)."""
    out: Blocks = {}
    p = snap.page_size
    for n in snap.nodes:
        if n.parent is None:
            continue
        full = snap.full_tokens(n.id)
        base = len(full) - len(n.key)
        for i in range(len(n.key) // p):
            out[(n.namespace, full[: base + (i + 1) * p])] = (
                n.device[i] if n.device is not None else None,
                n.host[i] if n.host is not None else None,
                n.hashes[i],
                n.device_ref,
                n.host_ref,
            )
    return out


def held_prefix(bl: Blocks, ns: int, tokens: tuple[int, ...], p: int, tier: Tier) -> list[int]:
    """Pages of the longest whole-page prefix of ``tokens`` held on ``tier`` (an independent model
    of TREE-1: block by block from the root, stopping at the first block missing there)."""
    col = 0 if tier is D else 1
    pages: list[int] = []
    for end in range(p, len(tokens) + 1, p):
        b = bl.get((ns, tokens[:end]))
        if b is None or b[col] is None:
            break
        pages.append(b[col])
    return pages


def candidates(snap: CacheSnapshot, tier: Tier) -> dict[int, tuple[int, int]]:
    """Evictable leaves of ``tier`` (unpinned, no child there) -> (access, seq)."""
    has_child = {n.parent for n in snap.nodes if n.parent is not None and n.pages(tier) is not None}
    return {
        n.id: (n.access(tier), n.seq)
        for n in snap.nodes
        if n.parent is not None and n.pages(tier) is not None and n.ref(tier) == 0
        and n.id not in has_child
    }


def expected_victims(snap: CacheSnapshot, tier: Tier, asked: int) -> tuple[set[int], int]:
    """The victims EVICT-1..EVICT-4 allow, replayed on a copy of the snapshot's tree."""
    nodes = snap.node_map()
    on = {n.id for n in snap.nodes if n.parent is not None and n.pages(tier) is not None}
    victims: set[int] = set()
    freed = 0
    while freed < asked:
        cands = [
            i for i in on
            if nodes[i].ref(tier) == 0 and not any(nodes[j].parent == i for j in on)
        ]
        if not cands:
            break
        v = min(cands, key=lambda i: (nodes[i].access(tier), nodes[i].seq))
        victims.add(v)
        on.discard(v)
        freed += len(nodes[v].pages(tier) or ())
    return victims, freed


def path_missing(snap: CacheSnapshot, node_id: int, tier: Tier) -> list[int]:
    """Node ids from the deepest ancestor holding ``tier`` (exclusive) down to ``node_id``."""
    nodes = snap.node_map()
    out: list[int] = []
    cur: int | None = node_id
    while cur is not None and nodes[cur].parent is not None and nodes[cur].pages(tier) is None:
        out.append(cur)
        cur = nodes[cur].parent
    return out[::-1]


def _plain(x: Any) -> Any:
    """Results made comparable across two caches (a Transfer holds a live Node)."""
    if hasattr(x, "op_id") and hasattr(x, "pairs"):
        return ("transfer", x.op_id, x.kind, tuple(x.pairs))
    return x


class ReferenceMachine(RuleBasedStateMachine):
    cache_cls: type[PrefixCache] = PrefixCache
    page_size = 1
    device_pages = 10
    host_pages = 6

    def __init__(self) -> None:
        super().__init__()
        self.p = self.page_size
        self.config = CacheConfig(self.p, self.device_pages, self.host_pages)
        self.c = self.cache_cls(self.config)
        self.history: list[tuple[str, tuple[Any, ...], Any]] = []
        self.locks: dict[int, HeldLock] = {}
        self.released: list[int] = []
        self.held: list[int] = []  # device pages the caller holds
        self.flight: dict[int, InFlight] = {}
        self.stored: dict[int, int] = {}  # hash -> namespace
        self.events: list[KVEvent] = []
        self.prompts: list[tuple[int, tuple[int, ...]]] = []

    # ----------------------------------------------------------------- plumbing
    def call(self, name: str, *args: Any) -> Any:
        """Call the cache, remembering the call and its outcome for the DET-1 replay."""
        try:
            out = getattr(self.c, name)(*args)
        except CacheError as e:
            self.history.append((name, args, ("rejected", e.code)))
            raise
        self.history.append((name, args, _plain(out)))
        return out

    def rejected(self, name: str, *args: Any) -> str:
        """A call that must be rejected with CacheError and change nothing (FAULT-1)."""
        before = self.c.snapshot()
        with pytest.raises(CacheError) as e:
            self.call(name, *args)
        assert self.c.snapshot() == before, f"rejected {name}{args} changed the cache"
        return e.value.code

    def snap(self) -> CacheSnapshot:
        return self.c.snapshot()

    # ----------------------------------------------------------------- rules: pages
    @rule(n=st.integers(0, 4))
    def alloc_hold(self, n: int) -> None:
        free_before = set(self.snap().pools[D].free)
        pages = self.call("alloc", n)
        if pages is None:
            assert n > len(free_before), "POOL-2: refused an allocation the pool could serve"
            return
        assert len(pages) == n == len(set(pages)), "POOL-2"
        assert set(pages) <= free_before, "POOL-2: handed out a page that was not free"
        self.held.extend(pages)

    @precondition(lambda self: self.held)
    @rule(k=PICK, n=st.integers(1, 3))
    def free_held(self, k: int, n: int) -> None:
        start = k % len(self.held)
        pages = self.held[start : start + n]
        self.call("free", pages)
        del self.held[start : start + n]

    # ----------------------------------------------------------------- rules: insert / match
    def whole(self, data: st.DataObject) -> tuple[int, ...]:
        n = data.draw(st.integers(1, 4), label="pages")
        return tuple(data.draw(st.lists(st.integers(0, ALPHABET - 1), min_size=n * self.p,
                                        max_size=n * self.p), label="tokens"))

    def _evict(self, tier: Tier, n: int) -> int:
        before = self.snap()
        want, want_freed = expected_victims(before, tier, n)
        cands_before = candidates(before, tier)
        freed = self.call("evict", tier, n)
        after = self.snap()
        a_nodes = after.node_map()
        b_nodes = before.node_map()
        lost = {
            i for i, b in b_nodes.items()
            if b.pages(tier) is not None and (i not in a_nodes or a_nodes[i].pages(tier) is None)
        }
        for i in lost:
            assert b_nodes[i].ref(tier) == 0, f"EVICT-1/PIN-2: evicted node {i} while pinned"
        assert freed == sum(len(b_nodes[i].pages(tier) or ()) for i in lost), "EVICT-4"
        # No leaf that could have gone and stayed is older than a victim (EVICT-2, EVICT-3).
        if lost:
            newest_victim = max((b_nodes[i].access(tier), b_nodes[i].seq) for i in lost)
            still = candidates(after, tier)
            for i, key in cands_before.items():
                assert not (i in still and key < newest_victim), (
                    f"EVICT-2: leaf {i} {key} stayed while a newer one {newest_victim} went"
                )
        if freed < n:
            assert not candidates(after, tier), "EVICT-4: stopped short with candidates left"
        assert (lost, freed) == (want, want_freed), "EVICT-1..4: not the allowed victims"
        other = H if tier is D else D
        for i in lost:  # EVICT-5: demoted, or gone when no tier is left
            if b_nodes[i].pages(other) is not None:
                assert i in a_nodes and a_nodes[i].pages(other) == b_nodes[i].pages(other)
            else:
                assert i not in a_nodes
        return freed

    def _insert(self, ns: int, toks: tuple[int, ...], reuse: bool) -> None:
        m = self.call("match", ns, list(toks))
        h = self.call("lock", m.device_node, D)  # keep what is reused while allocating
        reused = list(m.device_pages) if reuse else []
        need = len(toks) // self.p - len(reused)
        pages = self.call("alloc", need)
        if pages is None:
            self._evict(D, need)
            pages = self.call("alloc", need)
        if pages is None:
            self.call("unlock", h)
            return
        given = reused + pages
        before = self.snap()
        on_device = held_prefix(blocks(before), ns, toks, self.p, D)
        r = self.call("insert", ns, list(toks), given)
        after = self.snap()
        bl = blocks(after)
        # TREE-5: the insert is covered on device; places the tree held keep their page, and
        # the caller's pages there come back free; the rest are the caller's pages.
        assert held_prefix(bl, ns, toks, self.p, D) == on_device + given[len(on_device):]
        assert r.cached_len == len(on_device) * self.p
        dups = {g for g, t in zip(given, on_device, strict=False) if g != t}
        assert set(r.freed) == dups, "TREE-5: duplicates not (or wrongly) freed"
        assert all(after.pools[D].owners[pg] == "free" for pg in r.freed)
        self.call("unlock", h)
        self.prompts.append((ns, toks))

    @rule(ns=st.integers(0, NAMESPACES - 1), data=st.data(), reuse=st.booleans())
    def insert(self, ns: int, data: st.DataObject, reuse: bool) -> None:
        self._insert(ns, self.whole(data), reuse)

    @precondition(lambda self: self.prompts)
    @rule(k=PICK, cut=st.integers(0, 4), data=st.data(), reuse=st.booleans())
    def insert_known(self, k: int, cut: int, data: st.DataObject, reuse: bool) -> None:
        ns, toks = self.prompts[k % len(self.prompts)]
        self._insert(ns, toks[: cut * self.p] + self.whole(data), reuse)

    def _match(self, ns: int, query: tuple[int, ...], lock: Tier | None) -> None:
        before = self.snap()
        bl = blocks(before)
        m = self.call("match", ns, list(query))
        mid = self.snap()
        for tier, n, pages, node in (
            (D, m.device_len, m.device_pages, m.device_node),
            (H, m.host_len, m.host_pages, m.host_node),
        ):
            want = held_prefix(bl, ns, query, self.p, tier)
            assert n >= 0, "TREE-3: negative match length"
            assert n == len(want) * self.p, f"TREE-1: {tier} match {n}, tree holds {want}"
            assert list(pages) == want, "TREE-2: a page of another prefix was served"
            # TREE-3 / TREE-6: the handle is the node that ends exactly where the match ends.
            if n == 0:
                assert node == mid.roots.get(ns), "TREE-3: an empty match names its root"
            else:
                assert mid.full_tokens(node) == query[:n]
                assert mid.node_map()[node].namespace == ns
        assert blocks(mid) == bl, "TREE-4: a match changed cached blocks"
        if lock is not None:
            node = m.device_node if lock is D else m.host_node
            pages = m.device_pages if lock is D else m.host_pages
            n = m.device_len if lock is D else m.host_len
            handle = self.call("lock", node, lock)
            self.locks[handle] = HeldLock(handle, lock, node, ns, query[:n], tuple(pages))

    @rule(ns=st.integers(0, NAMESPACES - 1), data=st.data(),
          tail=st.lists(st.integers(0, ALPHABET - 1), max_size=2),
          lock=st.sampled_from([None, D, H]))
    def match(self, ns: int, data: st.DataObject, tail: list[int], lock: Tier | None) -> None:
        self._match(ns, self.whole(data) + tuple(tail[: self.p - 1]), lock)

    @precondition(lambda self: self.prompts)
    @rule(k=PICK, cut=st.integers(1, 4), other_ns=st.booleans(), divergent=st.booleans(),
          lock=st.sampled_from([None, D, H]))
    def match_known(self, k: int, cut: int, other_ns: bool, divergent: bool,
                    lock: Tier | None) -> None:
        ns, toks = self.prompts[k % len(self.prompts)]
        query = toks[: cut * self.p]
        if divergent:
            query = query + (ALPHABET,) * self.p  # a token no prompt has: splits mid-node
        self._match((ns + 1) % NAMESPACES if other_ns else ns, query, lock)

    # ----------------------------------------------------------------- rules: pins
    @precondition(lambda self: self.locks)
    @rule(k=PICK)
    def unlock(self, k: int) -> None:
        handle = sorted(self.locks)[k % len(self.locks)]
        self.call("unlock", handle)
        del self.locks[handle]
        self.released.append(handle)

    @precondition(lambda self: self.released)
    @rule(k=PICK)
    def unlock_again(self, k: int) -> None:
        handle = self.released[k % len(self.released)]
        assert self.rejected("unlock", handle) == "unbalanced_unlock"

    # ----------------------------------------------------------------- rules: eviction
    @rule(tier=TIERS, n=st.integers(0, 6))
    def evict(self, tier: Tier, n: int) -> None:
        self._evict(tier, n)

    @rule()
    def tick(self) -> None:
        now = self.c.clock.now
        assert self.call("tick") == now + 1

    # ----------------------------------------------------------------- rules: host tier
    def _start(self, kind: str, lock: HeldLock, ack_now: bool, success: bool) -> None:
        src, dst = (D, H) if kind == "writeback" else (H, D)
        before = self.snap()
        path = path_missing(before, lock.node, dst)
        t = self.call(f"start_{kind}", lock.node)
        if t is None:
            # HOST-5: declined only for a reason the spec names, and nothing changed.
            nodes = before.node_map()
            need = sum(len(nodes[i].pages(src) or ()) for i in path)
            assert (not path or any(nodes[i].pending is not None for i in path)
                    or need > len(before.pools[dst].free)), f"{kind} declined for no reason"
            assert self.snap() == before, "HOST-5: a declined transfer changed the cache"
            return
        nodes = before.node_map()
        # HOST-2 / HOST-3: exactly the source pages of the path that lack a destination copy,
        # into pages that were free and now belong to the transfer.
        assert [s for s, _ in t.pairs] == [pg for i in path for pg in nodes[i].pages(src) or ()]
        dsts = [d for _, d in t.pairs]
        assert set(dsts) <= set(before.pools[dst].free) and len(set(dsts)) == len(dsts)
        after = self.snap()
        assert all(after.pools[dst].owners[d] == f"transfer:{t.op_id}" for d in dsts)
        assert all(after.node_map()[i].pending == t.op_id for i in path)
        assert blocks(after).keys() == blocks(before).keys()
        anchor = nodes[path[0]].parent
        assert anchor is not None
        self.flight[t.op_id] = InFlight(t.op_id, kind, tuple(t.pairs), lock.node, anchor)
        if ack_now:
            self._finish(t.op_id, success)

    def _finish(self, op_id: int, success: bool) -> None:
        t = self.flight.pop(op_id)
        src, dst = (D, H) if t.kind == "writeback" else (H, D)
        before = self.snap()
        self.call("finish_transfer", op_id, success)
        after = self.snap()
        b_nodes, a_nodes = before.node_map(), after.node_map()
        mine = [i for i, n in b_nodes.items() if n.pending == op_id]
        assert all(a_nodes[i].pending is None for i in mine)
        dst_of = dict(t.pairs)
        if not success:
            # HOST-4: the destination pages go back free and no node gains a copy.
            assert all(after.pools[dst].owners[d] == "free" for _, d in t.pairs)
            for i in mine:
                assert a_nodes[i].pages(dst) == b_nodes[i].pages(dst)
            return
        for i in mine:
            want = tuple(dst_of[s] for s in b_nodes[i].pages(src) or ())
            if t.kind == "writeback":
                assert a_nodes[i].host == want
                # HOST-6: a node just written is not older on host than anything else there.
                assert a_nodes[i].host_access == self.c.clock.now
            elif b_nodes[i].device is None:
                assert a_nodes[i].device == want
            else:  # inserted on device meanwhile: the copy is dropped, the insert's pages stay
                assert a_nodes[i].device == b_nodes[i].device
        assert all(after.pools[dst].owners[d] != f"transfer:{op_id}" for _, d in t.pairs)

    def _locks_on(self, tier: Tier) -> list[HeldLock]:
        return [lk for _, lk in sorted(self.locks.items()) if lk.tier is tier]

    @precondition(lambda self: any(lk.tier is D for lk in self.locks.values()))
    @rule(k=PICK, ack_now=st.booleans(), success=st.booleans(), squeeze=st.booleans())
    def writeback(self, k: int, ack_now: bool, success: bool, squeeze: bool) -> None:
        locks = self._locks_on(D)
        self._start("writeback", locks[k % len(locks)], ack_now, success)
        if squeeze:  # pressure on the destination tier while copies may be in flight
            self._evict(H, self.host_pages)

    @precondition(lambda self: any(lk.tier is H for lk in self.locks.values()))
    @rule(k=PICK, ack_now=st.booleans(), success=st.booleans(), squeeze=st.booleans())
    def loadback(self, k: int, ack_now: bool, success: bool, squeeze: bool) -> None:
        locks = self._locks_on(H)
        self._start("loadback", locks[k % len(locks)], ack_now, success)
        if squeeze:
            self._evict(D, self.device_pages)

    def _offload(self, k: int, ack_now: bool, success: bool, squeeze: bool) -> None:
        ns, toks = self.prompts[k % len(self.prompts)]
        self._match(ns, toks, D)
        handle = max(self.locks)
        self._start("writeback", self.locks[handle], ack_now, success)
        if squeeze:  # host pressure while the copy may be in flight
            self._evict(H, self.host_pages)
        self.unlock(sorted(self.locks).index(handle))

    @precondition(lambda self: self.prompts)
    @rule(k=PICK, ack_now=st.booleans(), success=st.booleans(), squeeze=st.booleans())
    def offload(self, k: int, ack_now: bool, success: bool, squeeze: bool) -> None:
        """Lock a known prompt on device, write it back, let go of the lock: feeds the host
        tier; a copy acknowledged later keeps its source pinned by its own lock."""
        self._offload(k, ack_now, success, squeeze)

    @precondition(lambda self: self.prompts)
    @rule(k=PICK, ack_now=st.booleans(), success=st.booleans())
    def reload(self, k: int, ack_now: bool, success: bool) -> None:
        """Write a known prompt back, push it off the device, lock it on host, load it back."""
        ns, toks = self.prompts[k % len(self.prompts)]
        self._offload(k, True, True, False)
        self._evict(D, self.device_pages)
        self._match(ns, toks, H)
        handle = max(self.locks)
        self._start("loadback", self.locks[handle], ack_now, success)

    @precondition(lambda self: self.flight)
    @rule(k=PICK, success=st.booleans())
    def finish(self, k: int, success: bool) -> None:
        self._finish(sorted(self.flight)[k % len(self.flight)], success)

    # ----------------------------------------------------------------- rules: bad calls
    @rule(which=st.sampled_from(["free", "finish", "lock", "insert", "match", "evict"]), k=PICK)
    def bad_call(self, which: str, k: int) -> None:
        snap = self.snap()
        if which == "free":
            not_mine = [pg for pg, o in enumerate(snap.pools[D].owners) if o != "caller"]
            if not not_mine:
                return
            assert self.rejected("free", [not_mine[k % len(not_mine)]]) == "bad_pages"
        elif which == "finish":
            assert self.rejected("finish_transfer", 10_000 + k, True) == "unknown_op"
        elif which == "lock":
            assert self.rejected("lock", 10_000 + k, D) == "unknown_node"
        elif which == "insert":
            # Any namespace, one never used included: a rejected insert creates no root.
            ns = k % (NAMESPACES + 1)
            foreign = [pg for pg, o in enumerate(snap.pools[D].owners) if o != "caller"]
            if not foreign:
                return
            toks = [ALPHABET + 1] * self.p  # never cached, so the page must be the caller's
            assert self.rejected("insert", ns, toks, [foreign[k % len(foreign)]]) == "bad_pages"
        elif which == "match":
            assert self.rejected("match", k % NAMESPACES, [0, -1 - k % 3]) == "bad_tokens"
        else:
            assert self.rejected("evict", D if k % 2 else H, -1 - k % 5) == "bad_count"

    # ----------------------------------------------------------------- invariants
    @invariant()
    def ownership(self) -> None:
        snap = self.snap()
        nodes = snap.node_map()
        for tier, pool in snap.pools.items():
            assert len(pool.owners) == pool.size
            from_tree: dict[int, int] = {}
            for n in snap.nodes:
                pages = n.pages(tier)
                if pages is None:
                    continue
                if n.parent is not None:
                    assert len(pages) * self.p == len(n.key)
                    # HOST-1: presence on a tier is closed under ancestors.
                    assert nodes[n.parent].pages(tier) is not None, "HOST-1"
                for pg in pages:
                    assert pg not in from_tree, f"POOL-1: {tier} page {pg} in two nodes"
                    from_tree[pg] = n.id
            dsts = {
                d: t.op_id for t in self.flight.values()
                if (t.kind == "writeback") == (tier is H) for _, d in t.pairs
            }
            kinds: Counter[str] = Counter()
            for pg, owner in enumerate(pool.owners):
                kind = owner.split(":")[0]
                kinds[kind] += 1
                if kind == "node":
                    assert from_tree.get(pg) == int(owner[5:]), f"POOL-1: {tier} page {pg}"
                else:
                    assert pg not in from_tree, f"POOL-1: {tier} page {pg} in a node, {owner}"
                if kind == "transfer":
                    assert dsts.get(pg) == int(owner[9:]), f"POOL-1: {tier} page {pg}"
                elif kind == "caller":
                    assert tier is D and pg in self.held, f"POOL-4: {tier} page {pg} leaked"
                else:
                    assert kind in ("node", "free"), owner
            assert set(pool.free) == {pg for pg, o in enumerate(pool.owners) if o == "free"}
            assert len(set(pool.free)) == len(pool.free), "POOL-1: a page listed free twice"
            if tier is D:
                assert kinds["caller"] == len(self.held) == len(set(self.held)), "POOL-4"
            assert kinds["transfer"] == len(dsts), "POOL-4: a transfer lost a destination"
            assert sum(kinds.values()) == pool.size
            assert kinds["free"] + kinds["caller"] + kinds["node"] + kinds["transfer"] == pool.size

    @invariant()
    def pinning(self) -> None:
        snap = self.snap()
        nodes = snap.node_map()
        counts = subtree_locks(snap)
        for n in snap.nodes:
            assert n.device_ref == counts[(n.id, D)] >= 0, f"PIN-1: node {n.id} device count"
            assert n.host_ref == counts[(n.id, H)] >= 0, f"PIN-1: node {n.id} host count"
        mine = {lk.handle for lk in snap.locks if not lk.internal}
        assert mine == set(self.locks), "PIN-1: the caller's locks and the engine's differ"
        internal = sum(1 for lk in snap.locks if lk.internal)
        assert len(self.flight) <= internal <= 2 * len(self.flight)
        for t in self.flight.values():
            # HOST-2 / HOST-3: the source stays pinned, and so does the parent the copied pages
            # will hang from, on the destination tier.
            src, dst = (D, H) if t.kind == "writeback" else (H, D)
            assert nodes[t.node].ref(src) >= 1, f"{t.kind} {t.op_id}: source not pinned"
            assert nodes[t.anchor].ref(dst) >= 1, f"{t.kind} {t.op_id}: parent not pinned"
        for lk in self.locks.values():
            owners = snap.pools[lk.tier].owners
            gone = [pg for pg in lk.pages if not owners[pg].startswith("node:")]
            assert not gone, f"PIN-2: locked {lk.tier} pages {gone} left the tree"
            # The locked prefix still matches onto the same pages (read on the snapshot).
            got = held_prefix(blocks(snap), lk.ns, lk.tokens, self.p, lk.tier)
            assert tuple(got) == lk.pages, "PIN-2: a locked prefix moved"

    @invariant()
    def events(self) -> None:
        new = self.c.drain_events()
        self.events.extend(new)
        for ev in new:
            if ev.kind is EventKind.REMOVED:
                for h in ev.block_hashes:
                    assert h in self.stored, f"EVENT-2: removed {h:#x}, not stored"
                    del self.stored[h]
                continue
            assert ev.kind is EventKind.STORED
            parent = ev.parent_hash
            assert parent is None or parent in self.stored, "EVENT-3: parent not stored"
            assert ev.block_size == self.p and len(ev.tokens) == self.p * len(ev.block_hashes)
            for i, h in enumerate(ev.block_hashes):
                assert h not in self.stored, f"EVENT-1: {h:#x} stored twice"
                toks = ev.tokens[i * self.p : (i + 1) * self.p]
                assert h == block_hash(parent, ev.namespace, toks), "EVENT-4"
                assert h != block_hash(parent, ev.namespace + 1, toks), "EVENT-5"
                self.stored[h] = ev.namespace
                parent = h
        snap = self.snap()
        held = {
            h: n.namespace for n in snap.nodes
            if n.parent is not None and n.device is not None for h in n.hashes
        }
        assert held == self.stored, "EVENT-6: stored hashes differ from the device tier"

    # ----------------------------------------------------------------- teardown
    def teardown(self) -> None:
        if sys.exc_info()[0] is not None:
            return  # a rule or invariant failed: report that, not a consequence of it
        # Bring the cache to rest: every page must come home.
        for op_id in sorted(self.flight):
            self._finish(op_id, True)
        for handle in sorted(self.locks):
            self.call("unlock", handle)
        self.locks.clear()
        self._evict(H, 1 << 20)
        self._evict(D, 1 << 20)
        if self.held:
            self.call("free", list(self.held))
            self.held.clear()
        snap = self.snap()
        assert all(o == "free" for pool in snap.pools.values() for o in pool.owners), "POOL-4"
        assert all(n.parent is None for n in snap.nodes)
        self.events.extend(self.c.drain_events())
        # DET-1: the same calls on a fresh cache give the same results, events and state.
        again = self.cache_cls(self.config)
        for name, args, out in self.history:
            try:
                got = _plain(getattr(again, name)(*args))
            except CacheError as e:
                got = ("rejected", e.code)
            assert got == out, f"DET-1: {name}{args} gave {got}, first {out}"
        assert again.drain_events() == self.events, "DET-1: events differ"
        assert again.snapshot() == snap, "DET-1: final state differs"


class PageSize2Machine(ReferenceMachine):
    page_size = 2
    device_pages = 12
    host_pages = 8


class RoomyMachine(ReferenceMachine):
    """A larger tree: fewer evictions, deeper paths and more splits."""

    device_pages = 24
    host_pages = 12


TestReferencePage1 = ReferenceMachine.TestCase
TestReferencePage2 = PageSize2Machine.TestCase
TestReferenceRoomy = RoomyMachine.TestCase
