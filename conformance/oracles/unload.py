"""Unload oracle (NS-2, D268-4), white-box: an unloaded namespace leaves only what is still held.

After every step, a node reachable from no namespace root belongs to an unloaded adapter. Each
such node must still be held: pinned on a tier where it has pages, copied by a transfer in
flight, or above such a node. Anything else should have been freed in the call that let it go.
Black-box, the kit checks the other half: a match in an unloaded namespace finds nothing.
"""

from __future__ import annotations

from operator import attrgetter

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.oracles.base import Ctx, Oracle
from kvconf.conformance.oracles.tree_view import TreeView, same_fields
from kvconf.reference.tiers import Tier

_ID = attrgetter("id")
# What ``UnloadOracle`` reads of a node.
_HELD = attrgetter("id", "namespace", "parent", "pending", "device_ref", "host_ref", "device",
                   "host")
# What ``TreeView.reachable`` reads of a node (with the roots).
_LINKS = attrgetter("id", "parent")


class UnloadOracle(Oracle):
    name = "unload"
    behaviours = ("NS-2",)
    hook_rules = {"on_unload": ("NS-2",)}
    needs = frozenset({Feature.UNLOAD})

    def __init__(self) -> None:
        self.unloaded: set[int] = set()  # namespaces unloaded and not used since
        self.passed: tuple | None = None  # the snapshot's nodes and roots last seen to hold
        # The nodes and roots of the last snapshot whose every node was reachable: nothing to
        # hold there, whatever the pins and pages (``_judge``).
        self.linked: tuple | None = None

    def on_unload(self, ctx: Ctx, ns: int) -> None:
        self.unloaded.add(ns)

    def on_insert(self, ctx, ns, tokens, pages, r) -> None:
        self.unloaded.discard(ns)

    def on_match(self, ctx, ns, tokens, m) -> None:
        if ns in self.unloaded and (m.device_len or m.host_len):
            raise self.fail("NS-2", f"a match in unloaded namespace {ns} found "
                            f"{max(m.device_len, m.host_len)} tokens")

    def after_step(self, ctx: Ctx) -> None:
        snap = ctx.after
        if snap is None:
            return
        last = self.passed
        if (self.incremental and last is not None and snap.roots == last[1]
                and same_fields(snap.nodes, last[0], _HELD)):
            return  # the same tree, as far as holding goes, as at a step that held
        linked = self.linked
        if (self.incremental and linked is not None and snap.roots == linked[1]
                and same_fields(snap.nodes, linked[0], _LINKS)):
            # The same nodes under the same roots as a snapshot whose every node was
            # reachable: so is every node of this one (``_judge``'s first test).
            self.passed = self.linked = (snap.nodes, snap.roots)
            return
        self._judge(snap)
        self.passed = (snap.nodes, snap.roots)

    def _judge(self, snap) -> None:
        reachable = TreeView(snap).reachable()
        if reachable.issuperset(map(_ID, snap.nodes)):
            self.linked = (snap.nodes, snap.roots)
            return  # no node of an unloaded adapter: nothing to hold
        held: set[int] = set()
        kids: dict[int, list[int]] = {}
        for n in snap.nodes:
            if n.parent is not None:
                kids.setdefault(n.parent, []).append(n.id)
        nodes = snap.node_map()
        for n in reversed(snap.nodes):  # children before parents
            if n.id in reachable:
                continue
            own = n.pending is not None or any(
                n.ref(t) and (n.pages(t) is not None) for t in (Tier.DEVICE, Tier.HOST))
            if own or any(k in held for k in kids.get(n.id, ())):
                held.add(n.id)
                continue
            what = "root" if n.parent is None else f"node {n.id}"
            raise self.fail("NS-2", f"{what} of unloaded namespace {n.namespace} is held by "
                            f"nothing but was not freed (pages device {nodes[n.id].device}, "
                            f"host {nodes[n.id].host})")
