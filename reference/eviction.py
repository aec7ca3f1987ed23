"""Victim choice for eviction (spec EVICT-1..EVICT-4, D248-1).

The victim on a tier is the unlocked leaf of that tier with the oldest access time on that tier;
equal times are broken by the node's sequence number (older node first), never by anything that
differs between processes such as a memory address.
"""

from __future__ import annotations

import heapq

from kvconf.reference.radix_tree import Node
from kvconf.reference.tiers import Tier


def is_candidate(node: Node, tier: Tier) -> bool:
    """An evictable leaf of ``tier``: holds pages there, unpinned there, no child has any there."""
    if node.parent is None:  # a root holds no pages of its own
        return False
    if tier is Tier.DEVICE:  # a leaf, the usual case, without a generator
        return node.device is not None and node.device_ref == 0 and (
            not node.children or all(c.device is None for c in node.children.values()))
    return node.host is not None and node.host_ref == 0 and (
        not node.children or all(c.host is None for c in node.children.values()))


class VictimIndex:
    """Eviction candidates of both tiers in (access time, sequence number) order, kept across
    calls so an eviction does not scan the whole tree (spec EVICT-2, EVICT-3).

    Lazy: ``offer`` is called for every node whose access time, pages, pins or children on a
    tier may have changed, and pushes an entry for each tier it is a candidate on. ``pop``
    discards entries that went stale (node gone, no longer a candidate) and re-files entries
    whose access time moved, so the first valid entry is exactly the candidate with the
    smallest (access, seq): the same victim a full scan would pick.
    """

    __slots__ = ("_heaps",)

    def __init__(self) -> None:
        self._heaps: dict[Tier, list[tuple[int, int, Node]]] = {Tier.DEVICE: [], Tier.HOST: []}

    def offer(self, node: Node | None) -> None:
        if node is None or node.parent is None:
            return
        if is_candidate(node, Tier.DEVICE):
            heapq.heappush(self._heaps[Tier.DEVICE], (node.device_access, node.seq, node))
        if is_candidate(node, Tier.HOST):
            heapq.heappush(self._heaps[Tier.HOST], (node.host_access, node.seq, node))

    def pop(self, tier: Tier, nodes: dict[int, Node]) -> Node | None:
        heap = self._heaps[tier]
        while heap:
            access, seq, node = heapq.heappop(heap)
            if nodes.get(node.id) is not node or not is_candidate(node, tier):
                continue
            if node.access(tier) != access:
                heapq.heappush(heap, (node.access(tier), seq, node))
                continue
            return node
        return None

    def compact(self, nodes: dict[int, Node]) -> None:
        """Rebuild from a scan when stale entries outnumber the nodes by far."""
        if len(self._heaps[Tier.DEVICE]) + len(self._heaps[Tier.HOST]) <= 8 * len(nodes) + 64:
            return
        for tier in self._heaps:
            heap = [(n.access(tier), n.seq, n) for n in nodes.values() if is_candidate(n, tier)]
            heapq.heapify(heap)
            self._heaps[tier] = heap
