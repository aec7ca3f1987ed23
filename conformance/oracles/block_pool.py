"""Block-pool oracle: the white-box rules read through a hash-keyed cache's view (POOL-7).

The tree oracles (ownership, eviction, the white-box parts of matching and pinning) read a tree
of nodes; a hash-keyed cache has none, and the spec says how its own state stands for the
tree's (pools chapter, "A hash-keyed cache"). This oracle judges that state:

- owners and conservation (POOL-1, POOL-4): a block is in the free queue with no holder, or
  held; a cached block is in the map under each of its hashes and nowhere else; what holds a
  block that no table lists is the caller's, exactly the pages the caller holds;
- counts (PIN-1): a block's reference count is the tables holding it plus the caller, and the
  tables are the caller's live locks, each holding the pages its match returned (PIN-2: still
  cached under the locked prefix);
- the chain closed under prefixes (EVICT-1, EVICT-6): every cached hash's parent is cached;
- matches (TREE-1, TREE-4): the longest cached chain of the query as it stood, served from
  blocks cached under it, and nothing cached changes;
- inserts (TREE-5): the inserted prefix is cached after;
- evictions (EVICT-1, EVICT-2, EVICT-4, EVICT-6, PIN-2): victims hold no reference, are the
  head of the engine's own eviction order (its free queue's cached blocks), and are exactly
  as many as asked while candidates last;
- events (EVENT-6): the hashes the events leave stored are the map's;
- at rest (POOL-5): no table, every block free; with everything evicted, nothing cached.

What a tree has and such a cache legitimately lacks is not judged: one node per prefix (the map
may list a hash's duplicate, TREE-5), node splits (TREE-4's and TREE-6's nodes), per-node access
times and sequence numbers (EVICT-3; the free queue is the order), a root per namespace.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from kvconf.conformance.engine.block_snapshot import BlockSnapshot
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.protocol import Inserted, Match, match_scope
from kvconf.conformance.oracles.base import Ctx, Oracle
from kvconf.reference.kv_events import EventKind
from kvconf.reference.tiers import Tier


def _blocks(snap: object) -> BlockSnapshot | None:
    return snap if isinstance(snap, BlockSnapshot) else None


class BlockPoolOracle(Oracle):
    name = "block-pool"
    behaviours = ("POOL-1", "POOL-4", "POOL-5", "POOL-7", "PIN-1", "PIN-2", "TREE-1", "TREE-4",
                  "TREE-5", "EVICT-1", "EVICT-2", "EVICT-4", "EVICT-6", "EVENT-6")
    needs = frozenset({Feature.BLOCK_SNAPSHOT})

    def __init__(self) -> None:
        self.stored: set[int] = set()  # the hashes the events leave stored
        self.pending: tuple[int, tuple[int, ...], Match] | None = None  # this step's match
        self.inserted: list[tuple[int, tuple[int, ...]]] = []
        self.emptied = False  # the drain evicted everything

    # ----------------------------------------------------------------- hooks
    def on_match(self, ctx: Ctx, ns: int, tokens: Sequence[int], m: Match) -> None:
        before = _blocks(ctx.before)
        if before is not None and ctx.op in ("match", "extend"):
            scope = match_scope(ctx.engine, tokens)
            chain = before.chain(ns, scope)
            want = len(chain) * before.page_size
            if m.device_len != want:
                raise self.fail("TREE-1", f"device match returned {m.device_len} tokens, the "
                                f"block map held {want} of the query")
            for i, (pg, h) in enumerate(zip(m.device_pages, chain, strict=False)):
                if pg not in before.cached[h]:
                    raise self.fail("TREE-1", f"page {i} of the match is block {pg}, which is "
                                    f"not cached under the prefix's hash {h:#x} (blocks "
                                    f"{list(before.cached[h])})")
        if ctx.op == "match":
            self.pending = (ns, tuple(tokens), m)

    def on_insert(self, ctx: Ctx, ns: int, tokens: Sequence[int], pages: Sequence[int],
                  r: Inserted) -> None:
        self.inserted.append((ns, tuple(tokens)))

    def on_evict(self, ctx, tier, asked, freed, before, after) -> None:
        before, after = _blocks(before), _blocks(after)
        if before is None or after is None or tier is not Tier.DEVICE:
            return
        if ctx.op == "drain":
            self.emptied = True
        lost = [b.id for b in before.blocks
                if b.hashes and set(b.hashes) - set(after.blocks[b.id].hashes)]
        pinned = [i for i in lost if before.blocks[i].ref]
        if pinned:
            raise self.fail(("EVICT-1", "PIN-2"), f"blocks {pinned} were evicted while held "
                            f"(reference counts {[before.blocks[i].ref for i in pinned]})")
        order = [i for i in before.free if before.blocks[i].hashes]
        want = order[: min(asked, len(order))]
        if sorted(lost) != sorted(want):
            if len(lost) != len(want):
                raise self.fail(("EVICT-4", "EVICT-6"), f"asked to evict {asked} pages with "
                                f"{len(order)} evictable, the engine evicted blocks {lost}")
            raise self.fail("EVICT-2", f"evicted blocks {sorted(lost)}, not the head of the "
                            f"engine's own eviction order (its free queue's cached blocks "
                            f"{order[:len(want) + 2]})")
        if freed != len(lost):
            raise self.fail("EVICT-4", f"reported {freed} pages freed, {len(lost)} blocks were "
                            "evicted")

    def after_step(self, ctx: Ctx) -> None:
        pending, self.pending = self.pending, None
        inserted, self.inserted = self.inserted, []
        snap = _blocks(ctx.after)
        if snap is None:
            return
        self._events(ctx)
        index = snap.children()
        self.judge(ctx, snap, index)
        if pending is not None and ctx.before is not None:
            self._unchanged(_blocks(ctx.before), _blocks(ctx.mid) or snap)
        for ns, tokens in inserted:
            got = len(snap.chain(ns, tokens, index)) * snap.page_size
            if got != len(tokens):
                raise self.fail("TREE-5", f"after inserting {len(tokens)} tokens in namespace "
                                f"{ns} the block map holds {got} of them")
        if ctx.op == "drain":
            self._rest(ctx, snap)

    # ----------------------------------------------------------------- checks
    def judge(self, ctx: Ctx, snap: BlockSnapshot, index: dict) -> None:
        """Owners, conservation, counts, tables and the chain, raising at the first broken."""
        size = len(snap.blocks)
        if any(b.id != i for i, b in enumerate(snap.blocks)):
            raise self.fail("POOL-7", "the view lists blocks out of order")
        free = set(snap.free)
        if len(free) != len(snap.free):
            twice = sorted(b for b, k in Counter(snap.free).items() if k > 1)
            raise self.fail("POOL-1", f"the free queue lists blocks {twice} twice")
        reserved = set(snap.reserved)
        held: Counter[int] = Counter()
        for t in snap.tables:
            held.update(pg for pg in t.pages if pg not in reserved)
        caller = ctx.ledger.held
        for b in snap.blocks:
            if b.id in reserved:
                if b.id in free or b.hashes:
                    raise self.fail("POOL-1", f"reserved block {b.id} is free or cached")
                continue
            if b.id in free:
                if b.ref or held[b.id] or b.id in caller:
                    who = "the caller" if b.id in caller else f"{held[b.id]} block tables"
                    raise self.fail("POOL-1", f"block {b.id} is in the free queue and held by "
                                    f"{who} (reference count {b.ref})")
                continue
            if b.ref == 0:
                raise self.fail("POOL-4", f"block {b.id} is held by nobody but not in the free "
                                "queue: lost")
            own = b.ref - held[b.id]
            if own != (1 if b.id in caller else 0):
                raise self.fail("PIN-1", f"block {b.id} has reference count {b.ref} with "
                                f"{held[b.id]} block tables holding it"
                                + (" and the caller" if b.id in caller else ""))
            if b.id in caller and b.hashes:
                raise self.fail("POOL-1", f"block {b.id}, the caller's, is cached under "
                                f"{[hex(h) for h in b.hashes]}")
        for pg in caller:
            if not 0 <= pg < size or pg in free or pg in reserved:
                raise self.fail("POOL-4", f"the caller holds block {pg}, which the pool gave "
                                "away")
        for h, ids in snap.cached.items():
            if not ids:
                raise self.fail("POOL-7", f"hash {h:#x} is in the map with no block")
            for i in ids:
                if not 0 <= i < size or h not in snap.blocks[i].hashes:
                    raise self.fail("POOL-4", f"the map lists block {i} under {h:#x}, which "
                                    "the block does not carry")
        for b in snap.blocks:
            for h in b.hashes:
                if b.id not in snap.cached.get(h, ()):
                    raise self.fail("POOL-4", f"block {b.id} carries hash {h:#x} but the map "
                                    "does not list it there")
        for h in snap.cached:
            link = snap.links.get(h)
            if link is None:
                raise self.fail("POOL-7", f"cached hash {h:#x} stands for no known prefix")
            if link.parent is not None and link.parent not in snap.cached:
                raise self.fail(("EVICT-1", "EVICT-6"), f"hash {h:#x} is cached, its parent "
                                f"{link.parent:#x} is not: a prefix with a hole")
        self._locks(ctx, snap, index)

    def _locks(self, ctx: Ctx, snap: BlockSnapshot, index: dict) -> None:
        """The tables are the caller's live locks that hold pages, each on its pages (PIN-1),
        and those pages are still cached under the locked prefix (PIN-2)."""
        mine = {rec.handle: rec for rec in ctx.ledger.live_locks()
                if rec.tier is Tier.DEVICE and rec.pages}
        seen = set()
        for t in snap.tables:
            if not t.pages:
                continue  # an empty table pins nothing
            rec = mine.get(t.handle)
            if rec is None or t.handle in seen:
                raise self.fail("PIN-1", f"the engine holds a block table {list(t.pages)} for "
                                f"{t.handle!r}, which is no lock the caller holds")
            seen.add(t.handle)
            if t.pages != rec.pages:
                raise self.fail("PIN-1", f"the lock taken at step {rec.step} holds blocks "
                                f"{list(t.pages)}, its match returned {list(rec.pages)}")
            chain = snap.chain(rec.namespace, rec.tokens, index)
            for i, pg in enumerate(rec.pages):
                if i >= len(chain) or pg not in snap.cached[chain[i]]:
                    raise self.fail("PIN-2", f"block {pg} of the prefix locked at step "
                                    f"{rec.step} is no longer cached under it")
        missing = sorted(rec.step for h, rec in mine.items() if h not in seen)
        if missing:
            raise self.fail("PIN-1", f"the locks taken at steps {missing} hold no block table")

    def _unchanged(self, before: BlockSnapshot | None, matched: BlockSnapshot | None) -> None:
        """TREE-4: a match changes no cached block: the map, and each cached block's count."""
        if before is None or matched is None:
            return
        if before.cached != matched.cached or any(
                a.ref != b.ref for a, b in zip(before.blocks, matched.blocks, strict=True)
                if a.hashes):
            raise self.fail("TREE-4", "a match changed cached blocks or their counts")

    def _events(self, ctx: Ctx) -> None:
        """EVENT-6: what the events leave stored is what the map holds."""
        if Feature.KV_EVENTS not in ctx.engine.features:
            return
        for e in ctx.events:
            if e.kind is EventKind.STORED:
                self.stored.update(e.block_hashes)
            elif e.kind is EventKind.REMOVED:
                self.stored.difference_update(e.block_hashes)
            else:
                self.stored.clear()
        snap = _blocks(ctx.after)
        assert snap is not None
        if self.stored != snap.cached.keys():
            missing = sorted(snap.cached.keys() - self.stored)[:3]
            stale = sorted(self.stored - snap.cached.keys())[:3]
            raise self.fail("EVENT-6", f"stored hashes differ from the block map: cached but "
                            f"never announced {[hex(h) for h in missing]}, announced but gone "
                            f"{[hex(h) for h in stale]}")

    def _rest(self, ctx: Ctx, snap: BlockSnapshot) -> None:
        """POOL-5: at rest no table is left and every block is free; evicted, none cached."""
        left = [t for t in snap.tables if t.pages]
        if left:
            raise self.fail("POOL-5", f"at rest the engine still holds {len(left)} block "
                            f"tables (the first holds blocks {list(left[0].pages)})")
        out = [b.id for b in snap.blocks if b.id not in snap.reserved and b.id not in snap.free]
        if out and not ctx.ledger.held:
            raise self.fail("POOL-5", f"at rest blocks {out[:5]} are not in the free queue: "
                            "leaked")
        if self.emptied and snap.cached:
            raise self.fail("POOL-5", f"with nothing held and everything evicted, "
                            f"{len(snap.cached)} hashes are still cached")
