"""Legal variants of the reference cache: each takes another choice the spec permits.

Built by subclassing, never by editing the reference; each docstring starts with the rules it
exercises, and ``features`` says what it declares.
"""

from __future__ import annotations

from kvconf.conformance.engine.features import Feature
from kvconf.reference import PrefixCache
from kvconf.reference.errors import CacheError
from kvconf.reference.eviction import is_candidate
from kvconf.reference.pages import PagePool, transfer_owner
from kvconf.reference.tiers import Tier, as_tier


class MatchLeavesLast(PrefixCache):
    """TREE-7: a match never covers the query's last token; it returns the longest cached
    whole-page prefix of the query less that token, as an engine that must compute at least one
    token of every prompt does."""

    features = frozenset({Feature.MATCH_LEAVES_LAST})

    def match(self, namespace, tokens):
        self._check_tokens(tokens, whole_pages=False)  # the last token is still validated
        m = super().match(namespace, tokens[:-1])
        self.query_tokens += len(tokens) - len(tokens[:-1])  # it was asked the whole query
        return m


class EvictsPageByPage(PrefixCache):
    """EVICT-6: eviction frees one page at a time, the last page of the least recently used
    unpinned leaf (equal times: the oldest, EVICT-3), so evict(tier, n) frees exactly n pages
    while candidates last. The leaf is split above its last page first (invisible, TREE-4); the
    upper half keeps the leaf's age, so a prefix leaves page by page in the order it would have
    left whole."""

    features = frozenset({Feature.PAGE_EVICTION})

    def __init__(self, config=None) -> None:
        super().__init__(config)
        self._born: dict[int, int] = {}  # node id -> the sequence number of the leaf it was

    def _age(self, node, tier):
        return node.access(tier), self._born.get(node.id, node.seq)

    def evict(self, tier, num_pages):
        tier = as_tier(tier)
        if num_pages < 0:
            raise CacheError("bad_count", f"cannot evict {num_pages} pages")
        freed = 0
        while freed < num_pages:
            leaves = [n for n in self._nodes.values() if is_candidate(n, tier)]
            if not leaves:
                break
            victim = min(leaves, key=lambda n: self._age(n, tier))
            held = len(victim.pages(tier) or ())
            if held > 1:  # the victim keeps its last page, and its id
                upper = self._split(victim, held - 1)
                self._born[upper.id] = self._age(victim, tier)[1]
            freed += self._drop_tier(victim, tier)
            self._victims.offer(victim.parent)
        return freed


class InclusiveHostTier(PrefixCache):
    """HOST-12: the host tier is inclusive of what was written back while the device copy
    lives: host eviction takes only unpinned host leaves that hold no device pages, least
    recently used on either tier first (equal times: the oldest, EVICT-3); a writeback that
    finds the host full is declined (HOST-5)."""

    features = frozenset({Feature.INCLUSIVE_HOST_TIER})

    def evict(self, tier, num_pages):
        tier = as_tier(tier)
        if tier is not Tier.HOST:
            return super().evict(tier, num_pages)
        if num_pages < 0:
            raise CacheError("bad_count", f"cannot evict {num_pages} pages")
        freed = 0
        while freed < num_pages:
            leaves = [n for n in self._nodes.values()
                      if n.device is None and is_candidate(n, Tier.HOST)]
            if not leaves:
                break
            victim = min(leaves, key=lambda n: (max(n.device_access, n.host_access), n.seq))
            parent = victim.parent
            freed += self._drop_tier(victim, Tier.HOST)
            self._victims.offer(parent)
        return freed


class StreamOrderedLoadback(PrefixCache):
    """HOST-11 / HOST-9: a loadback's device pages join the tree (and are served, and announced)
    when the copy is submitted, as an engine whose readers wait on the copy's stream does; until
    it lands they stay pinned on device with the host source, and they are stamped used when it
    lands. A failed copy ends the runtime (HOST-9): a page already served cannot be taken back."""

    features = frozenset({Feature.STREAM_ORDERED_LOADBACK, Feature.FATAL_TRANSFER_FAILURE})

    def __init__(self, config=None) -> None:
        super().__init__(config)
        self._early: set[int] = set()  # loadbacks whose pages are in the tree already

    def start_loadback(self, node_id):
        t = super().start_loadback(node_id)
        if t is None:
            return t
        dst = dict(t.pairs)
        for n in t.node.path():
            if n.pending == t.op_id:
                self._attach_device(n, [dst[p] for p in n.host], transfer_owner(t.op_id),
                                    self.clock.now)
        t.locks.append(self._locks.acquire(t.node, Tier.DEVICE, internal=True))
        self._early.add(t.op_id)
        return t

    def finish_transfer(self, op_id, success):
        if op_id not in self._early:
            return super().finish_transfer(op_id, success)
        if not success:
            raise CacheError("fatal_transfer", f"loadback {op_id} failed: fatal here (HOST-9)")
        self._early.discard(op_id)
        t = self._transfers.pop(op_id)
        for n in t.node.path():
            if n.pending == op_id:
                n.pending = None
                n.device_access = self.clock.now  # a landed loadback is a device use
        for handle in t.locks:
            for n in self._locks.release(handle, internal=True).path():
                self._victims.offer(n)
        if self._ghosts:
            self._sweep_ghosts()
        return t


class _LowestFirstPool(PagePool):
    """Hands out the lowest free page ids first (the reference hands out the last released)."""

    __slots__ = ()

    def alloc(self, n, owner):
        if n < 0 or n > len(self._free):
            return super().alloc(n, owner)
        pages = sorted(self._free)[:n]
        taken = set(pages)
        self._free = [p for p in self._free if p not in taken]
        for p in pages:
            self._owner[p] = owner
        return pages


class LowestFreePageFirst(PrefixCache):
    """POOL-3: every allocation (the caller's pages and a transfer's destinations) takes the
    lowest free page ids, not the most recently freed."""

    features = frozenset()

    def __init__(self, config=None) -> None:
        super().__init__(config)
        self.pools = {tier: _LowestFirstPool(tier, pool.size) for tier, pool in self.pools.items()}


CACHE_VARIANTS: tuple[type, ...] = (MatchLeavesLast, EvictsPageByPage, LowestFreePageFirst,
                                    InclusiveHostTier, StreamOrderedLoadback)
