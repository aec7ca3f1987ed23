"""Host tier transfers at the cache level (spec HOST-1..HOST-6).

A writeback copies device pages of a path to newly allocated host pages; a loadback copies host
pages of a path to newly allocated device pages. While a transfer is in flight its destination
pages are owned by the transfer, and its source is pinned by a lock the cache itself holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvconf.reference.radix_tree import Node
from kvconf.reference.tiers import DEVICE, HOST, Tier


@dataclass(slots=True)
class Transfer:
    op_id: int
    kind: str  # "writeback" or "loadback"
    node: Node = field(repr=False)  # deepest node of the path being copied
    pairs: list[tuple[int, int]]  # (source page, destination page), root to leaf order
    locks: list[int]  # internal lock handles released on completion

    @property
    def src_tier(self) -> Tier:
        return DEVICE if self.kind == "writeback" else HOST

    @property
    def dst_tier(self) -> Tier:
        return HOST if self.kind == "writeback" else DEVICE


def missing_path(node: Node, tier: Tier) -> list[Node]:
    """Nodes from the deepest ancestor holding ``tier`` (exclusive) down to ``node``, root first.

    Tier presence is closed under ancestors (HOST-1), so these are exactly the nodes that lack it.
    """
    out: list[Node] = []
    cur: Node | None = node
    while cur is not None and not cur.is_root and cur.pages(tier) is None:
        out.append(cur)
        cur = cur.parent
    out.reverse()
    return out
