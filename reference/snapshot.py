"""Read-only introspection of a cache (white-box view for the kit's oracles).

The pools report their own owner maps and the tree reports its own page lists, independently, so
an oracle can cross-check them; a snapshot built from one map would agree with itself by design.

Nothing changes a view once made: a snapshot keeps the views of what did not change, and the
oracles tell by identity what they need not judge again. The views made at every step (a node's,
a pool's, a lock's, a copy's, the snapshot itself) are not frozen all the same, as
``reference.plan``'s ``ForwardRow`` is not: a frozen slotted dataclass pays one
``object.__setattr__`` per field when made, several times the cost of a plain one. They hash by
value like the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvconf.reference.tiers import Tier


@dataclass(slots=True, unsafe_hash=True)  # not frozen: see the module's docstring
class NodeView:
    """One node of the tree: its key, its pages on each tier, its block hashes, its lock counts."""

    id: int
    namespace: int
    parent: int | None
    start: int  # token offset of the key within the full prefix
    key: tuple[int, ...]
    device: tuple[int, ...] | None
    host: tuple[int, ...] | None
    hashes: tuple[int, ...]
    device_ref: int
    host_ref: int
    device_access: int
    host_access: int
    seq: int
    pending: int | None
    keys: tuple[str, ...] = ()  # L3 rolling keys, hex (L3-1)

    def pages(self, tier: Tier) -> tuple[int, ...] | None:
        return self.device if tier is Tier.DEVICE else self.host

    def ref(self, tier: Tier) -> int:
        return self.device_ref if tier is Tier.DEVICE else self.host_ref

    def access(self, tier: Tier) -> int:
        return self.device_access if tier is Tier.DEVICE else self.host_access


@dataclass(slots=True, unsafe_hash=True)  # not frozen: see the module's docstring
class PoolView:
    """One tier's pool: its size, its free list, and every page's owner (POOL-1)."""

    tier: Tier
    size: int
    free: tuple[int, ...]
    owners: tuple[str, ...]  # per page: "free", "caller", "node:<id>", "transfer:<op>"


@dataclass(slots=True, unsafe_hash=True)  # not frozen: see the module's docstring
class LockView:
    """A lock held on a node on one tier (PIN-1); ``internal`` for the cache's own locks."""

    handle: int
    node: int
    tier: Tier
    internal: bool


@dataclass(slots=True, unsafe_hash=True)  # not frozen: see the module's docstring
class TransferView:
    """A writeback or loadback in flight and the (source, destination) pages it holds."""

    op_id: int
    kind: str  # "writeback" (device -> host) or "loadback" (host -> device)
    node: int
    pairs: tuple[tuple[int, int], ...]  # (source page, destination page)


@dataclass(slots=True, unsafe_hash=True)  # not frozen: see the module's docstring
class L3View:
    """An L3 prefetch or backup in flight and the host pages it holds (spec chapter l3_store)."""

    op_id: int
    kind: str  # "prefetch" (L3 -> host) or "backup" (host -> L3)
    node: int  # the anchor it pins on host
    start: int  # index of its first page in the sequence
    pages: tuple[int, ...]  # host pages


@dataclass(slots=True, unsafe_hash=True)  # not frozen: see the module's docstring
class CacheSnapshot:
    """A white-box view of a cache: pools with each page's owner, the tree, locks and the
    transfers in flight; the oracles that check ownership (POOL-1, PIN-1) read it."""

    page_size: int
    pools: dict[Tier, PoolView]
    nodes: tuple[NodeView, ...]  # roots included; parents before children
    roots: dict[int, int]  # namespace -> root node id
    locks: tuple[LockView, ...]
    transfers: tuple[TransferView, ...]
    l3: tuple[L3View, ...] = ()  # L3 transfers in flight

    def node_map(self) -> dict[int, NodeView]:
        return {n.id: n for n in self.nodes}

    def children(self) -> dict[int, list[NodeView]]:
        out: dict[int, list[NodeView]] = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            if n.parent is not None:
                out[n.parent].append(n)
        return out

    def full_tokens(self, node_id: int) -> tuple[int, ...]:
        """The whole prefix a node stands for, root to the end of its key."""
        nodes = self.node_map()
        parts: list[tuple[int, ...]] = []
        cur: int | None = node_id
        while cur is not None:
            parts.append(nodes[cur].key)
            cur = nodes[cur].parent
        return tuple(t for part in reversed(parts) for t in part)
