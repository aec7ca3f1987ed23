"""Event oracle (EVENT-1..EVENT-6, and EVICT-1 as the events show it): the published KV events
tell the device tier's true story. The event-by-event checks are ``event_stream.StoredBlocks``,
which the scheduler level runs too."""

from __future__ import annotations

from operator import attrgetter

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.oracles.base import Ctx, Oracle
from kvconf.conformance.oracles.event_stream import StoredBlocks
from kvconf.conformance.oracles.tree_view import same_fields
from kvconf.reference.snapshot import CacheSnapshot

# What the drift check reads of a node (``TreeView.device_hashes``).
_STORED = attrgetter("id", "parent", "device", "hashes")


class EventOracle(Oracle):
    name = "events"
    behaviours = ("EVENT-1", "EVENT-2", "EVENT-3", "EVENT-4", "EVENT-5", "EVENT-6", "EVICT-1")
    needs = frozenset({Feature.KV_EVENTS})

    def __init__(self) -> None:
        self.blocks: StoredBlocks | None = None  # made at the first step: it needs the engine
        self.served: list[tuple[int, tuple[int, ...]]] = []  # this step's device matches
        self.passed: tuple | None = None  # the snapshot's nodes and roots last without drift

    def _blocks(self, ctx: Ctx) -> StoredBlocks:
        if self.blocks is None:
            self.blocks = StoredBlocks(self, ctx.engine.block_hash)
        return self.blocks

    def on_match(self, ctx: Ctx, ns: int, tokens, m) -> None:
        self._blocks(ctx).use(ns)
        if m.device_len:
            self.served.append((ns, tuple(tokens[: m.device_len])))

    def on_insert(self, ctx: Ctx, ns: int, tokens, pages, r) -> None:
        self._blocks(ctx).use(ns)

    def after_step(self, ctx: Ctx) -> None:
        blocks = self._blocks(ctx)
        # No event: nothing to apply, nothing removed (``take`` and ``orphaned`` of none).
        orphan = blocks.orphaned(blocks.take(ctx.events)) if ctx.events else None
        if orphan is not None:
            h, below = orphan
            raise self.fail(
                "EVICT-1" if ctx.op in ("evict", "drain") else "EVENT-6",
                f"BlockRemoved for {h:#x} while {below:#x}, stored under it, stays stored",
            )
        served, self.served = self.served, []
        for ns, tokens in served:
            p = ctx.ledger.page_size
            # Black-box EVENT-6: every block a match serves from the device tier is one the
            # events say is stored there (its hash recomputed along the served prefix).
            h = None
            for i in range(0, len(tokens), p):
                h = (blocks.chain(ns, tokens[: i + p], p) if i + p <= len(tokens)  # memoized
                     else ctx.engine.block_hash(h, ns, tokens[i:]))
                if h not in blocks.stored:
                    raise self.fail(
                        "EVENT-6", f"a match in namespace {ns} serves the {i + p}-token prefix "
                        f"from the device tier, but its block hash {h:#x} is not stored by the "
                        "events published so far",
                    )
        snap = ctx.after
        if not isinstance(snap, CacheSnapshot):  # a block view is block-pool's (POOL-7)
            return
        last = self.passed
        if (self.incremental and not ctx.events and last is not None and snap.roots == last[1]
                and same_fields(snap.nodes, last[0], _STORED)):
            return  # no event and the same device tier as when the stored hashes matched it
        drift = blocks.drift(snap)
        if drift is not None:
            raise self.fail("EVENT-6", drift)
        self.passed = (snap.nodes, snap.roots)
