"""Reference counts recomputed from the locks a snapshot lists (PIN-1), independently of the
kit's own TreeView, so tests do not check the cache with the code they are testing."""

from __future__ import annotations

from collections import Counter

from kvconf.reference import Tier
from kvconf.reference.snapshot import CacheSnapshot


def subtree_locks(snap: CacheSnapshot) -> Counter[tuple[int, Tier]]:
    """(node, tier) -> number of locks held on the node or below it."""
    nodes = snap.node_map()
    counts: Counter[tuple[int, Tier]] = Counter()
    for lk in snap.locks:
        cur: int | None = lk.node
        while cur is not None:
            counts[(cur, lk.tier)] += 1
            cur = nodes[cur].parent
    return counts
