"""What the kit itself knows while it drives an engine: black-box facts, no engine internals."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kvconf.conformance.engine.protocol import CopyOp
from kvconf.conformance.runtime.memory import KVMemory
from kvconf.reference.tiers import Tier


@dataclass(slots=True)
class LockRecord:
    step: int
    handle: Any
    namespace: int
    tier: Tier
    tokens: tuple[int, ...]  # the matched prefix the lock covers
    pages: tuple[int, ...]  # its pages on the locked tier
    node: Any
    live: bool = True
    detached: bool = False  # its namespace was unloaded: valid for the kit, matched by nobody


@dataclass(slots=True, frozen=True)
class TagOrigin:
    """What a content tag stands for: page ``depth`` of a prefix in ``namespace``."""

    namespace: int
    depth: int  # 1 for a prefix's first page
    parent: int | None  # the tag of the page before, None for the first page
    tokens: tuple[int, ...]  # this page's tokens


@dataclass(slots=True)
class Ledger:
    page_size: int
    memory: KVMemory  # the runtime's KV: a content tag per token slot
    origin: dict[int, TagOrigin] = field(default_factory=dict)  # every tag the kit wrote
    held: set[int] = field(default_factory=set)  # device pages the caller holds
    locks: dict[int, LockRecord] = field(default_factory=dict)  # by step index
    live: dict[int, LockRecord] = field(default_factory=dict)  # those held, in the same order
    transfers: dict[int, CopyOp] = field(default_factory=dict)  # started, not yet acknowledged
    copies: dict[int, Any] = field(default_factory=dict)  # by step index: the memory's copy
    # Failed copies of an engine whose failures are fatal (HOST-9): never acknowledged to it,
    # so still in flight for it; by op id.
    stranded: dict[Any, CopyOp] = field(default_factory=dict)
    sizes: dict[Tier, int] = field(default_factory=dict)  # each pool's configured size
    # Transfers started and not yet acknowledged, by op id: the lock each was started on and
    # the step (a loadback's prefix is on device once it lands; EVICT-7's account).
    started: dict[Any, tuple[LockRecord, int]] = field(default_factory=dict)
    # Every match call's query tokens and the device tokens it served, summed (POOL-8).
    queried: int = 0
    hits: int = 0

    def remember(self, namespace: int, tokens: Sequence[int], tags: Sequence[int]) -> None:
        p = self.page_size
        for i, tag in enumerate(tags):
            if tag not in self.origin:
                self.origin[tag] = TagOrigin(namespace, i + 1, tags[i - 1] if i else None,
                                             tuple(tokens[i * p : (i + 1) * p]))

    def hold(self, key: int, rec: LockRecord) -> None:
        """The caller took the lock ``rec``, kept under ``key``."""
        self.locks[key] = rec
        self.live[key] = rec

    def release(self, rec: LockRecord) -> None:
        """The caller let go of the lock ``rec``."""
        rec.live = False
        for key, held in self.live.items():
            if held is rec:
                del self.live[key]
                return

    def live_locks(self) -> list[LockRecord]:
        return list(self.live.values())

    def pinned_pages(self, tier: Tier) -> set[int]:
        return {p for r in self.live.values() if r.tier is tier for p in r.pages}
