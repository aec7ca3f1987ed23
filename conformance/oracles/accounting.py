"""Accounting oracles: the copies in flight (HOST-10), the rest state (POOL-5) and the engine's
own counters (POOL-6).

Conservation (POOL-4) counts a page held by the caller, by a pin or by an in-flight transfer as
owned. These oracles check that such owners are real: every copy the engine lists is one the
caller (or the runtime) holds and has not acknowledged, at rest nothing is held by anyone, and
the counts the engine decides with are those of its state. Each check reads what the level
offers: a snapshot where there is one, ``counters()`` where the engine declares them, and
otherwise only what the kit itself observed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat
from operator import attrgetter, is_
from typing import Any

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.oracles.base import Ctx, Oracle
from kvconf.conformance.oracles.tree_view import same_fields
from kvconf.reference.requests import State
from kvconf.reference.snapshot import CacheSnapshot
from kvconf.reference.tiers import Tier

# The counters an engine may report (POOL-6), by level; an engine reports those it keeps.
CACHE_COUNTERS = frozenset(f"{kind}_{tier.value}" for kind in ("available", "cached", "evictable")
                           for tier in Tier)
SCHED_COUNTERS = CACHE_COUNTERS | {"free_slots"}
# The hit statistics an engine may add at the cache level (POOL-8, ``HitRateOracle``).
HIT_COUNTERS = frozenset({"hit_tokens", "query_tokens"})
_CACHE_KNOWN = CACHE_COUNTERS | HIT_COUNTERS


def _cached(owner: str) -> bool:
    return owner.startswith("node:")


# Each tier's counter names (POOL-6), spelled once.
_NAMES = {tier: tuple(f"{kind}_{tier.value}" for kind in ("available", "cached", "evictable"))
          for tier in Tier}


def snapshot_counts(snap: CacheSnapshot) -> dict[str, int]:
    """What a cache snapshot shows, by counter name: the pools' free lists and owner records,
    and the pages of the nodes no lock pins (a node's count covers locks at or below it)."""
    out: dict[str, int] = {}
    evictable = _unpinned(snap.nodes)
    for tier, pool in snap.pools.items():
        available, cached, unpinned = _NAMES[tier]
        out[available] = len(pool.free)
        out[cached] = _in_tree(pool)
        out[unpinned] = evictable[tier]
    return out


def _unpinned(nodes: Iterable[Any]) -> dict[Tier, int]:
    """Each tier's pages of the nodes (roots aside) that no lock pins."""
    evictable = {Tier.DEVICE: 0, Tier.HOST: 0}
    for n in nodes:
        if n.parent is None:
            continue
        if n.device is not None and not n.device_ref:
            evictable[Tier.DEVICE] += len(n.device)
        if n.host is not None and not n.host_ref:
            evictable[Tier.HOST] += len(n.host)
    return evictable


def _in_tree(pool: Any) -> int:
    """A pool's pages that a node owns (one pass in C)."""
    return sum(map(str.startswith, pool.owners, repeat("node:")))


# What ``_unpinned`` reads of a node.
_COUNTED = attrgetter("parent", "device", "host", "device_ref", "host_ref")


def _any_transfer(owners: Sequence[str]) -> bool:
    """Whether any owner may be a copy in flight (most steps have none): the owners joined by
    NUL hold NUL + "transfer:" wherever an owner starts so, so False is exact; a True the
    caller's scan of each owner then settles (an owner holding that inside would pass here).
    Two passes in C, a few times faster than testing each owner."""
    try:
        return "\x00transfer:" in "\x00".join(("", *owners))
    except TypeError:  # not all strings: each tested, as before
        return any(map(str.startswith, owners, repeat("transfer:")))


def _ids(items: Iterable[Any]) -> str:
    return ", ".join(str(i) for i in sorted(items, key=str))


def _plain_counts(counts: dict[str, int], shown: Mapping[str, int] | None,
                  known: frozenset[str]) -> bool:
    """Whether every count is an int of at least 0 under a name in ``known``, equal to the
    state's (``shown``) where the state shows it: what both levels' ``_fine`` test first."""
    for k, v in counts.items():
        if type(v) is not int or v < 0 or k not in known:
            return False
        if shown is not None and k in shown and shown[k] != v:
            return False
    return True


def _fine_sched(counts: dict[str, int], shown: Mapping[str, int] | None, free: Any,
                sizes: Mapping[Tier, int], slots: int) -> bool:
    """Whether every check of ``CounterOracle.check_sched`` holds, decided in one pass without
    building a message; False whenever it would raise (the verdict then is always the full
    check's)."""
    if not _plain_counts(counts, shown, SCHED_COUNTERS):
        return False
    if free is not None and "free_slots" in counts and counts["free_slots"] != len(free):
        return False
    if counts.get("free_slots", 0) > slots:
        return False
    get = counts.get
    for tier, size in sizes.items():
        names = _NAMES[tier]
        a, c, e = get(names[0]), get(names[1]), get(names[2])
        if c is None:
            if a is not None and a > size:
                return False
        elif c > size or (a is not None and a + c > size) or (e is not None and e > c):
            return False
    return True


class CounterOracle(Oracle):
    """POOL-6: the counts ``counters()`` reports equal the engine's state after every call."""

    name = "counters"
    behaviours = ("POOL-6",)
    needs = frozenset({Feature.COUNTERS})

    def __init__(self) -> None:
        self.shown: tuple | None = None  # (nodes, pools, their counts) of the last snapshot
        self.passed: tuple | None = None  # the counts and state of the last step that held
        # Parts of the last counts, each with what it was read from (``_shown``): the
        # nodes and their unpinned pages; by tier, the pool and its free and cached pages.
        self.unpinned: tuple | None = None
        self.pooled: dict[Tier, tuple] = {}
        # The scheduler level's last counts that held, with what they were judged against.
        self.fine: tuple | None = None

    def _shown(self, snap: CacheSnapshot) -> dict[str, int]:
        """``snapshot_counts`` of ``snap``, each part kept while what it reads is the same: a
        pool's counts while it is the same object, the unpinned pages while the nodes show the
        same pages and pins (``_COUNTED``; a match changes only access times)."""
        if not self.incremental:
            return snapshot_counts(snap)
        last = self.shown
        if last is not None and last[0] is snap.nodes and last[1] is snap.pools:
            return last[2]
        kept = self.unpinned
        if kept is None or not same_fields(snap.nodes, kept[0], _COUNTED):
            kept = (snap.nodes, _unpinned(snap.nodes))
        self.unpinned = (snap.nodes, kept[1])  # the newest nodes: more views alike next time
        out: dict[str, int] = {}
        for tier, pool in snap.pools.items():
            part = self.pooled.get(tier)
            if part is None or part[0] is not pool:
                part = self.pooled[tier] = (pool, len(pool.free), _in_tree(pool))
            available, cached, unpinned = _NAMES[tier]
            out[available], out[cached], out[unpinned] = part[1], part[2], kept[1][tier]
        self.shown = (snap.nodes, snap.pools, out)
        return out

    def names(self, counts: Any, known: frozenset[str], where: str) -> dict[str, int]:
        """The reported mapping, checked for shape: known names, non-negative ints."""
        if not isinstance(counts, Mapping):
            raise self.fail("POOL-6", f"{where}: counters() returned "
                            f"{type(counts).__name__}, not a mapping of names to counts")
        out: dict[str, int] = {}
        for k, v in counts.items():
            if k not in known:
                raise self.fail("POOL-6", f"{where}: counters() reports {k!r}, which is none of "
                                f"the counters of this level ({_ids(known)})")
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise self.fail("POOL-6", f"{where}: counter {k} is {v!r}, not a count")
            out[k] = v
        return out

    def agree(self, counts: Mapping[str, int], want: Mapping[str, int], where: str,
              seen: str = "its snapshot shows") -> None:
        for k in sorted(counts):
            if k in want and counts[k] != want[k]:
                raise self.fail("POOL-6", f"{where}: the engine counts {k} = {counts[k]}, "
                                f"{seen} {want[k]}")

    def bounded(self, counts: Mapping[str, int], sizes: Mapping[Tier, int], where: str) -> None:
        """What holds whatever else holds pages: nothing over the pool, evictable within
        cached."""
        for tier, size in sizes.items():
            t = tier.value
            a, c, e = (counts.get(k) for k in _NAMES[tier])
            if a is not None and c is not None and a + c > size:
                raise self.fail("POOL-6", f"{where}: {a} available and {c} cached {t} pages "
                                f"exceed the pool of {size}")
            for n, what in ((a, "available"), (c, "cached")):
                if n is not None and n > size:
                    raise self.fail("POOL-6", f"{where}: {n} {what} {t} pages in a pool of "
                                    f"{size}")
            if e is not None and c is not None and e > c:
                raise self.fail("POOL-6", f"{where}: {e} evictable {t} pages but only {c} "
                                "cached")

    def after_step(self, ctx: Ctx) -> None:
        """Cache level: against the snapshot where there is one, and always against what the
        caller knows: free, cached, held by the caller and by the copies in flight add up."""
        counters = ctx.counters
        if counters is None:
            return
        led = ctx.ledger
        shown = self._shown(ctx.after) if isinstance(ctx.after, CacheSnapshot) else None
        flat = type(counters) is dict
        # By type too: True is not a count (a step that held had every count an int).
        types = tuple(map(type, counters.values())) if flat else None
        moving = (tuple((op.kind, len(op.pairs)) for op in led.transfers.values())
                  if led.transfers else ())
        last = self.passed
        if (self.incremental and flat and last is not None and last[0] == counters
                and last[1] == types and last[2] == shown and last[3] == len(led.held)
                and last[4] == moving):
            return  # the same counts against the same state as at a step where they held
        if not (self.incremental and flat and _fine(
                counters, shown, led, Feature.STREAM_ORDERED_LOADBACK in ctx.engine.features)):
            self._judge(ctx, shown)
        # A copy: the engine may change the mapping it handed out.
        self.passed = (dict(counters), types, shown, len(led.held), moving) if flat else None

    def _judge(self, ctx: Ctx, shown: Mapping[str, int] | None) -> None:
        where = f"after step {ctx.index} ({ctx.op})"
        counts = self.names(ctx.counters, _CACHE_KNOWN, where)
        if shown is not None:
            self.agree(counts, shown, where)
        led = ctx.ledger
        self.bounded(counts, led.sizes, where)
        landing = {Tier.DEVICE: 0, Tier.HOST: 0}
        # A stream-ordered loadback's destinations are cached already (HOST-11).
        early = Feature.STREAM_ORDERED_LOADBACK in ctx.engine.features
        for op in (*led.transfers.values(), *led.stranded.values()):
            if early and op.kind == "loadback":
                continue
            landing[Tier.HOST if op.kind == "writeback" else Tier.DEVICE] += len(op.pairs)
        for tier, size in led.sizes.items():
            a, c = counts.get(f"available_{tier.value}"), counts.get(f"cached_{tier.value}")
            if a is None or c is None:
                continue
            held = len(led.held) if tier is Tier.DEVICE else 0
            if a + c + held + landing[tier] != size:
                raise self.fail("POOL-6", f"{where}: {a} available and {c} cached {tier} pages, "
                                f"{held} the caller holds and {landing[tier]} the copies in flight "
                                f"fill add up to {a + c + held + landing[tier]}, not the pool's "
                                f"{size}")

    def check_sched(self, counts: Any, snap: Any, sizes: Mapping[Tier, int], slots: int,
                    where: str) -> dict[str, int]:
        """Scheduler level: against the snapshot where there is one; bounded otherwise (the
        runtime cannot tell a request's pages from the tree's). Returns the counts."""
        cache = getattr(snap, "cache", None)
        shown = self._shown(cache) if isinstance(cache, CacheSnapshot) else None
        free = getattr(snap, "free_slots", None) if shown is not None else None
        if self.incremental and type(counts) is dict:
            # The same counts (all ints, as there) against the very parts of the last counts
            # that held: ``_fine_sched`` reads nothing else, so it holds again.
            now = (shown, None if free is None else len(free), sizes, slots)
            last = self.fine
            if (last is not None and counts == last[0] and now[0] is last[1][0]
                    and now[1:] == last[1][1:]
                    and all(type(v) is int for v in counts.values())):
                return dict(counts)
            if _fine_sched(counts, shown, free, sizes, slots):
                self.fine = (dict(counts), now)
                return dict(counts)  # every check below holds: no message to build
        out = self.names(counts, SCHED_COUNTERS, where)
        if shown is not None:
            want = dict(shown)
            if free is not None:
                want["free_slots"] = len(free)
            self.agree(out, want, where)
        self.bounded(out, sizes, where)
        if out.get("free_slots", 0) > slots:
            raise self.fail("POOL-6", f"{where}: {out['free_slots']} free request slots in a "
                            f"pool of {slots}")
        return out


def _fine(counts: dict[str, int], shown: Mapping[str, int] | None, led,
          early: bool = False) -> bool:
    """Whether every check of ``CounterOracle._judge`` holds, decided without building a
    message; False whenever ``_judge`` would raise (it may be False where ``_judge`` finds
    nothing: the verdict is always ``_judge``'s). ``early``: the engine's loadbacks are
    stream-ordered (HOST-11), their destinations cached already, not landing."""
    if not _plain_counts(counts, shown, _CACHE_KNOWN):
        return False
    landing = {Tier.DEVICE: 0, Tier.HOST: 0}
    for op in (*led.transfers.values(), *led.stranded.values()):
        if early and op.kind == "loadback":
            continue  # as ``_judge``: counted among the cached pages
        landing[Tier.HOST if op.kind == "writeback" else Tier.DEVICE] += len(op.pairs)
    get = counts.get
    for tier, size in led.sizes.items():
        names = _NAMES[tier]
        a, c, e = get(names[0]), get(names[1]), get(names[2])
        if (a is not None and a > size) or (c is not None and c > size):
            return False
        if a is not None and c is not None and (
                a + c > size or a + c + (len(led.held) if tier is Tier.DEVICE else 0)
                + landing[tier] != size):
            return False
        if e is not None and c is not None and e > c:
            return False
    return True


class TransferOracle(Oracle):
    """HOST-10: the copies the engine lists in flight are those the caller holds unacknowledged.
    White-box: it compares the snapshot's transfers with the caller's own record."""

    name = "transfers"
    behaviours = ("HOST-10",)
    needs = frozenset({Feature.SNAPSHOT})

    def __init__(self) -> None:
        self.acked: dict[Any, str] = {}  # op id -> when its acknowledgement was sent
        self.passed: tuple | None = None  # what the last scheduler-level check that held read
        # Per pool (pages or state slots, tier): the last owner tuple seen holding no transfer.
        self.clean: dict[tuple[str, Tier], tuple[str, ...]] = {}
        # The last pools and Mamba view (the very objects) found with no page or slot owned by
        # a transfer (``_leaks``).
        self.no_transfer: tuple[Any, Any] | None = None

    def _gone(self, what: str, op_id: Any, where: str) -> str:
        when = self.acked.get(op_id)
        how = (f"which was acknowledged {when}" if when is not None
               else "which was never handed out")
        return f"{where}: the engine still lists {what} {op_id} in flight, {how}"

    def after_step(self, ctx: Ctx) -> None:
        """Cache level: the snapshot's transfers against the caller's ledger."""
        for op, _ok in ctx.acks:
            self.acked[op.op_id] = f"at step {ctx.index}"
        snap = ctx.after
        if snap is None:
            return
        if not (snap.transfers or snap.l3 or ctx.ledger.transfers or ctx.ledger.stranded):
            return  # no copy in flight on either side
        mine = {op.op_id: ref for ref, op in ctx.ledger.transfers.items()}
        mine.update((op_id, "a failed copy never acknowledged (HOST-9)")
                    for op_id in ctx.ledger.stranded)
        shown = {t.op_id: t.kind for t in snap.transfers}
        if not snap.l3 and shown.keys() == mine.keys():
            return  # the same copies on both sides: nothing below can fail
        where = f"after step {ctx.index} ({ctx.op})"
        for op_id in sorted(shown.keys() - mine.keys(), key=str):
            raise self.fail("HOST-10", self._gone(shown[op_id], op_id, where) + "; its pages "
                            "belong to a copy nobody will acknowledge")
        for op_id in sorted(mine.keys() - shown.keys(), key=str):
            raise self.fail("HOST-10", f"{where}: the transfer {op_id} started at step "
                            f"{mine[op_id]} is not acknowledged, but the engine no longer lists "
                            "it in flight")
        if snap.l3:
            raise self.fail("HOST-10", f"{where}: the engine lists L3 transfers "
                            f"{_ids(t.op_id for t in snap.l3)}, which nobody started")

    def check_sched(self, snap: Any, held: Mapping[str, Mapping[Any, str]],
                    landing: Iterable[Any], where: str, between: bool = False) -> None:
        """Scheduler level. ``held``: by kind ("writeback", "loadback", "l3"), the copies the
        runtime was handed and has not acknowledged; ``landing``: this plan's loadbacks, which
        an engine whose loadbacks are not acknowledged may list until the advance.
        ``between``: after an advance or a submit, where a copy the engine started for its next
        plan (a backup of a writeback just acknowledged) is not handed out yet; one already
        acknowledged must be gone all the same, and the next plan must hand out the rest."""
        cache = getattr(snap, "cache", None)
        if not isinstance(cache, CacheSnapshot):
            return
        writes, loads, l3 = held["writeback"], held["loadback"], held["l3"]
        landing = tuple(landing)
        if not (writes or loads or l3 or landing or cache.transfers or cache.l3
                or getattr(snap, "ops", None) or getattr(snap, "l3_ops", None)):
            # No copy in flight on either side: only a page or state slot still owned by a
            # transfer (a leak) can break HOST-10; the rest of the check compares empty sets.
            self._leaks(snap, cache, set(), set(), where)
            return
        # Everything the check reads: the cache's parts and the Mamba pools by identity (an
        # unchanged part of a snapshot is the last one's object), the scheduler's short lists
        # of copies and the runtime's record by value. The same as at the last check that
        # held, it holds again.
        parts = (cache.transfers, cache.l3, cache.pools, getattr(snap, "mamba", None))
        record = (getattr(snap, "ops", None), getattr(snap, "l3_ops", None),
                  tuple(writes.items()), tuple(loads.items()), tuple(l3.items()), landing,
                  between, len(self.acked))
        last = self.passed
        if (self.incremental and last is not None and record == last[1]
                and all(map(is_, parts, last[0]))):  # four parts each
            return
        self._check_sched(snap, cache, writes, loads, l3, landing, where, between)
        self.passed = (parts, record)

    def _check_sched(self, snap: Any, cache: CacheSnapshot, writes: Mapping[Any, str],
                     loads: Mapping[Any, str], l3: Mapping[Any, str], landing: Iterable[Any],
                     where: str, between: bool) -> None:
        shown: list[tuple[str, str, set[Any], Mapping[Any, str]]] = []
        ops = getattr(snap, "ops", None)
        if ops is not None:
            shown.append(("the scheduler", "writeback", {op for op, _rid in ops}, writes))
        l3_ops = getattr(snap, "l3_ops", None)
        if l3_ops is not None:
            shown.append(("the scheduler", "L3 transfer", {op for op, _rid in l3_ops}, l3))
        shown.append(("the cache", "writeback",
                      {t.op_id for t in cache.transfers if t.kind == "writeback"}, writes))
        shown.append(("the cache", "L3 transfer", {t.op_id for t in cache.l3}, l3))
        for who, what, engine, runtime in shown:
            for op_id in sorted(engine - runtime.keys(), key=str):
                if between and op_id not in self.acked:
                    continue  # started for the next plan, which must hand it out
                raise self.fail("HOST-10", self._gone(what, op_id, where).replace(
                    "the engine", who, 1))
            for op_id in sorted(runtime.keys() - engine, key=str):
                raise self.fail("HOST-10", f"{where}: {what} {op_id} ({runtime[op_id]}) is not "
                                f"acknowledged, but {who} no longer lists it in flight")
        allowed = loads.keys() | set(landing)
        for t in cache.transfers:
            if t.kind == "loadback" and t.op_id not in allowed:
                raise self.fail("HOST-10", self._gone("loadback", t.op_id, where).replace(
                    "the engine", "the cache", 1))
        dst: set[tuple[Tier, int, str]] = set()  # (tier, page, owner) of every listed copy
        for t in cache.transfers:
            tier = Tier.HOST if t.kind == "writeback" else Tier.DEVICE
            dst.update((tier, d, f"transfer:{t.op_id}") for _s, d in t.pairs)
        for t3 in cache.l3:
            dst.update((Tier.HOST, pg, f"transfer:{t3.op_id}") for pg in t3.pages)
        live = {f"transfer:{op}" for op in (*writes, *loads, *landing)}
        live.update(f"transfer:{x.op_id}" for x in (*cache.transfers, *cache.l3))
        self._leaks(snap, cache, dst, live, where)

    def _leaks(self, snap: Any, cache: CacheSnapshot, dst: set[tuple[Tier, int, str]],
               live: set[str], where: str) -> None:
        """HOST-10: no page is owned by a transfer that lists no such page in flight (``dst``:
        (tier, page, owner) of every listed copy), no Mamba state slot by a copy the runtime
        does not hold (``live``: their owner names). Only an owner that is a transfer can
        break it: pools and Mamba views found with none (the very objects, which a snapshot
        keeps while they do not change) hold again whatever ``dst`` and ``live`` are."""
        mamba = getattr(snap, "mamba", None)
        pools = cache.pools
        last = self.no_transfer
        if self.incremental and last is not None and last[0] is pools and last[1] is mamba:
            return
        clean = True
        for tier, pool in pools.items():
            if not self._any_transfer(pool.owners, ("pages", tier)):
                continue
            clean = False
            for pg, owner in enumerate(pool.owners):
                if owner.startswith("transfer:") and (tier, pg, owner) not in dst:
                    raise self.fail("HOST-10", f"{where}: {tier} page {pg} is owned by {owner}, "
                                    "which lists no such page in flight: a leak")
        if mamba is not None:
            for tier, owners in mamba.owners.items():
                if not self._any_transfer(owners, ("states", tier)):
                    continue
                clean = False
                for slot, owner in enumerate(owners):
                    if owner.startswith("transfer:") and owner not in live:
                        raise self.fail("HOST-10", f"{where}: {tier} state slot {slot} is owned "
                                        f"by {owner}, a copy the runtime does not hold: a leak")
        if clean:
            self.no_transfer = (pools, mamba)

    def _any_transfer(self, owners: Sequence[str], where: tuple[str, Tier]) -> bool:
        """``_any_transfer``, remembered for the last owner tuple of each pool (``where``) found
        with none: a snapshot's unchanged pool is the last one's tuple, and a tuple never
        changes."""
        if self.clean.get(where) is owners:
            return False
        if _any_transfer(owners):
            return True
        if type(owners) is tuple:
            self.clean[where] = owners
        return False

    def acknowledged(self, op_ids: Iterable[Any], when: str) -> None:
        """The runtime acknowledged these copies ``when`` (for the messages)."""
        for op_id in op_ids:
            self.acked[op_id] = when


class RestOracle(Oracle):
    """POOL-5: at rest nothing is held by anyone. Read from the snapshot, from the counters,
    and (by the drivers) from what an engine at rest must still be able to grant."""

    name = "at-rest"
    behaviours = ("POOL-5",)
    conditional = ("POOL-5",)  # judged where a driver brought the engine to rest (``mark``)

    def cache(self, snap: CacheSnapshot, where: str) -> None:
        """A cache snapshot at rest: no lock, no transfer; every page free or held by the node
        that lists it; each free list is the pool less its cached pages."""
        if snap.locks:
            lk = snap.locks[0]
            who = "the engine's own" if lk.internal else "a caller's"
            raise self.fail("POOL-5", f"{where}: {len(snap.locks)} locks are still held (first "
                            f"{who} lock {lk.handle} on {lk.tier} node {lk.node}): their pages "
                            "can never be evicted")
        for t in snap.transfers:
            raise self.fail("POOL-5", f"{where}: {t.kind} {t.op_id} is still in flight")
        for t3 in snap.l3:
            raise self.fail("POOL-5", f"{where}: L3 {t3.kind} {t3.op_id} is still in flight")
        holder: dict[tuple[Tier, int], int] = {}
        for n in snap.nodes:
            for tier in Tier:
                for pg in n.pages(tier) or ():
                    holder[(tier, pg)] = n.id
        for tier, pool in snap.pools.items():
            cached = 0
            for pg, owner in enumerate(pool.owners):
                if owner == "free":
                    continue
                node = holder.get((tier, pg))
                if not _cached(owner) or node is None or owner != f"node:{node}":
                    raise self.fail("POOL-5", f"{where}: {tier} page {pg} is owned by {owner}"
                                    + ("" if node is None else f" (the tree has it at node "
                                       f"{node})") + ": neither free nor cached, a leak")
                cached += 1
            if len(pool.free) != pool.size - cached:
                raise self.fail("POOL-5", f"{where}: the {tier} free list holds "
                                f"{len(pool.free)} pages, the pool of {pool.size} less its "
                                f"{cached} cached pages is {pool.size - cached}")

    def counts(self, counts: Mapping[str, int], sizes: Mapping[Tier, int], where: str,
               slots: int | None = None, empty: bool = False) -> None:
        """The engine's counters at rest: free and cached pages make up each pool and nothing
        is pinned; ``empty``: after evicting everything, every page is free."""
        for tier, size in sizes.items():
            t = tier.value
            a, c, e = (counts.get(k) for k in _NAMES[tier])
            if empty and a is not None and a != size:
                raise self.fail("POOL-5", f"{where}: with everything evicted the engine counts "
                                f"{a} available {t} pages of {size}: pages leaked")
            if a is not None and c is not None and a + c != size:
                raise self.fail("POOL-5", f"{where}: the engine counts {a} available and {c} "
                                f"cached {t} pages of {size}: {size - a - c} are held by "
                                "something at rest, a leak")
            if e is not None and c is not None and e != c:
                raise self.fail("POOL-5", f"{where}: the engine counts {c} cached {t} pages, "
                                f"only {e} of them evictable: {c - e} stay pinned at rest")
        if slots is not None and counts.get("free_slots", slots) != slots:
            raise self.fail("POOL-5", f"{where}: the engine counts {counts['free_slots']} free "
                            f"request slots of {slots}")

    def emptied(self, snap: CacheSnapshot, where: str) -> None:
        """After everything was evicted at rest, every page of every pool is free."""
        for tier, pool in snap.pools.items():
            kept = [(pg, o) for pg, o in enumerate(pool.owners) if o != "free"]
            if kept:
                pg, owner = kept[0]
                raise self.fail("POOL-5", f"{where}: with nothing locked and everything "
                                f"evicted, {len(kept)} {tier} pages are not free (page {pg} "
                                f"is owned by {owner}): pages leaked")

    def scheduler(self, snap: Any, slots: int, where: str) -> None:
        """A scheduler snapshot at rest: every request finished, no copy in flight, every
        request slot free, its cache at rest, every Mamba state slot free or an entry's."""
        left = [v.rid for v in getattr(snap, "requests", ()) if v.state is not State.FINISHED]
        if left:
            raise self.fail("POOL-5", f"{where}: requests {left[:5]} are not Finished")
        for attr, what in (("ops", "writebacks"), ("l3_ops", "L3 transfers")):
            ops = getattr(snap, attr, ())
            if ops:
                raise self.fail("POOL-5", f"{where}: the scheduler still lists {what} "
                                f"{_ids(op for op, _rid in ops)} in flight")
        free = getattr(snap, "free_slots", None)
        if free is not None and len(free) != slots:
            raise self.fail("POOL-5", f"{where}: {len(free)} of the {slots} request slots are "
                            "free: a slot leaked")
        cache = getattr(snap, "cache", None)
        if isinstance(cache, CacheSnapshot):
            self.cache(cache, where)
        mamba = getattr(snap, "mamba", None)
        if mamba is not None:
            self._states(mamba, where)

    def _states(self, view: Any, where: str) -> None:
        holder: dict[tuple[Tier, int], int] = {}
        for e in view.entries:
            for tier, slot in ((Tier.DEVICE, e.device), (Tier.HOST, e.host)):
                if slot is not None:
                    holder[(tier, slot)] = e.id
            if e.protect:
                raise self.fail("POOL-5", f"{where}: state entry {e.id} is still protected "
                                f"({e.protect}) for a retracted request")
        for tier, owners in view.owners.items():
            cached = 0
            for slot, owner in enumerate(owners):
                if owner == "free":
                    continue
                if owner != f"entry:{holder.get((tier, slot))}":
                    raise self.fail("POOL-5", f"{where}: {tier} state slot {slot} is owned by "
                                    f"{owner}: neither free nor cached, a leak")
                cached += 1
            if len(view.free[tier]) != len(owners) - cached:
                raise self.fail("POOL-5", f"{where}: the {tier} state free list holds "
                                f"{len(view.free[tier])} slots, the pool of {len(owners)} less "
                                f"its {cached} cached states is {len(owners) - cached}")
