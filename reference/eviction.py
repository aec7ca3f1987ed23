"""Victim choice for eviction (spec EVICT-1..EVICT-4, D248-1).

The victim on a tier is the unlocked leaf of that tier with the oldest access time on that tier;
equal times are broken by the node's sequence number (older node first), never by anything that
differs between processes such as a memory address.
"""

from __future__ import annotations

from collections.abc import Iterable

from reference.radix_tree import Node
from reference.tiers import Tier


def is_candidate(node: Node, tier: Tier) -> bool:
    """An evictable leaf of ``tier``: holds pages there, unpinned there, no child holds any there."""
    if node.is_root or node.pages(tier) is None or node.ref(tier) != 0:
        return False
    return all(c.pages(tier) is None for c in node.children.values())


def pick_victim(nodes: Iterable[Node], tier: Tier) -> Node | None:
    best: Node | None = None
    best_key: tuple[int, int] | None = None
    for node in nodes:
        if not is_candidate(node, tier):
            continue
        key = (node.access(tier), node.seq)
        if best_key is None or key < best_key:
            best, best_key = node, key
    return best
