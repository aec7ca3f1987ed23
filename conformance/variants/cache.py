"""Legal variants of the reference cache: each takes another choice the spec permits.

Built by subclassing, never by editing the reference; each docstring starts with the rules it
exercises, and ``features`` says what it declares.
"""

from __future__ import annotations

from kvconf.conformance.engine.features import Feature
from kvconf.reference import PrefixCache
from kvconf.reference.errors import CacheError
from kvconf.reference.eviction import is_candidate
from kvconf.reference.pages import PagePool
from kvconf.reference.tiers import as_tier


class MatchLeavesLast(PrefixCache):
    """TREE-7: a match never covers the query's last token; it returns the longest cached
    whole-page prefix of the query less that token, as an engine that must compute at least one
    token of every prompt does."""

    features = frozenset({Feature.MATCH_LEAVES_LAST})

    def match(self, namespace, tokens):
        self._check_tokens(tokens, whole_pages=False)  # the last token is still validated
        return super().match(namespace, tokens[:-1])


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


CACHE_VARIANTS: tuple[type, ...] = (MatchLeavesLast, EvictsPageByPage, LowestFreePageFirst)
