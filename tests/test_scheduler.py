"""Tests of ``kvconf.reference.scheduler``: the request state machine, plans, finishing, liveness.

A small deterministic runtime (:class:`Runtime`) plays the serving loop a driver follows: submit,
``next_plan()``, report a token for every row that samples, acknowledge writebacks now or one plan
later, finish each request after ``k`` tokens. After every plan and every advance it checks, on the
white-box snapshots:

* REQ-1: every logged transition is in ``TRANSITIONS`` and each request's log is one chain that
  ends in the state its view shows;
* REQ-3: what each state holds matches ``HOLDS`` (slot, pin), local pages are caller pages of
  exactly one request and every caller page is some request's, the shared pages are exactly the
  device pages of the pinned node's path, the pins are exactly the non-internal cache locks;
* PLAN-1..PLAN-5 on each plan, against the snapshot taken just before it (the reused and loaded
  back pages hold the KV of the row's own tokens in the pre-plan tree), and the reference's own
  choice of the request to retract (left open to engines by PLAN-6).

Focused tests then cover each behaviour, and a Hypothesis state machine drives the scheduler with
arbitrary interleavings of submissions, plans, results, finishes, aborts, acks and illegal events.
"""

from __future__ import annotations

import random
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvconf.reference.errors import CacheError
from kvconf.reference.plan import (
    Abort,
    ExtendResult,
    Finish,
    Plan,
    RequestSpec,
    RuntimeEvent,
    WritebackDone,
)
from kvconf.reference.requests import EXTERNAL, HOLDS, TRANSITIONS, Event, State
from kvconf.reference.scheduler import (
    RequestView,
    Scheduler,
    SchedulerConfig,
    SchedulerError,
    SchedulerSnapshot,
)
from kvconf.reference.snapshot import CacheSnapshot
from kvconf.reference.tiers import Tier

S = State
D, H = Tier.DEVICE, Tier.HOST
PREFILL_FROM = {S.SUBMITTED, S.PREFILLING, S.RETRACTED}
FIRST_CHUNK_FROM = {S.SUBMITTED, S.RETRACTED}
IN_FLIGHT = {S.RETRACTING, S.DRAINING, S.WRITING_BACK}


# --------------------------------------------------------------------------- snapshot helpers
def views(snap: SchedulerSnapshot) -> dict[str, RequestView]:
    return {v.rid: v for v in snap.requests}


def tier_blocks(cache: CacheSnapshot, tier: Tier = D) -> dict[int, tuple[int, tuple[int, ...]]]:
    """Page of ``tier`` held by a tree node -> (namespace, the token prefix through that page)."""
    p = cache.page_size
    out: dict[int, tuple[int, tuple[int, ...]]] = {}
    for n in cache.nodes:
        pages = n.pages(tier)
        if n.parent is None or pages is None:
            continue
        full = cache.full_tokens(n.id)
        base = len(full) - len(n.key)
        for i, page in enumerate(pages):
            out[page] = (n.namespace, full[: base + (i + 1) * p])
    return out


def path_pages(cache: CacheSnapshot, node_id: int, tier: Tier = D) -> list[int]:
    """The ``tier`` pages of the path root..node, root first (None on a node counts as none)."""
    nodes = cache.node_map()
    parts: list[tuple[int, ...]] = []
    cur: int | None = node_id
    while cur is not None:
        parts.append(nodes[cur].pages(tier) or ())
        cur = nodes[cur].parent
    return [pg for part in reversed(parts) for pg in part]


