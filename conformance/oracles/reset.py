"""Reset oracle (EVICT-8, EVICT-9, EVENT-9): a reset clears everything or changes nothing.

Whether a reset had to clear or refuse the driver knows from its own ledger (it holds the locks
and the copies) and judges there. This oracle judges what each answer leaves:

- a reset that cleared: no node holds a page on any tier and every page is free (white-box); the
  engine's own counts say every page is available and none cached (``counters``); a match in a
  namespace with nothing inserted since finds nothing on any tier (black-box, every engine);
  with KV events, the call published AllBlocksCleared with nothing stored after it;
- a refused reset: the engine is exactly as it was (white-box) and published no event.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.protocol import Match
from kvconf.conformance.oracles.base import Ctx, Oracle
from kvconf.reference.kv_events import EventKind
from kvconf.reference.snapshot import CacheSnapshot
from kvconf.reference.tiers import Tier


class ResetOracle(Oracle):
    name = "reset"
    behaviours = ("EVICT-8", "EVICT-9", "EVENT-9")
    needs = frozenset({Feature.RESET})
    # EVICT-8 is judged where a reset was refused and a snapshot shows what it left (the driver
    # marks it where it knew the answer owed); EVICT-9 where one cleared; EVENT-9 at any reset.
    conditional = ("EVICT-8", "EVICT-9")
    hook_rules = {"on_reset": ("EVENT-9",)}

    def __init__(self) -> None:
        # The namespaces inserted into since the last reset that cleared; None: no such reset.
        self.since: set[int] | None = None
        self.answer: bool | None = None  # this step's reset's answer, for ``after_step``

    def on_reset(self, ctx: Ctx, cleared: bool, before, after) -> None:
        self.answer = cleared
        if not cleared:
            if isinstance(before, CacheSnapshot) and isinstance(after, CacheSnapshot):
                self.mark("EVICT-8")
                if before != after:
                    raise self.fail("EVICT-8", "reset refused (returned False) but changed the "
                                    "engine's state")
            return
        self.mark("EVICT-9")
        self.since = set()
        if not isinstance(after, CacheSnapshot):
            return
        for n in after.nodes:
            if n.parent is not None and (n.device is not None or n.host is not None):
                tier = Tier.DEVICE if n.device is not None else Tier.HOST
                raise self.fail("EVICT-9", f"after a reset that cleared (returned True), node "
                                f"{n.id} still holds {tier} pages {list(n.pages(tier))}")
        for tier, pool in after.pools.items():
            kept = [p for p, o in enumerate(pool.owners) if o != "free"]
            if kept:
                raise self.fail("EVICT-9", f"after a reset that cleared, {tier} pages "
                                f"{kept[:5]} are not free (owners {pool.owners[kept[0]]!r}...)")

    def on_insert(self, ctx: Ctx, ns: int, tokens: Sequence[int], pages, r) -> None:
        if self.since is not None:
            self.since.add(ns)

    def on_match(self, ctx: Ctx, ns: int, tokens: Sequence[int], m: Match) -> None:
        since = self.since
        if since is None or ns in since or not (m.device_len or m.host_len):
            return
        raise self.fail("EVICT-9", f"a match in namespace {ns} found {m.device_len} tokens on "
                        f"device and {m.host_len} on host after a reset cleared the cache, "
                        "with nothing inserted in that namespace since")

    def after_step(self, ctx: Ctx) -> None:
        cleared, self.answer = self.answer, None
        if cleared is None:
            return
        if cleared and ctx.counters is not None:
            sizes = ctx.ledger.sizes
            for tier in Tier:
                free, cached = ctx.counters.get(f"available_{tier.value}"), ctx.counters.get(
                    f"cached_{tier.value}")
                if cached not in (None, 0) or free not in (None, sizes.get(tier, free)):
                    raise self.fail("EVICT-9", f"after a reset that cleared, the engine counts "
                                    f"{free} of {sizes.get(tier)} {tier} pages available and "
                                    f"{cached} cached")
        if Feature.KV_EVENTS not in ctx.engine.features:
            return
        kinds = [e.kind for e in ctx.events]
        if not cleared and kinds:
            raise self.fail("EVENT-9", f"a refused reset published {len(kinds)} events "
                            f"({kinds[0].value} first)")
        if cleared and EventKind.CLEARED not in kinds:
            raise self.fail("EVENT-9", "a reset that cleared the cache published no "
                            "AllBlocksCleared")
        if cleared and kinds[-1] is not EventKind.CLEARED:
            raise self.fail("EVENT-9", f"a reset published {kinds[-1].value} after its "
                            "AllBlocksCleared, with nothing cached")
