"""What the kit itself knows while it drives an engine: black-box facts, no engine internals."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conformance.memory import KVMemory
from conformance.protocol import CopyOp
from reference.tiers import Tier


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


@dataclass(slots=True)
class Ledger:
    page_size: int
    memory: KVMemory  # the runtime's KV: a content tag per token slot
    held: set[int] = field(default_factory=set)  # device pages the caller holds
    locks: dict[int, LockRecord] = field(default_factory=dict)  # by step index
    transfers: dict[int, CopyOp] = field(default_factory=dict)  # started, not yet acknowledged
    copies: dict[int, Any] = field(default_factory=dict)  # by step index: the memory's copy

    def live_locks(self) -> list[LockRecord]:
        return [r for r in self.locks.values() if r.live]

    def pinned_pages(self, tier: Tier) -> set[int]:
        return {p for r in self.locks.values() if r.live and r.tier is tier for p in r.pages}
