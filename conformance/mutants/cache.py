"""Copies of the reference cache with one defect planted each, the kit's mutants.

Built by subclassing, never by editing the reference; each names the behaviour it breaks.
"""

from __future__ import annotations

import contextlib
import dataclasses

from kvconf.reference import PrefixCache, Tier
from kvconf.reference.errors import CacheError
from kvconf.reference.eviction import is_candidate
from kvconf.reference.kv_events import EventKind, KVEvent
from kvconf.reference.pages import node_owner


def _evict_by(cache, tier, num_pages, eligible, choose) -> int:
    """Eviction the slow way, one victim at a time: ``choose`` among the nodes ``eligible``
    says until enough pages are freed. The eviction mutants differ only in those two."""
    freed = 0
    while freed < num_pages:
        cands = [n for n in cache._nodes.values() if eligible(n)]
        if not cands:
            break
        freed += cache._drop_tier(choose(cands), tier)
    return freed


class EvictsPinned(PrefixCache):
    """PIN-2 / E-3: eviction forgets to skip pinned nodes."""

    def evict(self, tier, num_pages):
        def leaves(n):  # pinned or not
            return (not n.is_root and n.pages(tier) is not None
                    and all(c.pages(tier) is None for c in n.children.values()))

        return _evict_by(self, tier, num_pages, leaves,
                         lambda cs: min(cs, key=lambda n: (n.access(tier), n.seq)))


class NewestFirst(PrefixCache):
    """EVICT-2 / E-4: the most recently used leaf is evicted first."""

    def evict(self, tier, num_pages):
        return _evict_by(self, tier, num_pages, lambda n: is_candidate(n, tier),
                         lambda cs: max(cs, key=lambda n: (n.access(tier), n.seq)))


class TieByNewestSeq(PrefixCache):
    """EVICT-3 / D248-1: equal access times broken by the newest node, not the oldest."""

    def evict(self, tier, num_pages):
        return _evict_by(self, tier, num_pages, lambda n: is_candidate(n, tier),
                         lambda cs: min(cs, key=lambda n: (n.access(tier), -n.seq)))


class LeaksDuplicates(PrefixCache):
    """TREE-5 / POOL-4 / E-5: duplicate caller pages are kept out of the free list and not
    reported."""

    def insert(self, namespace, tokens, pages):
        r = super().insert(namespace, tokens, pages)
        pool = self.pools[Tier.DEVICE]
        for p in r.freed:
            pool._free.remove(p)
            pool._owner[p] = "caller"
        return type(r)(r.cached_len, r.new_len, ())


class SplitDropsPins(PrefixCache):
    """PIN-1 / TREE-4 / E-6: the upper half of a split starts unpinned."""

    def _split(self, node, k):
        mid = super()._split(node, k)
        mid.device_ref = 0
        return mid


class IgnoresFailedAck(PrefixCache):
    """HOST-4 / E-1: a transfer acknowledged with success = false is taken as a success."""

    def finish_transfer(self, op_id, success):
        super().finish_transfer(op_id, True)


class NoHostRefresh(PrefixCache):
    """HOST-6 / D243-2: completing a writeback leaves the host LRU time as it was."""

    def finish_transfer(self, op_id, success):
        t = self._transfers.get(op_id)
        saved = {n.id: n.host_access for n in t.node.path()} if t else {}
        super().finish_transfer(op_id, success)
        if t is not None and t.kind == "writeback":
            for n in t.node.path():
                if n.id in saved:
                    n.host_access = saved[n.id]


class MatchOnePageLong(PrefixCache):
    """TREE-1 / TREE-2 / E-7: the match returns one page beyond the cached prefix when it can."""

    def match(self, namespace, tokens):
        m = super().match(namespace, tokens)
        free = self.pools[Tier.DEVICE].free_list()
        if m.device_len + self.page_size <= len(tokens) and m.device_len and free:
            return type(m)(
                m.namespace, m.device_len + self.page_size, m.host_len,
                (*m.device_pages, free[-1]), m.host_pages, m.device_node, m.host_node,
            )
        return m


class HashWithoutNamespace(PrefixCache):
    """EVENT-5 / D268-7: block hashes leave the namespace out."""

    def _new_node(self, namespace, parent, key, hashes):
        from kvconf.reference.kv_events import chain_hashes

        if parent is not None and hashes:
            hashes = chain_hashes(parent.last_hash(), 0, key, self.page_size)
        return super()._new_node(namespace, parent, key, hashes)


class UnbalancedUnlockAccepted(PrefixCache):
    """PIN-3 / E-8: an unlock of a handle not held is ignored instead of rejected."""

    def unlock(self, handle):
        with contextlib.suppress(CacheError):
            super().unlock(handle)


