"""Victim choice for eviction (spec EVICT-1..EVICT-4, D248-1).

The victim on a tier is the unlocked leaf of that tier with the oldest access time on that tier;
equal times are broken by the node's sequence number (older node first), never by anything that
differs between processes such as a memory address.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from reference.radix_tree import Node
from reference.tiers import Tier


def is_candidate(node: Node, tier: Tier) -> bool:
    """An evictable leaf of ``tier``: holds pages there, unpinned there, no child has any there."""
    if node.is_root or node.pages(tier) is None or node.ref(tier) != 0:
        return False
    return all(c.pages(tier) is None for c in node.children.values())


class VictimQueue:
    """Candidates of one tier in eviction order, for the span of one ``evict`` call.

    Nothing else touches access times while an eviction runs, so one scan builds the queue and
    only the parent of each victim can join it afterwards: O(n + k log n) for k victims instead
    of a full scan per victim. The key (access, seq) is unique per node, so the order is total.
    """

    __slots__ = ("_heap", "tier")

    def __init__(self, nodes: Iterable[Node], tier: Tier) -> None:
        self.tier = tier
        if tier is Tier.DEVICE:  # the scan runs on every eviction: attribute reads, no calls
            heap = [
                (n.device_access, n.seq, n) for n in nodes
                if n.device is not None and not n.device_ref and n.parent is not None
                and not any(c.device is not None for c in n.children.values())
            ]
        else:
            heap = [
                (n.host_access, n.seq, n) for n in nodes
                if n.host is not None and not n.host_ref and n.parent is not None
                and not any(c.host is not None for c in n.children.values())
            ]
        self._heap = heap
        heapq.heapify(self._heap)

    def pop(self) -> Node | None:
        return heapq.heappop(self._heap)[2] if self._heap else None

    def offer(self, node: Node | None) -> None:
        """Queue ``node`` if it became a candidate (its last child on the tier just left)."""
        if node is not None and is_candidate(node, self.tier):
            heapq.heappush(self._heap, (node.access(self.tier), node.seq, node))