def match_lengths(cache: CacheSnapshot, ns: int, tokens: Sequence[int]) -> tuple[int, int]:
    """(device_len, host_len) of the longest whole-page prefix of ``tokens`` held on each tier,
    computed from a snapshot without touching the cache (an independent model of TREE-1)."""
    p = cache.page_size
    by_prefix: dict[tuple[int, tuple[int, ...]], tuple[bool, bool]] = {}
    for n in cache.nodes:
        if n.parent is None:
            continue
        full = cache.full_tokens(n.id)
        base = len(full) - len(n.key)
        for i in range(len(n.key) // p):
            by_prefix[(n.namespace, full[: base + (i + 1) * p])] = (
                n.device is not None, n.host is not None)
    out = []
    for col in (0, 1):
        length = 0
        for end in range(p, len(tokens) + 1, p):
            b = by_prefix.get((ns, tuple(tokens[:end])))
            if b is None or not b[col]:
                break
            length = end
        out.append(length)
    return out[0], out[1]


# --------------------------------------------------------------------------- invariant checks
def check_transitions(sched: Scheduler, start: int = 0) -> None:
    """REQ-1: every logged transition is a table entry."""
    for rid, frm, event, to in sched.transitions[start:]:
        assert (frm, event) in TRANSITIONS, f"REQ-1: {rid}: ({frm}, {event}) is not in the table"
        assert to in TRANSITIONS[(frm, event)], f"REQ-1: {rid}: {frm} -{event}-> {to}"


def check_holds(snap: SchedulerSnapshot, config: SchedulerConfig) -> None:
    """REQ-3: each state holds exactly what HOLDS lists, and every resource has one owner."""
    cache = snap.cache
    owners = cache.pools[D].owners
    locks = {lk.handle: lk for lk in cache.locks}
    local_seen: dict[int, str] = {}
    slots_seen: dict[int, str] = {}
    pins = set()
    nodes = cache.node_map()
    for v in snap.requests:
        holds = HOLDS[v.state]
        assert (v.slot is not None) == ("slot" in holds), f"REQ-3: {v.rid} {v.state} slot {v.slot}"
        assert (v.lock is not None) == ("pin" in holds), f"REQ-3: {v.rid} {v.state} lock {v.lock}"
        local = v.pages[v.shared :]
        if "pages" not in holds:
            assert not local, f"REQ-3: {v.rid} {v.state} holds local pages {local}"
        if not holds & {"pages", "pin"}:
            assert not v.pages and not v.shared, f"REQ-3: {v.rid} {v.state} lists {v.pages}"
        for pg in local:
            assert owners[pg] == "caller", f"REQ-3: {v.rid} local page {pg} is {owners[pg]}"
            assert pg not in local_seen, f"REQ-3: page {pg} local to {v.rid} and {local_seen[pg]}"
            local_seen[pg] = v.rid
        if v.slot is not None:
            assert v.slot not in slots_seen, f"REQ-3: slot {v.slot} of {v.rid} and another"
            slots_seen[v.slot] = v.rid
        if v.lock is not None:
            lk = locks.get(v.lock)
            assert lk is not None and not lk.internal and lk.tier is D, f"REQ-3: {v.rid} lock"
            pins.add(v.lock)
            node = nodes[lk.node]
            assert node.namespace == v.namespace, f"REQ-3: {v.rid} pinned in another namespace"
            # The shared pages are exactly the device pages of the pinned node's path.
            assert list(v.pages[: v.shared]) == path_pages(cache, lk.node), (
                f"REQ-3: {v.rid} shared pages {v.pages[: v.shared]} are not its pinned path")
        if v.shared:  # in every state: a page listed as shared is still the tree's
            for pg in v.pages[: v.shared]:
                assert owners[pg].startswith("node:"), (
                    f"REQ-3: {v.rid} {v.state} shared page {pg} is {owners[pg]}")
        if "pages" in holds:
            assert v.computed <= len(v.pages) * cache.page_size, f"{v.rid} computed past pages"
    caller = {pg for pg, o in enumerate(owners) if o == "caller"}
    assert caller == set(local_seen), f"REQ-3: caller pages {caller - set(local_seen)} leaked"
    user_locks = {h for h, lk in locks.items() if not lk.internal}
    assert user_locks == pins, f"REQ-3: locks {user_locks - pins} held by no request"
    assert set(snap.free_slots).isdisjoint(slots_seen), "REQ-3: a held slot is also free"
    assert len(snap.free_slots) == len(set(snap.free_slots)), "REQ-3: a slot free twice"
    assert set(snap.free_slots) | set(slots_seen) == set(range(config.max_slots)), "slot leaked"
    # Writebacks in flight: the scheduler's ops are the cache's writeback transfers.
    transfers = {t.op_id for t in cache.transfers if t.kind == "writeback"}
    assert {op for op, _ in snap.ops} == transfers, "ops in flight differ from cache transfers"
    assert not any(t.kind == "loadback" for t in cache.transfers), "a loadback left in flight"
    for v in snap.requests:
        if v.state in (S.RETRACTING, S.WRITING_BACK):
            assert v.op is not None and (v.op, v.rid) in snap.ops, f"{v.rid} {v.state} op"


def check_rest(snap: SchedulerSnapshot) -> None:
    """REQ-3 at rest (every request finished, every writeback acked): nothing held anywhere."""
    assert all(v.state is S.FINISHED for v in snap.requests), "requests still live"
    assert not snap.ops, f"writebacks still in flight: {snap.ops}"
    cache = snap.cache
    bad = [o for o in cache.pools[D].owners if o != "free" and not o.startswith("node:")]
    assert not bad, f"REQ-3: device pages owned by {Counter(bad)} at rest"
    bad = [o for o in cache.pools[H].owners if o != "free" and not o.startswith("node:")]
    assert not bad, f"host pages owned by {Counter(bad)} at rest"
    assert not cache.locks, f"REQ-3: locks held at rest: {cache.locks}"
    assert not cache.transfers
    for n in cache.nodes:
        assert n.device_ref == 0 and n.host_ref == 0, f"node {n.id} still pinned at rest"


def check_plan(plan: Plan, before: SchedulerSnapshot, after: SchedulerSnapshot,
               config: SchedulerConfig, tokens: dict[str, tuple[int, ...]]) -> None:
    """PLAN-1..PLAN-5 for ``plan``, built from the scheduler ``before`` into ``after``.

    ``tokens`` is the runtime's own record of each request's sequence (prompt + reported tokens).
    """
    p = config.page_size
    pre = views(before)
    post = views(after)
    rids = [row.rid for row in plan.rows]
    # PLAN-1: one row per request, only for a computing state with no token due.
    assert len(rids) == len(set(rids)), f"PLAN-1: two rows for one request in {rids}"
    for row in plan.rows:
        v = pre[row.rid]
        assert not v.awaiting, f"PLAN-1: row for {row.rid} whose token is still due"
        if row.kind == "prefill":
            assert v.state in PREFILL_FROM, f"PLAN-1: prefill row for {row.rid} in {v.state}"
        else:
            assert v.state is S.DECODING, f"PLAN-1: decode row for {row.rid} in {v.state}"
        assert v.state not in IN_FLIGHT, f"PLAN-5: row for {row.rid} in {v.state}"
    # PLAN-2: budget and batch.
    assert sum(len(r.input_tokens) for r in plan.rows) <= config.max_tokens, "PLAN-2 tokens"
    assert len(plan.rows) <= config.max_batch, "PLAN-2 batch"
    # PLAN-3: no decode next to a prefill unless mixed.
    if not config.mixed:
        kinds = {r.kind for r in plan.rows}
        assert kinds != {"prefill", "decode"}, "PLAN-3: prefill and decode rows mixed"
    # PLAN-9: at most max_adapters distinct adapters among the rows.
    if config.max_adapters:
        adapters = {r.namespace for r in plan.rows if r.namespace != 0}
        assert len(adapters) <= config.max_adapters, f"PLAN-9: adapters {adapters} in one plan"
    # PLAN-4 and the rows' contents.
    blocks = tier_blocks(before.cache)
    host_blocks = tier_blocks(before.cache, H)
    loaded: dict[str, dict[int, int]] = {}
    every: dict[int, int] = {}  # destination -> source, over all loadbacks of the plan
    for op in plan.loadbacks:
        assert op.kind == "loadback"
        loaded.setdefault(op.rid, {}).update({dst: src for src, dst in op.pairs})
        for src, dst in op.pairs:
            assert dst not in every, f"two loadbacks into device page {dst}"
            every[dst] = src
    for op in plan.writebacks:
        assert op.kind == "writeback"
    row_of = {row.rid: row for row in plan.rows}
    for rid in loaded:
        assert rid in row_of, f"PLAN-5: loadback for {rid} which has no row in the plan"
    for row in plan.rows:
        v = pre[row.rid]
        seq = tokens[row.rid]
        n = len(row.input_tokens)
        assert n >= 1 and row.start + n <= len(seq), f"PLAN-4: {row.rid} computes past its end"
        assert row.input_tokens == seq[row.start : row.start + n], f"{row.rid} wrong tokens"
        assert len(row.page_table) * p >= row.start + n, f"{row.rid} page table too short"
        assert len(set(row.page_table)) == len(row.page_table), f"{row.rid} page twice in table"
        assert set(row.new_pages) <= set(row.page_table[-len(row.new_pages):] if row.new_pages
                                         else ())
        assert row.slot == post[row.rid].slot and row.slot >= 0
        assert row.samples == (row.start + n == len(seq)), f"{row.rid} samples mid-sequence"
        assert row.namespace == v.namespace
        if row.kind == "decode":
            assert n == 1 and row.start == len(seq) - 1 and row.reused == 0
            assert list(row.page_table[: len(v.pages)]) == list(v.pages)
            continue
        if v.state in FIRST_CHUNK_FROM:
            assert row.reused < len(seq), f"PLAN-4: {row.rid} reuses its whole sequence"
            assert row.start == row.reused and row.reused % p == 0
            mine = loaded.get(row.rid, {})
            for i, pg in enumerate(row.page_table[: row.reused // p]):
                want = (row.namespace, tuple(seq[: (i + 1) * p]))
                if pg in every:  # PLAN-5: loaded back from a host page holding this prefix
                    assert host_blocks.get(every[pg]) == want, f"PLAN-5: {row.rid} loads garbage"
                else:  # on device before the plan, holding this prefix
                    assert blocks.get(pg) == want, (
                        f"PLAN-5: {row.rid} reuses page {pg} holding {blocks.get(pg)} for {want}")
            assert set(mine) <= set(row.page_table[: row.reused // p]), (
                f"PLAN-5: {row.rid} loadback lands outside its reused pages")
        else:
            assert row.reused == 0 and row.start == v.computed
            assert list(row.page_table[: len(v.pages)]) == list(v.pages)
        assert not set(row.new_pages) & set(every), f"{row.rid}: a new page is loaded back into"
    # A new page is in no other row's table (nor twice new).
    new = [pg for row in plan.rows for pg in row.new_pages]
    assert len(new) == len(set(new)), "two rows were given the same new page"
    for row in plan.rows:
        others = set(new) - set(row.new_pages)
        assert not others & set(row.page_table), f"{row.rid} uses another row's new page"


def check_victims(plan: Plan, before: SchedulerSnapshot,
                  log: Sequence[tuple[str, State, Event, State]]) -> None:
    """The reference's choice of victim (left open to engines, PLAN-6): a retracted request was
    the longest decoding one that could be pushed off (ties: the earlier arrival), and a
    retraction with a copy is listed as a retract writeback.

    Only requests that got no row in the plan are surely candidates (one planned before the
    request that ran short was not), so the check compares a victim with those."""
    pre = views(before)
    order = [v.rid for v in before.requests]  # by arrival
    with_row = {row.rid for row in plan.rows}
    victims = [rid for rid, _f, ev, _t in log if ev in (Event.RETRACT, Event.RETRACT_NO_COPY)]
    copies = {op.rid for op in plan.writebacks if op.retract}
    assert copies == {rid for rid, _f, ev, _t in log if ev is Event.RETRACT}, "retract copies"
    assert all(not op.retract for op in plan.writebacks if op.rid not in copies)
    gone: set[str] = set()
    for rid in victims:
        v = pre[rid]
        assert v.state is S.DECODING and not v.awaiting and rid not in with_row
        for other in before.requests:
            if (other.state is not S.DECODING or other.awaiting or other.rid in with_row
                    or other.rid in gone or other.rid == rid):
                continue
            key = (other.length, -order.index(other.rid))
            assert (v.length, -order.index(rid)) > key, f"PLAN-6: {rid} retracted, not {other.rid}"
        gone.add(rid)


# --------------------------------------------------------------------------- the runtime
@dataclass
class Runtime:
    """The driver's loop over one scheduler, with every check run after every plan and advance.

    Tokens come from a seeded ``random.Random`` over a small alphabet, a writeback is acked in the
    advance right after its plan or (with probability ``ack_later``) one plan later, and each
    request is finished in the advance that reports its ``k``-th token.
    """

    config: SchedulerConfig
    seed: int = 0
    k: int = 2  # tokens reported before Finish
    ks: dict[str, int] = field(default_factory=dict)  # per-request exceptions to ``k``
    ack_later: float = 0.5  # chance a writeback is acknowledged one plan later instead of now
    fail: float = 0.0  # chance a writeback is acknowledged with success=False
    alphabet: int = 4
    sched: Scheduler = field(init=False)
    rng: random.Random = field(init=False)
    tokens: dict[str, tuple[int, ...]] = field(default_factory=dict)
    reported: Counter = field(default_factory=Counter)
    unacked: list[int] = field(default_factory=list)  # writebacks planned, ack not yet decided
    later: list[int] = field(default_factory=list)  # writebacks to ack after the next plan
    plans: list[Plan] = field(default_factory=list)
    events: list[list[RuntimeEvent]] = field(default_factory=list)
    snaps: list[SchedulerSnapshot] = field(default_factory=list)
    trace: list[tuple[str, object]] = field(default_factory=list)  # what crossed the API
    last: dict[str, State] = field(default_factory=dict)
    _n: int = 0

    def __post_init__(self) -> None:
        self.sched = Scheduler(self.config)
        self.rng = random.Random(self.seed)

    def __repr__(self) -> str:
        return f"Runtime({self.config}, seed={self.seed}, k={self.k}, plans={len(self.plans)})"

    # ------------------------------------------------------------------ plumbing
    def prompt(self, length: int) -> tuple[int, ...]:
        return tuple(self.rng.randrange(self.alphabet) for _ in range(length))

    def submit(self, *specs: RequestSpec) -> None:
        self.sched.submit(list(specs))
        self.trace.append(("submit", list(specs)))
        for s in specs:
            self.tokens[s.rid] = tuple(s.tokens)
        self.check(planning=False)

    def view(self, rid: str):
        return views(self.sched.snapshot()).get(rid)

    def check(self, planning: bool) -> SchedulerSnapshot:
        """REQ-1 (the log is table entries, each request's log one chain ending in its state,
        scheduler events taken only while planning and runtime events only in advance) and
        REQ-3 on the current snapshot."""
        snap = self.sched.snapshot()
        check_transitions(self.sched, self._n)
        for rid, frm, event, to in self.sched.transitions[self._n :]:
            assert self.last.get(rid, S.SUBMITTED) is frm, f"REQ-1: {rid} left {frm}"
            assert (event in EXTERNAL) != planning, f"REQ-1: {rid} took {event} at the wrong time"
            self.last[rid] = to
        self._n = len(self.sched.transitions)
        for v in snap.requests:
            assert self.last.get(v.rid, S.SUBMITTED) is v.state, f"REQ-1: {v.rid} is {v.state}"
            assert v.length == len(self.tokens[v.rid])
        check_holds(snap, self.config)
        self.snaps.append(snap)
        return snap

    # ------------------------------------------------------------------ the loop
    def plan(self) -> Plan:
        before = self.sched.snapshot()
        n = len(self.sched.transitions)
        plan = self.sched.next_plan()
        self.trace.append(("plan", plan))
        after = self.check(planning=True)
        check_plan(plan, before, after, self.config, self.tokens)
        check_victims(plan, before, self.sched.transitions[n:])
        for v in before.requests:  # erased exactly when Finished
            assert (v.rid in views(after)) != (v.state is S.FINISHED), f"{v.rid} erased wrongly"
        for row in plan.rows:
            assert views(after)[row.rid].awaiting == row.samples
        self.unacked.extend(op.op_id for op in plan.writebacks)
        self.plans.append(plan)
        return plan

    def result(self, rid: str) -> list[RuntimeEvent]:
        """The token of ``rid``'s sampling row, and its Finish when that was its k-th token."""
        evs: list[RuntimeEvent] = [ExtendResult(rid, self.rng.randrange(self.alphabet))]
        if self.reported[rid] + 1 >= self.ks.get(rid, self.k):
            evs.append(Finish(rid))
        return evs

    def acks(self) -> list[RuntimeEvent]:
        """Acks for the writebacks held from the plan before, and for this plan's (or some)."""
        out = [WritebackDone(op, self.rng.random() >= self.fail) for op in self.later]
        self.later = []
        for op in self.unacked:
            if self.rng.random() < self.ack_later:
                self.later.append(op)
            else:
                out.append(WritebackDone(op, self.rng.random() >= self.fail))
        self.unacked = []
        return out

    def respond(self, plan: Plan) -> list[RuntimeEvent]:
        evs: list[RuntimeEvent] = []
        for row in plan.rows:
            if row.samples:
                evs.extend(self.result(row.rid))
        return evs + self.acks()

    def advance(self, evs: Sequence[RuntimeEvent]) -> None:
        self.sched.advance(list(evs))
        self.trace.append(("advance", list(evs)))
        for ev in evs:
            if isinstance(ev, ExtendResult):
                self.tokens[ev.rid] += (ev.token,)
                self.reported[ev.rid] += 1
            elif isinstance(ev, WritebackDone):
                for pending in (self.unacked, self.later):
                    if ev.op_id in pending:
                        pending.remove(ev.op_id)
        self.events.append(list(evs))
        self.check(planning=False)

    def step(self) -> Plan:
        plan = self.plan()
        self.advance(self.respond(plan))
        return plan

    def live(self) -> bool:
        snap = self.sched.snapshot()
        return any(v.state is not S.FINISHED for v in snap.requests) or bool(snap.ops)

    def run(self, bound: int) -> int:
        """Step until every request is finished and every writeback acked (LIVE-1 within
        ``bound`` plans), then check the rest state (REQ-3); returns the number of plans."""
        n = 0
        while self.live():
            assert n < bound, f"LIVE-1: still live after {bound} plans: {self.sched.snapshot()}"
            plan = self.plan()
            evs = self.respond(plan)
            # Requests whose row sampled before the caller took over get their token too.
            due = {e.rid for e in evs if isinstance(e, ExtendResult)}
            for v in self.sched.snapshot().requests:
                if v.awaiting and v.rid not in due and v.rid not in {r.rid for r in plan.rows}:
                    evs = self.result(v.rid) + evs
            self.advance(evs)
            n += 1
        self.plan()  # erase the finished ones
        check_rest(self.sched.snapshot())
        return n


# --------------------------------------------------------------------------- configurations
def cfg(**kw) -> SchedulerConfig:
    base = dict(page_size=2, device_pages=24, host_pages=16, max_tokens=16, max_batch=4,
                max_slots=4)
    base.update(kw)
    return SchedulerConfig(**base)


def spec(rid: str, tokens: Sequence[int], ns: int = 0) -> RequestSpec:
    return RequestSpec(rid, tuple(tokens), ns)


# Where each state is reached: a configuration, the requests, the tokens before Finish, and
# whether the state is looked for right after a plan (else right after an advance).
RECIPES: dict[str, tuple[SchedulerConfig, list[RequestSpec], int, str]] = {
    "Submitted": (cfg(), [spec("a", (1, 2, 3, 1, 2))], 2, "submit"),
    "Prefilling": (cfg(max_tokens=2), [spec("a", (1, 2, 3, 1, 2))], 2, "plan"),
    "PrefillDone": (cfg(), [spec("a", (1, 2, 3, 1, 2))], 2, "plan"),
    "Decoding-due": (cfg(), [spec("a", (1, 2, 3, 1, 2))], 4, "plan"),
    "Decoding": (cfg(), [spec("a", (1, 2, 3, 1, 2))], 4, "advance"),
    # Four device pages, two decoding requests: the longer is retracted for the shorter's page.
    "Retracting": (cfg(device_pages=4, host_pages=8),
                   [spec("s", (3, 3)), spec("a", (1, 2, 3, 1, 2))], 4, "plan"),
    "Retracted": (cfg(device_pages=4, host_pages=0),
                  [spec("s", (3, 3)), spec("a", (1, 2, 3, 1, 2))], 4, "plan"),
    "Draining": (cfg(), [spec("a", (1, 2, 3, 1, 2))], 1, "advance"),
    "WritingBack": (cfg(), [spec("a", (1, 2, 3, 1, 2))], 1, "plan"),
    "Finished": (cfg(host_pages=0), [spec("a", (1, 2, 3, 1, 2))], 1, "advance"),
}


def reach(name: str, seed: int = 0) -> tuple[Runtime, str]:
    """A runtime whose request ``a`` is in the state ``name`` names (``-due``: a token due).

    Writebacks are held (never acked) on the way, so a copy in flight stays in flight."""
    config, specs, k, when = RECIPES[name]
    state = State(name.split("-")[0])
    due = name.endswith("-due")
    rt = Runtime(config, seed=seed, k=k, ack_later=1.0)

    def there() -> bool:
        v = rt.view("a")
        return v is not None and v.state is state and v.awaiting == (due or (
            state is S.PREFILL_DONE))

    rt.submit(*specs)
    if when == "submit":
        return rt, "a"
    for _ in range(40):
        plan = rt.plan()
        if when == "plan" and there():
            return rt, "a"
        evs = [e for row in plan.rows if row.samples for e in rt.result(row.rid)]
        rt.advance(evs)
        if when == "advance" and there():
            return rt, "a"
    raise AssertionError(f"{name} not reached: {rt.sched.snapshot()}")


STATES = list(RECIPES)


def host_owned(snap: SchedulerSnapshot) -> list[str]:
    return [o for o in snap.cache.pools[H].owners if o != "free"]


def held_nothing(v) -> bool:
    return v.slot is None and v.lock is None and not v.pages and not v.shared and not v.awaiting


def workload(rt: Runtime, n: int, rng: random.Random, max_len: int = 9,
             namespaces: int = 2) -> list[RequestSpec]:
    """``n`` requests, many sharing a prefix with an earlier one, over ``namespaces``."""
    base = rt.prompt(max_len)
    specs = []
    for i in range(n):
        head = base[: rng.randrange(len(base) + 1)]
        specs.append(spec(f"r{i}", head + rt.prompt(rng.randint(1, 4)), rng.randrange(namespaces)))
    return specs


def run_workload(config: SchedulerConfig, seed: int, n: int = 6, k: int = 3, fail: float = 0.0,
                 stagger: bool = True) -> Runtime:
    """Submit ``n`` requests (half of them between plans) and run to rest."""
    rng = random.Random(seed)
    rt = Runtime(config, seed=seed, k=k, fail=fail)
    for s in workload(rt, n, rng):
        rt.submit(s)
        if stagger and rng.random() < 0.5:
            rt.step()
    rt.run(50 * n)
    return rt


# Workloads whose every request fits the device on its own (so all must finish), from roomy to
# tight enough that requests are retracted, with and without host, mixed or not.
CONFIGS = {
    "roomy": cfg(device_pages=64, host_pages=32),
    "no-host": cfg(device_pages=64, host_pages=0),
    "unmixed": cfg(device_pages=64, mixed=False, publish_mid_flight=False),
    "page1": cfg(page_size=1, device_pages=40, host_pages=12, max_tokens=5, max_batch=2),
    "page3": cfg(page_size=3, device_pages=20, host_pages=8, max_slots=2),
    "tight": cfg(device_pages=8, host_pages=6, max_tokens=6),
    "tight-no-host": cfg(device_pages=8, host_pages=0, max_tokens=4, mixed=False),
    "tight-host-full": cfg(device_pages=9, host_pages=2, max_batch=2, max_slots=3),
}


# =========================================================================== REQ-1
@pytest.mark.behaviours("REQ-1", "REQ-3", "PLAN-1", "PLAN-2", "PLAN-3", "PLAN-4", "PLAN-5")
@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("seed", range(4))
def test_runtime_loop_keeps_every_invariant(name: str, seed: int) -> None:
    """The driver's loop over varied workloads: every check after every plan and advance."""
    rt = run_workload(CONFIGS[name], seed, fail=0.25 if seed % 2 else 0.0)
    assert all(s is S.FINISHED for s in rt.last.values())
    assert set(rt.last) == set(rt.tokens)


@pytest.mark.behaviours("REQ-1")
def test_every_table_entry_is_taken_and_nothing_else() -> None:
    """Across the scenarios of this file every (state, event) pair of the table is taken, and
    every logged transition is one of them (with a target the table lists)."""
    taken: set[tuple[State, Event]] = set()
    for name in STATES:
        rt, rid = reach(name)
        if rt.view(rid).state is not S.FINISHED:
            rt.advance([Abort(rid)])
        rt.run(200)
        taken |= {(frm, ev) for _rid, frm, ev, _to in rt.sched.transitions}
    for name in CONFIGS:
        rt = run_workload(CONFIGS[name], 1, fail=0.3)
        taken |= {(frm, ev) for _rid, frm, ev, _to in rt.sched.transitions}
    # Retracted -Finish-> Finished: a runtime may finish a request that is off the device.
    rt, rid = reach("Retracted")
    rt.advance([Finish(rid)])
    assert rt.view(rid).state is S.FINISHED and held_nothing(rt.view(rid))
    rt.run(100)
    taken |= {(frm, ev) for _rid, frm, ev, _to in rt.sched.transitions}
    # The L3 entries need an L3 store; tests/test_l3.py takes each of them.
    l3 = {(s, e) for s, e in TRANSITIONS if s in (S.PREFETCHING, S.PREFETCH_DONE)
          or e is Event.PREFETCH}
    assert set(TRANSITIONS) - l3 - taken == set(), "table entries never taken"


# =========================================================================== REQ-2
def illegal_lists(v, host: bool) -> list[tuple[list[RuntimeEvent], int]]:
    """Event lists the table rejects for the request ``v``, with the index of the bad event."""
    rid, st, due = v.rid, v.state, v.awaiting
    out: list[tuple[list[RuntimeEvent], int]] = [
        ([ExtendResult("nope", 1)], 0),
        ([Finish("nope")], 0),
        ([Abort("nope")], 0),
        ([WritebackDone(10_000)], 0),
        ([WritebackDone(10_000, False)], 0),
    ]
    if not ((st, Event.EXTEND_RESULT) in TRANSITIONS and due):
        out.append(([ExtendResult(rid, 1)], 0))
    if not ((st, Event.FINISH) in TRANSITIONS and not due):
        out.append(([Finish(rid)], 0))
    if st is S.FINISHED:
        out.append(([Abort(rid)], 0))
    if (st, Event.EXTEND_RESULT) in TRANSITIONS and due:
        out.append(([ExtendResult(rid, 1), ExtendResult(rid, 2)], 1))  # one token due, not two
        out.append(([ExtendResult(rid, -1)], 0))  # not a token
    if (st, Event.FINISH) in TRANSITIONS and not due:
        out.append(([Finish(rid), Finish(rid)], 1))
        out.append(([Finish(rid), ExtendResult(rid, 1)], 1))
    if st is not S.FINISHED:
        # A legal event first: the whole list is still rejected, the abort not applied.
        out.append(([Abort(rid), ExtendResult("nope", 1)], 1))
        out.append(([Abort(rid), Abort(rid)], 1))
    if v.op is not None:
        out.append(([WritebackDone(v.op), WritebackDone(v.op)], 1))  # a second ack
        out.append(([WritebackDone(v.op, False), WritebackDone(v.op, True)], 1))
    return out


def assert_rejected(rt: Runtime, evs: list[RuntimeEvent], bad: int) -> SchedulerError:
    """``advance(evs)`` raises SchedulerError naming the bad event and changes nothing."""
    sched = rt.sched
    before, log = sched.snapshot(), list(sched.transitions)
    states = {v.rid: v.state for v in before.requests}
    with pytest.raises(SchedulerError) as info:
        sched.advance(evs)
    e = info.value
    ev = evs[bad]
    if isinstance(ev, WritebackDone):
        assert e.event == str(Event.WRITEBACK_DONE), e
    else:
        kind = {ExtendResult: Event.EXTEND_RESULT, Finish: Event.FINISH, Abort: Event.ABORT}
        assert e.rid == ev.rid, f"REQ-2: the error names {e.rid}, not {ev.rid}"
        assert e.event == str(kind[type(ev)]), f"REQ-2: the error names event {e.event}"
        if ev.rid in states and bad == 0:
            assert e.state is states[ev.rid], f"REQ-2: error names {e.state}, not the state"
        elif ev.rid in states:
            assert e.state is not None
        assert ev.rid in str(e), "REQ-2: the message names the request"
    assert sched.snapshot() == before, f"REQ-2: rejected {evs} changed the scheduler"
    assert sched.transitions == log
    return e


@pytest.mark.behaviours("REQ-2")
@pytest.mark.parametrize("name", STATES)
def test_illegal_events_are_rejected_and_change_nothing(name: str) -> None:
    rt, rid = reach(name)
    v = rt.view(rid)
    host = rt.config.host_pages > 0
    for evs, bad in illegal_lists(v, host):
        assert_rejected(rt, evs, bad)
    rt.run(200)  # and the scheduler carries on as if nothing was sent


@pytest.mark.behaviours("REQ-2")
def test_error_names_request_state_and_event() -> None:
    rt, rid = reach("Prefilling")
    e = assert_rejected(rt, [Finish(rid)], 0)
    assert (e.rid, e.state, e.event) == (rid, S.PREFILLING, "Finish")
    assert rid in str(e) and "Prefilling" in str(e) and "Finish" in str(e)
    rt, rid = reach("PrefillDone")
    e = assert_rejected(rt, [Finish(rid)], 0)  # its sampled token is still due
    assert (e.rid, e.state, e.event) == (rid, S.PREFILL_DONE, "Finish")
    rt, rid = reach("Decoding")
    e = assert_rejected(rt, [ExtendResult(rid, 0)], 0)  # no token due
    assert (e.rid, e.state, e.event) == (rid, S.DECODING, "ExtendResult")


@pytest.mark.behaviours("REQ-2")
def test_acks_twice_and_events_for_erased_requests_are_rejected() -> None:
    rt, rid = reach("WritingBack")
    op = rt.view(rid).op
    rt.advance([WritebackDone(op)])
    assert rt.view(rid).state is S.FINISHED
    assert_rejected(rt, [WritebackDone(op)], 0)  # a second ack in a later advance
    assert_rejected(rt, [Abort(rid)], 0)  # Finished: nothing is legal any more
    rt.plan()  # erases it
    assert rt.view(rid) is None
    for ev in (Abort(rid), Finish(rid), ExtendResult(rid, 0)):
        e = assert_rejected(rt, [ev], 0)
        assert e.rid == rid and e.state is None
    rt.run(10)


@pytest.mark.behaviours("REQ-2")
def test_finish_in_the_same_list_as_the_last_token_is_legal() -> None:
    """The list is checked in order: ExtendResult clears the due token, so Finish may follow."""
    rt, rid = reach("PrefillDone")
    rt.advance([ExtendResult(rid, 3), Finish(rid)])
    assert rt.view(rid).state is S.DRAINING
    rt.run(20)


# =========================================================================== REQ-3
@pytest.mark.behaviours("REQ-3")
@pytest.mark.parametrize("name", STATES)
def test_each_state_holds_what_the_table_lists(name: str) -> None:
    rt, rid = reach(name)
    v = rt.view(rid)
    holds = HOLDS[v.state]
    assert (v.slot is not None) == ("slot" in holds)
    assert (v.lock is not None) == ("pin" in holds)
    if "pages" in holds:
        assert v.pages, "a computing request has its page table"
    if "pin" in holds:
        cache = rt.sched.snapshot().cache
        lk = {lk.handle: lk for lk in cache.locks}[v.lock]
        assert list(v.pages[: v.shared]) == path_pages(cache, lk.node)
        if not v.shared:  # nothing cached: the pin is on the namespace's root
            assert lk.node == cache.roots[v.namespace]
    else:
        assert not v.pages and not v.shared
    check_holds(rt.sched.snapshot(), rt.config)
    rt.run(200)


@pytest.mark.behaviours("REQ-3")
def test_rest_state_after_everything_finishes() -> None:
    """D243-4: after all requests finish and all writebacks are acked, every device page is free
    or the tree's, and no lock of any kind is held."""
    for name in ("roomy", "tight", "tight-no-host", "page3"):
        rt = run_workload(CONFIGS[name], 7)
        snap = rt.sched.snapshot()
        assert not snap.requests
        assert len(snap.free_slots) == rt.config.max_slots
        check_rest(snap)


# =========================================================================== REQ-4
@pytest.mark.behaviours("REQ-4", "REQ-3")
@pytest.mark.parametrize("name", [s for s in STATES if s != "Finished"])
def test_abort_from_every_live_state(name: str) -> None:
    rt, rid = reach(name)
    op = rt.view(rid).op
    evs: list[RuntimeEvent] = [Abort(rid)]
    if op is not None:
        evs.append(WritebackDone(op))  # the copy's ack in the same list
    rt.advance(evs)
    v = rt.view(rid)
    assert v.state is S.FINISHED and held_nothing(v), f"REQ-4: {v}"
    assert rt.sched.transitions[-1][1:] in {(State(name.split("-")[0]), Event.ABORT, S.FINISHED),
                                            (S.RETRACTED, Event.ABORT, S.FINISHED)}
    assert_rejected(rt, [Abort(rid)], 0)  # once Finished, never again
    rt.run(200)


@pytest.mark.behaviours("REQ-4", "REQ-5", "REQ-3")
@pytest.mark.parametrize("name", ["Retracting", "WritingBack"])
@pytest.mark.parametrize("ack", ["before-erase", "after-erase", "failed"])
def test_abort_while_the_copy_is_in_flight(name: str, ack: str) -> None:
    """E-2: the abort is accepted, the copy carries on and its ack is accepted afterwards."""
    rt, rid = reach(name)
    op = rt.view(rid).op
    assert op is not None
    rt.advance([Abort(rid)])
    assert held_nothing(rt.view(rid)) and rt.view(rid).state is S.FINISHED
    assert (op, rid) in rt.sched.snapshot().ops, "E-2: the copy carries on after the abort"
    if ack != "before-erase":
        rt.plan()
        assert rt.view(rid) is None
    rt.advance([WritebackDone(op, ack != "failed")])  # E-2: still accepted
    assert not rt.sched.snapshot().ops
    if ack == "failed":
        assert host_owned(rt.sched.snapshot()) == []
    assert_rejected(rt, [WritebackDone(op)], 0)
    rt.run(200)


@pytest.mark.behaviours("REQ-4")
def test_abort_of_a_request_whose_row_is_in_flight() -> None:
    """Abort while its sampled token is due: the token is then never accepted."""
    rt, rid = reach("Decoding-due")
    rt.advance([Abort(rid)])
    assert held_nothing(rt.view(rid))
    assert_rejected(rt, [ExtendResult(rid, 0)], 0)
    rt.run(10)


# =========================================================================== REQ-5
@pytest.mark.behaviours("REQ-5", "FIN-2")
def test_failed_finish_writeback_leaves_no_host_copy() -> None:
    rt, rid = reach("WritingBack")
    op = rt.view(rid).op
    seq = rt.tokens[rid]
    assert len(host_owned(rt.sched.snapshot())) == 2  # the copy's destination pages
    rt.advance([WritebackDone(op, success=False)])
    snap = rt.sched.snapshot()
    assert rt.view(rid).state is S.FINISHED, "E-1: the request still finishes"
    assert host_owned(snap) == [], "E-1: the failed copy's host pages are freed"
    assert match_lengths(snap.cache, 0, seq) == (4, 0)
    rt.run(5)
    m = rt.sched.cache.match(0, seq)
    assert m.host_len == 0 and m.device_len == 4


@pytest.mark.behaviours("REQ-5", "PLAN-6")
def test_failed_retract_writeback_recovers_by_recomputation() -> None:
    rt, rid = reach("Retracting")
    op = rt.view(rid).op
    seq = rt.tokens[rid]
    rt.advance([WritebackDone(op, success=False)])
    snap = rt.sched.snapshot()
    assert rt.view(rid).state is S.RETRACTED, "E-1: moves on as for a completed writeback"
    assert host_owned(snap) == []
    assert match_lengths(snap.cache, 0, seq)[1] == 0
    rt.run(100)
    assert rt.last[rid] is S.FINISHED


@pytest.mark.behaviours("REQ-5")
@pytest.mark.parametrize("seed", range(3))
def test_every_writeback_failing(seed: int) -> None:
    """All copies fail: nothing ever reaches host and every request still finishes."""
    rt = run_workload(cfg(device_pages=10, host_pages=8, max_tokens=6), seed, fail=1.0)
    assert host_owned(rt.sched.snapshot()) == []
    assert all(n.host is None for n in rt.sched.snapshot().cache.nodes if n.parent is not None)


# =========================================================================== PLAN-1..PLAN-5
@pytest.mark.behaviours("PLAN-1")
@pytest.mark.parametrize("name", ["PrefillDone", "Decoding-due"])
def test_no_row_while_a_token_is_due(name: str) -> None:
    rt, rid = reach(name)
    rt.submit(spec("b", (1, 2, 3, 1, 2, 0)))  # other work, so plans are not empty
    for _ in range(3):
        plan = rt.plan()
        assert rid not in [row.rid for row in plan.rows], "PLAN-1: a row before the result"
    rt.run(50)


@pytest.mark.behaviours("PLAN-2")
@pytest.mark.parametrize(("max_tokens", "max_batch"), [(1, 4), (3, 2), (5, 1), (7, 3)])
def test_budget_and_batch_are_never_exceeded(max_tokens: int, max_batch: int) -> None:
    config = cfg(device_pages=64, max_tokens=max_tokens, max_batch=max_batch, max_slots=6)
    rt = run_workload(config, max_tokens, n=6, stagger=False)
    sizes = [sum(len(r.input_tokens) for r in p.rows) for p in rt.plans]
    batches = [len(p.rows) for p in rt.plans]
    assert max(sizes) <= max_tokens and max(batches) <= max_batch
    assert max_tokens in sizes or max_batch in batches, "the limits were never reached"


@pytest.mark.behaviours("PLAN-3")
@pytest.mark.parametrize("mixed", [False, True])
def test_mixed_prefill_and_decode(mixed: bool) -> None:
    rt = Runtime(cfg(mixed=mixed), k=8, ack_later=0.0)
    rt.submit(spec("a", (1, 2, 3)))
    rt.step()  # a: prefill, then decoding
    rt.submit(spec("b", (2, 2, 2, 2, 2, 2, 2)), spec("c", (3, 3, 3, 3, 3, 3)))
    plan = rt.plan()
    kinds = sorted(row.kind for row in plan.rows)
    if mixed:
        assert kinds == ["decode", "prefill", "prefill"]
    else:
        assert kinds == ["prefill", "prefill"], "PLAN-3: a decode row beside a prefill"
    rt.advance(rt.respond(plan))
    rt.run(60)
    if not mixed:
        for p in rt.plans:
            assert len({row.kind for row in p.rows}) <= 1


@pytest.mark.behaviours("PLAN-4")
@pytest.mark.parametrize("length", [1, 2, 3, 4, 7, 8])
def test_a_fully_cached_sequence_still_computes_its_last_token(length: int) -> None:
    prompt = tuple(range(1, length + 1))
    rt = Runtime(cfg(host_pages=0), k=1)
    rt.submit(spec("a", prompt))
    rt.run(10)
    rt.submit(spec("b", prompt))  # a's full pages are cached: all of b but a partial page
    plan = rt.plan()
    (row,) = plan.rows
    p = rt.config.page_size
    assert row.reused == ((length - 1) // p) * p, "the device match of tokens[:-1] is reused"
    assert row.reused < length and row.start + len(row.input_tokens) == length and row.samples
    rt.advance(rt.respond(plan))
    rt.run(10)


@pytest.mark.behaviours("PLAN-4", "PLAN-2")
def test_chunks_cover_the_sequence_exactly() -> None:
    rt = Runtime(cfg(max_tokens=3), k=1)
    prompt = (1, 2, 3, 1, 2, 3, 1, 2)
    rt.submit(spec("a", prompt))
    rt.run(10)
    rows = [row for p in rt.plans for row in p.rows if row.kind == "prefill"]
    assert [(r.start, len(r.input_tokens)) for r in rows] == [(0, 3), (3, 3), (6, 2)]
    assert [r.samples for r in rows] == [False, False, True]
    assert rt.sched.transitions[:3] == [
        ("a", S.SUBMITTED, Event.CHUNK, S.PREFILLING),
        ("a", S.PREFILLING, Event.CHUNK, S.PREFILLING),
        ("a", S.PREFILLING, Event.LAST_CHUNK, S.PREFILL_DONE),
    ]


def evict_to_host(rt: Runtime, prompt: tuple[int, ...], filler_len: int) -> None:
    """Run ``prompt`` to the end (written back), then a filler that pushes it off the device."""
    rt.submit(spec("first", prompt))
    rt.run(10)
    rt.submit(spec("filler", tuple([7] * filler_len)))
    rt.run(10)


@pytest.mark.behaviours("PLAN-5")
def test_host_only_prefix_is_loaded_back_into_the_row_page_table() -> None:
    rt = Runtime(cfg(device_pages=4, host_pages=16), k=1, ack_later=0.0)
    prompt = (1, 2, 3, 1, 2)
    evict_to_host(rt, prompt, 7)
    snap = rt.sched.snapshot()
    assert match_lengths(snap.cache, 0, prompt) == (0, 4), "the prefix is on host only"
    rt.submit(spec("b", prompt + (3,)))
    plan = rt.plan()
    (row,) = plan.rows
    (lb,) = plan.loadbacks
    assert lb.rid == "b" and lb.kind == "loadback" and len(lb.pairs) == 2
    assert row.reused == 4
    assert [dst for _, dst in lb.pairs] == list(row.page_table[:2]), "PLAN-5: lands in the table"
    hosts = tier_blocks(snap.cache, H)
    assert [hosts[src] for src, _ in lb.pairs] == [(0, prompt[:2]), (0, prompt[:4])]
    rt.advance(rt.respond(plan))
    rt.run(10)


@pytest.mark.behaviours("PLAN-5", "REQ-2")
def test_no_loadback_for_a_first_chunk_that_does_not_fit() -> None:
    """The host prefix fits on device but the rest of the first chunk does not: neither the
    loadback nor the row is planned (a loadback with no row, or a pin on a device node that the
    loadback's eviction emptied, were both possible in an earlier revision)."""
    rt = Runtime(cfg(device_pages=4, host_pages=16), k=1, ack_later=0.0)
    prompt = (1, 2, 3, 1, 2)
    evict_to_host(rt, prompt, 7)
    rt.ks["d"] = 6
    rt.submit(spec("d", (5, 5, 5)))  # decodes on two pinned pages for a while
    rt.step()
    rt.submit(spec("b", prompt + (3, 3)))  # two pages to load back and two to compute
    plan = rt.plan()
    assert "b" not in [row.rid for row in plan.rows] and not plan.loadbacks
    assert rt.view("b").state is S.SUBMITTED and held_nothing(rt.view("b"))
    rt.advance(rt.respond(plan))
    rt.run(30)
    (brow,) = [row for p in rt.plans for row in p.rows if row.rid == "b" and row.kind == "prefill"]
    assert brow.reused == 4
    for p in rt.plans:
        for lb in p.loadbacks:  # the other half of PLAN-5: never acked as a writeback
            assert_rejected(rt, [WritebackDone(lb.op_id)], 0)


@pytest.mark.behaviours("PLAN-5", "PLAN-6", "FIN-2")
@pytest.mark.parametrize("name", ["Retracting", "WritingBack", "Draining"])
def test_no_row_while_the_request_data_is_in_flight(name: str) -> None:
    rt, rid = reach(name)
    rt.submit(spec("b", (0, 1)))
    state = rt.view(rid).state
    for _ in range(3):
        plan = rt.plan()
        assert rid not in [row.rid for row in plan.rows], f"PLAN-5: a row while {state}"
        if state is S.DRAINING:
            assert rt.view(rid).state is S.WRITING_BACK  # the next plan carries the copy
            assert [op.rid for op in plan.writebacks] == [rid]
            state = S.WRITING_BACK
        assert rt.view(rid).state is state, "nothing moves before the ack"
        evs = [e for row in plan.rows if row.samples for e in rt.result(row.rid)]
        rt.advance(evs)
    rt.run(60)


# =========================================================================== PLAN-6
def retraction_runtime(host_pages: int) -> Runtime:
    """Four device pages: ``a`` (one page) and ``b`` (three, namespace 1) both decode; ``a``'s
    next page does not fit, so ``b``, the longer, is pushed off."""
    rt = Runtime(cfg(device_pages=4, host_pages=host_pages), k=3, ack_later=1.0)
    rt.submit(spec("a", (1, 1)), spec("b", (2, 3, 2, 3, 2), ns=1))
    rt.step()
    return rt


@pytest.mark.behaviours("PLAN-6", "PLAN-5", "REQ-1")
def test_retraction_with_a_host_copy() -> None:
    rt = retraction_runtime(host_pages=8)
    b_pages = rt.view("b").pages
    plan = rt.plan()
    assert [row.rid for row in plan.rows] == [], "a's decode did not fit this plan"
    (wb,) = plan.writebacks
    assert (wb.rid, wb.kind, wb.retract) == ("b", "writeback", True)
    assert [src for src, _ in wb.pairs] == list(b_pages[:2]), "its two full pages are copied"
    v = rt.view("b")
    assert v.state is S.RETRACTING and v.op == wb.op_id and held_nothing(v)
    seq = rt.tokens["b"]
    cache = rt.sched.snapshot().cache
    assert match_lengths(cache, 1, seq)[0] == 4, "full pages inserted in b's own namespace"
    assert match_lengths(cache, 0, seq) == (0, 0)
    owners = cache.pools[D].owners
    assert owners[b_pages[2]] == "free", "the partial page is freed"
    rt.advance([])  # the ack is late: b stays Retracting
    plan = rt.plan()
    assert rt.view("b").state is S.RETRACTING and "b" not in [r.rid for r in plan.rows]
    evs = [e for row in plan.rows if row.samples for e in rt.result(row.rid)]
    rt.advance([*evs, WritebackDone(wb.op_id)])
    assert rt.view("b").state is S.RETRACTED
    assert match_lengths(rt.sched.snapshot().cache, 1, seq)[1] == 4, "the copy landed on host"
    rt.run(40)
    recovered = [row for p in rt.plans for row in p.rows if row.rid == "b" and row.reused]
    assert recovered and recovered[0].reused == 4 and recovered[0].start == 4
    assert [t[2] for t in rt.sched.transitions if t[0] == "b"].count(Event.RETRACT) == 1


@pytest.mark.behaviours("PLAN-6")
def test_retraction_without_a_host_tier() -> None:
    rt = retraction_runtime(host_pages=0)
    plan = rt.plan()
    assert not plan.writebacks and not plan.rows
    assert rt.view("b").state is S.RETRACTED and held_nothing(rt.view("b"))
    assert ("b", S.DECODING, Event.RETRACT_NO_COPY, S.RETRACTED) in rt.sched.transitions
    rt.advance([])
    rt.run(40)
    recovered = [row for p in rt.plans for row in p.rows if row.rid == "b" and row.kind ==
                 "prefill" and row.start > 0]
    assert recovered and recovered[0].reused == 4, "its pages survived on device and are reused"


@pytest.mark.behaviours("PLAN-6", "LIVE-1")
@pytest.mark.parametrize("host_pages", [0, 3, 16])
@pytest.mark.parametrize("seed", range(3))
def test_tiny_device_retracts_and_everyone_finishes(host_pages: int, seed: int) -> None:
    """Each request fits the device alone, not all together: retractions happen, all finish."""
    config = cfg(page_size=2, device_pages=6, host_pages=host_pages, max_tokens=8, max_slots=4)
    rng = random.Random(seed)
    rt = Runtime(config, seed=seed, k=4)
    for i in range(5):
        rt.submit(spec(f"r{i}", rt.prompt(rng.randint(2, 6)), rng.randrange(2)))
    rt.run(250)
    events = [ev for _rid, _f, ev, _t in rt.sched.transitions]
    assert Event.RETRACT in events or Event.RETRACT_NO_COPY in events, "no retraction happened"
    if host_pages == 0:
        assert Event.RETRACT not in events


# =========================================================================== PLAN-7
def prefix_nodes(cache: CacheSnapshot, ns: int, tokens: Sequence[int]) -> list:
    """The non-root nodes of ``ns`` whose whole prefix is a prefix of ``tokens``."""
    tokens = tuple(tokens)
    return [n for n in cache.nodes if n.parent is not None and n.namespace == ns
            and tokens[: len(cache.full_tokens(n.id))] == cache.full_tokens(n.id)]


@pytest.mark.behaviours("PLAN-7")
@pytest.mark.parametrize("host_pages", [0, 8])
def test_mid_flight_publish_is_reused_and_pinned_by_its_publisher(host_pages: int) -> None:
    rt = Runtime(cfg(host_pages=host_pages, publish_mid_flight=True), k=8, ack_later=0.0)
    prompt = (1, 2, 3, 1, 2)  # two full pages and a partial one
    rt.submit(spec("a", prompt))
    rt.step()
    assert rt.view("a").state is S.DECODING
    cache = rt.sched.snapshot().cache
    assert match_lengths(cache, 0, prompt) == (4, 0), "D381-1: published at its first token"
    rt.submit(spec("b", prompt[:4] + (0, 0, 3)))
    rt.ks["b"] = 1
    plan = rt.plan()
    (brow,) = [row for row in plan.rows if row.rid == "b"]
    assert brow.reused == 4 and brow.page_table[:2] == rt.view("a").pages[:2]
    # b finishes long before a; a's pin keeps its prompt's nodes on device (D381-2).
    rt.advance(rt.respond(plan))
    b_done = False
    while rt.view("a").state is S.DECODING:
        nodes = prefix_nodes(rt.sched.snapshot().cache, 0, prompt[:4])
        assert nodes and all(n.device_ref > 0 for n in nodes), "D381-2: the publisher's pin"
        b_done = b_done or rt.view("b") is None
        rt.step()
    assert b_done, "b was gone while a still decoded"
    rt.run(20)
    assert all(n.device_ref == 0 for n in rt.sched.snapshot().cache.nodes)


@pytest.mark.behaviours("PLAN-7")
def test_without_mid_flight_publish_nothing_is_reused_until_finish() -> None:
    rt = Runtime(cfg(publish_mid_flight=False), k=4, ack_later=0.0)
    prompt = (1, 2, 3, 1, 2)
    rt.submit(spec("a", prompt))
    rt.step()
    assert match_lengths(rt.sched.snapshot().cache, 0, prompt) == (0, 0)
    rt.submit(spec("b", prompt + (3,)))
    plan = rt.plan()
    (brow,) = [row for row in plan.rows if row.rid == "b"]
    assert brow.reused == 0 and rt.view("a").state is S.DECODING
    rt.advance(rt.respond(plan))
    rt.run(20)
    rt.submit(spec("c", prompt + (3,)))  # after a finished: published at its finish
    plan = rt.plan()
    assert plan.rows[0].reused == 4


# =========================================================================== NS-3
@pytest.mark.behaviours("NS-3", "PLAN-7", "FIN-1")
@pytest.mark.parametrize("mid_flight", [True, False])
def test_every_continuation_stays_in_the_request_namespace(mid_flight: bool) -> None:
    """Chunks, decodes and both publishes of an adapter's request are in its namespace only."""
    rt = Runtime(cfg(max_tokens=2, publish_mid_flight=mid_flight), k=4, ack_later=0.0)
    prompt = (1, 2, 3, 1, 2, 0, 3)
    rt.submit(spec("a", prompt, 5))
    rows = []
    while rt.view("a") is not None and rt.view("a").state is not S.DECODING:
        rows.extend(rt.step().rows)
    assert len(rows) == 4 and all(row.namespace == 5 for row in rows), rows
    cache = rt.sched.snapshot().cache
    assert match_lengths(cache, 0, prompt)[0] == 0, "NS-3: published into the base model"
    assert match_lengths(cache, 5, prompt)[0] == (6 if mid_flight else 0)
    rt.run(20)
    assert all(row.namespace == 5 for plan in rt.plans for row in plan.rows)
    cache = rt.sched.snapshot().cache
    assert match_lengths(cache, 0, prompt + (0,)) == (0, 0), "NS-3: finished into namespace 0"
    assert max(match_lengths(cache, 5, prompt)) == 6


# =========================================================================== PLAN-9
@pytest.mark.behaviours("PLAN-9")
def test_adapter_cap_counts_only_rows_of_the_forward() -> None:
    """A request whose row cannot be planned (no device room) takes no adapter place: the next
    adapter's request that fits is planned in the same forward (D268-5)."""
    rt = Runtime(cfg(device_pages=5, host_pages=0, max_adapters=1), k=3, ack_later=0.0)
    rt.submit(spec("hog", (1, 2, 3, 1, 2, 0)))
    rt.step()
    rt.submit(spec("big", (0, 0, 1, 1, 2), 1), spec("small", (3,), 2))
    plan = rt.plan()
    assert {row.rid: row.namespace for row in plan.rows} == {"small": 2, "hog": 0}
    rt.advance(rt.respond(plan))
    rt.run(40)


@pytest.mark.behaviours("PLAN-9", "LIVE-1")
@pytest.mark.parametrize("cap", [1, 2])
def test_adapter_cap_holds_and_every_adapter_gets_its_turn(cap: int) -> None:
    """More adapters than places: every plan within the cap (checked on each), all finish."""
    rt = Runtime(cfg(max_adapters=cap, max_batch=4), k=3)
    rng = random.Random(cap)
    for s in workload(rt, 8, rng, namespaces=4):
        rt.submit(s)
    rt.run(200)
    served = [{row.namespace for row in plan.rows} - {0} for plan in rt.plans]
    assert max(len(a) for a in served) == cap


@pytest.mark.behaviours("PLAN-9")
def test_a_negative_adapter_cap_is_rejected() -> None:
    with pytest.raises(CacheError, match="max_adapters"):
        cfg(max_adapters=-1)


# =========================================================================== FIN-1, FIN-2
@pytest.mark.behaviours("FIN-1", "FIN-2", "REQ-3")
@pytest.mark.parametrize("host_pages", [0, 8])
@pytest.mark.parametrize("k", [1, 2])
def test_finish_publishes_full_pages_and_frees_the_partial_one(host_pages: int, k: int) -> None:
    rt = Runtime(cfg(host_pages=host_pages, publish_mid_flight=False), k=k, ack_later=0.0)
    prompt = (1, 2, 3, 1, 2)
    rt.submit(spec("a", prompt, ns=1))
    while True:
        plan = rt.plan()
        evs = rt.respond(plan)
        if any(isinstance(e, Finish) for e in evs):
            break
        rt.advance(evs)
    before = rt.view("a")
    rt.advance(evs)
    v = rt.view("a")
    seq = rt.tokens["a"]
    full = (len(seq) - 1) // 2  # the last reported token has no KV
    snap = rt.sched.snapshot()
    assert match_lengths(snap.cache, 1, seq) == (2 * full, 0), "FIN-1: full pages in the tree"
    assert match_lengths(snap.cache, 0, seq) == (0, 0), "FIN-1: in its own namespace only"
    partial = before.pages[full:]
    owners = snap.cache.pools[D].owners
    assert all(owners[pg] == "free" for pg in partial), "FIN-1: the partial page is freed"
    assert v.slot is None and before.slot in snap.free_slots, "FIN-1: the slot is released"
    assert "caller" not in owners
    if host_pages:
        assert v.state is S.DRAINING and v.lock is not None, "FIN-2: drains to host"
        plan = rt.plan()
        (wb,) = plan.writebacks
        assert wb.rid == "a" and not wb.retract and rt.view("a").state is S.WRITING_BACK
        assert [src for src, _ in wb.pairs] == list(before.pages[:full])
        rt.advance([])
        rt.plan()
        assert rt.view("a").state is S.WRITING_BACK, "FIN-2: Finished only after the ack"
        rt.advance([WritebackDone(wb.op_id)])
        assert rt.view("a").state is S.FINISHED
        assert match_lengths(rt.sched.snapshot().cache, 1, seq) == (2 * full, 2 * full)
    else:
        assert v.state is S.FINISHED and held_nothing(v), "FIN-2: no host, straight to Finished"
    rt.plan()
    assert rt.view("a") is None
    check_rest(rt.sched.snapshot())
    m = rt.sched.cache.match(1, seq)
    assert m.device_len == 2 * full and m.host_len == (2 * full if host_pages else 0)


@pytest.mark.behaviours("FIN-1")
def test_finish_frees_duplicates_of_pages_already_cached() -> None:
    rt = Runtime(cfg(host_pages=0, publish_mid_flight=False), k=2, ack_later=0.0)
    prompt = (1, 2, 3, 1, 2)
    rt.submit(spec("a", prompt), spec("b", prompt))  # same prompt: both compute it
    plan = rt.plan()
    a_pages, b_pages = rt.view("a").pages, rt.view("b").pages
    assert not set(a_pages) & set(b_pages)
    rt.advance([ExtendResult("a", 0), ExtendResult("b", 0)])
    rt.advance([Finish("a")])
    owners = rt.sched.snapshot().cache.pools[D].owners
    assert all(owners[pg].startswith("node:") for pg in a_pages[:2])
    rt.advance([Finish("b")])  # b's first two pages duplicate a's
    owners = rt.sched.snapshot().cache.pools[D].owners
    assert all(owners[pg] == "free" for pg in b_pages), "TREE-5: duplicates and partial freed"
    assert len(plan.rows) == 2
    rt.run(5)


@pytest.mark.behaviours("FIN-2")
def test_nothing_to_copy_finishes_at_once() -> None:
    """A request without a full page has nothing to write back, host tier or not."""
    rt = Runtime(cfg(host_pages=8), k=1, ack_later=0.0)
    rt.submit(spec("a", (5,)))
    plan = rt.plan()
    rt.advance(rt.respond(plan))
    assert rt.view("a").state is S.FINISHED and held_nothing(rt.view("a"))
    assert not rt.plan().writebacks


@pytest.mark.behaviours("FIN-2")
def test_draining_with_its_prefix_already_on_host_finishes_without_a_copy() -> None:
    rt = Runtime(cfg(host_pages=8), k=1, ack_later=0.0)
    rt.submit(spec("a", (1, 2, 3, 1, 2)))
    rt.run(10)
    rt.submit(spec("b", (1, 2, 3, 1, 2)))
    rt.step()
    assert rt.view("b").state is S.DRAINING
    plan = rt.plan()
    assert not plan.writebacks, "the prefix is on host already"
    assert rt.sched.transitions[-1] == ("b", S.DRAINING, Event.WRITEBACK, S.FINISHED)


# =========================================================================== LIVE-1
@pytest.mark.behaviours("LIVE-1")
@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("k", [1, 4])
def test_every_request_finishes_within_a_bound(name: str, k: int) -> None:
    n = 8
    rt = run_workload(CONFIGS[name], seed=11 * k, n=n, k=k, stagger=False)
    assert len(rt.plans) <= 50 * n + 1
    assert all(state is S.FINISHED for state in rt.last.values()) and len(rt.last) == n


@pytest.mark.behaviours("LIVE-1")
def test_requests_keep_arriving() -> None:
    """A new request every plan for a while: the early ones are not starved."""
    rt = Runtime(cfg(device_pages=16, host_pages=8, max_tokens=6, max_batch=3), seed=3, k=3)
    finished_at: dict[str, int] = {}
    for i in range(30):
        rt.submit(spec(f"r{i}", rt.prompt(3 + i % 4)))
        rt.step()
        for rid, state in rt.last.items():
            if state is S.FINISHED and rid not in finished_at:
                finished_at[rid] = i
    rt.run(300)
    assert "r0" in finished_at and finished_at["r0"] < 15


# =========================================================================== DET-1
@pytest.mark.behaviours("DET-1")
@pytest.mark.parametrize("name", ["roomy", "tight", "tight-no-host", "page1"])
def test_same_submissions_and_events_give_the_same_plans(name: str) -> None:
    first = run_workload(CONFIGS[name], 5, fail=0.2)
    again = run_workload(CONFIGS[name], 5, fail=0.2)
    assert again.plans == first.plans and again.events == first.events
    assert again.snaps == first.snaps
    assert again.sched.transitions == first.sched.transitions
    # A bare scheduler fed the recorded submissions and events gives the same plans.
    bare = Scheduler(CONFIGS[name])
    for kind, what in first.trace:
        if kind == "submit":
            bare.submit(what)
        elif kind == "plan":
            assert bare.next_plan() == what, "DET-1: a different plan"
        else:
            bare.advance(what)
    assert bare.snapshot() == first.sched.snapshot()
    assert bare.transitions == first.sched.transitions


# =========================================================================== state machine
PICK = st.integers(0, 1 << 16)


class SchedulerMachine(RuleBasedStateMachine):
    """Arbitrary interleavings of what a runtime may do, every step checked (REQ-1..REQ-3,
    PLAN-1..PLAN-6 through :class:`Runtime`), illegal events thrown in (REQ-2)."""

    config = cfg(device_pages=8, host_pages=6, max_tokens=4, max_batch=3, max_slots=3)
    max_live = 6

    def __init__(self) -> None:
        super().__init__()
        self.rt = Runtime(self.config, k=1 << 30, alphabet=3)
        self.prompts: list[tuple[int, ...]] = []
        self.count = 0
        self.erased: list[str] = []

    # ------------------------------------------------------------------ helpers
    def requests(self, pred) -> list:
        return [v for v in self.rt.sched.snapshot().requests if pred(v)]

    def pick(self, items: list, i: int):
        return items[i % len(items)]

    def send(self, evs: list[RuntimeEvent]) -> None:
        before = {v.rid for v in self.rt.sched.snapshot().requests}
        self.rt.advance(evs)
        assert {v.rid for v in self.rt.sched.snapshot().requests} == before

    # ------------------------------------------------------------------ rules
    @precondition(lambda self: len(self.requests(lambda v: v.state is not S.FINISHED))
                  < self.max_live)
    @rule(base=PICK, cut=st.integers(0, 8), tail=st.lists(st.integers(0, 2), min_size=1,
                                                            max_size=5), ns=st.integers(0, 1))
    def submit(self, base: int, cut: int, tail: list[int], ns: int) -> None:
        head = self.pick(self.prompts, base)[:cut] if self.prompts else ()
        prompt = tuple(head) + tuple(tail)
        self.prompts.append(prompt)
        self.count += 1
        self.rt.submit(spec(f"q{self.count}", prompt, ns))

    @rule()
    def plan(self) -> None:
        before = {v.rid for v in self.rt.sched.snapshot().requests if v.state is S.FINISHED}
        self.rt.plan()
        self.erased.extend(sorted(before))

    @rule(fail=st.booleans())
    def cycle(self, fail: bool) -> None:
        """A whole runtime step: plan, report every due token, ack every copy."""
        self.plan()
        evs: list[RuntimeEvent] = [ExtendResult(v.rid, 2) for v in self.requests(
            lambda v: v.awaiting)]
        evs += [WritebackDone(op, not fail) for op, _ in self.rt.sched.snapshot().ops]
        self.send(evs)

    @precondition(lambda self: self.requests(lambda v: v.awaiting))
    @rule(i=PICK, finish=st.sampled_from([False, False, True]))
    def report(self, i: int, finish: bool) -> None:
        v = self.pick(self.requests(lambda v: v.awaiting), i)
        evs: list[RuntimeEvent] = [ExtendResult(v.rid, i % 3)]
        if finish:
            evs.append(Finish(v.rid))
        self.send(evs)

    def finishable(self, v) -> bool:
        """Decoding with a few tokens out (finishing at once leaves little to decode), or off
        the device (a runtime may finish a retracted request)."""
        return ((v.state is S.DECODING and not v.awaiting and self.rt.reported[v.rid] >= 3)
                or v.state is S.RETRACTED)

    @precondition(lambda self: self.requests(self.finishable))
    @rule(i=PICK)
    def finish(self, i: int) -> None:
        v = self.pick(self.requests(self.finishable), i)
        self.send([Finish(v.rid)])
        after = self.rt.view(v.rid)
        assert after.state in TRANSITIONS[(v.state, Event.FINISH)]
        assert after.slot is None and not after.pages[after.shared:]

    @precondition(lambda self: self.requests(lambda v: v.state is not S.FINISHED))
    @rule(i=PICK)
    def abort(self, i: int) -> None:
        v = self.pick(self.requests(lambda v: v.state is not S.FINISHED), i)
        self.send([Abort(v.rid)])
        assert held_nothing(self.rt.view(v.rid)), "REQ-4"

    @precondition(lambda self: self.rt.sched.snapshot().ops)
    @rule(i=PICK, success=st.booleans())
    def ack(self, i: int, success: bool) -> None:
        op, rid = self.pick(list(self.rt.sched.snapshot().ops), i)
        v = self.rt.view(rid)
        self.send([WritebackDone(op, success)])
        if v is not None and v.op == op and v.state in (S.RETRACTING, S.WRITING_BACK):
            assert self.rt.view(rid).state in TRANSITIONS[(v.state, Event.WRITEBACK_DONE)]
        if not success:
            assert all(o != f"transfer:{op}" for o in self.rt.sched.snapshot().cache.pools[H]
                       .owners), "REQ-5: the failed copy's host pages are freed"

    @rule()
    def everything_due(self) -> None:
        """One list with every due token and every ack: a big legal advance."""
        evs: list[RuntimeEvent] = [ExtendResult(v.rid, 1) for v in self.requests(
            lambda v: v.awaiting)]
        evs += [WritebackDone(op) for op, _ in self.rt.sched.snapshot().ops]
        self.send(evs)

    @rule(i=PICK, j=PICK, erased=st.booleans())
    def illegal(self, i: int, j: int, erased: bool) -> None:
        snap = self.rt.sched.snapshot()
        if erased and self.erased:
            rid = self.pick(self.erased, i)
            evs = self.pick([[Abort(rid)], [Finish(rid)], [ExtendResult(rid, 0)]], j)
            assert_rejected(self.rt, evs, 0)
            return
        if not snap.requests:
            assert_rejected(self.rt, [WritebackDone(10_000)], 0)
            return
        v = self.pick(list(snap.requests), i)
        evs, bad = self.pick(illegal_lists(v, self.config.host_pages > 0), j)
        assert_rejected(self.rt, evs, bad)

    # ------------------------------------------------------------------ invariants
    @invariant()
    def holds(self) -> None:
        snap = self.rt.sched.snapshot()
        check_holds(snap, self.config)
        check_transitions(self.rt.sched)
        for v in snap.requests:
            assert self.rt.last.get(v.rid, S.SUBMITTED) is v.state

    def teardown(self) -> None:
        if sys.exc_info()[0] is not None:
            return
        rt = self.rt
        rt.k, rt.ack_later = 1, 0.0
        for _ in range(60):  # let what fits finish, then abort the rest
            if not rt.live():
                break
            plan = rt.plan()
            due = [v.rid for v in rt.sched.snapshot().requests if v.awaiting]
            evs = [e for rid in due for e in rt.result(rid)]
            evs += [Finish(v.rid) for v in rt.sched.snapshot().requests
                    if v.state is S.DECODING and not v.awaiting]
            rt.unacked = []
            evs += [WritebackDone(op) for op, _ in rt.sched.snapshot().ops]
            rt.advance(evs)
            assert plan.step == rt.sched.step
        rt.advance([Abort(v.rid) for v in rt.sched.snapshot().requests
                    if v.state is not S.FINISHED])
        rt.advance([WritebackDone(op) for op, _ in rt.sched.snapshot().ops])
        rt.plan()
        check_rest(rt.sched.snapshot())


class UnmixedNoHostMachine(SchedulerMachine):
    config = cfg(page_size=1, device_pages=10, host_pages=0, max_tokens=4, max_batch=2,
                 max_slots=4, mixed=False, publish_mid_flight=False)


class Page3Machine(SchedulerMachine):
    config = cfg(page_size=3, device_pages=7, host_pages=4, max_tokens=8, max_batch=4,
                 max_slots=4)


TestSchedulerMachine = SchedulerMachine.TestCase
TestUnmixedNoHostMachine = UnmixedNoHostMachine.TestCase
TestPage3Machine = Page3Machine.TestCase


# =========================================================================== submit, tokens
def test_submit_rejects_repeated_or_empty_requests_and_queues_none() -> None:
    sched = Scheduler(cfg())
    sched.submit([spec("a", (1, 2))])
    before = sched.snapshot()
    for specs in ([spec("b", (1,)), spec("a", (3,))], [spec("b", (1,)), spec("b", (2,))],
                  [spec("b", (1,)), spec("c", ())]):
        with pytest.raises(SchedulerError) as info:
            sched.submit(specs)
        assert info.value.code in ("duplicate_request", "bad_request")
        assert sched.snapshot() == before


@pytest.mark.behaviours("REQ-2")
def test_a_token_the_cache_cannot_hold_is_rejected_up_front() -> None:
    """A token is checked when it is reported (bad_token), not when it is later published: an
    advance that passed its check must apply in full. Either the huge token is rejected at once
    and changes nothing, or everything after it still works."""
    sched = Scheduler(cfg(host_pages=0))
    sched.submit([spec("a", (1, 2, 3)), spec("b", (4, 5, 6))])
    sched.next_plan()
    before = sched.snapshot()
    try:
        sched.advance([ExtendResult("a", 2**63), ExtendResult("b", 7)])
    except SchedulerError as e:
        assert (e.rid, e.state) == ("a", S.PREFILL_DONE) and sched.snapshot() == before
        return
    sched.next_plan()  # a decodes the huge token: its KV is now computed
    sched.advance([ExtendResult("a", 1), ExtendResult("b", 7)])
    sched.advance([Finish("b"), Finish("a")])  # raises CacheError with b already finished
    assert {v.state for v in sched.snapshot().requests} == {S.FINISHED}


@pytest.mark.behaviours("REQ-2")
def test_malformed_runtime_input_is_rejected_and_changes_nothing() -> None:
    s = Scheduler(SchedulerConfig(page_size=2))
    s.submit([RequestSpec("a", (1, 2, 3))])
    s.next_plan()
    before = s.snapshot()
    for bad in ([object()], [WritebackDone(True)], [ExtendResult("a", 2**63)],
                [ExtendResult("a", 1), "Finish a"]):
        with pytest.raises(SchedulerError):
            s.advance(bad)  # type: ignore[list-item]
        assert s.snapshot() == before
    for spec in (RequestSpec("b", (1, -2)), RequestSpec("c", (1,), -1), "d"):
        with pytest.raises(SchedulerError) as e:
            s.submit([spec])  # type: ignore[list-item]
        assert e.value.code == "bad_request"
        assert s.snapshot() == before


@pytest.mark.behaviours("PLAN-6")
def test_which_decoding_request_is_retracted_is_left_to_engines() -> None:
    """PLAN-6 holds what happens to the request pushed off, not which one (the requests
    chapter leaves it open): a scheduler that retracts the decoding request admitted last (as
    vLLM does) instead of the longest passes the retraction scenarios with every oracle, on
    traces where it picks another victim than the reference."""
    from functools import partial

    from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter
    from kvconf.conformance.scheduler.generator import play_sched
    from kvconf.conformance.scheduler.scenarios import SCHED_SCENARIOS

    picked: dict[str, list[str]] = {}

    def spy(name: str, choose):
        def _victim(self, cands):
            v = choose(self, cands)
            picked.setdefault(name, []).append(v.rid)
            return v
        return type(name, (Scheduler,), {"_victim": _victim})

    longest = spy("longest", Scheduler._victim)
    last = spy("last", lambda self, cands: max(cands, key=lambda r: r.arrival))
    differ = 0
    for sc in SCHED_SCENARIOS:
        if "PLAN-6" not in sc.behaviours or sc.trace.config.mamba:
            continue
        picked.clear()
        for cls in (longest, last):
            play_sched(partial(ReferenceSchedulerAdapter, scheduler_cls=cls), sc.trace)
        differ += picked.get("longest") != picked.get("last")
    assert differ, "no retraction scenario tells the two choices apart"
