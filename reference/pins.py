"""Node references (pins): a lock pins a node and every ancestor on one tier (spec PIN-1..PIN-4).

Locks are handles, so that an unlock names exactly what it releases: an unlock of a handle that is
not held is rejected (PIN-3) instead of driving a count below what others hold.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvconf.reference.errors import CacheError
from kvconf.reference.radix_tree import Node
from kvconf.reference.tiers import Tier


@dataclass(slots=True, frozen=True)
class Lock:
    node: Node
    tier: Tier
    internal: bool  # held by the cache itself for an in-flight transfer


class LockTable:
    __slots__ = ("_locks", "_next")

    def __init__(self) -> None:
        self._locks: dict[int, Lock] = {}
        self._next = 0

    def acquire(self, node: Node, tier: Tier, internal: bool = False) -> int:
        for n in node.path():
            if tier is Tier.DEVICE:
                n.device_ref += 1
            else:
                n.host_ref += 1
        self._next += 1
        self._locks[self._next] = Lock(node, tier, internal)
        return self._next

    def release(self, handle: int, internal: bool = False) -> Node:
        """Release ``handle``; returns the node it pinned (whose path may now be evictable)."""
        lock = self._locks.get(handle)
        if lock is None or lock.internal != internal:
            raise CacheError("unbalanced_unlock", f"lock handle {handle} is not held")
        del self._locks[handle]
        for n in lock.node.path():
            if lock.tier is Tier.DEVICE:
                n.device_ref -= 1
            else:
                n.host_ref -= 1
        return lock.node

    def items(self) -> list[tuple[int, Lock]]:
        return list(self._locks.items())
