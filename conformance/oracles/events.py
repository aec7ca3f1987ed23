"""Event oracle (EVENT-1..EVENT-6, and EVICT-1 as the events show it): the published KV events
tell the device tier's true story."""

from __future__ import annotations

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.oracles.base import Ctx, Oracle
from kvconf.conformance.oracles.tree_view import TreeView
from kvconf.reference.kv_events import EventKind


class EventOracle(Oracle):
    name = "events"
    behaviours = ("EVENT-1", "EVENT-2", "EVENT-3", "EVENT-4", "EVENT-5", "EVENT-6", "EVICT-1")
    needs = frozenset({Feature.KV_EVENTS})

    def __init__(self) -> None:
        self.stored: dict[int, int] = {}  # hash -> namespace
        self.prefix: dict[int, tuple[int, ...]] = {}  # hash -> the tokens of its whole prefix
        self.served: list[tuple[int, tuple[int, ...]]] = []  # this step's device matches
        self.children: dict[int, list[int]] = {}  # hash -> hashes stored under it, in order

    def on_match(self, ctx: Ctx, ns: int, tokens, m) -> None:
        if m.device_len:
            self.served.append((ns, tuple(tokens[: m.device_len])))

    def after_step(self, ctx: Ctx) -> None:
        engine = ctx.engine
        removed: list[int] = []
        for ev in ctx.events:
            if ev.kind is EventKind.CLEARED:
                self.stored.clear()
                self.prefix.clear()
                self.children.clear()
                continue
            if ev.kind is EventKind.REMOVED:
                for h in ev.block_hashes:
                    if h not in self.stored:
                        raise self.fail("EVENT-2", f"BlockRemoved for {h:#x}, which is not stored")
                    del self.stored[h]
                    removed.append(h)
                continue
            parent = ev.parent_hash
            if parent is not None and parent not in self.stored:
                raise self.fail(
                    "EVENT-3", f"BlockStored {ev.block_hashes[0]:#x} names parent {parent:#x}, "
                    "which is not stored"
                )
            bs = ev.block_size
            if bs <= 0 or len(ev.tokens) != bs * len(ev.block_hashes):
                raise self.fail(
                    "EVENT-4", f"BlockStored carries {len(ev.tokens)} tokens for "
                    f"{len(ev.block_hashes)} blocks of {bs}"
                )
            for i, h in enumerate(ev.block_hashes):
                toks = ev.tokens[i * bs : (i + 1) * bs]
                if h in self.stored:
                    raise self.fail("EVENT-1", f"BlockStored for {h:#x}, which is already stored")
                want = engine.block_hash(parent, ev.namespace, toks)
                if h != want:
                    raise self.fail(
                        "EVENT-4",
                        f"block {i} of a BlockStored has hash {h:#x}; recomputed from its parent, "
                        f"namespace {ev.namespace} and tokens it is {want:#x}",
                    )
                whole = (self.prefix.get(parent, ()) if parent is not None else ()) + tuple(toks)
                if _chain(engine, ev.namespace + 1, whole, bs) == h:
                    raise self.fail(
                        "EVENT-5", f"hash {h:#x} of a {len(whole)}-token prefix is the same in "
                        f"namespaces {ev.namespace} and {ev.namespace + 1}"
                    )
                self.stored[h] = ev.namespace
                self.prefix[h] = whole
                if parent is not None:
                    self.children.setdefault(parent, []).append(h)
                parent = h
        for h in removed:
            # A step leaves no block stored under a removed one: only the ends of cached
            # prefixes are evicted (EVICT-1), and what the events call stored is a tree (EVENT-6).
            if h in self.stored:  # stored again later in the step
                continue
            below = [c for c in self.children.pop(h, ()) if c in self.stored]
            if below:
                raise self.fail(
                    "EVICT-1" if ctx.op in ("evict", "drain") else "EVENT-6",
                    f"BlockRemoved for {h:#x} while {below[0]:#x}, stored under it, stays stored",
                )
        served, self.served = self.served, []
        for ns, tokens in served:
            p = ctx.ledger.page_size
            # Black-box EVENT-6: every block a match serves from the device tier is one the
            # events say is stored there (its hash recomputed along the served prefix).
            h = None
            for i in range(0, len(tokens), p):
                h = engine.block_hash(h, ns, tokens[i : i + p])
                if h not in self.stored:
                    raise self.fail(
                        "EVENT-6", f"a match in namespace {ns} serves the {i + p}-token prefix "
                        f"from the device tier, but its block hash {h:#x} is not stored by the "
                        "events published so far",
                    )
        if ctx.after is not None:
            held = TreeView(ctx.after).device_hashes()
            stored = set(self.stored)
            if held != stored:
                missing = sorted(held - stored)[:3]
                stale = sorted(stored - held)[:3]
                raise self.fail(
                    "EVENT-6",
                    f"stored hashes differ from the device tier: held but never announced "
                    f"{[hex(h) for h in missing]}, announced but gone {[hex(h) for h in stale]}",
                )


def _chain(engine, namespace: int, tokens: tuple[int, ...], block_size: int) -> int | None:
    """The hash of the last block of ``tokens`` as a prefix of ``namespace``, chained from its
    root: the namespace may enter every block or only the first (EVENT-5 compares prefixes)."""
    h = None
    for i in range(0, len(tokens), block_size):
        h = engine.block_hash(h, namespace, tokens[i : i + block_size])
    return h
