"""The cache-level engine protocol: what an adapter must offer the kit.

Page ids, node handles and lock handles are the engine's own values; the kit never interprets
node or lock handles, it only hands them back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from kvconf.conformance.engine.features import Feature
from kvconf.reference.kv_events import KVEvent
from kvconf.reference.snapshot import CacheSnapshot
from kvconf.reference.tiers import Tier


@dataclass(frozen=True, slots=True)
class Match:
    device_len: int
    host_len: int
    device_pages: tuple[int, ...]
    host_pages: tuple[int, ...]
    device_node: Any
    host_node: Any


@dataclass(frozen=True, slots=True)
class Inserted:
    cached_len: int
    freed: tuple[int, ...]  # caller pages the engine returned to its free list


@dataclass(frozen=True, slots=True)
class CopyOp:
    op_id: Any
    kind: str  # "writeback" | "loadback"
    pairs: tuple[tuple[int, int], ...]  # (source page, destination page)


@runtime_checkable
class CacheEngine(Protocol):
    name: str
    version: str
    features: frozenset[Feature]
    page_size: int

    def tick(self) -> None:
        """A new scheduling step begins (engines on wall time may ignore it)."""
    def alloc(self, n: int) -> list[int] | None: ...
    def free(self, pages: Sequence[int]) -> None: ...
    def match(self, namespace: int, tokens: Sequence[int]) -> Match: ...
    def insert(self, namespace: int, tokens: Sequence[int], pages: Sequence[int]) -> Inserted: ...
    def lock(self, node: Any, tier: Tier) -> Any: ...
    def unlock(self, handle: Any) -> None: ...
    def evict(self, tier: Tier, num_pages: int) -> int: ...
    def start_writeback(self, node: Any) -> CopyOp | None: ...
    def start_loadback(self, node: Any) -> CopyOp | None: ...
    def finish_transfer(self, op_id: Any, success: bool) -> None: ...
    def drain_events(self) -> list[KVEvent]: ...
    def block_hash(self, parent: int | None, namespace: int, tokens: Sequence[int]) -> int: ...
    def snapshot(self) -> CacheSnapshot | None: ...
    def unload(self, namespace: int) -> int:
        """Unload a namespace's adapter (only engines declaring ``unload``); pages freed now."""


def match_scope(engine: CacheEngine, tokens: Sequence[int]) -> Sequence[int]:
    """The part of a query a match of ``engine`` may cover: all of it, or all but the last token
    for an engine that declares ``match_leaves_last`` (TREE-7)."""
    if Feature.MATCH_LEAVES_LAST in engine.features:
        return tokens[:-1]
    return tokens
