"""The reference scheduler: requests over the prefix cache, one plan at a time (spec REQ, PLAN).

Same loop as a real engine, so one driver serves both: ``submit(specs)``, ``next_plan()``,
``advance(events)``, ``snapshot()``. Every page a request uses is owned explicitly: its cached
prefix by the tree (pinned by the request's lock), the rest by the cache's caller account and
listed as the request's local pages; every resource a state holds (``requests.HOLDS``) is
released exactly once, by the transition that leaves it. A rejected ``advance`` changes nothing.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from kvconf.reference.errors import CacheError
from kvconf.reference.host_tier import Transfer
from kvconf.reference.l3 import L3Transfer
from kvconf.reference.mamba import MambaCache, MambaEntry, MambaView
from kvconf.reference.plan import (
    Abort,
    BackupDone,
    CopyOp,
    ExtendResult,
    Finish,
    ForwardRow,
    L3Op,
    Plan,
    PrefetchDone,
    RequestSpec,
    RuntimeEvent,
    WritebackDone,
)
from kvconf.reference.prefix_cache import CacheConfig, PrefixCache
from kvconf.reference.radix_tree import TOKEN
from kvconf.reference.requests import (
    LEGAL_MOVES,
    MOVE_CODE,
    TRANSITIONS,
    Event,
    State,
    TransitionLog,
    next_states,
)
from kvconf.reference.tiers import DEVICE, HOST
from kvconf.reference.window import window_from_model_config

# The states and events of a request's usual way (submitted, prefilled, decoded, finished,
# written back), read on every row and event, bound once as module constants: on Python 3.11 a
# member read off its Enum class goes through ``EnumType.__getattr__``, several times the cost
# of a global. The rest (prefetch, retraction, abort) are spelled with their Enum.
SUBMITTED, PREFILLING, PREFILL_DONE, DECODING = (
    State.SUBMITTED, State.PREFILLING, State.PREFILL_DONE, State.DECODING)
RETRACTING, RETRACTED, PREFETCH_DONE = State.RETRACTING, State.RETRACTED, State.PREFETCH_DONE
DRAINING, WRITING_BACK, FINISHED = State.DRAINING, State.WRITING_BACK, State.FINISHED
CHUNK, LAST_CHUNK, DECODE, EXTEND_RESULT = (
    Event.CHUNK, Event.LAST_CHUNK, Event.DECODE, Event.EXTEND_RESULT)
FINISH, WRITEBACK, WRITEBACK_DONE = Event.FINISH, Event.WRITEBACK, Event.WRITEBACK_DONE


class SchedulerError(Exception):
    """An event the state machine does not allow (REQ-2). Names the request, state and event."""

    def __init__(self, code: str, message: str, rid: str | None = None,
                 state: State | None = None, event: str | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message
        self.rid, self.state, self.event = rid, state, event


@dataclass(slots=True, frozen=True)
class SchedulerConfig:
    page_size: int = 2
    device_pages: int = 32
    host_pages: int = 32
    max_tokens: int = 16  # token budget of one forward (PLAN-2)
    max_batch: int = 4  # rows of one forward (PLAN-2)
    max_slots: int = 8  # request pool slots: requests holding device pages at once
    mixed: bool = True  # decode rows may join a forward that has prefill rows (PLAN-3)
    publish_mid_flight: bool = True  # publish a prompt's full pages when its prefill completes
    # Sliding-window attention (0 = full attention): the runtime may drop a request's KV more
    # than this many positions behind the one it computes, so none of it may be published
    # (PLAN-8, D381-4). An explicit switch, not inferred from any other object (D381-5).
    sliding_window: int = 0
    # An L3 store below the host tier (spec chapter l3_store): prompts with enough L3 hits are
    # prefetched into host first; every acknowledged writeback is backed up. Off: no L3 ops.
    l3_store: bool = False
    prefetch_threshold: int = 1  # pages past the cached prefix worth a prefetch (L3-2)
    # At most this many distinct adapters (non-base namespaces) among the rows of one forward,
    # like a runtime's LoRA slots (PLAN-9, D268-5); 0 = no cap.
    max_adapters: int = 0
    # Mamba state beside KV (spec chapter mamba): per request a working and a checkpoint slot,
    # per cached prefix a state of exact depth, moved by the same copies as KV. Off: no slots.
    mamba: bool = False
    mamba_slots: int = 16  # device state slots
    mamba_host_slots: int = 16  # host state slots

    def __post_init__(self) -> None:
        for name in ("max_tokens", "max_batch", "max_slots", "prefetch_threshold",
                     "mamba_slots"):
            if getattr(self, name) < 1:
                raise CacheError("bad_config", f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("sliding_window", "max_adapters", "mamba_host_slots"):
            if getattr(self, name) < 0:
                raise CacheError("bad_config", f"{name} must be >= 0, got {getattr(self, name)}")


@dataclass(slots=True)
class Request:
    spec: RequestSpec
    arrival: int
    rid: str = field(init=False)  # the spec's, kept at hand: read on every row and event
    state: State = SUBMITTED
    # The prompt, then every reported token: checked ``TOKEN`` words, the form the cache
    # compares and keys by, so a slice of them goes to a match or an insert as it is.
    tokens: array = field(default_factory=lambda: array(TOKEN))
    computed: int = 0  # leading positions whose KV is in ``pages``
    pages: list[int] = field(default_factory=list)  # device page table
    shared: int = 0  # leading pages of ``pages`` owned by the tree, pinned by ``lock``
    lock: int | None = None
    node: int | None = None  # the node ``lock`` pins
    slot: int | None = None
    awaiting: bool = False  # a row that samples was planned; its ExtendResult is due
    op: int | None = None  # the writeback in flight for this request
    prefetch: int | None = None  # its prefetch in flight (Prefetching)
    hlock: int | None = None  # host pin on the pages its prefetch fetched (PrefetchDone)
    # Mamba (MAMBA-7, MAMBA-8): request-local state slots, acquired at admission, refreshed by
    # each row, published or released at finish, retraction and abort, by this request alone.
    mamba: int | None = None  # working slot: the state at depth ``mdepth``
    mdepth: int = 0
    ckpt: int | None = None  # checkpoint slot: the state at the last page boundary passed
    ckpt_depth: int = 0
    mfailed: bool = False  # a checkpoint refresh failed (reported, D243-3)
    msrc: int = -1  # the cached device state its next row resumes from
    mstate: tuple[int, int, int] | None = None  # retract state: (entry, host slot, depth)

    def __post_init__(self) -> None:
        self.rid = self.spec.rid

    @property
    def local(self) -> list[int]:
        return self.pages[self.shared :]


# The views a snapshot is made of are not frozen, as ``reference.snapshot``'s are not: a frozen
# slotted dataclass pays one ``object.__setattr__`` per field when made (seventeen here, for each
# request a plan or an event changed). Nothing changes one once made; they hash by value.
@dataclass(slots=True, unsafe_hash=True)
class RequestView:
    """One request as a snapshot shows it: its state, its pages and slots, what it waits for."""

    rid: str
    state: State
    namespace: int
    length: int
    computed: int
    pages: tuple[int, ...]
    shared: int
    lock: int | None
    slot: int | None
    awaiting: bool
    op: int | None
    host_lock: int | None = None
    prefetch: int | None = None
    mamba: int | None = None  # working Mamba slot
    checkpoint: int | None = None  # checkpoint Mamba slot
    mamba_failed: bool = False  # a checkpoint refresh failed and was reported (D243-3)
    mamba_state: int | None = None  # the protected entry of its retract state (D162-5)


@dataclass(slots=True, unsafe_hash=True)  # not frozen: see RequestView
class SchedulerSnapshot:
    """A white-box view of a scheduler: its requests, its cache, free slots and transfers in
    flight."""

    step: int
    requests: tuple[RequestView, ...]
    cache: object  # reference.snapshot.CacheSnapshot
    free_slots: tuple[int, ...]
    ops: tuple[tuple[int, str], ...]  # writebacks in flight: (op id, request id)
    l3_ops: tuple[tuple[int, str], ...] = ()  # L3 transfers in flight: (op id, request id)
    mamba: MambaView | None = None  # state pools and entries (spec chapter mamba)


# The queue of ``next_plan`` a request in each of these states is planned from: draining,
# prefilling, new or prefetched, retracted, decoding (PLAN-1).
_QUEUE = {DECODING: 4, DRAINING: 0, PREFILLING: 1, SUBMITTED: 2, PREFETCH_DONE: 2,
          RETRACTED: 3}  # the commonest state first: ``_ordered`` tests them in this order

# The request-level runtime events and the state-machine event each one is.
_EVENT_OF = {ExtendResult: EXTEND_RESULT, Finish: FINISH, Abort: Event.ABORT}


def _state_after(after: dict[str, tuple[State, bool]], requests: dict[str, Request],
                 rid: str) -> tuple[State, bool] | None:
    """``rid``'s (state, awaiting) as the events checked so far leave it: ``after`` holds those
    an event changed, any other is read from the request as it is, so checking a list costs
    what its events name, not a copy of every request's state. None for an unknown request."""
    got = after.get(rid)
    if got is None:
        r = requests.get(rid)
        if r is not None:
            got = (r.state, r.awaiting)
    return got


