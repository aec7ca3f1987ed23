"""Memory oracles: checks on the KV memory itself, not on what the engine says about it.

With the kit's shadow memory they read a dict; under ``kvconf gpu`` the same checks read the
torch pools, so they judge what the copies and the forward really left in the tensors.
"""

from __future__ import annotations

from operator import attrgetter

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.oracles.base import Ctx, Oracle
from kvconf.conformance.oracles.content import filling
from kvconf.conformance.oracles.tree_view import same_fields
from kvconf.conformance.runtime.content import page_tags
from kvconf.conformance.runtime.memory import RESERVED
from kvconf.reference.tiers import Tier


class PinnedContentOracle(Oracle):
    """PIN-2 on the memory: a page under a held lock keeps the content it had when locked.

    A pinned page handed out again is overwritten by its next owner's forward or copy; this
    sees that in the memory even when the engine's own records look consistent.
    """

    name = "pinned-content"
    behaviours = ("PIN-2",)

    def __init__(self) -> None:
        self.want: dict[tuple[int, Tier], list[int]] = {}  # (lock step, tier) -> page tags
        self.passed: tuple | None = None  # the locks and memory writes last seen to hold
        self.exempt = False  # whether pages still being filled were let off at that step

    def on_forward(self, ctx: Ctx, pages) -> None:
        self.after_step(ctx)  # a forward into a pinned page shows before the engine hears of it

    def after_step(self, ctx: Ctx) -> None:
        memory = ctx.ledger.memory
        writes = getattr(memory, "writes", None)
        seen = (tuple(ctx.ledger.live), writes)  # a held lock never changes
        last = self.passed
        if self.incremental and writes is not None and seen == last:
            return  # the same locks over a memory nobody wrote since they held
        live = ctx.ledger.live_locks()
        early = filling(ctx)  # still being filled under stream order (HOST-11): judged landed
        # A lock that held at the last step holds while none of its pages was written since:
        # only new locks and locks over a page written since are read again.
        written = (set(memory.written_since(last[1]))
                   if self.incremental and writes is not None and last is not None
                   and last[1] is not None and not early and not self.exempt else None)
        keep: dict[tuple[int, Tier], list[int]] = {}
        for tier in (Tier.DEVICE, Tier.HOST):
            recs = [r for r in live if r.tier is tier and r.pages]
            if written is not None:
                again = []
                for r in recs:
                    key = (r.step, tier)
                    want = self.want.get(key)
                    if want is None or (written and any((tier, pg) in written
                                                        for pg in r.pages)):
                        again.append(r)
                    else:
                        keep[key] = want
                recs = again
            if not recs:
                continue
            got = iter(memory.read_pages(tier, [p for r in recs for p in r.pages]))
            for r in recs:
                key = (r.step, tier)
                want = self.want.get(key)
                if want is None:  # what the match served (the content oracle checked it)
                    want = page_tags(r.namespace, r.tokens, ctx.ledger.page_size)
                keep[key] = want
                for k, page in enumerate(r.pages):
                    if next(got) != want[k] and not (tier is Tier.DEVICE and page in early):
                        raise self.fail(
                            "PIN-2", f"{tier} page {page}, pinned by the lock taken at step "
                            f"{r.step}, no longer holds the KV it held when locked: the engine "
                            "handed it out again while the lock was held"
                        )
        self.want = keep
        self.passed = seen
        self.exempt = bool(early)


# What ``PageHashOracle`` reads of a node (not its access times or pins).
_HASHED = attrgetter("id", "namespace", "parent", "start", "key", "device", "hashes")


