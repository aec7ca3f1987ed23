"""The engine: a paged prefix cache with its own API, as an in-house engine would have one.

It keeps KV on device only and has no event stream. To stay a few lines long it delegates the
radix tree, page ownership, pins and LRU eviction to kvconf's reference cache; a real engine
has its own code here, and only ``adapter.py`` knows about kvconf's protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvconf.reference import CacheConfig, PrefixCache, Tier


class HouseCacheError(Exception):
    """A call the cache refuses; it changes nothing. ``code`` is stable, for callers."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Hit:
    """The longest cached whole-page prefix of a lookup, and the node to pin to keep it."""

    tokens: int
    pages: tuple[int, ...]
    node: int
    root: int  # the adapter's root node: nothing is cached above it (and nothing on host)


class HouseCache:
    """Pages in, prefixes out: ``lookup``, ``publish``, ``pin`` / ``unpin``, ``reclaim``."""

    def __init__(self, page_size: int, pages: int) -> None:
        self._core = PrefixCache(CacheConfig(page_size=page_size, device_pages=pages,
                                             host_pages=0, enable_events=False))

    def _call(self, fn, *args):
        from kvconf.reference import CacheError

        try:
            return fn(*args)
        except CacheError as e:
            raise HouseCacheError(e.code, e.message) from None

    def step(self) -> None:
        """A scheduling step begins: recency is counted in steps."""
        self._core.tick()

    def allocate(self, n: int) -> list[int] | None:
        return self._call(self._core.alloc, n)

    def release(self, pages: Sequence[int]) -> None:
        self._call(self._core.free, pages)

    def lookup(self, adapter: int, tokens: Sequence[int]) -> Hit:
        m = self._call(self._core.match, adapter, tokens)
        return Hit(m.device_len, m.device_pages, m.device_node, m.host_node)

    def publish(self, adapter: int, tokens: Sequence[int], pages: Sequence[int]
                ) -> tuple[int, tuple[int, ...]]:
        """Cache ``tokens`` in ``pages``; returns (tokens already cached, pages given back)."""
        r = self._call(self._core.insert, adapter, tokens, pages)
        return r.cached_len, r.freed

    def pin(self, node: int, tier: Tier = Tier.DEVICE) -> int:
        """Keep ``node`` and its ancestors (their pages on ``tier``) from being reclaimed."""
        return self._call(self._core.lock, node, tier)

    def unpin(self, pin: int) -> None:
        self._call(self._core.unlock, pin)

    def reclaim(self, n: int) -> int:
        """Free at least ``n`` pages of unpinned least recently used prefixes, if it can."""
        return self._call(self._core.evict, Tier.DEVICE, n)

    def state(self):
        """A white-box view for tests (kvconf's snapshot)."""
        return self._core.snapshot()
