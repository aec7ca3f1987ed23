"""Match oracle (TREE-1, TREE-3..TREE-7): what a match returns and leaves."""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

from kvconf.conformance.engine.protocol import Inserted, Match, match_scope
from kvconf.conformance.oracles.base import Ctx, Oracle
from kvconf.conformance.oracles.tree_view import TreeView, same_fields
from kvconf.reference.snapshot import CacheSnapshot
from kvconf.reference.tiers import Tier

# What ``TreeView.blocks`` reads of a node (with the roots): the same in two snapshots, the
# same blocks (a match changes access times, which no block shows).
_BLOCKS = attrgetter("id", "namespace", "parent", "key", "device", "host", "hashes",
                     "device_ref", "host_ref")


class MatchOracle(Oracle):
    name = "match"
    hook_rules = {"on_match": ("TREE-1", "TREE-3", "TREE-6", "TREE-7")}
    behaviours = ("TREE-1", "TREE-3", "TREE-4", "TREE-5", "TREE-6", "TREE-7")

    def __init__(self) -> None:
        self._pending_match: tuple[int, tuple[int, ...], Match] | None = None
        self._inserted: list[tuple[int, tuple[int, ...], Sequence[int], Inserted]] = []

    def on_match(self, ctx: Ctx, ns: int, tokens: Sequence[int], m: Match) -> None:
        p = ctx.ledger.page_size
        for tier, n, pages in (
            (Tier.DEVICE, m.device_len, m.device_pages),
            (Tier.HOST, m.host_len, m.host_pages),
        ):
            if n < 0:
                raise self.fail("TREE-3", f"{tier} match length {n} is negative")
            if n % p or n > len(tokens) or len(pages) * p != n:
                raise self.fail(
                    "TREE-1",
                    f"{tier} match of {n} tokens with {len(pages)} pages is not whole pages "
                    f"within a {len(tokens)}-token query",
                )
        scope = match_scope(ctx.engine, tokens)
        if max(m.device_len, m.host_len) > len(scope):
            raise self.fail("TREE-7", f"a match of {max(m.device_len, m.host_len)} tokens covers "
                            f"the last token of the {len(tokens)}-token query, and the engine "
                            "declares match_leaves_last")
        if isinstance(ctx.before, CacheSnapshot) and ctx.op in ("match", "extend"):
            for tier, n, want in zip((Tier.DEVICE, Tier.HOST), (m.device_len, m.host_len),
                                     _longest(TreeView(ctx.before), ns, scope), strict=True):
                if n != want:
                    raise self.fail(
                        "TREE-1",
                        f"{tier} match returned {n} tokens, the tree holds {want} of the query",
                    )
        if ctx.op == "match":
            self._pending_match = (ns, tuple(tokens), m)

    def on_insert(
        self, ctx: Ctx, ns: int, tokens: Sequence[int], pages: Sequence[int], r: Inserted
    ) -> None:
        if not set(r.freed) <= set(pages):
            raise self.fail("TREE-5", f"insert freed pages {sorted(set(r.freed) - set(pages))} "
                             "that the caller did not pass")
        self._inserted.append((ns, tuple(tokens), pages, r))

    def after_step(self, ctx: Ctx) -> None:
        pending, self._pending_match = self._pending_match, None
        inserted, self._inserted = self._inserted, []
        if not (isinstance(ctx.after, CacheSnapshot) and isinstance(ctx.before, CacheSnapshot)) or (
                pending is None and not inserted):
            return
        if pending is not None:
            # A locking match is judged on the tree between the match and its lock.
            matched = TreeView(ctx.mid if ctx.mid is not None else ctx.after)
            ns, tokens, m = pending
            same = (self.incremental and ctx.before.roots == matched.snap.roots
                    and same_fields(matched.snap.nodes, ctx.before.nodes, _BLOCKS))
            before_blocks = {} if same else TreeView(ctx.before).blocks()
            after_blocks = {} if same else matched.blocks()
            if before_blocks != after_blocks:
                changed = sorted(
                    set(before_blocks.items()) ^ set(after_blocks.items()), key=repr
                )[:2]
                raise self.fail("TREE-4", f"a match changed cached blocks: {changed}")
            end = max(m.device_len, m.host_len)
            covered = 0
            for node, _k in matched.walk(ns, tokens):
                covered += len(node.key)
                if covered >= end:
                    break
            if end and covered != end:
                raise self.fail(
                    "TREE-6",
                    f"the match of {end} tokens ends inside a node that runs to {covered}",
                )
        for ns, tokens, _pages, r in inserted:
            got = TreeView(ctx.after).longest(ns, tokens, Tier.DEVICE)
            if got != len(tokens):
                raise self.fail(
                    "TREE-5", f"after inserting {len(tokens)} tokens the tree holds {got} of them"
                )
            pool = ctx.after.pools[Tier.DEVICE]
            kept = [pg for pg in r.freed if pool.owners[pg] != "free"]
            if kept:
                raise self.fail("TREE-5", f"insert reported pages {kept} freed but they are not")


def _longest(view: TreeView, namespace: int, tokens: Sequence[int]) -> tuple[int, int]:
    """``view.longest`` of ``tokens`` on the device tier and on the host tier (TREE-1), from
    one walk down the tree."""
    device = host = 0
    on_device = on_host = True
    p = view.p
    for n, k in view.walk(namespace, tokens):
        on_device = on_device and n.device is not None
        on_host = on_host and n.host is not None
        if not (on_device or on_host):
            break
        device += k * p if on_device else 0
        host += k * p if on_host else 0
    return device, host
