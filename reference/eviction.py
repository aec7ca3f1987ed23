"""Victim choice for eviction (spec EVICT-1..EVICT-4, D248-1).

The victim on a tier is the unlocked leaf of that tier with the oldest access time on that tier;
equal times are broken by the node's sequence number (older node first), never by anything that
differs between processes such as a memory address.
"""

from __future__ import annotations

import heapq

from kvconf.reference.radix_tree import Node
from kvconf.reference.tiers import DEVICE, HOST, Tier


def is_candidate(node: Node, tier: Tier) -> bool:
    """An evictable leaf of ``tier``: holds pages there, unpinned there, no child has any there."""
    if node.parent is None:  # a root holds no pages of its own
        return False
    # Spelled as loops, not ``all`` over a generator: asked tens of times a plan.
    if tier is DEVICE:
        if node.device is None or node.device_ref != 0:
            return False
        for c in node.children.values():  # noqa: SIM110 (no generator: see above)
            if c.device is not None:
                return False
        return True
    if node.host is None or node.host_ref != 0:
        return False
    for c in node.children.values():  # noqa: SIM110 (no generator: see above)
        if c.host is not None:
            return False
    return True


class VictimIndex:
    """Eviction candidates of both tiers in (access time, sequence number) order, kept across
    calls so an eviction does not scan the whole tree (spec EVICT-2, EVICT-3).

    Lazy: ``offer`` is called for every node whose access time, pages, pins or children on a
    tier may have changed, and files an entry for each tier it is a candidate on, unless its
    newest entry there already has its access time (a node unpinned again and again is filed
    once). ``pop`` discards entries that went stale (node gone, no longer a candidate) and
    re-files entries whose access time moved (unless the newer entry is filed already), so the
    first valid entry is exactly the candidate with the smallest (access, seq): the same
    victim a full scan would pick. Every candidate has an entry whose key is at most its own.
    """

    __slots__ = ("_filed", "_heaps")

    def __init__(self) -> None:
        self._heaps: dict[Tier, list[tuple[int, int, Node]]] = {DEVICE: [], HOST: []}
        # Per tier, each node's newest entry: node id -> the access time it was filed with.
        self._filed: dict[Tier, dict[int, int]] = {DEVICE: {}, HOST: {}}

    def _file(self, tier: Tier, node: Node, access: int) -> None:
        filed = self._filed[tier]
        if filed.get(node.id) != access:
            filed[node.id] = access
            heapq.heappush(self._heaps[tier], (access, node.seq, node))

    def offer(self, node: Node | None) -> None:
        if node is None or node.parent is None:
            return
        # A node absent from a tier or pinned there is no candidate there, and one whose newest
        # entry there has its access time needs no new entry whether it is one or not: the
        # usual cases, told before the candidate test (which may look at every child).
        if node.device is not None and node.device_ref == 0 \
                and self._filed[DEVICE].get(node.id) != node.device_access \
                and is_candidate(node, DEVICE):
            self._file(DEVICE, node, node.device_access)
        if node.host is not None and node.host_ref == 0 \
                and self._filed[HOST].get(node.id) != node.host_access \
                and is_candidate(node, HOST):
            self._file(HOST, node, node.host_access)

    def pop(self, tier: Tier, nodes: dict[int, Node]) -> Node | None:
        heap, filed = self._heaps[tier], self._filed[tier]
        while heap:
            access, _seq, node = heapq.heappop(heap)
            newest = filed.get(node.id) == access
            if newest:  # its newest entry leaves the heap: filed again when offered again
                del filed[node.id]
            if nodes.get(node.id) is not node or not is_candidate(node, tier):
                continue
            now = node.access(tier)
            if now != access:
                self._file(tier, node, now)
                continue
            return node
        return None

    def compact(self, nodes: dict[int, Node]) -> None:
        """Rebuild from a scan when stale entries outnumber the nodes by far."""
        if len(self._heaps[DEVICE]) + len(self._heaps[HOST]) <= 8 * len(nodes) + 64:
            return
        for tier in self._heaps:
            heap = [(n.access(tier), n.seq, n) for n in nodes.values() if is_candidate(n, tier)]
            heapq.heapify(heap)
            self._heaps[tier] = heap
            self._filed[tier] = {n.id: access for access, _seq, n in heap}
