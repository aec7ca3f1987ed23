"""Queries over an engine's snapshot that white-box oracles share."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
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


def same_fields(now: tuple[NodeView, ...], then: tuple[NodeView, ...] | None,
                fields: Callable[[NodeView], object]) -> bool:
    """Whether two snapshots' node lists show the same ``fields`` of each node, in order. A
    view that is the very object of the other list's (a snapshot keeps the view of a node that
    did not change, and views are immutable) is not read again."""
    if now is then:
        return True
    if then is None or len(now) != len(then):
        return False
    for a, b in zip(now, then, strict=True):  # noqa: SIM110 (a loop: no generator per call)
        if a is not b and fields(a) != fields(b):
            return False
    return True


class TreeView:
    """Lookups over one snapshot. ``TreeView(snap)`` for the snapshot the driver just took is
    the view the other oracles of the step already built: the queries below are computed once
    per snapshot, whoever asks first (a snapshot is immutable, so its answers never change)."""

    _recent: list[TreeView] = []  # the views of the latest snapshots asked for (a step's
    # before, between and after), newest last

    def __new__(cls, snap: CacheSnapshot) -> TreeView:
        recent = TreeView._recent
        if recent and recent[-1].snap is snap:
            return recent[-1]
        for view in recent:
            if view.snap is snap:
                return view
        self = super().__new__(cls)
        self._build(snap)
        TreeView._recent = [*TreeView._recent[-3:], self]
        return self

    def _build(self, snap: CacheSnapshot) -> None:
        self.snap = snap
        self.p = snap.page_size
        self.nodes = snap.node_map()
        self._child: dict[tuple[int, tuple[int, ...]], NodeView] | None = None
        self._reachable: set[int] | None = None
        self._blocks: dict[tuple, Block] | None = None
        self._locks: dict[tuple[int, Tier], int] | None = None
        self._hashes: set[int] | None = None

    @property
    def child(self) -> dict[tuple[int, tuple[int, ...]], NodeView]:
        """(parent id, its child's first page of tokens) -> the child: made when a walk first
        needs it (most snapshots are never walked). Shared: callers read it, never change it."""
        if self._child is None:
            p = self.p
            self._child = {(n.parent, n.key[:p]): n for n in self.snap.nodes
                           if n.parent is not None}
        return self._child

    def walk(self, namespace: int, tokens: Sequence[int]) -> list[tuple[NodeView, int]]:
        """(node, pages of it the query covers) from the root down."""
        root = self.snap.roots.get(namespace)
        out: list[tuple[NodeView, int]] = []
        if root is None:
            return out
        cur, pos, p, child = root, 0, self.p, self.child
        while pos + p <= len(tokens):
            n = child.get((cur, tuple(tokens[pos : pos + p])))
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
        them, so they are told apart by their node: (namespace, prefix, node id). The mapping
        is shared: callers read it, never change it."""
        if self._blocks is None:
            self._blocks = self._all_blocks()
        return self._blocks

    def _all_blocks(self) -> dict[tuple, Block]:
        out: dict[tuple, Block] = {}
        for key, n, i in self.block_keys():
            out[key] = Block(
                n.id,
                n.device[i] if n.device is not None else None,
                n.host[i] if n.host is not None else None,
                n.hashes[i] if i < len(n.hashes) else None,
                n.device_ref,
                n.host_ref,
            )
        return out

    def block_keys(self) -> Iterator[tuple[tuple, NodeView, int]]:
        """(the key ``blocks`` files the block under, its node, its page index in the node) for
        every page of the tree, parents first: a later block of the same key takes the place of
        an earlier one. For a reader that needs one field of each block, not a ``Block``."""
        prefix: dict[int, tuple[int, ...]] = {}
        live = self.reachable()
        p = self.p
        for n in self.snap.nodes:  # parents come before children
            base = prefix[n.parent] if n.parent is not None else ()
            full = base + n.key
            prefix[n.id] = full
            for i in range(len(n.key) // p):
                end = len(base) + (i + 1) * p
                yield ((n.namespace, full[:end]) if n.id in live else (
                    n.namespace, full[:end], n.id)), n, i

    def reachable(self) -> set[int]:
        """Nodes of some namespace's tree; the rest belong to unloaded adapters (NS-2).
        Shared: callers read it, never change it."""
        if self._reachable is not None:
            return self._reachable
        out: set[int] = set(self.snap.roots.values())
        for n in self.snap.nodes:  # parents come before children
            if n.parent in out:
                out.add(n.id)
        self._reachable = out
        return out

    def device_hashes(self) -> set[int]:
        """Hashes of the blocks cached on device: what the published events must add up to.
        Shared: callers read it, never change it."""
        if self._hashes is not None:
            return self._hashes
        live = self.reachable()
        self._hashes = {
            h for n in self.snap.nodes
            if n.device is not None and n.parent is not None and n.id in live
            for h in n.hashes
        }
        return self._hashes

    def subtree_locks(self) -> dict[tuple[int, Tier], int]:
        """(node, tier) -> number of locks held on the node or below it (PIN-1). Shared:
        callers read it, never change it."""
        if self._locks is None:
            self._locks = self._subtree_locks()
        return self._locks

    def _subtree_locks(self) -> dict[tuple[int, Tier], int]:
        counts: dict[tuple[int, Tier], int] = {}
        for lk in self.snap.locks:
            cur: int | None = lk.node
            while cur is not None:
                counts[(cur, lk.tier)] = counts.get((cur, lk.tier), 0) + 1
                cur = self.nodes[cur].parent if cur in self.nodes else None
        return counts