class Scheduler:
    """Deterministic: requests are ordered by arrival, pages and slots come from stacks."""

    cache_cls: type[PrefixCache] = PrefixCache
    mamba_cls: type[MambaCache] = MambaCache
    # How the scheduler reads a model's window from its config (WIN-1, D381-6).
    model_window = staticmethod(window_from_model_config)

    def __init__(self, config: SchedulerConfig | None = None) -> None:
        self.config = config or SchedulerConfig()
        c = self.config
        self.p = c.page_size
        self.cache = self.cache_cls(CacheConfig(c.page_size, c.device_pages, c.host_pages,
                                                l3=c.l3_store))
        self._l3: dict[int, str] = {}  # L3 transfer in flight -> request id
        self._backups: list[L3Op] = []  # backups of acknowledged writebacks, for the next plan
        self.requests: dict[str, Request] = {}
        self._arrivals = 0
        # The last snapshot's view of each request, with the fields it was made from.
        self._views: dict[str, tuple[tuple, RequestView]] = {}
        self._snap: SchedulerSnapshot | None = None  # the last snapshot, whose equal parts stay
        self._slots = list(range(c.max_slots - 1, -1, -1))
        self._ops: dict[int, str] = {}  # writeback op id -> request id
        self.step = 0
        self.transitions = TransitionLog()
        self.mamba = self.mamba_cls(c.mamba_slots, c.mamba_host_slots) if c.mamba else None
        self._mops: dict[int, list[tuple[int, int, str | None]]] = {}  # op -> Mamba units
        self._mbusy: list[MambaEntry] = []  # entries this plan's rows read from

    # ----------------------------------------------------------------- submit
    def submit(self, specs: Sequence[RequestSpec]) -> None:
        """Queue new requests; a repeated or empty request is rejected, and then none is queued."""
        seen: set[str] = set()  # the ids of this list so far (the known ones are in requests)
        prompts: list[array] = []  # each prompt as checked
        for s in specs:
            if not isinstance(s, RequestSpec):
                raise SchedulerError("bad_request", f"{s!r} is not a RequestSpec")
            if s.rid in seen or s.rid in self.requests:
                raise SchedulerError("duplicate_request", f"request {s.rid!r} is already known",
                                     s.rid)
            if not s.tokens:
                raise SchedulerError("bad_request", f"request {s.rid!r} has an empty prompt",
                                     s.rid)
            try:
                prompts.append(self.cache._check_tokens(s.tokens, whole_pages=False))
            except CacheError as e:
                raise SchedulerError("bad_request", f"request {s.rid!r}: {e.message}",
                                     s.rid) from None
            if isinstance(s.namespace, bool) or not isinstance(s.namespace, int) \
                    or s.namespace < 0:
                raise SchedulerError("bad_request", f"request {s.rid!r}: namespace "
                                     f"{s.namespace!r} is not a non-negative int", s.rid)
            if isinstance(s.l3_hits, bool) or not isinstance(s.l3_hits, int) or s.l3_hits < 0:
                raise SchedulerError("bad_request", f"request {s.rid!r}: l3_hits "
                                     f"{s.l3_hits!r} is not a non-negative int", s.rid)
            seen.add(s.rid)
        for s, tokens in zip(specs, prompts, strict=True):
            self._arrivals += 1
            self.requests[s.rid] = Request(s, self._arrivals, tokens=tokens)

    # ----------------------------------------------------------------- transitions
    def _move(self, r: Request, event: Event, to: State) -> None:
        move = (r.state, event, to)
        code = MOVE_CODE[move]  # the move's number in the log, and below LEGAL_MOVES if legal
        assert code < LEGAL_MOVES, (r.rid, move)
        self.transitions.add_code(r.rid, code)
        r.state = to

    def _release_slot(self, r: Request) -> None:
        if r.slot is not None:
            self._slots.append(r.slot)
            r.slot = None

    def _unlock(self, r: Request) -> None:
        """Release the request's pin; its shared pages are then the tree's alone, so the
        request stops listing them (REQ-3: a state without a pin holds no pages)."""
        if r.lock is not None:
            self.cache.unlock(r.lock)
            r.lock = r.node = None
        r.pages = r.pages[r.shared :]
        r.shared = 0

    def _free_local(self, r: Request) -> None:
        """Give back the request-local pages of its table (the table itself is the caller's to
        reset)."""
        if r.local:
            self.cache.free(r.local)

    def _drop_pages(self, r: Request) -> None:
        """Give back everything the request holds on device: local pages, its pin, its slot."""
        self._free_local(r)
        r.pages, r.shared, r.computed = [], 0, 0
        self._unlock(r)
        self._release_slot(r)
        self._mamba_free(r)

    # ----------------------------------------------------------------- plan
    def next_plan(self) -> Plan:
        """Erase finished requests, plan writebacks of draining ones, then schedule rows."""
        self.step += 1
        self.cache.tick()
        if self.mamba is not None:
            self.mamba.tick()
            for e in self._mbusy:
                e.busy -= 1
                self.mamba.release(e)
            self._mbusy = []
        for rid in [rid for rid, r in self.requests.items() if r.state is FINISHED]:
            del self.requests[rid]
        # The requests this plan may act on, by arrival, in one pass: the draining ones, then
        # the ones a prefill row may take (prefilling first, then new and prefetched, then
        # retracted), then the decoding ones. Planning a row or a writeback moves a request
        # out of its queue, never into a later one, so the queues hold from here on.
        draining, prefilling, fresh, retracted, decoding = queues = ([], [], [], [], [])
        for r in self._ordered(*_QUEUE):
            queues[_QUEUE[r.state]].append(r)
        writebacks: list[CopyOp] = []
        for r in draining:
            writebacks.extend(self._plan_writeback(r))
        l3, self._backups = self._backups, []
        rows: list[ForwardRow] = []
        loadbacks: list[CopyOp] = []
        budget = self.config.max_tokens
        cap = self.config.max_adapters
        adapters: set[int] = set()  # adapters of the rows planned so far (PLAN-9)
        order = prefilling + fresh + retracted
        max_batch = self.config.max_batch
        for r in order:
            if len(rows) >= max_batch or budget <= 0:
                break
            if r.state is SUBMITTED and self.config.l3_store:
                op = self._prefetch(r)
                if op is not None:
                    l3.append(op)
                    continue
            if cap and self._capped(r, adapters):
                continue
            row = self._prefill_row(r, budget, loadbacks)
            if row is not None:
                rows.append(row)
                budget -= len(row.input_tokens)
                if cap:
                    self._count_adapter(row, adapters)
        if self.config.mixed or not rows:
            for r in decoding:
                if r.awaiting or r.state is not DECODING:  # retracted by a row before it
                    continue
                if len(rows) >= max_batch or budget <= 0:
                    break
                if cap and self._capped(r, adapters):
                    continue
                row = self._decode_row(r, writebacks, rows)
                if row is not None:
                    rows.append(row)
                    budget -= 1
                    if cap:
                        self._count_adapter(row, adapters)
        return Plan(self.step, tuple(rows), tuple(loadbacks), tuple(writebacks), tuple(l3))

    def _capped(self, r: Request, adapters: set[int]) -> bool:
        """Whether ``r``'s adapter would be one too many in this forward (PLAN-9). ``adapters``
        holds only the adapters of rows already planned: a queued, waiting or finished request,
        or one whose row could not be planned, takes no slot (D268-5)."""
        cap, ns = self.config.max_adapters, r.spec.namespace
        return bool(cap) and ns != 0 and ns not in adapters and len(adapters) >= cap

    @staticmethod
    def _count_adapter(row: ForwardRow, adapters: set[int]) -> None:
        if row.namespace != 0:
            adapters.add(row.namespace)

    def _ordered(self, *states: State) -> list[Request]:
        """The requests in ``states`` by arrival: the order ``requests`` keeps, since each is
        added once, at its arrival, and only ever removed."""
        return [r for r in self.requests.values() if r.state in states]

    def _prefetch(self, r: Request) -> L3Op | None:
        """Fetch the prompt's pages past its host match from L3 when enough of them are
        there (L3-2); keys are computed now, for the host match as it is now (D293-5)."""
        ns, p = r.spec.namespace, self.p
        hits = min(r.spec.l3_hits, (len(r.tokens) - 1) // p)
        if hits < self.config.prefetch_threshold:
            return None
        m = self.cache.match(ns, r.tokens[:-1])
        h, d = m.host_len // p, m.device_len // p
        least = max(h, d) - h + self.config.prefetch_threshold
        if hits - h < least:
            return None
        t = self.cache.start_prefetch(m.host_node, r.tokens[h * p : hits * p], hits - h, least)
        if t is None:
            return None
        r.prefetch = t.op_id
        self._l3[t.op_id] = r.rid
        self._move(r, Event.PREFETCH, State.PREFETCHING)
        return self._l3_op(t, r.rid)

    @staticmethod
    def _l3_op(t: L3Transfer, rid: str) -> L3Op:
        return L3Op(t.op_id, t.kind, rid, t.namespace, t.start, tuple(t.pages),
                    tuple(k.hex() for k in t.keys))

    def _release_host_pin(self, r: Request) -> None:
        if r.hlock is not None:
            self.cache.unlock(r.hlock)
            r.hlock = None

    def _alloc(self, n: int) -> list[int] | None:
        """``n`` device pages, evicting unpinned cache if the pool is short (EVICT-4)."""
        if n == 0:
            return []
        short = n - self.cache.available()
        if short > 0:
            self.cache.evict(DEVICE, short)
        return self.cache.alloc(n)

    def _admit(self, r: Request, budget: int, loadbacks: list[CopyOp]) -> bool:
        """First chunk of a new or retracted request: match, pin, load back what is on host.

        Room for the loadback and the first chunk together is made (evicting unpinned cache)
        before anything is committed, so a loadback is planned only for a row that runs (PLAN-5).
        """
        if not self._slots:
            return False
        ns, p = r.spec.namespace, self.p
        m = self.cache.match(ns, r.tokens[:-1])  # the last token is always computed (PLAN-4)
        msrc: tuple[MambaEntry | None, int | None] = (None, None)
        if self.mamba is not None:
            m, msrc = self._mamba_reuse(r, m)
            if msrc[0] is not None:
                msrc[0].busy += 1  # read by this plan: not evicted under the row
                self._mbusy.append(msrc[0])
            r.mamba = self.mamba.alloc(DEVICE, f"request:{r.rid}")
            if r.mamba is None:
                return False
        dev_lock = self.cache.lock(m.device_node, DEVICE)
        deeper = m.host_len > m.device_len
        host_lock = self.cache.lock(m.host_node, HOST) if deeper else None
        base = m.host_len if deeper else m.device_len
        load = (base - m.device_len) // p
        n = min(len(r.tokens) - base, budget)
        need = load + -(-(base + n) // p) - base // p
        short = need - self.cache.available()
        if short > 0:
            self.cache.evict(DEVICE, short)
        room = self.cache.available() >= need
        t = self.cache.start_loadback(m.host_node) if room and deeper else None
        if host_lock is not None:
            self.cache.unlock(host_lock)
        if not room or (deeper and t is None):
            self.cache.unlock(dev_lock)
            self._mamba_free(r, keep_state=True)
            return False
        mamba_units = self._mamba_admit(r, msrc) if self.mamba is not None else ()
        node, length, pages = m.device_node, m.device_len, list(m.device_pages)
        if t is not None:
            # A loadback in a plan lands before that plan's forward (PLAN-5): it is complete
            # as far as the tree is concerned, and the runtime copies before computing.
            loadbacks.append(CopyOp(t.op_id, "loadback", r.rid, tuple(t.pairs),
                                    mamba=mamba_units))
            mamba_units = ()
            self.cache.finish_transfer(t.op_id, True)
            m = self.cache.match(ns, r.tokens[:base])
            node, length, pages = m.device_node, m.device_len, list(m.device_pages)
            lock = self.cache.lock(node, DEVICE)
            self.cache.unlock(dev_lock)
            dev_lock = lock
        if mamba_units:  # the state alone is on host: a copy of its own (MAMBA-2)
            loadbacks.append(CopyOp(self.cache.reserve_op(), "loadback", r.rid, (),
                                    mamba=mamba_units))
        r.lock, r.node = dev_lock, node
        r.pages, r.shared, r.computed = pages, len(pages), length
        r.slot = self._slots.pop()
        return True

    def _prefill_row(self, r: Request, budget: int, loadbacks: list[CopyOp]) -> ForwardRow | None:
        fresh = r.state in (SUBMITTED, RETRACTED, PREFETCH_DONE)
        if fresh and not self._admit(r, budget, loadbacks):
            return None
        reused = r.computed if fresh else 0
        n = min(len(r.tokens) - r.computed, budget)
        need = -(-(r.computed + n) // self.p) - len(r.pages)
        new = self._alloc(need)
        if new is None:
            if fresh:  # back to where it was: nothing held, nothing computed
                self._drop_pages(r)
            return None
        start = r.computed
        r.pages.extend(new)
        r.computed += n
        last = r.computed == len(r.tokens)
        self._move(r, LAST_CHUNK if last else CHUNK,
                   PREFILL_DONE if last else PREFILLING)
        self._release_host_pin(r)  # its fetched pages are pinned on device now, or reused
        r.awaiting = last
        row = ForwardRow(r.rid, "prefill", r.spec.namespace, start,
                         tuple(r.tokens[start : start + n]), reused, tuple(r.pages),
                         tuple(new), r.slot if r.slot is not None else -1, last)
        return self._mamba_row(r, row) if self.mamba is not None else row

    def _decode_row(self, r: Request, writebacks: list[CopyOp],
                    rows: list[ForwardRow]) -> ForwardRow | None:
        pos = r.computed  # the KV of the last reported token is computed by this row
        new: tuple[int, ...] = ()
        if pos >= len(r.pages) * self.p:
            got = self._alloc(1)
            if got is None:
                self._retract_longest(writebacks, {row.rid for row in rows})
                return None
            new = tuple(got)
            r.pages.extend(new)
        r.computed += 1
        r.awaiting = True
        self._move(r, DECODE, DECODING)
        row = ForwardRow(r.rid, "decode", r.spec.namespace, pos, (r.tokens[pos],), 0,
                         tuple(r.pages), new, r.slot if r.slot is not None else -1, True)
        return self._mamba_row(r, row) if self.mamba is not None else row

    def _victim(self, cands: list) -> object:
        """The decoding request to push off: the longest, ties by arrival (the reference's
        choice; which one is left to engines, PLAN-6)."""
        return max(cands, key=lambda r: (len(r.tokens), -r.arrival))

    def _retract_longest(self, writebacks: list[CopyOp], busy: set[str]) -> None:
        """Device full: push the longest decoding request off the device (PLAN-6). One per
        plan: its pages come free only once its copy is acknowledged, so retracting more in
        the same plan would push requests off for nothing."""
        if any(op.retract for op in writebacks):
            return
        cands = [r for r in self._ordered(DECODING) if not r.awaiting and r.rid not in busy]
        if not cands:
            return
        victim = self._victim(cands)
        node = self._publish(victim, victim.computed)
        self._free_local(victim)  # the partial page: recomputed on recovery
        self._release_slot(victim)
        t = self.cache.start_writeback(node) if node is not None else None
        units: tuple[tuple[int, int], ...] = ()
        if self.mamba is not None:
            units = self._mamba_retract(victim, t.op_id if t is not None else None)
        self._unlock(victim)
        victim.pages, victim.shared, victim.computed = [], 0, 0
        if t is None:
            self._move(victim, Event.RETRACT_NO_COPY, RETRACTED)
            return
        victim.op = t.op_id
        self._ops[t.op_id] = victim.rid
        writebacks.append(CopyOp(t.op_id, "writeback", victim.rid, tuple(t.pairs), retract=True,
                                 mamba=units))
        self._move(victim, Event.RETRACT, RETRACTING)

    def _publish(self, r: Request, upto: int) -> int | None:
        """Insert the full pages of ``tokens[:upto]`` into the request's namespace, free the
        duplicates and the partial page beyond, keep the rest of the table; re-pin the request
        on the new deepest node. Returns that node (None when nothing is cached)."""
        full = upto // self.p
        if self.config.sliding_window:
            # Computed here, it may have been dropped by the window: only what the request
            # reused from the cache is known intact (PLAN-8).
            full = min(full, r.shared)
        if full == 0:
            return None
        ns = r.spec.namespace
        if full == r.shared and r.node is not None and not self.config.l3_store \
                and self.cache._node(r.node).namespace == ns:
            # Nothing new (half the finishes): these are the very pages of the path the request
            # pins, in this namespace's tree, and inserting them would only stamp that path as
            # accessed (EVICT-2), as a match of its node does. With L3 keys the insert would
            # also backfill missing ones (D381-3): then it is made.
            self.cache.match_node(r.node)
            node = r.node
        else:
            ins = self.cache.insert(ns, r.tokens[: full * self.p], r.pages[:full])
            # Pages the tree already held are now the tree's copies; ours went back free. The
            # insert says what a match of the same tokens would: the node and the tree's pages.
            r.pages[:full] = ins.device_pages
            assert not ins.freed or not set(ins.freed).intersection(ins.device_pages)
            node = ins.node
        old = r.lock
        r.lock, r.node = self.cache.lock(node, DEVICE), node
        if old is not None:
            self.cache.unlock(old)
        r.shared = full
        return node

    def _host_room(self, need: int) -> None:
        """Evict host pages until a writeback of ``need`` pages fits, where unpinned ones allow
        (an engine may decline the copy instead, HOST-5)."""
        short = need - self.cache.available(HOST)
        if short > 0:
            self.cache.evict(HOST, short)

    def _plan_writeback(self, r: Request) -> list[CopyOp]:
        """A draining request's KV goes to host; declined (host full even after eviction, or
        nothing to copy) means it simply finishes."""
        node = r.node
        t = None
        if node is not None and r.shared:
            m = self.cache.match_node(node)  # its pinned prefix, as a match of it would see
            self._host_room((m.device_len - m.host_len) // self.p)
            t = self.cache.start_writeback(node)
        units: tuple[tuple[int, int], ...] = ()
        if t is not None and self.mamba is not None:
            units = self._mamba_writeback(r, r.shared * self.p, t.op_id)
        self._unlock(r)
        if t is None:
            self._move(r, WRITEBACK, FINISHED)
            return []
        r.op = t.op_id
        self._ops[t.op_id] = r.rid
        self._move(r, WRITEBACK, WRITING_BACK)
        return [CopyOp(t.op_id, "writeback", r.rid, tuple(t.pairs), mamba=units)]

    # ----------------------------------------------------------------- advance
    def advance(self, events: Sequence[RuntimeEvent]) -> None:
        """Apply what the runtime observed; the whole list is checked first (REQ-2)."""
        self._check(events)
        for ev in events:
            self._apply(ev)

    def _check(self, events: Sequence[RuntimeEvent]) -> None:
        if not events:
            return
        requests = self.requests
        # Each request's (state, awaiting) that an event so far changed (``_state_after``).
        states: dict[str, tuple[State, bool]] = {}
        # The writebacks and L3 transfers in flight as the events so far leave them: copied
        # when the first event that acknowledges one comes (most lists have none).
        ops: dict[int, str] | None = None
        l3: dict[int, str] | None = None
        for ev in events:
            kind = _EVENT_OF.get(type(ev))  # a request's event, the common case
            if kind is None:
                if isinstance(ev, WritebackDone):
                    if ops is None:
                        ops = dict(self._ops)
                    self._check_writeback(ev, ops, states)
                elif isinstance(ev, (PrefetchDone, BackupDone)):
                    if l3 is None:
                        l3 = dict(self._l3)
                    self._check_l3(ev, l3, states)
                else:
                    raise SchedulerError("bad_event", f"{ev!r} is not a runtime event")
                continue
            rid = ev.rid
            now = states.get(rid)  # changed by an earlier event, or as it is
            if now is None:
                r = requests.get(rid)
                now = None if r is None else (r.state, r.awaiting)
            if now is None:
                raise SchedulerError("unknown_request",
                                     f"{kind.value} for unknown request {rid!r}", rid, None,
                                     kind.value)
            state, aw = now
            targets = TRANSITIONS.get((state, kind))  # None: not in the table (REQ-2)
            ok = targets is not None
            if kind is EXTEND_RESULT:
                ok = ok and aw
                if isinstance(ev.token, bool) or not isinstance(ev.token, int) \
                        or not 0 <= ev.token < 2**63:
                    raise SchedulerError("bad_token", f"token {ev.token!r} for {rid!r}", rid,
                                         state, kind.value)
            if kind is FINISH:
                ok = ok and not aw
            if not ok:  # a probe the kit sends often: names spelled by value, as ``str`` does
                why = " (its sampled token is still due)" if aw else ""
                raise SchedulerError(
                    "invalid_transition",
                    f"{kind.value} is not allowed for request {rid!r} in state {state.value}{why}",
                    rid, state, kind.value,
                )
            nxt = (self._finish_target(self.requests[rid], state) if kind is FINISH
                   else targets[0])
            states[rid] = (nxt, aw and kind is not EXTEND_RESULT)

    def _check_writeback(self, ev: WritebackDone, ops: dict[int, str],
                         states: dict[str, tuple[State, bool]]) -> None:
        if isinstance(ev.op_id, bool) or not isinstance(ev.op_id, int):
            raise SchedulerError("bad_event", f"writeback id {ev.op_id!r} is not an int",
                                 event="WriteBackDone")
        rid = ops.pop(ev.op_id, None)
        if rid is None:
            raise SchedulerError("unknown_op", f"writeback {ev.op_id} is not in flight",
                                 event="WriteBackDone")
        now = _state_after(states, self.requests, rid)
        if now is None or self.requests[rid].op != ev.op_id:
            return
        state, aw = now
        if state in (RETRACTING, WRITING_BACK):
            states[rid] = (next_states(state, WRITEBACK_DONE)[0], aw)

    def _check_l3(self, ev: PrefetchDone | BackupDone, l3: dict[int, str],
                  states: dict[str, tuple[State, bool]]) -> None:
        name = type(ev).__name__
        kind = "prefetch" if isinstance(ev, PrefetchDone) else "backup"
        if isinstance(ev.op_id, bool) or not isinstance(ev.op_id, int):
            raise SchedulerError("bad_event", f"{kind} id {ev.op_id!r} is not an int", event=name)
        t = self.cache.l3_transfer(ev.op_id)
        if ev.op_id not in l3 or t is None or t.kind != kind:
            raise SchedulerError("unknown_op", f"{kind} {ev.op_id} is not in flight", event=name)
        if isinstance(ev, PrefetchDone):
            c = ev.completed
            if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c <= len(t.pages):
                raise SchedulerError("bad_event", f"prefetch {ev.op_id} completed {c!r} of "
                                     f"{len(t.pages)} pages", event=name)
        else:
            if not isinstance(ev.success, bool):
                raise SchedulerError("bad_event", f"backup {ev.op_id}: success "
                                     f"{ev.success!r} is not a bool", event=name)
        rid = l3.pop(ev.op_id)
        r = self.requests.get(rid)
        now = _state_after(states, self.requests, rid)
        if isinstance(ev, PrefetchDone) and r is not None and r.prefetch == ev.op_id \
                and now is not None and now[0] is State.PREFETCHING:
            states[rid] = (State.PREFETCH_DONE, now[1])

    def _finish_target(self, r: Request, state: State) -> State:
        """Finish drains to host when there is a host tier and a full page to keep (FIN-2)."""
        if state is DECODING and self.config.host_pages and r.computed >= self.p:
            return DRAINING
        return FINISHED

    def _apply(self, ev: RuntimeEvent) -> None:
        if isinstance(ev, ExtendResult):  # the commonest first: one per row that sampled
            r = self.requests[ev.rid]
            r.tokens.append(ev.token)
            r.awaiting = False
            if r.state is PREFILL_DONE and self.config.publish_mid_flight \
                    and not self.config.sliding_window:
                self._publish(r, r.computed)  # D381-1, pinned by its publisher: D381-2
            self._move(r, EXTEND_RESULT, DECODING)
            return
        if isinstance(ev, PrefetchDone):
            self._prefetch_done(ev)
            return
        if isinstance(ev, BackupDone):
            del self._l3[ev.op_id]
            self.cache.finish_backup(ev.op_id)  # its source pages may be evicted again (L3-5)
            return
        if isinstance(ev, WritebackDone):
            rid = self._ops.pop(ev.op_id)
            t = self.cache.finish_transfer(ev.op_id, ev.success)  # a failure frees it (E-1)
            if self.mamba is not None:
                self._mamba_landed(ev.op_id, ev.success)
            if ev.success and self.config.l3_store:
                self._backup(t, rid)
            r = self.requests.get(rid)
            if r is not None and r.op == ev.op_id:
                r.op = None
                if r.state is RETRACTING:
                    self._move(r, WRITEBACK_DONE, RETRACTED)
                elif r.state is WRITING_BACK:
                    self._move(r, WRITEBACK_DONE, FINISHED)
            return
        r = self.requests[ev.rid]
        if isinstance(ev, Finish):
            self._finish(r)
        else:
            self._abort(r)

    def _prefetch_done(self, ev: PrefetchDone) -> None:
        """The fetched pages that landed join the tree below the host match (L3-3); the
        request pins them on host until its first chunk (L3-2)."""
        rid = self._l3.pop(ev.op_id)
        node = self.cache.finish_prefetch(ev.op_id, ev.completed)
        r = self.requests.get(rid)
        if r is None or r.prefetch != ev.op_id:
            return  # aborted meanwhile: the pages are cached all the same
        r.prefetch = None
        r.hlock = self.cache.lock(node, HOST)
        self._move(r, Event.PREFETCH_DONE, State.PREFETCH_DONE)

    def _backup(self, t: Transfer, rid: str) -> None:
        """Back up what an acknowledged writeback put on host; pinned until BackupDone (L3-5)."""
        b = self.cache.start_backup(t.node.id, len(t.pairs))
        if b is not None:
            self._l3[b.op_id] = rid
            self._backups.append(self._l3_op(b, rid))

    def _finish(self, r: Request) -> None:
        if r.state is RETRACTED:
            self._mamba_free(r)
            self._move(r, FINISH, FINISHED)
            return
        node = self._publish(r, r.computed)
        if self.mamba is not None:
            self._mamba_publish(r, r.shared * self.p if node is not None else 0)
        self._free_local(r)  # the partial last page (FIN-1)
        r.pages = r.pages[: r.shared]
        self._release_slot(r)
        to = self._finish_target(r, r.state)
        if to is FINISHED:
            self._unlock(r)
        self._move(r, FINISH, to)

    def _abort(self, r: Request) -> None:
        """From any live state: release what the state holds; a writeback in flight carries on
        under the cache's own pins and its acknowledgement is still accepted (E-2)."""
        self._drop_pages(r)  # Mamba slots and the retract state's protection too (D243-4)
        self._release_host_pin(r)
        r.awaiting = False
        r.prefetch = None  # a fetch in flight carries on under the cache's pin (L3-2)
        self._move(r, Event.ABORT, FINISHED)

    # ----------------------------------------------------------------- views
    def drain_events(self):
        return self.cache.drain_events()

    def counters(self) -> dict[str, int]:
        """Its cache's page counts and the free request-pool slots (POOL-6)."""
        return {**self.cache.counters(), "free_slots": len(self._slots)}

    def snapshot(self) -> SchedulerSnapshot:
        """The white-box view, requests by arrival (the order ``requests`` keeps). A request
        whose fields are as at the last snapshot keeps the view it had then, and so does each
        part (the request list, the free slots, the copies in flight, the Mamba pools) equal to
        the last one's: a snapshot equal to the last one is the last one. Each part is compared
        as it is now, never taken on trust from a flag, so an oracle can tell by identity what
        a call left alone."""
        last_views, views, out = self._views, {}, []
        for r in self.requests.values():
            seen = (r.rid, r.state, r.spec.namespace, len(r.tokens), r.computed, tuple(r.pages),
                    r.shared, r.lock, r.slot, r.awaiting, r.op, r.hlock, r.prefetch, r.mamba,
                    r.ckpt, r.mfailed, r.mstate[0] if r.mstate is not None else None)
            old = last_views.get(r.rid)
            if old is None or old[0] != seen:
                old = (seen, RequestView(*seen))
            views[r.rid] = old
            out.append(old[1])
        self._views = views
        requests = tuple(out)
        cache = self.cache.snapshot()
        slots = tuple(self._slots)
        ops = tuple(sorted(self._ops.items())) if self._ops else ()
        l3 = tuple(sorted(self._l3.items())) if self._l3 else ()
        mamba = self.mamba.view() if self.mamba is not None else None
        last = self._snap
        if last is not None:  # a part equal to the last one's is that one: one object
            if requests == last.requests:
                requests = last.requests
            if slots == last.free_slots:
                slots = last.free_slots
            if ops == last.ops:
                ops = last.ops
            if l3 == last.l3_ops:
                l3 = last.l3_ops
            if mamba is not last.mamba and mamba == last.mamba:
                mamba = last.mamba
            if (self.step == last.step and requests is last.requests and cache is last.cache
                    and slots is last.free_slots and ops is last.ops and l3 is last.l3_ops
                    and mamba is last.mamba):
                return last
        snap = SchedulerSnapshot(self.step, requests, cache, slots, ops, l3, mamba)
        self._snap = snap
        return snap

    # ----------------------------------------------------------------- Mamba (chapter mamba)
    def _mamba_reuse(self, r: Request, m):
        """Cut the KV match back to the deepest depth that also has a Mamba state (MAMBA-3):
        a cached prefix's state of exactly that depth (D162-4), or for a retracted request its
        own protected retract state, whatever depth it was taken at (MAMBA-4)."""
        assert self.mamba is not None
        ns, p = r.spec.namespace, self.p
        usable = max(m.device_len, m.host_len)
        entry, host, depth = None, None, 0
        if r.mstate is not None and 0 < r.mstate[2] <= usable:
            entry, host, depth = self.mamba.by_id[r.mstate[0]], r.mstate[1], r.mstate[2]
        else:
            entry = self.mamba.deepest(ns, r.tokens, usable, p)
            if entry is not None:
                depth = entry.depth
                host = entry.host if entry.device is None else None
        if depth < usable:
            m = self.cache.match(ns, r.tokens[:depth])
        return m, (entry, host)

    def _mamba_admit(self, r: Request, msrc) -> tuple[tuple[int, int], ...]:
        """Commit the state the first row resumes from: a device state is read in place (copy
        on write into the working slot), a host state is loaded into the working slot by a
        loadback unit of its own (MAMBA-2, MAMBA-6). The checkpoint slot is acquired too; when
        none can be had the failure is recorded, never silent (MAMBA-7)."""
        assert self.mamba is not None and r.mamba is not None
        entry, host = msrc
        units: tuple[tuple[int, int], ...] = ()
        if entry is not None:
            self.mamba.touch(entry)
            if host is not None:
                units = ((host, r.mamba),)
            else:
                r.msrc = entry.device if entry.device is not None else -1
        self._mamba_unprotect(r)
        r.ckpt = self.mamba.alloc(DEVICE, f"request:{r.rid}")
        r.ckpt_depth = 0
        if r.ckpt is None:
            r.mfailed = True
        return units

    def _mamba_row(self, r: Request, row: ForwardRow) -> ForwardRow:
        end = row.start + len(row.input_tokens)
        b = (end // self.p) * self.p
        ck, cd = -1, 0
        if b > row.start and r.ckpt is not None:
            ck, cd = r.ckpt, b
            r.ckpt_depth = b
        elif b > row.start:
            r.mfailed = True  # no checkpoint slot to refresh: reported (D243-3)
        r.mdepth = end
        src, r.msrc = r.msrc, -1
        return replace(row, mamba=r.mamba if r.mamba is not None else -1, mamba_src=src,
                       checkpoint=ck, checkpoint_depth=cd)

    def _mamba_take(self, r: Request, depth: int) -> int | None:
        """The request's slot holding the state at ``depth``: its checkpoint, or when it has
        none there, its working slot (the finish fallback, D243-3). The slot leaves the
        request."""
        if depth and r.ckpt is not None and r.ckpt_depth == depth:
            slot, r.ckpt = r.ckpt, None
            return slot
        if depth and r.mamba is not None and r.mdepth == depth:
            slot, r.mamba = r.mamba, None
            return slot
        return None

    def _mamba_publish(self, r: Request, depth: int) -> None:
        """Finish: the state at the published depth joins the cache beside the KV (MAMBA-7)."""
        assert self.mamba is not None
        slot = self._mamba_take(r, depth)
        if slot is not None:
            self.mamba.attach(r.spec.namespace, tuple(r.tokens[:depth]), DEVICE, slot)
        elif depth:
            r.mfailed = True  # published KV without its state: said so, never silent
        self._mamba_free(r)

    def _mamba_writeback(self, r: Request, depth: int, op: int) -> tuple[tuple[int, int], ...]:
        """A unit of the draining request's writeback copies its prefix's state to host."""
        assert self.mamba is not None
        e = self.mamba.get(r.spec.namespace, tuple(r.tokens[:depth])) if depth else None
        if e is None or e.device is None or e.host is not None or e.busy:
            return ()
        e.busy += 1  # so that its device state outlives the copy
        host = self.mamba.alloc(HOST, f"transfer:{op}")
        if host is None:
            e.busy -= 1
            return ()
        self._mops.setdefault(op, []).append((e.id, host, None))
        return ((e.device, host),)

    def _mamba_retract(self, r: Request, op: int | None) -> tuple[tuple[int, int], ...]:
        """The retracted request's state at its published depth goes to host with its KV and is
        protected there until it recovers, finishes or aborts (MAMBA-4, D162-5)."""
        assert self.mamba is not None
        depth = r.shared * self.p
        slot = self._mamba_take(r, depth) if op is not None else None
        units: tuple[tuple[int, int], ...] = ()
        if slot is not None and op is not None:
            key = tuple(r.tokens[:depth])
            self.mamba.attach(r.spec.namespace, key, DEVICE, slot)
            e = self.mamba.entry(r.spec.namespace, key)
            if e.host is not None and not e.busy:
                e.protect += 1
                r.mstate = (e.id, e.host, depth)
            elif e.device is not None:
                e.busy += 1
                host = self.mamba.alloc(HOST, f"transfer:{op}")
                if host is None:
                    e.busy -= 1
                    self.mamba.release(e)
                else:
                    e.protect += 1
                    r.mstate = (e.id, host, depth)
                    self._mops.setdefault(op, []).append((e.id, host, r.rid))
                    units = ((e.device, host),)
        self._mamba_free(r, keep_state=True)
        return units

    def _mamba_landed(self, op: int, success: bool) -> None:
        """A writeback's Mamba units land with it, or fail with it (MAMBA-2)."""
        assert self.mamba is not None
        for eid, host, rid in self._mops.pop(op, []):
            e = self.mamba.by_id[eid]
            e.busy -= 1
            r = self.requests.get(rid) if rid is not None else None
            mine = r is not None and r.mstate is not None and r.mstate[0] == eid
            if success and e.host is None:
                e.host = host
                self.mamba.give(HOST, host, f"entry:{e.id}")
            else:
                self.mamba.free(HOST, host)
            if mine and r is not None:
                if success and e.host is not None:
                    r.mstate = (eid, e.host, e.depth)
                else:
                    self._mamba_unprotect(r)
            self.mamba.release(e)

    def _mamba_unprotect(self, r: Request) -> None:
        if self.mamba is not None and r.mstate is not None:
            e = self.mamba.by_id[r.mstate[0]]
            e.protect -= 1
            r.mstate = None
            self.mamba.release(e)

    def _mamba_free(self, r: Request, keep_state: bool = False) -> None:
        """Release every request-local state slot (MAMBA-8, D243-4)."""
        if self.mamba is None:
            return
        for slot in (r.mamba, r.ckpt):
            if slot is not None:
                self.mamba.free(DEVICE, slot)
        r.mamba = r.ckpt = None
        r.mdepth = r.ckpt_depth = 0
        r.msrc = -1
        if not keep_state:
            self._mamba_unprotect(r)