class StoresTwice(PrefixCache):
    """EVENT-1 / E-9: a loadback announces blocks the device already announced."""

    def _attach_device(self, node, pages, src_owner, now):
        super()._attach_device(node, pages, src_owner, now)
        if src_owner.startswith("transfer:"):
            self._emit(KVEvent(EventKind.STORED, tuple(node.hashes), node.namespace,
                               node.parent.last_hash() if node.parent else None, tuple(node.key),
                               self.page_size))


class SharedNamespaces(PrefixCache):
    """NS-1 / D268-1: every namespace is served from the base model's tree."""

    def match(self, namespace, tokens):
        return super().match(0, tokens)

    def insert(self, namespace, tokens, pages):
        return super().insert(0, tokens, pages)


class LoadbackVisibleEarly(PrefixCache):
    """HOST-3 / E-10: loaded pages join the tree when the loadback starts, before the copy lands."""

    def start_loadback(self, node_id):
        t = super().start_loadback(node_id)
        if t is not None:
            self._transfers.pop(t.op_id)
            for n in t.node.path():
                if n.pending == t.op_id:
                    n.pending = None
            dst = dict(t.pairs)
            for n in t.node.path():
                if n.device is None and n.host is not None and not n.is_root:
                    self._attach_device(n, [dst[p] for p in n.host], f"transfer:{t.op_id}", 0)
            for h in t.locks:
                self._locks.release(h, internal=True)
            self._transfers[t.op_id] = type(t)(t.op_id, t.kind, t.node, [], [])
        return t


class WritebackParentUnpinned(PrefixCache):
    """HOST-2 / HOST-1 / E-11: a writeback in flight does not pin the host copy of the path's
    parent."""

    def _start(self, node, kind):
        t = super()._start(node, kind)
        if t is not None and kind == "writeback" and len(t.locks) > 1:
            self._locks.release(t.locks.pop(), internal=True)
        return t


class UnloadKeepsUnpinned(PrefixCache):
    """NS-2 / D268-4: unloading detaches the namespace but frees nothing, now or later."""

    def _sweep_ghosts(self):
        return 0


class UnloadFreesPinned(PrefixCache):
    """NS-2 / PIN-2 / D268-4: unloading frees every block, the ones a request holds included."""

    def unload(self, namespace):
        root = self._roots.get(namespace)
        if root is not None:
            for node in reversed(self._subtree(root)):
                if node is root or node.pending is not None:
                    continue
                for tier in (Tier.DEVICE, Tier.HOST):
                    if node.pages(tier) is not None and not any(
                        c.pages(tier) is not None for c in node.children.values()
                    ):
                        self._drop_tier(node, tier)
        return super().unload(namespace)


class UnloadSilent(PrefixCache):
    """NS-2 / EVENT-6 / D268-4: unloading frees blocks without announcing their removal."""

    def unload(self, namespace):
        before = len(self._events)
        freed = super().unload(namespace)
        del self._events[before:]
        return freed


class ResetIgnoresHolders(PrefixCache):
    """EVICT-8 / E-26: a reset while part of the cache is held drops what nobody holds and
    reports success (announcing the clearing), leaving the held pages matchable."""

    def reset(self):
        if not self.in_use():
            return super().reset()
        self.evict(Tier.DEVICE, 1 << 30)
        self.evict(Tier.HOST, 1 << 30)
        self._emit(KVEvent(EventKind.CLEARED, ()))
        return True


class ResetKeepsHostCopies(PrefixCache):
    """EVICT-9 / E-27: a reset evicts the device tier and announces the clearing, but host
    copies stay in the tree, matchable."""

    def reset(self):
        if self.in_use():
            return False
        self.evict(Tier.DEVICE, 1 << 30)
        self._emit(KVEvent(EventKind.CLEARED, ()))
        return True


class ResetSilent(PrefixCache):
    """EVENT-9 / E-28: a reset clears the cache without publishing AllBlocksCleared."""

    def reset(self):
        before = len(self._events)
        cleared = super().reset()
        del self._events[before:]
        return cleared


class HitsCountHost(PrefixCache):
    """POOL-8 / E-29: the hit statistics count a prefix found on the host tier as a hit, as if
    it were served from device."""

    def match(self, namespace, tokens):
        m = super().match(namespace, tokens)
        self.hit_tokens += max(m.host_len - m.device_len, 0)
        return m


class NegativeDepthAtRoot(PrefixCache):
    """TREE-3 / D268-8: a miss in an adapter's namespace reports a negative depth (the
    namespace offset is not removed when the match falls back to the root)."""

    def match(self, namespace, tokens):
        m = super().match(namespace, tokens)
        if namespace and not m.device_len:
            return type(m)(m.namespace, -self.page_size, m.host_len, m.device_pages,
                           m.host_pages, m.device_node, m.host_node)
        return m


class RootNotLockableOnHost(PrefixCache):
    """PIN-1 / D268-6: a namespace's root cannot be locked on the host tier."""

    def lock(self, node_id, tier=Tier.DEVICE):
        node = self._node(node_id)
        if node.is_root and Tier(tier) is Tier.HOST:
            raise CacheError("not_on_tier", f"root {node_id} holds no host pages")
        return super().lock(node_id, tier)


