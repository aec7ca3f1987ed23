"""Node references (pins): a lock pins a node and every ancestor on one tier (spec PIN-1..PIN-4).

Locks are handles, so that an unlock names exactly what it releases: an unlock of a handle that is
not held is rejected (PIN-3) instead of driving a count below what others hold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvconf.reference.errors import CacheError
from kvconf.reference.radix_tree import Node
from kvconf.reference.tiers import DEVICE, Tier


@dataclass(slots=True)
class Lock:  # never changed once made; not frozen, so that making one costs no setattr calls
    node: Node
    tier: Tier
    internal: bool  # held by the cache itself for an in-flight transfer


# Told when a node becomes pinned (+1) or unpinned (-1) on a tier: the cache's evictable count.
PinWatch = Callable[[Node, Tier, int], None]


class LockTable:
    __slots__ = ("_locks", "_next", "_watch")

    def __init__(self, watch: PinWatch | None = None) -> None:
        self._locks: dict[int, Lock] = {}
        self._next = 0
        self._watch = watch

    def acquire(self, node: Node, tier: Tier, internal: bool = False) -> int:
        """Pin ``node`` and its ancestors on ``tier``, walking up the parent links; the watch
        hears of each one that was unpinned there."""
        device, watch = tier is DEVICE, self._watch
        n: Node | None = node
        while n is not None:
            if device:
                n.device_ref += 1
                first = n.device_ref == 1
            else:
                n.host_ref += 1
                first = n.host_ref == 1
            if first and watch is not None:
                watch(n, tier, 1)
            n = n.parent
        self._next += 1
        self._locks[self._next] = Lock(node, tier, internal)
        return self._next

    def release(self, handle: int, internal: bool = False) -> Node:
        """Release ``handle``; returns the node it pinned (whose path may now be evictable)."""
        lock = self._locks.get(handle)
        if lock is None or lock.internal != internal:
            raise CacheError("unbalanced_unlock", f"lock handle {handle} is not held")
        del self._locks[handle]
        tier = lock.tier
        device, watch = tier is DEVICE, self._watch
        n: Node | None = lock.node
        while n is not None:
            if device:
                n.device_ref -= 1
                last = n.device_ref == 0
            else:
                n.host_ref -= 1
                last = n.host_ref == 0
            if last and watch is not None:
                watch(n, tier, -1)
            n = n.parent
        return lock.node

    def items(self) -> list[tuple[int, Lock]]:
        return list(self._locks.items())

    def held(self) -> dict[int, Lock]:
        """Each lock held, by handle: a copy, compared whole by a snapshot (a lock never
        changes while it is held)."""
        return dict(self._locks)
