"""Queries over an engine's snapshot that white-box oracles share."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kvconf.reference.snapshot import CacheSnapshot, NodeView
from kvconf.reference.tiers import Tier


@dataclass(frozen=True, slots=True)
class Block:
    """One page of a cached prefix as the snapshot shows it."""

    node: int = field(compare=False)  # a split renames nodes without changing any block
    device: int | None
    host: int | None
    hash: int | None
    device_ref: int
    host_ref: int


class TreeView:
    def __init__(self, snap: CacheSnapshot) -> None:
        self.snap = snap
        self.p = snap.page_size
        self.nodes = snap.node_map()
        self.child: dict[tuple[int, tuple[int, ...]], NodeView] = {}
        for n in snap.nodes:
            if n.parent is not None:
                self.child[(n.parent, n.key[: self.p])] = n

    def walk(self, namespace: int, tokens: Sequence[int]) -> list[tuple[NodeView, int]]:
        """(node, pages of it the query covers) from the root down."""
        root = self.snap.roots.get(namespace)
        out: list[tuple[NodeView, int]] = []
        if root is None:
            return out
        cur, pos, p = root, 0, self.p
        while pos + p <= len(tokens):
            n = self.child.get((cur, tuple(tokens[pos : pos + p])))
            if n is None:
                break
            k = 0
            while (k + 1) * p <= len(n.key) and pos + (k + 1) * p <= len(tokens) and tuple(
                n.key[k * p : (k + 1) * p]
            ) == tuple(tokens[pos + k * p : pos + (k + 1) * p]):
                k += 1
            out.append((n, k))
            if k * p < len(n.key):
                break
            cur, pos = n.id, pos + len(n.key)
        return out

    def longest(self, namespace: int, tokens: Sequence[int], tier: Tier) -> int:
        """Tokens of the longest whole-page prefix of ``tokens`` held on ``tier`` (TREE-1)."""
        total = 0
        for n, k in self.walk(namespace, tokens):
            if n.pages(tier) is None:
                break
            total += k * self.p
        return total

    def blocks(self) -> dict[tuple, Block]:
        """(namespace, full prefix to the end of the block) -> the block. Blocks of unloaded
        adapters (NS-2) can repeat a prefix a live tree holds again; nothing matches or splits
        them, so they are told apart by their node: (namespace, prefix, node id)."""
        out: dict[tuple, Block] = {}
        prefix: dict[int, tuple[int, ...]] = {}
        live = self.reachable()
        for n in self.snap.nodes:  # parents come before children
            base = prefix[n.parent] if n.parent is not None else ()
            full = base + n.key
            prefix[n.id] = full
            for i in range(len(n.key) // self.p):
                end = len(base) + (i + 1) * self.p
                key = (n.namespace, full[:end]) if n.id in live else (
                    n.namespace, full[:end], n.id)
                out[key] = Block(
                    n.id,
                    n.device[i] if n.device is not None else None,
                    n.host[i] if n.host is not None else None,
                    n.hashes[i] if i < len(n.hashes) else None,
                    n.device_ref,
                    n.host_ref,
                )
        return out

    def reachable(self) -> set[int]:
        """Nodes of some namespace's tree; the rest belong to unloaded adapters (NS-2)."""
        out: set[int] = set(self.snap.roots.values())
        for n in self.snap.nodes:  # parents come before children
            if n.parent in out:
                out.add(n.id)
        return out

    def device_hashes(self) -> set[int]:
        """Hashes of the blocks cached on device: what the published events must add up to."""
        live = self.reachable()
        return {
            h for n in self.snap.nodes
            if n.device is not None and n.parent is not None and n.id in live
            for h in n.hashes
        }

    def subtree_locks(self) -> dict[tuple[int, Tier], int]:
        """(node, tier) -> number of locks held on the node or below it (PIN-1)."""
        counts: dict[tuple[int, Tier], int] = {}
        for lk in self.snap.locks:
            cur: int | None = lk.node
            while cur is not None:
                counts[(cur, lk.tier)] = counts.get((cur, lk.tier), 0) + 1
                cur = self.nodes[cur].parent if cur in self.nodes else None
        return counts
