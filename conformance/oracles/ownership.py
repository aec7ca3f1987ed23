"""Ownership oracle (POOL-1, POOL-3, POOL-4, HOST-1, HOST-2, HOST-3, PIN-1), white-box.

The pools' owner records and the tree's page lists are reported separately by the engine; this
oracle checks that they tell one story, that nothing is lost, and that pins match the locks held.
Which free page an allocation picks is never judged (POOL-3).
"""

from __future__ import annotations

from operator import attrgetter

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.oracles.base import Ctx, Oracle
from kvconf.conformance.oracles.tree_view import TreeView, same_fields
from kvconf.reference.tiers import Tier

DEVICE, HOST = Tier.DEVICE, Tier.HOST


class OwnershipOracle(Oracle):
    name = "ownership"
    behaviours = ("POOL-1", "POOL-3", "POOL-4", "HOST-1", "HOST-2", "HOST-3", "HOST-11", "PIN-1")
    needs = frozenset({Feature.SNAPSHOT})
    # A transfer's pages are judged only where a snapshot showed one in flight.
    conditional = ("HOST-2", "HOST-3", "HOST-11")

    def __init__(self) -> None:
        self.passed: tuple | None = None  # the inputs of the last step that held (``_inputs``)
        self.pools: dict = {}  # tier -> (pool, claims) last seen to hold (``_holds``)
        self.kinds_seen: set[str] = set()  # kinds of transfer seen in flight (``conditional``)

    def after_step(self, ctx: Ctx) -> None:
        snap = ctx.after
        if snap is None:
            return
        if snap.transfers and len(self.kinds_seen) < 2:
            self._seen(snap.transfers)
        last = self.passed
        if (self.incremental and last is not None and last[2] is snap
                and last[0][4] == ctx.ledger.held and last[1][2] == len(ctx.ledger.live)):
            return  # the very snapshot that held, and the caller holds what it held then
        seen = _inputs(snap, ctx)
        # The pages' owners as they were at the last step that held: only the pins can be
        # wrong (a lock taken or released changes nothing else that ``judge`` reads).
        if (self.incremental and last is not None and _same_owners(seen[0], last[0])
                and (_same_pins(seen[1], last[1]) or _pins_hold(snap, ctx))):
            self.passed = (*seen, snap)
            return
        if not _holds(snap, ctx, self.pools if self.incremental else None):
            self.pools.clear()
            self.judge(ctx, snap)  # names the first rule broken, as it always did
        self.passed = (*seen, snap)

    def _seen(self, transfers) -> None:
        """Mark the transfer rules of the kinds first seen in flight (at most twice a play)."""
        for t in transfers:
            if t.kind not in self.kinds_seen:
                self.kinds_seen.add(t.kind)
                if t.kind == "writeback":
                    self.mark("HOST-2")
                elif t.kind == "loadback":
                    self.mark("HOST-3", "HOST-11")

    def _landing_in_tree(self, snap, key, op, owner: str) -> bool:
        """HOST-11: a device destination of an in-flight loadback that already hangs in the
        tree is legal only held by a node pinned on device until the copy lands."""
        t = next(t for t in snap.transfers if t.op_id == op)
        if t.kind != "loadback" or not owner.startswith("node:"):
            return False
        node = snap.node_map().get(int(owner[5:]))
        if node is None or not node.device_ref:
            raise self.fail("HOST-11", f"device page {key[1]}, still being filled by loadback "
                            f"{op}, hangs in the tree at a node not pinned on device")
        return True

    def judge(self, ctx: Ctx, snap) -> None:
        """Every check in turn, raising at the first broken one with what it saw."""
        claimed: dict[tuple[Tier, int], str] = {}
        nodes = snap.node_map()
        for n in snap.nodes:
            for tier in (Tier.DEVICE, Tier.HOST):
                pages = n.pages(tier)
                if pages is None:
                    continue
                if n.parent is not None:
                    if len(pages) * snap.page_size != len(n.key):
                        raise self.fail(
                            "POOL-1",
                            f"node {n.id} holds {len(pages)} {tier} pages for {len(n.key)} tokens",
                        )
                    parent = nodes[n.parent]
                    if parent.pages(tier) is None:
                        raise self.fail(
                            "HOST-1",
                            f"node {n.id} holds {tier} pages but its parent {parent.id} does not",
                        )
                for pg in pages:
                    key = (tier, pg)
                    if key in claimed:
                        raise self.fail(
                            "POOL-1", f"{tier} page {pg} is held by {claimed[key]} and node {n.id}"
                        )
                    claimed[key] = f"node {n.id}"
        transfer_dst: dict[tuple[Tier, int], int] = {}
        # HOST-11: a stream-ordered loadback's destinations are in the tree already
        early = Feature.STREAM_ORDERED_LOADBACK in ctx.engine.features
        for t in snap.transfers:
            dst = Tier.HOST if t.kind == "writeback" else Tier.DEVICE
            src = Tier.DEVICE if t.kind == "writeback" else Tier.HOST
            for s, d in t.pairs:
                transfer_dst[(dst, d)] = t.op_id
                owner = claimed.get((src, s))
                if owner is None:
                    raise self.fail(
                        "HOST-2" if t.kind == "writeback" else "HOST-3",
                        f"{src} source page {s} of in-flight {t.kind} {t.op_id} left the tree",
                    )
        for tier, pool in snap.pools.items():
            if len(pool.owners) != pool.size:
                raise self.fail("POOL-1", f"{tier} pool reports {len(pool.owners)} owners")
            free = set(pool.free)
            if len(free) != len(pool.free):
                raise self.fail("POOL-1", f"{tier} free list holds a page twice")
            caller = 0
            for pg, owner in enumerate(pool.owners):
                tree_owner = claimed.get((tier, pg))
                if owner == "free":
                    if pg not in free:
                        raise self.fail("POOL-4", f"{tier} page {pg} is marked free but not listed")
                    if tree_owner:
                        raise self.fail(
                            "POOL-1", f"{tier} page {pg} is free and held by {tree_owner}"
                        )
                elif pg in free:
                    raise self.fail(
                        "POOL-1", f"{tier} page {pg} is on the free list and owned by {owner}"
                    )
                elif owner.startswith("node:"):
                    if tree_owner != f"node {owner[5:]}":
                        raise self.fail(
                            "POOL-1",
                            f"{tier} page {pg} is recorded for {owner} but the tree has it at "
                            f"{tree_owner or 'no node'}",
                        )
                elif owner.startswith("transfer:"):
                    if transfer_dst.get((tier, pg)) != int(owner[9:]):
                        raise self.fail(
                            "HOST-2" if tier is Tier.HOST else "HOST-3",
                            f"{tier} page {pg} is owned by {owner} but is no destination of it",
                        )
                elif owner == "caller":
                    caller += 1
                    if tier is Tier.DEVICE and pg not in ctx.ledger.held:
                        raise self.fail("POOL-4", f"{tier} page {pg} is charged to the caller, "
                                        "who does not hold it")
                if tree_owner and owner != f"node:{tree_owner[5:]}":
                    raise self.fail(
                        "POOL-1", f"{tier} page {pg} is in {tree_owner}, owned by {owner}"
                    )
            if tier is Tier.DEVICE and caller != len(ctx.ledger.held):
                missing = sorted(p for p in ctx.ledger.held if pool.owners[p] != "caller")
                raise self.fail("POOL-4", f"caller holds device pages {missing} the pool gave away")
            for key, op in transfer_dst.items():
                if key[0] is tier and pool.owners[key[1]] != f"transfer:{op}":
                    if early and self._landing_in_tree(snap, key, op, pool.owners[key[1]]):
                        continue
                    raise self.fail(
                        "HOST-2" if tier is Tier.HOST else "HOST-3",
                        f"{tier} destination page {key[1]} of transfer {op} is owned by "
                        f"{pool.owners[key[1]]}",
                    )
        counts = TreeView(snap).subtree_locks()
        by_node = Feature.LOCK_HANDLES not in ctx.engine.features
        for n in snap.nodes:
            if by_node and n.parent is None:
                continue  # an engine that unlocks by node need not count at a root (PIN-3)
            for tier in (Tier.DEVICE, Tier.HOST):
                want = counts.get((n.id, tier), 0)
                if n.ref(tier) != want:
                    raise self.fail(
                        "PIN-1",
                        f"node {n.id} has {tier} reference count {n.ref(tier)} with {want} "
                        "locks held on it or below",
                    )
        kit_locks = sum(1 for lk in snap.locks if not lk.internal)
        if kit_locks != len(ctx.ledger.live_locks()):
            raise self.fail(
                "PIN-1", f"engine lists {kit_locks} caller locks, the caller holds "
                f"{len(ctx.ledger.live_locks())}"
            )


