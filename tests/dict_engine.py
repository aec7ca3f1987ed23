"""A new user's first engine, written from docs/engine-guide.md and docs/api.md alone: a prefix
cache kept as a dict from (namespace, token prefix) to the page that holds its last page of KV.

It declares no capability (no snapshot, host tier, events, namespaces, counters) and has none of
their methods (no ``start_writeback``, ``drain_events``, ``snapshot``, ``block_hash``): the kit
must never call them. Its one declaration is the allowance ``page_eviction`` (EVICT-6): each
prefix page is a leaf of its own, so it frees exactly the pages an eviction asks for.
``tests/test_contract.py`` runs it through every cache-level case.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import count
from typing import Any

from kvconf import EngineConfig, EngineRejected, Feature, Inserted, Match, Tier

Key = tuple[int, tuple[int, ...]]  # (namespace, the token prefix up to the end of a page)


@dataclass
class Entry:
    page: int
    used: int  # the step of its last match or insert (LRU)
    seq: int  # its creation order: the older of two equally recent entries goes first
    pins: int = 0
    children: int = 0


class DictCache:
    """The engine: ``alloc`` / ``free`` over a free list, prefixes in a dict, pins by handle."""

    name = "dict-cache"
    version = "0.1.0"
    features = frozenset({Feature.PAGE_EVICTION})

    def __init__(self, config: EngineConfig) -> None:
        self.page_size = config.page_size
        self.free_pages = list(range(config.device_pages - 1, -1, -1))  # a stack, 0 on top
        self.entries: dict[Key, Entry] = {}
        self.locks: dict[int, list[Key]] = {}
        self.clock = 0
        self.ids = count()

    def tick(self) -> None:
        self.clock += 1

    def alloc(self, n: int) -> list[int] | None:
        if n > len(self.free_pages):
            return None
        return [self.free_pages.pop() for _ in range(n)]

    def free(self, pages: Sequence[int]) -> None:
        self.free_pages.extend(pages)

    def _keys(self, ns: int, tokens: Sequence[int]) -> list[Key]:
        """The keys of the whole pages of ``tokens`` that are cached, from the first on."""
        p, out = self.page_size, []
        for end in range(p, len(tokens) + 1, p):
            key = (ns, tuple(tokens[:end]))
            if key not in self.entries:
                break
            out.append(key)
        return out

    def match(self, namespace: int, tokens: Sequence[int]) -> Match:
        keys = self._keys(namespace, tokens)
        for k in keys:
            self.entries[k].used = self.clock
        node = keys[-1] if keys else (namespace, ())
        pages = tuple(self.entries[k].page for k in keys)
        return Match(len(keys) * self.page_size, 0, pages, (), node, (namespace, ()))

    def insert(self, namespace: int, tokens: Sequence[int], pages: Sequence[int]) -> Inserted:
        p = self.page_size
        cached = len(self._keys(namespace, tokens))
        freed = []
        for i, page in enumerate(pages):
            key = (namespace, tuple(tokens[: (i + 1) * p]))
            entry = self.entries.get(key)
            if entry is not None:
                entry.used = self.clock
                if entry.page != page:  # the cache holds these tokens already: give it back
                    freed.append(page)
                    self.free_pages.append(page)
                continue
            self.entries[key] = Entry(page, self.clock, next(self.ids))
            if i:
                self.entries[(namespace, tuple(tokens[: i * p]))].children += 1
        return Inserted(cached * p, tuple(freed))

    def _path(self, node: Key) -> list[Key]:
        ns, prefix = node
        return [(ns, prefix[:end]) for end in range(self.page_size, len(prefix) + 1,
                                                    self.page_size)]

    def lock(self, node: Any, tier: Tier) -> Any:
        keys = self._path(node) if tier is Tier.DEVICE else []  # no host tier: nothing to pin
        for k in keys:
            self.entries[k].pins += 1
        handle = next(self.ids)
        self.locks[handle] = keys
        return handle

    def unlock(self, handle: Any) -> None:
        keys = self.locks.pop(handle, None)
        if keys is None:
            raise EngineRejected("unbalanced_unlock", f"lock {handle!r} is not held")
        for k in keys:
            self.entries[k].pins -= 1

    def evict(self, tier: Tier, num_pages: int) -> int:
        if tier is not Tier.DEVICE:
            return 0
        freed = 0
        while freed < num_pages:
            leaves = [(e.used, e.seq, k) for k, e in self.entries.items()
                      if e.children == 0 and e.pins == 0]
            if not leaves:
                break
            _, _, key = min(leaves)
            self.free_pages.append(self.entries.pop(key).page)
            ns, prefix = key
            if len(prefix) > self.page_size:
                self.entries[(ns, prefix[: -self.page_size])].children -= 1
            freed += 1
        return freed


def factory(config: EngineConfig) -> DictCache:
    """What ``kvconf run --engine dict_engine:factory`` calls."""
    return DictCache(config)
