"""Retention oracles (EVICT-7, MAMBA-12): what the cache was handed stays until it is evicted.

The reuse obligations (TREE-1, MAMBA-10) are judged against what the cache holds, so an engine
that drops what it would owe on is owed nothing by them. These oracles keep the caller's own
account instead.

At the cache level (black-box) the kit counts every device page the cache took (a caller page
an insert kept, a page a loadback filled) and every page an eviction reported freed. A prefix
inserted is matched again in full on device until pages go; the owed pages a match finds gone
are never more than the evictions freed, and at rest, with everything evicted, the pages taken
are no more than the evictions freed and the unloads let go. An engine may also evict under
pressure inside a call that needs device pages (a loadback's destination, EVICT-7): with KV
events the device blocks it announces removed in a loadback's start count as freed; without them
the kit cannot count such an eviction, so after a loadback starts it stops raising for the rest
of the trace. Where the kit cannot tell (what an unload let go, a loaded page the caller
inserted meanwhile) each bound leans the engine's way: the account can miss a loss, never invent
one.

At the scheduler level (white-box) the snapshots show each cached Mamba state: one that leaves a
tier in a call while that tier's pool had free slots and handed none out went with no allocation
taking it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.protocol import Inserted, Match, match_scope
from kvconf.conformance.oracles.base import Ctx, Oracle
from kvconf.reference.kv_events import EventKind
from kvconf.reference.requests import State
from kvconf.reference.tiers import Tier


@dataclass(slots=True)
class _Page:
    """One page the cache owes on device: the step it was first cached at and the last step an
    insert or a loadback put it there again, and the pages owed below it."""

    step: int
    last: int
    kids: dict[tuple[int, ...], _Page] = field(default_factory=dict)


def _count(page: _Page) -> int:
    return 1 + sum(_count(k) for k in page.kids.values())


class RetentionOracle(Oracle):
    """EVICT-7, black-box: the kit's account of the device pages it had the cache take."""

    name = "retention"
    behaviours = ("EVICT-7",)
    # its after_step reads the step's events (evictions under pressure) as well as its acks
    after_acks_only = False

    def __init__(self) -> None:
        # The prefixes the device must still serve: namespace -> first pages -> pages below.
        self.owed: dict[int, dict[tuple[int, ...], _Page]] = {}
        self.taken: dict[int, int] = {}  # per namespace: device pages the cache took
        self.gone: dict[int, int] = {}  # per namespace: owed pages a match found gone
        self.total = 0  # device pages the cache took, all namespaces, unloaded ones too
        self.found = 0  # owed pages a match found gone, all namespaces
        self.unloaded = 0  # pages an unload may have let go (NS-2)
        self.freed = 0  # device pages the evictions reported freed
        # An eviction under pressure the kit could not count happened (a loadback started on an
        # engine without KV events): from then on nothing is raised (the account leans the
        # engine's way).
        self.blind = False

    def on_insert(self, ctx: Ctx, ns: int, tokens: Sequence[int], pages: Sequence[int],
                  r: Inserted) -> None:
        """Every page the caller allocated and handed over that did not come back free is
        cached now (POOL-1; kept beside the tree's copy, TREE-5, it is cached too)."""
        back = set(r.freed)
        held = ctx.ledger.held
        self._take(ns, sum(1 for pg in pages if pg in held and pg not in back))
        self._owe(ctx, ns, tokens)

    def after_step(self, ctx: Ctx) -> None:
        """A loadback that landed put its lock's whole prefix on device (HOST-3), its last
        pages (as many as it copied) fresh there: each is a page the cache took, save one the
        caller inserted while the copy was in flight (taken by that insert, the copy's page
        went back free).

        The engine's own evictions under pressure count as freed: a loadback's start is the one
        call of this level that needs device pages it may lack (an alloc never evicts, POOL-2),
        so the device blocks its KV events announce removed in that step were freed for it.
        A removal announced in any other call (an unlock, say) is no eviction. Without KV
        events a loadback's start may have evicted what the kit cannot count: the account goes
        blind."""
        if ctx.op == "loadback":
            if Feature.KV_EVENTS in ctx.engine.features:
                self.freed += sum(len(e.block_hashes) for e in ctx.events
                                  if e.kind is EventKind.REMOVED)
            else:
                self.blind = True
        for op, ok in ctx.acks:
            got = ctx.ledger.started.pop(op.op_id, None)
            if not ok or op.kind != "loadback" or got is None or got[0].detached:
                continue
            rec, start = got
            p = ctx.ledger.page_size
            pages, level, fresh = len(rec.tokens) // p, self.owed.get(rec.namespace, {}), 0
            for k in range(pages - len(op.pairs), pages):
                page = _find(level, rec.tokens, p, k)
                fresh += page is None or page.last < start
            self._take(rec.namespace, fresh)
            self._owe(ctx, rec.namespace, rec.tokens)

    def _take(self, ns: int, n: int) -> None:
        self.taken[ns] = self.taken.get(ns, 0) + n
        self.total += n

    def _owe(self, ctx: Ctx, ns: int, tokens: Sequence[int]) -> None:
        """The whole pages of ``tokens`` are on device now: the match must serve them."""
        p = ctx.ledger.page_size
        level = self.owed.setdefault(ns, {})
        for k in range(len(tokens) // p):
            key = tuple(tokens[k * p:(k + 1) * p])
            page = level.get(key)
            if page is None:
                page = level[key] = _Page(ctx.index, ctx.index)
            page.last = ctx.index
            level = page.kids

    def on_evict(self, ctx, tier, asked, freed, before, after) -> None:
        if tier is Tier.DEVICE and isinstance(freed, int) and freed > 0:
            self.freed += freed

    def unloaded_ns(self, ctx: Ctx, ns: int, freed: object) -> None:
        """Unloading drops the namespace by name (NS-2): nothing of it is owed any more. It may
        let go of no more pages than the namespace's the cache took and no match found gone,
        nor than it freed now (``freed``, both tiers) and its locks and copies still hold."""
        self.owed.pop(ns, None)
        p = ctx.ledger.page_size
        held = sum(len(r.pages) for r in ctx.ledger.live_locks()
                   if r.namespace == ns and r.tier is Tier.DEVICE)
        for op_id, (r, _) in list(ctx.ledger.started.items()):
            if r.namespace == ns:  # it lands, if at all, on the detached tree
                held += len(r.tokens) // p
                del ctx.ledger.started[op_id]
        now = freed if isinstance(freed, int) and freed > 0 else 0
        self.unloaded += max(0, min(self.taken.pop(ns, 0) - self.gone.pop(ns, 0), now + held))

    def on_reset(self, ctx: Ctx, cleared: bool, before, after) -> None:
        """A reset that cleared dropped every cached page lawfully (EVICT-9; it clears only with
        nothing in use, EVICT-8): nothing is owed any more, and the account starts again."""
        if cleared:
            self.__init__()

    def on_match(self, ctx: Ctx, ns: int, tokens: Sequence[int], m: Match) -> None:
        p = ctx.ledger.page_size
        scope = len(match_scope(ctx.engine, tokens)) // p
        level, depth = self.owed.get(ns), 0
        while level is not None and depth < scope:
            key = tuple(tokens[depth * p:(depth + 1) * p])
            page = level.get(key)
            if page is None:
                return
            if depth * p >= m.device_len:
                # Page ``depth`` and every page inserted below it are gone from the device.
                del level[key]
                lost = _count(page)
                self.gone[ns] = self.gone.get(ns, 0) + lost
                self.found += lost
                gone = self.found
                if gone > self.freed and not self.blind:
                    raise self.fail("EVICT-7", (
                        f"a match of {len(tokens)} tokens in namespace {ns} serves "
                        f"{m.device_len} of them from the device, but the page of tokens "
                        f"{depth * p}..{(depth + 1) * p - 1} was cached at step {page.step} and "
                        f"no eviction freed it: {gone} cached pages are gone and evictions "
                        f"freed {self.freed}; a cached page leaves only by an eviction"))
                return
            level, depth = page.kids, depth + 1

    def emptied(self, where: str) -> None:
        """At rest with everything evicted (the driver's drain): every page the cache took has
        gone, each by an eviction that counted it or with its namespace."""
        taken = self.total - self.unloaded
        if taken > self.freed and not self.blind:
            raise self.fail("EVICT-7", (
                f"{where}: the cache took {taken} device pages the kit handed it (beyond what "
                f"unloads let go), but evictions freed {self.freed}: {taken - self.freed} left "
                "without an eviction (or went back free unreported: an insert lists in `freed` "
                "every caller page it returns, TREE-5)"))


def _find(level: dict[tuple[int, ...], _Page], tokens: Sequence[int], p: int,
          k: int) -> _Page | None:
    """The owed page ``k`` of ``tokens`` (None where the kit owes no such prefix)."""
    page = None
    for i in range(k + 1):
        page = level.get(tuple(tokens[i * p:(i + 1) * p]))
        if page is None:
            return None
        level = page.kids
    return page


def _slot(entry, tier: Tier) -> int | None:
    """A Mamba entry's view's slot on ``tier`` (None for no entry)."""
    if entry is None:
        return None
    return entry.device if tier is Tier.DEVICE else entry.host


class MambaRetentionOracle(Oracle):
    """MAMBA-12, white-box: a cached state leaves a tier only when an allocation takes it.

    A snapshot shows no allocation that came and went within one call: a plan may take slots
    for a request it then fails to admit (evicting on the way) and give them back. So a plan
    in which a request waits to be admitted may have run a pool dry; any other call that lost
    a state while its pool had free slots, and handed none out, lost it without pressure."""

    name = "mamba-retention"
    behaviours = ("MAMBA-12",)
    conditional = ("MAMBA-12",)  # judged where a call changed the states and was compared
    needs = frozenset({Feature.MAMBA, Feature.SNAPSHOT})

    def check(self, before, after, where: str, phase: str = "") -> None:
        if before is None or before.mamba is None or after.mamba is None:
            return
        if before.mamba is after.mamba:
            return
        if phase == "plan" and any(v.state in _WAITING for v in before.requests):
            return  # slots may have been taken for an admission that failed, and given back
        self.mark("MAMBA-12")
        now = {(e.namespace, e.tokens): e for e in after.mamba.entries}
        for tier in (Tier.DEVICE, Tier.HOST):
            lost = [e for e in before.mamba.entries if _slot(e, tier) is not None
                    and _slot(now.get((e.namespace, e.tokens)), tier) is None]
            if not lost or not before.mamba.free[tier]:
                continue
            was, got = before.mamba.owners[tier], after.mamba.owners[tier]
            if any(_handed(w, o) for w, o in zip(was, got, strict=True)):
                continue  # slots were handed out: the pool may have run dry in the call
            e = lost[0]
            raise self.fail("MAMBA-12", (
                f"{where}: the {tier} state of depth {e.depth} of namespace {e.namespace} "
                f"(entry {e.id}) left the cache while {len(before.mamba.free[tier])} {tier} "
                "state slots were free and none was handed out: a cached state leaves only when "
                "an allocation takes its slot"))


# Requests a plan may admit, taking state slots for them (spec chapter requests).
_WAITING = frozenset({State.SUBMITTED, State.PREFETCHING, State.PREFETCH_DONE, State.RETRACTED})


def _handed(was: str, now: str) -> bool:
    """Whether a slot went to a new owner: not back to the free list, and not a request's own
    slot published as its entry's (MAMBA-7)."""
    return now != was and now != "free" and not (was.startswith("request:")
                                                 and now.startswith("entry:"))