def _inputs(snap, ctx: Ctx) -> tuple[tuple, tuple]:
    """Everything ``judge`` reads, in two parts: what the pages' owners are checked against
    (the snapshot's parts, compared by identity: an engine that reuses an unchanged part says
    so; the nodes' pages and the caller's pages) and what the pins are (the locks, the nodes'
    reference counts, the caller's live locks). The nodes are compared field by field
    (``_OWNED``, ``_PINS``)."""
    return ((snap.pools, snap.transfers, snap.nodes, snap.page_size, frozenset(ctx.ledger.held)),
            (snap.locks, snap.nodes, len(ctx.ledger.live)))


# What ``judge`` reads of a node for its owners, and for its pins (not its access times, which
# a match changes).
_OWNED = attrgetter("id", "parent", "device", "host", "key")
_PINS = attrgetter("id", "device_ref", "host_ref")


def _same_owners(seen: tuple, passed: tuple) -> bool:
    return (seen[0] is passed[0] and seen[1] is passed[1] and seen[3:] == passed[3:]
            and same_fields(seen[2], passed[2], _OWNED))


def _same_pins(seen: tuple, passed: tuple) -> bool:
    return seen[0] == passed[0] and seen[2] == passed[2] and same_fields(seen[1], passed[1], _PINS)