class CopiesToWrongPages(PrefixCache):
    """HOST-3 / TREE-2 / E-12: the copy a transfer hands out names its destinations in the wrong
    order
    (rotated by one), so the runtime copies page i into the page the tree keeps for page i+1."""

    def _start(self, node, kind):
        t = super()._start(node, kind)
        if t is None or len(t.pairs) < 2:
            return t
        src = [s for s, _d in t.pairs]
        dst = [d for _s, d in t.pairs]
        return dataclasses.replace(t, pairs=list(zip(src, dst[1:] + dst[:1], strict=True)))


class EvictionDropsHostCopy(PrefixCache):
    """EVICT-5 / D243-1: evicting a node's device copy drops its host copy too, when nothing
    pins it there: a prefix demoted to host is gone and must be prefilled again."""

    def _drop_tier(self, node, tier):
        if (tier is Tier.DEVICE and node.host is not None and not node.children
                and node.host_ref == 0 and node.pending is None):
            self.pools[Tier.HOST].release(list(node.host), node_owner(node.id))
            node.host = None  # its pages do not count against the device eviction asked for
        return super()._drop_tier(node, tier)


class WritebackNeverRetired(PrefixCache):
    """HOST-10 / E-15: an acknowledged writeback is never retired: the cache keeps listing it in
    flight and its host pages stay the transfer's, so every count still adds up."""

    def finish_transfer(self, op_id, success):
        t = self._transfers.get(op_id)
        if t is not None and t.kind == "writeback":
            return t
        return super().finish_transfer(op_id, success)


class EvictableOffByOne(PrefixCache):
    """POOL-6 / E-18: after an eviction that frees pages the evictable-page counter is one too
    high, as if the victim's last page were counted back."""

    def evict(self, tier, num_pages):
        freed = super().evict(tier, num_pages)
        if freed:
            self._pinned[Tier(tier)] -= 1
        return freed


class UnlockDropsTransferPin(PrefixCache):
    """PIN-2 / HOST-3 / E-21: releasing a caller's host lock on a node whose loadback is still in
    flight also releases the loadback's own pin on its host source: a host eviction that then
    reaches the path frees the pages the copy still reads. Only a race shows it: a loadback held
    back, the caller's lock released before its ack, and a host eviction, together."""

    def unlock(self, handle: int) -> None:
        lock = dict(self._locks.items()).get(handle)
        super().unlock(handle)
        if lock is None or lock.internal:
            return
        for t in self._transfers.values():
            if t.kind == "loadback" and t.node is lock.node and t.locks \
                    and lock.tier is t.src_tier:
                for n in self._locks.release(t.locks.pop(0), internal=True).path():
                    self._victims.offer(n)


class DropsLeafOnUnlock(PrefixCache):
    """EVICT-7 / E-24: releasing a device lock held across steps frees the locked leaf's device
    pages as if the request that held it owned them: the removal is announced and the pool
    conserved, but nothing evicted the prefix, and no reuse obligation counts it any more."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._taken: dict[int, int] = {}  # lock handle -> the clock when it was taken

    def lock(self, node_id, tier=Tier.DEVICE):
        handle = super().lock(node_id, tier)
        self._taken[handle] = self.clock.now
        return handle

    def unlock(self, handle: int) -> None:
        lock = dict(self._locks.items()).get(handle)
        super().unlock(handle)
        taken = self._taken.pop(handle, None)
        if lock is None or lock.internal or lock.tier is not Tier.DEVICE or taken is None \
                or taken == self.clock.now:
            return
        node = lock.node
        if node.id in self._nodes and is_candidate(node, Tier.DEVICE) and node.pending is None \
                and not (self._ghosts and self._detached(node)):
            parent = node.parent
            self._drop_tier(node, Tier.DEVICE)
            self._victims.offer(parent)


PLANTED = {
    cls.__name__: cls
    for cls in (
        EvictsPinned, NewestFirst, TieByNewestSeq, LeaksDuplicates, SplitDropsPins,
        IgnoresFailedAck, NoHostRefresh, MatchOnePageLong, HashWithoutNamespace,
        UnbalancedUnlockAccepted, StoresTwice, SharedNamespaces, LoadbackVisibleEarly,
        WritebackParentUnpinned, UnloadKeepsUnpinned, UnloadFreesPinned, UnloadSilent,
        NegativeDepthAtRoot, RootNotLockableOnHost, CopiesToWrongPages, EvictionDropsHostCopy,
        WritebackNeverRetired, EvictableOffByOne, UnlockDropsTransferPin, DropsLeafOnUnlock,
        ResetIgnoresHolders, ResetKeepsHostCopies, ResetSilent, HitsCountHost,
    )
}
