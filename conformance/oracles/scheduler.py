"""Scheduler-level oracles: plans, request states and what they hold, reuse, liveness.

Each watches the scheduler driver (``kvconf.conformance.scheduler.driver``). The plan and reuse
checks are black-box: they use only the plans and what the driver itself reported. The state checks
read ``snapshot()`` where the engine offers it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter, is_
from typing import Any

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.oracles.base import Oracle, Violation
from kvconf.conformance.oracles.event_stream import StoredBlocks
from kvconf.conformance.oracles.tree_view import TreeView, same_fields
from kvconf.conformance.runtime.memory import POISON, ZEROED
from kvconf.reference.plan import Plan
from kvconf.reference.requests import HOLDS, TRANSITIONS, Event, State
from kvconf.reference.tiers import Tier

PLAN_EVENTS = frozenset({Event.CHUNK, Event.LAST_CHUNK, Event.DECODE, Event.RETRACT,
                         Event.RETRACT_NO_COPY, Event.WRITEBACK, Event.PREFETCH})
L3_STATES = frozenset({State.PREFETCHING, State.PREFETCH_DONE})
# What EVENT-6's comparison with the device tier reads of a node (``TreeView.device_hashes``).
_DEVICE_BLOCKS = attrgetter("id", "parent", "device", "hashes")
# Transitions outside the table that an allowance adds for the engine declaring it (requests
# chapter, "Declared transitions").
DECLARED_TRANSITIONS: dict[Feature, dict[tuple[State, Event], tuple[State, ...]]] = {
    Feature.PREEMPTS_PREFILLING: {(State.PREFILLING, Event.RETRACT_NO_COPY): (State.RETRACTED,)},
}


def _one_user_each(rows: Sequence[Any], p: int, window: int, window_table: bool) -> bool:
    """Whether every page a row of the forward computes into is used (read or computed through,
    by the spans ``PlanOracle.own_pages`` reads) by that row alone. Then none of its checks can
    fail: each asks for another row using a page some row computes into. Slices, not index
    loops, where every span lies inside its table (as after PLAN-10); otherwise False."""
    if len(rows) == 1:  # a forward of one row (the commonest): it alone uses every page
        return _inside_tables(rows[0], p, window_table)
    one: dict[int, Any] = {}  # page -> the one row using it; ``rows`` itself when several do
    written: list[int] = []
    for r in rows:
        rid, start = r.rid, r.start
        if start < 0:
            return False  # index loops and slices differ below zero: the full check decides
        end = start + len(r.input_tokens)
        first = max(0, start - window + 1) if window else 0
        spans = [(r.page_table, 0 if window_table or not window else first)]
        if window_table and r.window_table:
            spans.append((r.window_table, first))
        for table, lo in spans:
            if -(-end // p) > len(table):
                return False  # past its table: the index loops of the full check decide
            for pg in table[lo // p : -(-end // p)]:
                if one.setdefault(pg, rid) != rid:
                    one[pg] = rows
            written.extend(table[start // p : -(-end // p)])
    return all(one[pg] is not rows for pg in written)


def _inside_tables(r: Any, p: int, window_table: bool) -> bool:
    """Whether the row's spans (as ``_one_user_each`` takes them) lie inside its tables, from a
    non-negative start: then every page a row computes into is used by that row, and where it
    is the forward's only row, by that row alone."""
    if r.start < 0:
        return False
    last = -(-(r.start + len(r.input_tokens)) // p)
    if last > len(r.page_table):
        return False
    return not (window_table and r.window_table and last > len(r.window_table))


# ``RequestStateOracle._in_own_namespace``'s markers: an owner name not read yet, and one
# that names no node id (``_own_namespace`` then judges it).
_UNREAD, _NOT_A_NODE = object(), object()


def table_for(features: frozenset[Feature]) -> dict[tuple[State, Event], tuple[State, ...]]:
    """The transition table an engine declaring ``features`` is held to."""
    table = dict(TRANSITIONS)
    for feature, extra in DECLARED_TRANSITIONS.items():
        if feature in features:
            table.update(extra)
    return table


# The answers of ``reachable`` under each table, by the allowances that made it (``table_for``).
_REACHABLE: dict[frozenset[Feature], dict[tuple[State, State, frozenset[Event]], bool]] = {}


@dataclass
class Live:
    """What the driver (the runtime) knows of one request, without looking inside the engine."""

    rid: str
    ns: int
    tokens: list[int]
    prompt: int
    due: bool = False  # a sampling row ran; its result not yet reported
    copying: set[Any] = field(default_factory=set)  # its writebacks in flight
    finished: bool = False  # Finish or Abort sent
    aborted: bool = False
    published_at: int | None = None  # plan after which its prompt's first result was reported


def reachable(a: State, b: State, events: frozenset[Event], depth: int = 3,
              table: dict[tuple[State, Event], tuple[State, ...]] = TRANSITIONS) -> bool:
    """``b`` from ``a`` by at most ``depth`` table transitions using only ``events``."""
    frontier = {a}
    for _ in range(depth):
        if b in frontier:
            return True
        frontier = frontier | {
            t for s in frontier for (s2, e), ts in table.items()
            if s2 is s and e in events for t in ts
        }
    return b in frontier


class PlanOracle(Oracle):
    name = "plan"
    behaviours = ("PLAN-1", "PLAN-2", "PLAN-3", "PLAN-4", "PLAN-5", "PLAN-9", "PLAN-10",
                  "PLAN-12", "PLAN-13", "NS-3", "REQ-3", "HOST-2", "HOST-13", "HOST-14")

    def table_covers(self, step: int, r, page_size: int) -> None:
        """PLAN-10: a row's page table has a page for every position it reads or computes."""
        end = r.start + len(r.input_tokens)
        for what, table in (("page table", r.page_table), ("window table", r.window_table)):
            if table is r.window_table and not table:
                continue  # no window table (WIN-3), or the driver's own check says it lacks one
            if end > len(table) * page_size:
                raise self.fail("PLAN-10", f"plan {step}: the {r.kind} row of {r.rid} computes "
                                f"positions up to {end - 1}, but its {what} {list(table)} "
                                f"holds {len(table) * page_size}")

    def __init__(self, same_forward: bool = False, deferred: bool = False,
                 flushed: bool = False) -> None:
        self.op_ids: set[Any] = set()  # every copy id handed out so far
        # PLAN-13: the engine's runtime writes every row's KV of a layer before any row of it
        # attends, so a row may read a page another row of its forward computes into.
        self.same_forward = same_forward
        # HOST-13: a loadback may land plans before its request's first row. Its request ->
        # (op id, destination pages) while unacknowledged, and the pages once landed, until
        # the request's next row takes them.
        self.deferred = deferred
        self.loading: dict[str, tuple[Any, frozenset[int]]] = {}
        self.loaded: dict[str, frozenset[int]] = {}
        # HOST-14: a plan may name writebacks the runtime completes before its forward.
        self.flushed = flushed
        self.writebacks: set[Any] = set()  # writebacks handed out and not acknowledged

    def check(self, plan: Plan, live: dict[str, Live], config, page_size: int,
              window_table: bool = False) -> None:
        for op in (*plan.loadbacks, *plan.writebacks, *plan.l3):
            if op.op_id in self.op_ids:
                raise self.fail("PLAN-5", f"plan {plan.step} reuses copy id {op.op_id}: its "
                                "acknowledgement could not be told apart")
            self.op_ids.add(op.op_id)
        self.writebacks.update(op.op_id for op in plan.writebacks)
        self.check_flush(plan)
        rows = plan.rows
        if len({r.rid for r in rows}) != len(rows):
            count = Counter(r.rid for r in rows)
            twice = sorted(rid for rid, n in count.items() if n > 1)
            raise self.fail("PLAN-1", f"plan {plan.step} has several rows for {twice}")
        total = sum(len(r.input_tokens) for r in rows)
        if total > config.max_tokens or len(rows) > config.max_batch:
            raise self.fail("PLAN-2", f"plan {plan.step}: {len(rows)} rows, {total} tokens over "
                            f"batch {config.max_batch} / budget {config.max_tokens}")
        kinds = {r.kind for r in rows}
        if not config.mixed and kinds == {"prefill", "decode"}:
            raise self.fail("PLAN-3", f"plan {plan.step} mixes prefill and decode rows")
        adapters = (sorted({r.namespace for r in rows if r.namespace != 0})
                    if config.max_adapters else ())
        if config.max_adapters and len(adapters) > config.max_adapters:
            raise self.fail("PLAN-9", f"plan {plan.step} serves adapters {adapters}, over the "
                            f"cap of {config.max_adapters}")
        loaded = {d for op in plan.loadbacks for _s, d in op.pairs}
        tables: set[int] = set()
        for r in rows:
            req = live.get(r.rid)
            if req is None or req.finished:
                raise self.fail("PLAN-1", f"plan {plan.step} has a row for {r.rid}, which is "
                                "not live")
            if r.namespace != req.ns:
                raise self.fail("NS-3", f"plan {plan.step} has a {r.kind} row of {r.rid} "
                                f"(namespace {req.ns}) in namespace {r.namespace}")
            if req.due:
                raise self.fail("PLAN-1", f"plan {plan.step} schedules {r.rid} before its last "
                                "sampled token was reported")
            if req.copying:
                raise self.fail("PLAN-5", f"plan {plan.step} schedules {r.rid} while its "
                                f"writeback {sorted(req.copying)} is in flight")
            n = len(req.tokens)
            if r.start + len(r.input_tokens) > n or r.reused > r.start:
                raise self.fail("PLAN-4", f"row of {r.rid} computes [{r.start}, "
                                f"{r.start + len(r.input_tokens)}) of a {n}-token sequence "
                                f"(reused {r.reused})")
            if r.kind == "prefill" and r.reused and r.reused >= n:
                raise self.fail("PLAN-4", f"{r.rid} reuses all {n} tokens: none is computed")
            end = r.start + len(r.input_tokens)
            if end > len(r.page_table) * page_size or (
                    r.window_table and end > len(r.window_table) * page_size):
                self.table_covers(plan.step, r, page_size)  # raises, naming the table
            tables.update(r.page_table)
            tables.update(r.window_table)
        self.check_deferred(plan, live)
        stray = loaded - tables
        if self.deferred:  # HOST-13: a loadback for a request with no row in this plan
            planned = {r.rid for r in rows}
            for op in plan.loadbacks:
                dst = frozenset(d for _s, d in op.pairs)
                req = live.get(op.rid)
                if dst & stray and op.rid not in planned and req is not None \
                        and not req.finished:
                    self.loading[op.rid] = (op.op_id, dst)
                    stray -= dst
        if stray:
            raise self.fail("PLAN-5", f"plan {plan.step} loads back into device pages "
                            f"{sorted(stray)} that no row uses")
        self.own_pages(plan, page_size, config.sliding_window, window_table)

    def check_deferred(self, plan: Plan, live: dict[str, Live]) -> None:
        """HOST-13: a request whose loadback is not acknowledged has no row; its first row
        after the acknowledgement reads the pages it loaded; no other request's row uses them
        before that row."""
        if not self.loading and not self.loaded:
            return  # no loadback waits for its request's row: nothing below can fail
        for rid in [r for r in (*self.loading, *self.loaded)
                    if live.get(r) is None or live[r].finished]:
            self.loading.pop(rid, None)  # finished or aborted: the pages go back after the ack
            self.loaded.pop(rid, None)
        # Unacknowledged destinations only: once landed, the pages are the cache's like any
        # other reused page, and another request may share them before their own reader.
        held = {pg: rid for rid, (_op, pages) in self.loading.items() for pg in pages}
        for r in plan.rows:
            if r.rid in self.loading:
                raise self.fail("HOST-13", f"plan {plan.step} schedules {r.rid} while its "
                                f"loadback {self.loading[r.rid][0]} is not acknowledged")
            pages = self.loaded.pop(r.rid, None)
            if pages is not None and not pages <= set(r.page_table) | set(r.window_table):
                raise self.fail("HOST-13", f"plan {plan.step}: the first row of {r.rid} after "
                                f"its loadback does not read the loaded device pages "
                                f"{sorted(pages - set(r.page_table) - set(r.window_table))} "
                                f"(table {list(r.page_table)})")
            other = sorted(pg for pg in set(r.page_table) | set(r.window_table)
                           if held.get(pg, r.rid) != r.rid)
            if other:
                raise self.fail("HOST-13", f"plan {plan.step}: the row of {r.rid} uses device "
                                f"page {other[0]}, into which the loadback of {held[other[0]]} "
                                "is not acknowledged yet")

    def landed(self, op_ids) -> None:
        """The runtime acknowledged these copies (HOST-13, HOST-14)."""
        done = set(op_ids)
        self.writebacks -= done
        for rid, (op, pages) in list(self.loading.items()):
            if op in done:
                del self.loading[rid]
                self.loaded[rid] = pages

    def check_flush(self, plan: Plan) -> None:
        """HOST-14: a plan names in its flush only writebacks handed out and not acknowledged,
        and only where the engine declares flushed_writeback; without it a writeback's source
        stays pinned until its acknowledgement (HOST-2) and there is nothing to flush."""
        if not plan.flush:
            return
        if not self.flushed:
            raise self.fail("HOST-2", f"plan {plan.step} names writebacks {list(plan.flush)} "
                            "to flush before its forward, handing out their source pages "
                            "before the acknowledgement (HOST-14 allows it; not declared)")
        unknown = sorted(set(plan.flush) - self.writebacks)
        if unknown:
            raise self.fail("HOST-14", f"plan {plan.step} names {unknown} to flush, which is "
                            "no writeback in flight")

    def own_pages(self, plan: Plan, page_size: int, window: int, window_table: bool) -> None:
        """REQ-3, black-box: a page a row computes into is no other row's in that forward (no
        other row reads or computes through it), whatever a window let go of behind it (WIN-4):
        a page handed to another request while the window still reads it shows here. Where the
        other row reads positions of that page, it reuses what the forward is still computing
        (PLAN-12)."""
        p = page_size
        if self.incremental and _one_user_each(plan.rows, p, window, window_table):
            return  # every page a row computes into is used by that row alone: nothing fails
        used: dict[int, set[str]] = {}
        read: dict[int, set[str]] = {}  # pages holding positions a row reads (before its start)
        written: dict[int, str] = {}
        for r in plan.rows:
            end = r.start + len(r.input_tokens)
            first = max(0, r.start - window + 1) if window else 0
            spans = [(r.page_table, 0 if window_table or not window else first)]
            if window_table and r.window_table:
                spans.append((r.window_table, first))
            for table, lo in spans:
                for k in range(lo // p, -(-end // p)):
                    used.setdefault(table[k], set()).add(r.rid)
                for k in range(lo // p, -(-r.start // p)):
                    read.setdefault(table[k], set()).add(r.rid)
                for k in range(r.start // p, -(-end // p)):
                    written[table[k]] = r.rid
        for page, rid in sorted(written.items()):
            readers = sorted(read.get(page, set()) - {rid})
            if readers and self.same_forward:  # PLAN-13: reading it is legal, sharing it not
                others = sorted(used.get(page, set()) - {rid} - set(readers))
                if others:
                    raise self.fail("REQ-3", f"plan {plan.step}: the row of {rid} computes into "
                                    f"device page {page}, which the row of {others[0]} uses "
                                    "in the same forward")
                continue
            if readers:
                raise self.fail(("PLAN-12", "REQ-3"), f"plan {plan.step}: the row of "
                                f"{readers[0]} reads device page {page}, which the row of "
                                f"{rid} computes into in the same forward: the rows run at "
                                "once, so it reads the page before that KV is there")
            others = sorted(used.get(page, set()) - {rid})
            if others:
                raise self.fail("REQ-3", f"plan {plan.step}: the row of {rid} computes into "
                                f"device page {page}, which the row of {others[0]} uses in the "
                                "same forward")


class RequestStateOracle(Oracle):
    """REQ-1, REQ-3, FIN-1, FIN-2, PLAN-6, NS-3 and the L3 states of L3-2 (white-box); under a
    sliding window a table slot behind the window may be a hole (WIN-4)."""

    name = "requests"
    behaviours = ("REQ-1", "REQ-3", "REQ-7", "FIN-1", "FIN-2", "PLAN-6", "NS-3", "L3-2", "WIN-4")
    needs = frozenset({Feature.SNAPSHOT})

    def __init__(self, features: frozenset[Feature] = frozenset()) -> None:
        self.table = table_for(features)  # REQ-7: what the engine's allowances add
        # Each (from, to, events) question has one answer under a fixed table: ask it once,
        # for every oracle held to the same table (it depends only on the allowances declared).
        declared = frozenset(f for f in DECLARED_TRANSITIONS if f in features)
        self._reachable: dict[tuple[State, State, frozenset[Event]], bool] = \
            _REACHABLE.setdefault(declared, {})
        # The requests of the last ``after`` checked, by id: the next check's ``before``.
        self._by_rid: tuple[Any, dict[str, Any]] | None = None
        self._passed: Any = None  # the ``after`` of the last check that held
        self._nodes: tuple[Any, dict[int, Any]] | None = None  # ``_node_map``'s last answer
        self._ids: dict[str, int] = {}  # "node:<id>" -> id, each owner name parsed once
        # NS-3's reads of the last node list and lock list, by identity (``_namespaces``): an
        # owner name's node namespace (None: no such node), and each lock's node id.
        self._owner_ns: tuple[Any, dict[str, int | None]] | None = None
        self._locked: tuple[Any, dict[int, int]] | None = None

    def check(self, phase: str, before, after, live: dict[str, Live], page_size: int,
              external: dict[str, set[Event]], window: int = 0) -> None:
        if self.incremental and not window and self._unchanged(before, after):
            last = self._by_rid
            if last is not None and last[0] is before.requests:  # the same views, by id
                self._by_rid = (after.requests, last[1])
        else:
            self._check(phase, before, after, live, page_size, external, window)
        self._passed = after

    def _unchanged(self, before, after) -> bool:
        """Whether ``after`` shows what ``before``, the state of the last check that held,
        showed: the very same device pool, tree, locks and copies (``_same_parts``) and every
        request the very same view (a snapshot keeps an unchanged request's view). Then no
        request changed state, and every other check reads only these: it holds again. The
        caller asks only without a window (WIN-4)."""
        if not self._same_parts(before, after, 0):
            return False
        a, b = after.requests, before.requests
        return len(a) == len(b) and all(map(is_, a, b))  # one pass in C

    def _same_parts(self, before, after, window: int) -> bool:
        """Whether ``before`` is the state of the last check that held and ``after`` shows the
        very same device pool, tree and locks and the same copies in flight (the requests
        aside). Not under a window, where a slot behind it depends on the state before the last
        one too (WIN-4)."""
        if window or before is None or before is not self._passed:
            return False
        c, d = after.cache, before.cache
        return (c.pools is d.pools and c.nodes is d.nodes and c.locks is d.locks
                and getattr(after, "ops", None) == getattr(before, "ops", None))

    def _check(self, phase: str, before, after, live: dict[str, Live], page_size: int,
               external: dict[str, set[Event]], window: int) -> None:
        last = self._by_rid
        if before is None:
            prev = {}
        elif last is not None and last[0] is before.requests:  # the last check's ``after``
            prev = last[1]
        else:
            prev = {v.rid: v for v in before.requests}
        self._by_rid = (after.requests, {v.rid: v for v in after.requests})
        tree: TreeView | None = None  # built when FIN-1 or PLAN-6 asks what the tree caches
        owners = after.cache.pools[Tier.DEVICE].owners
        locks = after.cache.locks
        locked: dict[int, int] | None = None
        claimed: dict[int, str] = {}
        slots: dict[int, str] = {}
        behind: list[tuple[str, list[int]]] = []  # table slots a window let go of (WIN-4)
        # A request whose view is the very one of the last check that held, against the very
        # device pool, tree and locks and the same copies in flight: every check of it below
        # reads only these, except that its slot and local pages are no other request's.
        kept = self.incremental and self._same_parts(before, after, window)
        for v in after.requests:
            old = prev.get(v.rid)
            if kept and old is v:
                self._take_slot(v, slots)
                self._claim_local(v, v.pages[v.shared :], claimed, owners)
                if v.rid in live:  # whether the runtime knows it may differ from the last time
                    self._writeback_in_flight(v, after)
                continue
            if old is not None and old.state is not v.state:
                events = PLAN_EVENTS if phase == "plan" else frozenset(
                    external.get(v.rid, set()) | {Event.WRITEBACK_DONE, Event.PREFETCH_DONE})
                key = (old.state, v.state, events)
                ok = self._reachable.get(key)
                if ok is None:
                    ok = self._reachable[key] = reachable(old.state, v.state, events,
                                                          table=self.table)
                if not ok:
                    rules = ("REQ-1", "L3-2") if {old.state, v.state} & L3_STATES else (
                        ("REQ-1", "REQ-7") if old.state is State.PREFILLING else "REQ-1")
                    raise self.fail(rules, f"{v.rid} went {old.state} -> {v.state} during "
                                    f"{phase}, which no table path allows")
            holds = HOLDS[v.state]
            host_lock = getattr(v, "host_lock", None)
            if (host_lock is not None) != ("host_pin" in holds):
                raise self.fail(("REQ-3", "L3-2"), f"{v.rid} in {v.state} has host lock "
                                f"{host_lock}")
            if (v.slot is not None) != ("slot" in holds):
                raise self.fail("REQ-3", f"{v.rid} in {v.state} has slot {v.slot}")
            if (v.lock is not None) != ("pin" in holds):
                raise self.fail("REQ-3", f"{v.rid} in {v.state} has lock {v.lock}")
            if v.pages and "pin" not in holds and "pages" not in holds:
                raise self.fail("REQ-3", f"{v.rid} in {v.state} still lists pages "
                                f"{list(v.pages)}")
            local = v.pages[v.shared :]
            if local and "pages" not in holds:
                raise self.fail("REQ-3", f"{v.rid} in {v.state} still holds pages {list(local)}")
            self._take_slot(v, slots)
            # WIN-4: a local page wholly before the first position the request's row reads
            # (its row in flight, or the next one) may have been freed; its slot is a hole.
            gone = 0
            if window and local:
                start = min(old.computed, v.computed) if old is not None else v.computed
                gone = max(0, min(len(local), (start - window + 1) // page_size - v.shared))
                behind.append((v.rid, list(local[:gone])))
            self._claim_local(v, local[gone:], claimed, owners)
            for pg in v.pages[: v.shared]:
                if not owners[pg].startswith("node:"):
                    raise self.fail("REQ-3", f"shared page {pg} of {v.rid} is {owners[pg]}")
            if v.shared or v.lock is not None:  # it holds something of the tree (NS-3)
                if locked is None:
                    locked = self._locks_now(locks)
                if not self._in_own_namespace(v, after.cache, owners, locked):
                    self._own_namespace(v, self._node_map(after.cache), owners, locked)
            req = live.get(v.rid)
            # What it had computed before this call (a retraction resets the count to zero).
            was = old if old is not None and old.state is not v.state else v
            full = (was.computed // page_size) * page_size
            if window:  # only what it reused is known intact (PLAN-8)
                full = min(full, was.shared * page_size)
            if req is None:
                continue
            if v.state in (State.DRAINING, State.RETRACTING) and full and (
                old is None or old.state is not v.state
            ):
                rule = "FIN-1" if v.state is State.DRAINING else "PLAN-6"
                if tree is None:
                    tree = TreeView(after.cache)
                got = tree.longest(v.namespace, req.tokens[:full], Tier.DEVICE)
                if got < full:
                    raise self.fail(rule, f"{v.rid} is {v.state} but only {got} of its {full} "
                                    f"computed tokens are cached in namespace {v.namespace}")
            self._writeback_in_flight(v, after)
        for rid, pages in behind:  # a slot behind the window is held where the page still is
            for pg in pages:
                if 0 <= pg < len(owners) and owners[pg] == "caller" and pg not in claimed:
                    claimed[pg] = rid
        caller = owners.count("caller")
        if caller != len(claimed):
            raise self.fail("REQ-3", f"{caller} device pages are charged to the caller but the "
                            f"requests hold {len(claimed)}")


    def _take_slot(self, v, slots: dict[int, str]) -> None:
        """REQ-3: the request's slot, if it holds one, is no other request's of this check."""
        if v.slot is not None:
            if v.slot in slots:
                raise self.fail("REQ-3", f"slot {v.slot} held by {slots[v.slot]} and {v.rid}")
            slots[v.slot] = v.rid

    def _claim_local(self, v, pages, claimed: dict[int, str], owners) -> None:
        """REQ-3: each of the request's local ``pages`` is charged to the caller and is no
        other request's of this check."""
        for pg in pages:
            if pg in claimed or owners[pg] != "caller":
                raise self.fail("REQ-3", f"local page {pg} of {v.rid} is also "
                                f"{claimed.get(pg) or owners[pg]}")
            claimed[pg] = v.rid

    def _writeback_in_flight(self, v, after) -> None:
        """FIN-2: a request in WritingBack has its writeback among the copies in flight."""
        if v.state is State.WRITING_BACK and (
            v.op is None or v.op not in {op for op, _rid in after.ops}
        ):
            raise self.fail("FIN-2", f"{v.rid} is WritingBack with no writeback in flight")

    def _node_id(self, owner: str) -> int:
        """The node id an owner name ``node:<id>`` names, each name parsed once; raises as
        ``int`` does for a name that holds none."""
        node_id = self._ids.get(owner)
        if node_id is None:
            node_id = self._ids[owner] = int(owner.split(":", 1)[1])
        return node_id

    def _locks_now(self, locks) -> dict[int, int]:
        """Each lock's node id by handle; while the lock list is the very same object (a
        snapshot keeps it while no lock changed), the map made from it last time."""
        last = self._locked
        if self.incremental and last is not None and last[0] is locks:
            return last[1]
        locked = {lk.handle: lk.node for lk in locks} if locks else {}
        self._locked = (locks, locked)
        return locked

    def _in_own_namespace(self, v, cache, owners, locked: dict[int, int]) -> bool:
        """Whether NS-3 holds for ``v`` (``_own_namespace`` would find nothing), decided from
        each owner name's node namespace, read from the node list once per owner name while
        the node list is the very same object (its views never change); False where it does
        not hold or cannot tell (an owner name no node list entry answers): then
        ``_own_namespace`` judges, and names what is wrong. Off without ``incremental``."""
        if not self.incremental:
            return False
        memo = self._owner_ns
        if memo is None or memo[0] is not cache.nodes:
            memo = self._owner_ns = (cache.nodes, {})
        names = memo[1]
        ns = v.namespace
        for pg in v.pages[: v.shared]:
            owner = owners[pg]
            got = names.get(owner, _UNREAD)
            if got is _UNREAD:
                got = self._owner_namespace(owner, cache)
                if got is _NOT_A_NODE:
                    return False  # a name that is no node id: ``_own_namespace`` says so
                names[owner] = got
            if got is not None and got != ns:
                return False
        if v.lock is not None and v.lock in locked:
            node = self._node_map(cache).get(locked[v.lock])
            if node is not None and node.namespace != ns:
                return False
        return True

    def _owner_namespace(self, owner: str, cache) -> Any:
        """The namespace of the node an owner name ``node:<id>`` names, as ``_own_namespace``
        reads it; None where the node list has no such node; ``_NOT_A_NODE`` where the name
        holds no node id."""
        try:
            node_id = self._node_id(owner)
        except (IndexError, ValueError):
            return _NOT_A_NODE
        node = self._node_map(cache).get(node_id)
        return None if node is None else node.namespace

    def _node_map(self, cache) -> dict[int, Any]:
        """The cache's nodes by id, kept while its node list is the very same object."""
        last = self._nodes
        if last is None or last[0] is not cache.nodes:
            last = self._nodes = (cache.nodes, cache.node_map())
        return last[1]

    def _own_namespace(self, v, nodes: dict[int, Any], owners, locked: dict[int, int]) -> None:
        """NS-3: the pages a request shares and the node it pins are in its own namespace's
        tree, whichever step (admission, publish, recovery) put them there."""
        if not v.shared and v.lock is None:
            return  # it holds nothing of the tree
        shared = v.pages[: v.shared]
        held = [self._node_id(owners[pg]) for pg in shared]  # node ids, all read first
        pinned = v.lock is not None and v.lock in locked
        if pinned:
            held.append(locked[v.lock])
        ns = v.namespace
        for i, node_id in enumerate(held):
            node = nodes.get(node_id)
            if node is not None and node.namespace != ns:
                what = (f"shared page {shared[i]}" if i < len(shared)
                        else f"pinned node (lock {v.lock})")  # only for the message
                raise self.fail("NS-3", f"{v.rid} (namespace {ns}, {v.state}) holds "
                                f"{what} of namespace {node.namespace}")


class ReuseOracle(Oracle):
    """PLAN-7 (D381-1): a request arriving while another with its prefix decodes reuses it.

    With a snapshot the publishers are those it shows Decoding. Black-box, the driver knows who
    published when and who was retracted with a copy, but not who was pushed off the device
    without one (PLAN-6: its pins, and with them its published nodes, may go at once, and the
    runtime sees no copy). So the black-box obligation demands only the reuse the runtime can
    know was possible: a publisher that decodes in the admission's own plan (its decode row
    reads the prefix from the device in that forward) is judged at once; one that does not is
    judged when its next row comes: a decode row shows it was never pushed off (a retracted
    request is prefilled again, or its retraction's copy is seen), anything else drops the
    obligation."""

    name = "reuse"
    behaviours = ("PLAN-7",)

    def __init__(self) -> None:
        # Black-box obligations waiting for the publisher's next row:
        # publisher -> [(request, tokens reused, tokens owed, plan of the admission)].
        self.pending: dict[str, list[tuple[str, int, int, int]]] = {}

    def check_admit(self, row, req: Live, live: dict[str, Live], page_size: int,
                    step: int, snap=None, running: frozenset[str] = frozenset()) -> None:
        decoding = None if snap is None else {
            v.rid for v in snap.requests if v.state is State.DECODING
        }
        best = 0
        for other in live.values():
            if other is req or other.ns != req.ns or other.finished:
                continue
            if decoding is not None and other.rid not in decoding:
                continue
            if other.published_at is None or other.published_at >= step:
                continue
            common = 0
            limit = min(other.prompt, len(req.tokens) - 1)
            while common < limit and other.tokens[common] == req.tokens[common]:
                common += 1
            owed = (common // page_size) * page_size
            if decoding is None and other.rid not in running:
                if row.reused < owed:  # judged at the publisher's next row
                    self.pending.setdefault(other.rid, []).append(
                        (req.rid, row.reused, owed, step))
                continue
            best = max(best, owed)
        if row.reused < best:
            raise self.fail("PLAN-7", f"{req.rid} reuses {row.reused} tokens but a live request "
                            f"published {best} of its prefix before it was scheduled")

    def next_rows(self, plan, step: int) -> None:
        """A plan's rows settle the obligations waiting on their publishers (black-box)."""
        for row in plan.rows:
            waiting = self.pending.pop(row.rid, None)
            if not waiting or row.kind != "decode":
                continue  # prefilled again: it was pushed off the device, owing nothing
            rid, reused, owed, at = min(waiting, key=lambda w: (w[1] - w[2], w[3]))
            raise self.fail("PLAN-7", f"{rid} reuses {reused} tokens at plan {at} but "
                            f"{row.rid}, which published {owed} of its prefix, was decoding "
                            f"then: it decodes again at plan {step} with no retraction seen")

    def retracted(self, rid: str) -> None:
        """Pushed off the device with a copy: what it owed waits for nothing more."""
        self.pending.pop(rid, None)


def _kv_depth(cache, ns: int, tokens, page_size: int) -> int:
    """How deep ``tokens`` is cached in ``cache`` (a CacheSnapshot) in namespace ``ns``, on
    device or host, by whole pages, through nodes with no transfer pending."""
    root = cache.roots.get(ns)
    if root is None:
        return 0
    children: dict[int, list] = {}
    for n in cache.nodes:
        if n.parent is not None:
            children.setdefault(n.parent, []).append(n)
    def common(n) -> int:
        k = 0
        while k < len(n.key) and depth + k < len(tokens) and n.key[k] == tokens[depth + k]:
            k += 1
        return k

    node, depth = root, 0
    while True:
        best = max(children.get(node, ()), key=common, default=None)
        if best is None or best.pending is not None or (best.device is None
                                                        and best.host is None):
            break
        k = common(best)
        depth += k
        if k == 0 or k < len(best.key):
            break
        node = best.id
    return (depth // page_size) * page_size


class HybridReuseOracle(Oracle):
    """MAMBA-10: with Mamba on, a request's first chunk reuses the deepest prefix of its prompt
    whose KV and a state of exactly that depth the cache held, unprotected and idle, from before
    the plan that admitted it to after it (white-box: the snapshots tell what was held)."""

    name = "hybrid-reuse"
    behaviours = ("MAMBA-10",)

    def check_admit(self, row, req: Live, page_size: int, before, after) -> None:
        if before is None or after is None or before.mamba is None or after.mamba is None:
            return
        kept = {e.id: e for e in after.mamba.entries}
        limit = len(req.tokens) - 1  # the last token is always computed (PLAN-4)
        best = 0
        for e in before.mamba.entries:
            late = kept.get(e.id)
            if late is None or e.namespace != req.ns or not e.tokens or e.depth > limit \
                    or e.depth <= best or tuple(req.tokens[: e.depth]) != tuple(e.tokens):
                continue
            if e.protect or late.protect or e.busy or (e.device is None and e.host is None) \
                    or (late.device is None and late.host is None):
                continue
            if min(_kv_depth(before.cache, req.ns, req.tokens, page_size),
                   _kv_depth(after.cache, req.ns, req.tokens, page_size)) < e.depth:
                continue
            best = e.depth
        if row.reused < best:
            raise self.fail("MAMBA-10", f"{req.rid} reuses {row.reused} tokens but the cache held "
                            f"the KV and the state of depth {best} of its prompt before and "
                            "after the plan that admitted it")


class LivenessOracle(Oracle):
    name = "liveness"
    behaviours = ("LIVE-1", "L3-2", "PLAN-9", "MAMBA-9")

    def stuck(self, plans: int, left: list[str], states: dict | None = None,
              capped: list[str] | None = None) -> Violation:
        """``states`` (from a snapshot, where there is one) tells a request stranded after its
        prefetch (L3-2) apart from one merely starved; ``capped`` names the adapter requests of
        a run with an adapter cap: when they are all that is left, the cap starved them."""
        where = sorted(rid for rid in left if states and states.get(rid) in L3_STATES)
        if where:
            return self.fail(("LIVE-1", "L3-2"), f"after {plans} plans requests {where[:5]} are "
                             f"still {states[where[0]]}: the L3 path never reached a prefill")
        if capped and set(left) <= set(capped):
            return self.fail(("LIVE-1", "PLAN-9"), f"after {plans} plans only adapter requests "
                             f"{left[:5]} are left: the adapter cap starves them")
        return self.fail("LIVE-1", f"after {plans} plans requests {left[:5]} never finished")


class RuntimeEventOracle(Oracle):
    """REQ-2 (rejections change nothing), REQ-4 (abort ends holding nothing), REQ-5 (failed
    writeback leaves no host copy), REQ-6 (an ignored unknown event changes nothing); and what a
    black-box runtime sees of transfers in flight: HOST-8 (a loadback's ends stay pinned until its
    acknowledgement), HOST-2 and HOST-9 (no loadback reads a host copy that never landed)."""

    name = "runtime-events"
    behaviours = ("REQ-2", "REQ-4", "REQ-5", "REQ-6", "HOST-2", "HOST-8", "HOST-9")
    # Each judged only where its event happened: a probe, an abort, a failed copy, an ignored
    # event, a loadback or a loadback reading host pages of failed copies (``mark``).
    conditional = behaviours

    def in_flight(self, plan, loads: Sequence, writes: Sequence, abandoned: set[int]) -> None:
        """A plan, seen while ``loads`` (loadbacks) and ``writes`` (writebacks) await their
        acknowledgement and the host pages ``abandoned`` belong to copies that failed and were
        never acknowledged: no fresh or copied-into page of the plan is one a loadback in flight
        still owns, and no loadback reads a host page whose copy has not landed."""
        if not loads and not plan.loadbacks:
            return  # every check below reads a loadback in flight or one of the plan
        if loads:
            self.mark("HOST-8")
        if plan.loadbacks:
            self.mark("HOST-2", *(("HOST-9",) if abandoned else ()))
        for op in loads:
            dst = {d for _s, d in op.pairs}
            src = {s for s, _d in op.pairs}
            hit = sorted(dst & (set(plan.zero) | {d for o in plan.loadbacks for _s, d in o.pairs}))
            if hit:
                raise self.fail("HOST-8", f"device page {hit[0]} is reused by plan {plan.step} "
                                f"while loadback {op.op_id} into it is not acknowledged")
            hit = sorted(src & {d for o in plan.writebacks for _s, d in o.pairs})
            if hit:
                raise self.fail("HOST-8", f"host page {hit[0]} is overwritten by a writeback of "
                                f"plan {plan.step} while loadback {op.op_id} still reads it")
        landing = {d for o in writes for _s, d in o.pairs}
        for o in plan.loadbacks:
            for s, _d in o.pairs:
                if s in landing:
                    raise self.fail("HOST-2", f"loadback {o.op_id} of plan {plan.step} reads "
                                    f"host page {s}, whose writeback is not acknowledged yet")
                if s in abandoned:
                    raise self.fail("HOST-9", f"loadback {o.op_id} of plan {plan.step} reads "
                                    f"host page {s}, whose writeback failed and was never "
                                    "acknowledged")

    def ignored_changed(self, with_log: list, without_log: list) -> Violation | None:
        """REQ-6: the plans of a run with ignored events against the same run without them."""
        self.mark("REQ-6")
        for i, (a, b) in enumerate(zip(with_log, without_log, strict=False)):
            if a != b:
                return self.fail("REQ-6", f"an event the engine ignored changed the scheduler: "
                                 f"entry {i} of the run differs from the same run without the "
                                 f"ignored events ({_short(a)} against {_short(b)})")
        if len(with_log) != len(without_log):
            return self.fail("REQ-6", f"an event the engine ignored changed the scheduler: the "
                             f"run took {len(with_log)} entries, {len(without_log)} without the "
                             "ignored events")
        return None

    def rejected(self, what: str, before, after) -> None:
        self.mark("REQ-2")
        if before is not None and after is not None and before != after:
            raise self.fail("REQ-2", f"the rejected {what} changed the scheduler")

    def accepted_illegal(self, what: str) -> Violation:
        return self.fail("REQ-2", f"{what} was accepted")

    def aborted(self, rid: str, after) -> None:
        if after is None:
            return
        self.mark("REQ-4")
        for v in after.requests:
            if v.rid == rid and (v.state is not State.FINISHED or v.pages or v.lock is not None
                                 or v.slot is not None
                                 or getattr(v, "host_lock", None) is not None):
                raise self.fail("REQ-4", f"{rid} after Abort is {v.state} holding pages "
                                f"{list(v.pages)}, lock {v.lock}, slot {v.slot}")

    def failed_copy(self, op, after) -> None:
        if after is None:
            return
        self.mark("REQ-5")
        owners = after.cache.pools[Tier.HOST].owners
        kept = [d for _s, d in op.pairs if owners[d] != "free"]
        if kept:
            raise self.fail("REQ-5", f"writeback {op.op_id} failed but its host pages {kept} "
                            f"are kept ({[owners[d] for d in kept]})")


class SchedContentOracle(Oracle):
    """TREE-2, NS-1, NS-3, PLAN-8 at the scheduler level: every position a forward reads holds
    the tag of its own (namespace, prefix), and none holds KV a sliding window dropped (for an
    engine that declares keeps_window_prefix the runtime never drops the first W positions, so
    only a publish past them reads dropped KV: WIN-2; with a window table each table is read by
    its own rule and nothing is dropped: WIN-3; the runtime drops only KV still where the
    request computed it, so a page freed behind the window is its new owner's: WIN-4). KV of
    another namespace read there was
    computed or published by a step that left its request's namespace (NS-3), or matched across
    namespaces (NS-1)."""

    name = "content"
    behaviours = ("TREE-2", "NS-1", "NS-3", "PLAN-8", "WIN-2", "WIN-3", "WIN-4", "PLAN-11",
                  "PLAN-12", "REQ-5", "HOST-4")
    conditional = ("REQ-5", "HOST-4")  # reads of a failed copy's remains: the driver marks

    def same_forward(self, row, i: int, page: int, rid: str, at: int) -> Violation:
        """PLAN-12: the row reads KV that another row of its own forward computes; the rows of
        a forward run at once, so on a device it reads what the page held before."""
        whose = "itself" if rid == row.rid else rid
        return self.fail(("PLAN-12", "TREE-2"), f"{row.kind} row of {row.rid} reads position "
                         f"{i} from device page {page}, which the row of {whose} computes "
                         f"(position {at}) in the same forward: the rows of a forward run at "
                         "once, so it reads what the page held before it")

    def zeroed(self, row, page: int) -> Violation:
        return self.fail(("PLAN-11", "TREE-2"), f"the plan tells the runtime to zero device "
                         f"page {page}, which the {row.kind} row of {row.rid} reads or a "
                         "loadback of the same plan fills")

    def dropped(self, row, i: int, page: int) -> Violation:
        return self.fail(("PLAN-8", "TREE-2"), f"{row.kind} row of {row.rid} reads position {i} "
                         f"from device page {page}, whose KV the sliding window had dropped")

    def __init__(self) -> None:
        self.origin: dict[int, int] = {}  # tag -> the namespace whose KV it is

    def wrong(self, row, ns: int, i: int, page: int, got: int | None,
              window: bool = False, failed: bool = False) -> Violation:
        """``window``: read through the row's window table (WIN-3). ``failed``: the page's
        content comes from a copy the runtime acknowledged as failed, so the engine kept (or
        served) what a failed writeback left: REQ-5 and HOST-4 (E-1)."""
        win = ("WIN-3",) if window else ()
        where = f"window page {page}" if window else f"device page {page}"
        other = self.origin.get(got) if got is not None else None
        if other is not None and other != ns:
            return self.fail((*win, "TREE-2", "NS-1", "NS-3"), f"{row.kind} row of {row.rid} "
                             f"(namespace {ns}) reads position {i} from {where}, "
                             f"which holds KV of namespace {other}")
        if got == POISON and failed:
            return self.fail((*win, "TREE-2", "REQ-5", "HOST-4"), f"{row.kind} row of "
                             f"{row.rid} (namespace {ns}) reads position {i} from {where}, "
                             "which holds the remains of a copy the runtime acknowledged as "
                             "failed: a failed writeback was kept as a host copy and served")
        what = ("nothing" if got is None else "the remains of an unfinished copy"
                if got == POISON else "zeros (a plan told the runtime to zero it)"
                if got == ZEROED else "the KV of another prefix")
        return self.fail((*win, "TREE-2"), f"{row.kind} row of {row.rid} (namespace {ns}) "
                         f"reads position {i} from {where}, which holds {what}")

    def tokens(self, row, want) -> Violation:
        return self.fail("TREE-2", f"row of {row.rid} computes tokens {list(row.input_tokens)} "
                         f"at {row.start}, the sequence has {list(want)}")


def _short(entry, limit: int = 160) -> str:
    text = repr(entry)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class SchedEventOracle(Oracle):
    """KV events as a scheduler-level runtime reads them (drained after every call): the same
    event-by-event checks as the cache level (``event_stream.StoredBlocks``): EVENT-1..EVENT-3
    on the stream itself, EVENT-4 where the engine offers its block hash, EVENT-5 across every
    pair of namespaces the trace used; EVENT-6 (a removal leaves no stored block under it, and
    with a snapshot the stored hashes are the device tier's blocks); and EVENT-7: a prefix a
    prefill row reuses from the device cache is announced. An engine that announces only
    reusable boundaries (EVENT-8) may name a parent that is not stored; ``resolve`` then says
    which prefix a parent hash names (None: no prefix the runtime knows), a reuse needs only
    its last block announced, and the stored hashes are not the tree's."""

    name = "sched-events"
    behaviours = ("EVENT-1", "EVENT-2", "EVENT-3", "EVENT-4", "EVENT-5", "EVENT-6", "EVENT-7",
                  "EVENT-8")
    needs = frozenset({Feature.KV_EVENTS})

    def __init__(self, block_hash=None, resolve=None) -> None:
        self.resolve = resolve
        self.blocks = StoredBlocks(self, block_hash, resolve)
        # EVENT-6 against the device tier: the tree (nodes, roots) of the last snapshot that
        # held, and whether events came since (the stored hashes are all it compares them to).
        self.device_passed: tuple[Any, dict[int, int]] | None = None
        self.taken = False

    @property
    def announced(self) -> dict[tuple[int, tuple[int, ...]], int]:
        return self.blocks.announced

    def use(self, namespace: int) -> None:
        """A namespace the trace uses (a request's, or a row's): EVENT-5 compares it."""
        self.blocks.use(namespace)

    def take(self, events: Sequence[Any]) -> None:
        if not events:
            return  # nothing announced: nothing stored or removed (most drains)
        self.taken = True
        removed = self.blocks.take(events)
        if self.resolve is not None:
            return  # EVENT-8: a stored block's parent may be unstored, so may a removed one
        orphan = self.blocks.orphaned(removed)
        if orphan is not None:
            h, below = orphan
            raise self.fail("EVENT-6", f"BlockRemoved for {h:#x} while {below:#x}, stored "
                            "under it, stays stored")

    def device(self, snap, where: str) -> None:
        """With a snapshot: the stored hashes are the blocks the tree holds on the device
        (EVENT-6); not for an engine that announces only reusable boundaries (EVENT-8)."""
        if self.resolve is not None or snap is None:
            return
        cache, last = snap.cache, self.device_passed
        if self.incremental and not self.taken and last is not None and last[1] == cache.roots:
            if last[0] is cache.nodes:
                return  # the same tree and no event since the last check that held
            if same_fields(cache.nodes, last[0], _DEVICE_BLOCKS):
                # No event since, and every node shows the same id, parent, device pages and
                # hashes: the device tier's blocks (all ``drift`` reads of the tree) are those
                # of the last check that held.
                self.device_passed = (cache.nodes, last[1])
                return
        drift = self.blocks.drift(cache)
        if drift is not None:
            raise self.fail("EVENT-6", f"{where}: {drift}")
        self.device_passed, self.taken = (cache.nodes, dict(cache.roots)), False

    def reused(self, plan, row, tokens: Sequence[int], p: int) -> None:
        """A prefill row admitted with ``row.reused`` tokens from the cache: every whole block
        of them that was already on the device (not loaded back by this plan) is announced;
        under EVENT-8 the block that ends at the reuse boundary."""
        landed = {d for op in plan.loadbacks for _s, d in op.pairs}
        blocks = range(row.reused // p)
        for k in blocks[-1:] if self.resolve is not None else blocks:
            if row.page_table[k] in landed:
                continue
            if (row.namespace, tuple(tokens[: (k + 1) * p])) not in self.announced:
                raise self.fail("EVENT-7", f"{row.rid} reuses block {k} (tokens "
                                f"[{k * p}, {(k + 1) * p})) from device page "
                                f"{row.page_table[k]}, which no BlockStored announces")