def _pins_hold(snap, ctx: Ctx) -> bool:
    """Whether the pin checks of ``OwnershipOracle.judge`` hold (PIN-1): each node's counts
    are the locks held on it or below, and the engine lists the caller's locks. One pass up
    the node list from its end, each node's locks added to its parent's once it is judged;
    a list that does not give every node once, after its parent, and any count that differs,
    are left to ``_pins_by_view``, which follows each lock up its parents as the judge does."""
    if sum(1 for lk in snap.locks if not lk.internal) != len(ctx.ledger.live):
        return False
    dev: dict[int, int] = {}  # node id -> device locks held on it or below (so far)
    host: dict[int, int] = {}
    for lk in snap.locks:
        if lk.tier is DEVICE:
            dev[lk.node] = dev.get(lk.node, 0) + 1
        elif lk.tier is HOST:
            host[lk.node] = host.get(lk.node, 0) + 1
    by_node = Feature.LOCK_HANDLES not in ctx.engine.features
    done: set[int] = set()
    for n in reversed(snap.nodes):
        nid, par = n.id, n.parent
        if nid in done or par in done:
            return _pins_by_view(snap, ctx)
        done.add(nid)
        d, h = dev.get(nid, 0), host.get(nid, 0)
        if (n.device_ref != d or n.host_ref != h) and not (by_node and par is None):
            return _pins_by_view(snap, ctx)  # broken: the judge's own way says so
        if par is not None:
            if d:
                dev[par] = dev.get(par, 0) + d
            if h:
                host[par] = host.get(par, 0) + h
    return True


def _pins_by_view(snap, ctx: Ctx) -> bool:
    """``_pins_hold`` over any node list: each lock counted up its parents (``TreeView``)."""
    counts = TreeView(snap).subtree_locks()
    by_node = Feature.LOCK_HANDLES not in ctx.engine.features
    for n in snap.nodes:
        if by_node and n.parent is None:
            continue
        if (n.device_ref != counts.get((n.id, DEVICE), 0)
                or n.host_ref != counts.get((n.id, HOST), 0)):
            return False
    return sum(1 for lk in snap.locks if not lk.internal) == len(ctx.ledger.live_locks())


def _holds(snap, ctx: Ctx, memo: dict | None = None) -> bool:
    """Whether every check of ``OwnershipOracle.judge`` holds, decided in one pass over the
    snapshot without building a message. False whenever ``judge`` would raise (it may also be
    False where ``judge`` then finds nothing: the verdict is always ``judge``'s). ``memo``
    keeps each pool whose checks held, with the claims it was checked against: the same pool
    object against the same claims is not checked again."""
    p = snap.page_size
    view = TreeView(snap)
    nodes = view.nodes
    claim: dict[Tier, dict[int, str]] = {DEVICE: {}, HOST: {}}  # page -> its node's owner tag
    dev_claim, host_claim = claim[DEVICE], claim[HOST]
    for n in snap.nodes:
        dev, host, par = n.device, n.host, n.parent
        tag = f"node:{n.id}"
        parent = nodes.get(par) if par is not None else None
        if par is not None and parent is None:
            return False
        if dev is not None:
            if parent is not None and (len(dev) * p != len(n.key) or parent.device is None):
                return False
            for pg in dev:
                if pg in dev_claim:
                    return False
                dev_claim[pg] = tag
        if host is not None:
            if parent is not None and (len(host) * p != len(n.key) or parent.host is None):
                return False
            for pg in host:
                if pg in host_claim:
                    return False
                host_claim[pg] = tag
    dst: dict[Tier, dict[int, int]] = {DEVICE: {}, HOST: {}}
    for t in snap.transfers:
        src, to = (DEVICE, HOST) if t.kind == "writeback" else (HOST, DEVICE)
        for s, d in t.pairs:
            dst[to][d] = t.op_id
            if s not in claim[src]:
                return False
    held = ctx.ledger.held
    for tier, pool in snap.pools.items():
        seen = (claim.get(tier), dst[tier], frozenset(held) if tier is DEVICE else None)
        if memo is not None and memo.get(tier, (None,))[0] is pool and memo[tier][1] == seen:
            continue  # this pool, these claims: they held at an earlier step
        owners = pool.owners
        if len(owners) != pool.size or tier not in claim:
            return False
        free = set(pool.free)
        if len(free) != len(pool.free):
            return False
        mine, landing = claim[tier], dst[tier]
        caller = 0
        for pg, owner in enumerate(owners):
            tag = mine.get(pg)
            if tag is not None:
                if owner != tag or pg in free:
                    return False
            elif owner == "free":
                if pg not in free:
                    return False
            elif pg in free:
                return False
            elif owner == "caller":
                caller += 1
                if tier is DEVICE and pg not in held:
                    return False
            elif owner.startswith("node:") or (
                    owner.startswith("transfer:") and owner != f"transfer:{landing.get(pg)}"):
                return False
        if tier is DEVICE and caller != len(held):
            return False
        for d, op in landing.items():
            if not 0 <= d < len(owners) or owners[d] != f"transfer:{op}":
                return False
        if memo is not None:
            memo[tier] = (pool, seen)
    return _pins_hold(snap, ctx)