class PageHashOracle(Oracle):
    """EVENT-4 and TREE-2 on the memory: every device page of a tree node holds the KV of the
    node's prefix, and the block hash the node publishes is the one recomputed from the tokens
    that KV was computed from (the tag names them), not from what the engine believes."""

    name = "page-hashes"
    behaviours = ("EVENT-4", "TREE-2")
    needs = frozenset({Feature.SNAPSHOT})

    def __init__(self) -> None:
        self.hash_of: dict[int, int] = {}  # tag -> the block hash of the page it stands for
        # The node list, page size, memory writes and pages still filling last seen to hold.
        self.passed: tuple | None = None
        self.tails: dict[int, int] = {}  # node id -> the tag of its last device page, then

    def _hash(self, ctx: Ctx, tag: int) -> int:
        chain: list[int] = []
        cur: int | None = tag
        while cur is not None and cur not in self.hash_of:
            chain.append(cur)
            cur = ctx.ledger.origin[cur].parent
        parent = None if cur is None else self.hash_of[cur]
        for t in reversed(chain):
            o = ctx.ledger.origin[t]
            parent = self.hash_of[t] = ctx.engine.block_hash(parent, o.namespace, o.tokens)
        assert parent is not None
        return parent

    def after_step(self, ctx: Ctx) -> None:
        snap = ctx.after
        if snap is None:
            return
        memory = ctx.ledger.memory
        writes = getattr(memory, "writes", None)
        early = filling(ctx)  # pages a stream-ordered loadback still fills (HOST-11)
        seen = (snap.page_size, writes, tuple(early))
        last = self.passed
        if (self.incremental and writes is not None and last is not None and seen == last[1:]
                and same_fields(snap.nodes, last[0], _HASHED)):
            return  # the same nodes over a memory nobody wrote since they held
        redo = None
        if (self.incremental and writes is not None and last is not None and not early
                and not last[3] and last[1] == snap.page_size and last[2] is not None):
            redo = _changed(snap.nodes, last[0], set(memory.written_since(last[2])), self.tails)
        self._judge(ctx, snap, early, redo)
        self.passed = (snap.nodes, *seen)

    def _judge(self, ctx: Ctx, snap, early: dict[int, object],
               redo: set[int] | None = None) -> None:
        """Every node's device pages in order, or (``redo``) only those nodes: the others held
        at the last step on the same fields, pages and parent (``_changed``)."""
        # A node a stream-ordered loadback is still filling, and what hangs below it, is
        # judged once the copy lands (HOST-11).
        skipped: set[int] = set()
        for n in snap.nodes if early else ():  # none while nothing is being filled
            if n.device and (n.parent in skipped or any(pg in early for pg in n.device)):
                skipped.add(n.id)
        nodes = [n for n in snap.nodes if n.device and n.id not in skipped]
        pages = [p for n in nodes if redo is None or n.id in redo for p in n.device]
        tails: dict[int, int] = {}  # node id -> the tag of its last device page
        tags = iter(ctx.ledger.memory.read_pages(Tier.DEVICE, pages) if pages else ())
        p = snap.page_size
        for n in nodes:
            if redo is not None and n.id not in redo:
                tails[n.id] = self.tails[n.id]
                continue
            prev = tails.get(n.parent) if n.parent is not None else None
            for k, page in enumerate(n.device):
                tag = next(tags)
                o = None if tag is None or tag in RESERVED else ctx.ledger.origin.get(tag)
                depth = n.start // p + k + 1
                if (o is None or o.namespace != n.namespace or o.depth != depth
                        or o.parent != prev or o.tokens != n.key[k * p : (k + 1) * p]):
                    what = ("nothing the kit wrote" if o is None else
                            f"KV of page {o.depth} of another prefix in namespace {o.namespace}")
                    raise self.fail("TREE-2", f"device page {page}, page {depth} of node {n.id} "
                                    f"in namespace {n.namespace}, holds {what}")
                want = self._hash(ctx, tag)
                if k < len(n.hashes) and n.hashes[k] != want:
                    raise self.fail(
                        "EVENT-4", f"node {n.id} publishes {n.hashes[k]:#x} for device page "
                        f"{page}; recomputed from the tokens its KV was computed from, the block "
                        f"hash is {want:#x}"
                    )
                prev = tag
            tails[n.id] = prev
        self.tails = tails


def _changed(nodes, then, written: set[tuple[Tier, int]], tails: dict[int, int]) -> set[int]:
    """The nodes ``PageHashOracle._judge`` must read again after a step that held on ``then``:
    those whose fields it reads changed, whose device pages were written since, that it did
    not judge then, and every node below one of those (a child's first page is checked
    against its parent's last)."""
    old = {v.id: v for v in then}
    dirty: set[int] = set()
    for n in nodes:
        o = old.get(n.id)
        if (o is None or (o is not n and _HASHED(o) != _HASHED(n)) or n.parent in dirty
                or (n.device and (n.id not in tails or (written and any(
                    (Tier.DEVICE, pg) in written for pg in n.device))))):
            dirty.add(n.id)
    return dirty
