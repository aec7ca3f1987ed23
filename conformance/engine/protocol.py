"""The engine protocols: what an adapter must offer the kit, at the cache level and at the
scheduler level.

Page ids, node handles and lock handles are the engine's own values; the kit never interprets
node or lock handles, it only hands them back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from kvconf.conformance.engine.features import Feature
from kvconf.reference.kv_events import KVEvent
from kvconf.reference.plan import Plan, RequestSpec, RuntimeEvent
from kvconf.reference.snapshot import CacheSnapshot
from kvconf.reference.tiers import Tier


@dataclass(frozen=True, slots=True)
class Match:
    """What a match found: the longest cached whole-page prefix on each tier (TREE-1), its pages,
    and the node handles to lock it by."""

    device_len: int  # the longest whole-page prefix of the query the device tier holds
    host_len: int  # the longest whole-page prefix of the query the host tier holds
    device_pages: tuple[int, ...]
    host_pages: tuple[int, ...]
    device_node: Any
    host_node: Any


@dataclass(frozen=True, slots=True)
class Inserted:
    """What an insert did: how much of the prefix is now cached, and which of the caller's pages
    went back to the free list because the tree already held them (TREE-5)."""

    cached_len: int  # tokens of the prefix already cached before this insert (SGLang's meaning)
    freed: tuple[int, ...]  # caller pages the engine returned to its free list


@dataclass(frozen=True, slots=True)
class CopyOp:
    """A writeback or loadback the engine asks the runtime to perform (HOST-2, HOST-3)."""

    op_id: Any
    kind: str  # "writeback" | "loadback"
    pairs: tuple[tuple[int, int], ...]  # (source page, destination page)


@runtime_checkable
class CacheEngine(Protocol):
    """The prefix-cache level: the calls a scheduler makes on its cache (docs/engine-guide.md)."""

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
    def unlock(self, handle: Any) -> None:
        """Release a lock; one already released is refused by raising EngineRejected (PIN-3)."""
    def evict(self, tier: Tier, num_pages: int) -> int:
        """Free at least ``num_pages`` pages of ``tier`` while candidates last; returns the pages
        freed (EVICT-4)."""
    def start_writeback(self, node: Any) -> CopyOp | None:
        """Start copying a node's device pages to host; the copy, or None when declined."""
    def start_loadback(self, node: Any) -> CopyOp | None: ...
    def finish_transfer(self, op_id: Any, success: bool) -> None: ...
    def drain_events(self) -> list[KVEvent]: ...
    def block_hash(self, parent: int | None, namespace: int, tokens: Sequence[int]) -> int: ...
    def snapshot(self) -> CacheSnapshot | None: ...
    def unload(self, namespace: int) -> int:
        """Unload a namespace's adapter (only engines declaring ``unload``); pages freed now."""
    def counters(self) -> Mapping[str, int]:
        """The engine's own counts by name (only engines declaring ``counters``, POOL-6):
        ``available_<tier>``, ``cached_<tier>``, ``evictable_<tier>``."""


@runtime_checkable
class SchedulerEngine(Protocol):
    """The scheduler level: requests in, plans out, the runtime's events back (spec chapters
    requests and plans). A factory of one has ``level = "scheduler"`` and takes a
    ``SchedConfig``. ``drain_events`` is needed with ``kv_events``, ``snapshot`` with
    ``snapshot``, ``model_window`` with ``model_config``, ``counters`` with ``counters``."""

    name: str
    version: str
    features: frozenset[Feature]
    page_size: int

    def submit(self, specs: Sequence[RequestSpec]) -> None: ...
    def next_plan(self) -> Plan: ...
    def advance(self, events: Sequence[RuntimeEvent]) -> None: ...
    def drain_events(self) -> list[KVEvent]: ...
    def snapshot(self) -> Any: ...
    def model_window(self, model_config: Mapping[str, Any]) -> int: ...
    def counters(self) -> Mapping[str, int]:
        """As the cache level's, with ``free_slots`` (only engines declaring ``counters``)."""


def match_scope(engine: CacheEngine, tokens: Sequence[int]) -> Sequence[int]:
    """The part of a query a match of ``engine`` may cover: all of it, or all but the last token
    for an engine that declares ``match_leaves_last`` (TREE-7)."""
    if Feature.MATCH_LEAVES_LAST in engine.features:
        return tokens[:-1]
    return tokens
