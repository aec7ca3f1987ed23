"""Pin oracle (PIN-2, POOL-2, POOL-1, TREE-5): pinned pages are never taken; allocations give
only free pages.

Black-box: the kit knows the pages of every lock it holds and every page it holds itself, so an
allocation that returns one of them, or a match that no longer covers a locked prefix, is caught
without looking inside the engine. It also knows which device pages the tree has held since the
last eviction (what inserts kept and matches served): nothing but an eviction frees those, so an
allocation that returns one is a page in two places, or an insert that freed more than it said.
White-box: locked pages must still belong to a tree node.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvconf.conformance.engine.protocol import Inserted, Match, match_scope
from kvconf.conformance.oracles.base import Ctx, Oracle
from kvconf.reference.snapshot import CacheSnapshot
from kvconf.reference.tiers import Tier


class PinOracle(Oracle):
    name = "pinning"
    behaviours = ("PIN-2", "POOL-2", "POOL-1", "TREE-5")
    hook_rules = {"on_alloc": ("POOL-2",), "on_insert": ("TREE-5",)}

    def __init__(self) -> None:
        self.cached: dict[int, int] = {}  # device page -> step that showed it in the tree
        self.passed: tuple | None = None  # the pools and locks of the last step that held

    def on_insert(self, ctx: Ctx, ns: int, tokens: Sequence[int], pages: Sequence[int],
                  r: Inserted) -> None:
        freed = set(r.freed)
        for pg in pages:
            if pg not in freed:
                self.cached[pg] = ctx.index

    def on_evict(self, ctx: Ctx, tier, asked, freed, before, after) -> None:
        self.cached.clear()  # which pages an eviction freed, the kit cannot tell

    def on_unload(self, ctx: Ctx, ns: int) -> None:
        self.cached.clear()

    def on_reset(self, ctx: Ctx, cleared, before, after) -> None:
        if cleared:
            self.cached.clear()  # every cached page went back to the free list (EVICT-9)

    def on_alloc(self, ctx: Ctx, pages: list[int]) -> None:
        if len(set(pages)) != len(pages):
            raise self.fail("POOL-2", f"allocation returned a page twice: {pages}")
        held = sorted(set(pages) & ctx.ledger.held)
        if held:
            raise self.fail("POOL-2", f"allocation returned pages {held} the caller still holds")
        pinned = sorted(set(pages) & ctx.ledger.pinned_pages(Tier.DEVICE))
        if pinned:
            raise self.fail("PIN-2", f"allocation handed out pinned device pages {pinned}")
        cached = sorted(pg for pg in pages if pg in self.cached)
        if cached:
            raise self.fail(
                ("POOL-1", "TREE-5"),
                f"allocation handed out device page {cached[0]}, which the tree held at step "
                f"{self.cached[cached[0]]} with no eviction since (a page in two places, or an "
                "insert that freed more than it reported)",
            )

    def on_match(self, ctx: Ctx, ns: int, tokens: Sequence[int], m: Match) -> None:
        for pg in m.device_pages:
            self.cached[pg] = ctx.index
        for rec in ctx.ledger.live_locks():
            if rec.detached or rec.namespace != ns:
                continue
            if tuple(tokens[: len(rec.tokens)]) != rec.tokens:
                continue
            got = m.device_pages if rec.tier is Tier.DEVICE else m.host_pages
            # A match that may not cover the query's last token (TREE-7) is judged on the pages
            # it may cover.
            p = ctx.ledger.page_size
            want = rec.pages[: len(match_scope(ctx.engine, tokens)) // p]
            if tuple(got[: len(want)]) != want:
                raise self.fail(
                    "PIN-2",
                    f"{rec.tier} prefix of {len(rec.tokens)} tokens locked at step {rec.step} "
                    f"on pages {list(want)} is now matched as {list(got[: len(want)])}",
                )

    def after_step(self, ctx: Ctx) -> None:
        if not isinstance(ctx.after, CacheSnapshot):  # a block view is block-pool's
            return
        # All it reads: the pools (a snapshot keeps an unchanged pool's view, so by identity)
        # and the locks held, which never change while held.
        pools, live = ctx.after.pools, ctx.ledger.live
        held = tuple(live)  # the same key, the same lock (a trace step takes at most one)
        last = self.passed
        if not self.incremental or last is None:
            self._judge(ctx, live.values())
        elif last[1] != held or last[0] is not pools:
            # A lock that held at the last step holds while its tier's pool is the same view.
            then_pools, then = last
            again = [rec for key, rec in live.items()
                     if key not in then or pools[rec.tier] is not then_pools.get(rec.tier)]
            if again:
                self._judge(ctx, again)
        self.passed = (pools, held)

    def _judge(self, ctx: Ctx, locks) -> None:
        for rec in locks:
            owners = ctx.after.pools[rec.tier].owners
            lost = [p for p in rec.pages if not owners[p].startswith("node:")]
            if lost:
                raise self.fail(
                    "PIN-2",
                    f"{rec.tier} pages {lost} locked at step {rec.step} are no longer in the tree",
                )
