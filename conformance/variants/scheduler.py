"""Legal variants of the reference scheduler: each takes another choice the spec permits.

Built by subclassing, never by editing the reference; each docstring starts with the rules it
exercises, and ``features`` says what it declares.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from dataclasses import replace

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.mutants.scheduler import PublishesBeforeForward
from kvconf.conformance.variants.cache import LowestFreePageFirst
from kvconf.reference.kv_events import EventKind, KVEvent
from kvconf.reference.plan import (
    Abort,
    BackupDone,
    ExtendResult,
    Finish,
    LoadbackDone,
    PrefetchDone,
    WritebackDone,
)
from kvconf.reference.requests import Event, State
from kvconf.reference.scheduler import Scheduler, SchedulerError
from kvconf.reference.tiers import Tier
from kvconf.reference.window import window_by_config_class


def _an_id(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@contextmanager
def _no_window_guard(sched: Scheduler):
    """The reference's publishing with its window guard off (PLAN-8): for a variant whose
    runtime keeps what the guard protects, and which caps what it publishes by its own rule."""
    saved = sched.config
    sched.config = replace(saved, sliding_window=0)
    try:
        yield
    finally:
        sched.config = saved


# ----------------------------------------------------------------------------- windows
class FreesBehindWindow(Scheduler):
    """WIN-4: under a sliding window, each request-local page whose positions all lie before
    the first one the request's next row reads is freed while the request prefills or decodes,
    before that row's pages are allocated (so it may serve this very plan); the table keeps the
    stale id in the slot, a hole no row reads."""

    features = frozenset()

    def __init__(self, config=None) -> None:
        super().__init__(config)
        self._holes: dict[str, set[int]] = {}  # request -> table slots freed behind the window

    def _freeable(self, r) -> int:
        """How many leading table slots lie wholly behind the window of the row that computes
        from ``r.computed`` (it reads from r.computed - W + 1)."""
        return max(0, r.computed - self.config.sliding_window + 1) // self.p

    def _free_behind(self, r) -> None:
        if not self.config.sliding_window:
            return
        holes = self._holes.setdefault(r.rid, set())
        for k in range(r.shared, min(self._freeable(r), len(r.pages))):
            if k not in holes:
                self.cache.free([r.pages[k]])
                holes.add(k)

    def _free_local(self, r) -> None:
        holes = self._holes.pop(r.rid, set())
        pages = [pg for k, pg in enumerate(r.pages) if k >= r.shared and k not in holes]
        if pages:
            self.cache.free(pages)

    def _prefill_row(self, r, budget, loadbacks):
        if r.state is State.PREFILLING:  # a later chunk: its table is the request's own
            self._free_behind(r)
        return super()._prefill_row(r, budget, loadbacks)

    def _decode_row(self, r, writebacks, rows):
        self._free_behind(r)
        return super()._decode_row(r, writebacks, rows)


class KeepsWindowPrefix(Scheduler):
    """WIN-2 / PLAN-8: for a runtime that keeps each sequence's first W positions, whole pages
    within them are published under the window (mid-flight and at finish) and reused; nothing
    past them is."""

    features = frozenset({Feature.KEEPS_WINDOW_PREFIX})

    def __init__(self, config=None) -> None:
        super().__init__(config)
        self.window = self.config.sliding_window  # the guard is off while _apply publishes

    def _publish(self, r, upto):
        w = self.window
        if not w:
            return super()._publish(r, upto)
        cap = max(r.shared, w // self.p) * self.p  # whole pages in the first W positions
        with _no_window_guard(self):
            return super()._publish(r, min(upto, cap))

    def _apply(self, ev):  # mid-flight publish under the window too (capped by _publish)
        with _no_window_guard(self):
            return super()._apply(ev)


class WindowTable(Scheduler):
    """WIN-3 / PLAN-8: the window's layers get a table of their own beside the full table: it
    names the full table's pages, with a null page (an id past the pool) for every page wholly
    behind the row's window. Nothing is dropped, so prefixes are published as under full
    attention, mid-flight and at finish."""

    features = frozenset({Feature.WINDOW_TABLE})

    def __init__(self, config=None) -> None:
        super().__init__(config)
        c = self.config
        self.null_page = c.device_pages
        self.page_ids = (c.device_pages + 1, c.host_pages)
        self.window = c.sliding_window

    def _windowed(self, row):
        w = self.window
        if row is None or not w:
            return row
        first = max(0, row.start - w + 1)
        table = tuple(self.null_page if (k + 1) * self.p <= first else pg
                      for k, pg in enumerate(row.page_table))
        return replace(row, window_table=table)

    def _prefill_row(self, r, budget, loadbacks):
        return self._windowed(super()._prefill_row(r, budget, loadbacks))

    def _decode_row(self, r, writebacks, rows):
        return self._windowed(super()._decode_row(r, writebacks, rows))

    def _publish(self, r, upto):
        with _no_window_guard(self):
            return super()._publish(r, upto)

    def _apply(self, ev):
        with _no_window_guard(self):
            return super()._apply(ev)


# The default window of the config class ``ReadsByConfigClass`` reads through (Qwen2-VL's text
# config: use_sliding_window on with no size takes 4096).
CLASS_DEFAULT_WINDOW = 4096


def _by_config_class(cfg) -> int:
    """A config read through its architecture's class: its default where the read level leaves
    the size unsaid (a window where the switch is on, none otherwise)."""
    want, positive = window_by_config_class(cfg)
    if want is not None:
        return want
    return CLASS_DEFAULT_WINDOW if positive else 0


class ReadsByConfigClass(Scheduler):
    """WIN-5: a model config is read through its architecture's config class: a nested text
    config, where there is one, configures the language model alone (its window wins over the
    top level's), and a switch on with no size takes the class's default window; nothing is
    refused for disagreeing levels."""

    features = frozenset({Feature.CONFIG_CLASS_WINDOW})
    model_window = staticmethod(_by_config_class)


# ----------------------------------------------------------------------------- events
class AnnouncesReusableBoundaries(Scheduler):
    """EVENT-8: with Mamba state beside the KV, a cached prefix is reused only up to a depth
    that holds a state (MAMBA-3), so the KV events announce exactly those boundaries: a device
    block is announced (naming as parent the hash of its own prefix, stored or not) while a
    state of exactly its depth is cached on either tier, and removed as soon as that state
    or the block is gone. Without Mamba every boundary is reusable: the reference's events."""

    features = frozenset({Feature.SPARSE_PREFIX_EVENTS})

    def __init__(self, config=None) -> None:
        super().__init__(config)
        # The reference's own stream, block by block: each device block it stored and has not
        # removed (hash -> its one-block BlockStored), in the order stored; and the prefix each
        # hash it ever stored names (namespace, tokens), which its children's prefixes extend.
        self._held: dict[int, KVEvent] = {}
        self._prefix: dict[int, tuple[int, tuple[int, ...]]] = {}
        self._shown: dict[int, None] = {}  # the blocks announced and not removed, in order

    def _reusable(self, h: int) -> bool:
        """Whether a request could reuse the block's prefix to its end (``_mamba_reuse``): a
        state entry of exactly that depth holds a state on some tier."""
        assert self.mamba is not None
        e = self.mamba.get(*self._prefix[h])
        return e is not None and (e.device is not None or e.host is not None)

    def drain_events(self):
        events = super().drain_events()
        if self.mamba is None:
            return events
        out: list[KVEvent] = []
        for ev in events:
            if ev.kind is EventKind.CLEARED:  # what was announced is gone with it
                self._held.clear()
                if self._shown:
                    self._shown.clear()
                    out = [ev]
            elif ev.kind is EventKind.REMOVED:
                for h in ev.block_hashes:
                    self._held.pop(h, None)
            else:
                self._take_stored(ev)
        for h in [h for h in self._shown if h not in self._held or not self._reusable(h)]:
            del self._shown[h]
            out.append(KVEvent(EventKind.REMOVED, (h,), self._prefix[h][0]))
        for h, ev in self._held.items():
            if h not in self._shown and self._reusable(h):
                self._shown[h] = None
                out.append(ev)
        return out

    def _take_stored(self, ev: KVEvent) -> None:
        """A BlockStored of the reference's cache, split into its blocks."""
        parent, bs, ns = ev.parent_hash, ev.block_size, ev.namespace
        whole = () if parent is None else self._prefix[parent][1]
        for i, h in enumerate(ev.block_hashes):
            toks = tuple(ev.tokens[i * bs : (i + 1) * bs])
            whole = whole + toks
            self._prefix[h] = (ns, whole)
            self._held.pop(h, None)  # stored again: last in the order
            self._held[h] = KVEvent(EventKind.STORED, (h,), ns, parent, toks, bs)
            parent = h


class IgnoresUnknownEvents(Scheduler):
    """REQ-6: an event naming a request the scheduler does not hold, or a transfer not in
    flight, is ignored instead of rejected; the rest of the call is applied as usual."""

    features = frozenset({Feature.IGNORES_UNKNOWN_EVENTS})

    def _names_nothing(self, ev) -> bool:
        if isinstance(ev, (ExtendResult, Finish, Abort)):
            return isinstance(ev.rid, str) and ev.rid not in self.requests
        if isinstance(ev, WritebackDone):
            return _an_id(ev.op_id) and ev.op_id not in self._ops
        if isinstance(ev, (PrefetchDone, BackupDone)):
            return _an_id(ev.op_id) and ev.op_id not in self._l3
        return False

    def advance(self, events):
        super().advance([ev for ev in events if not self._names_nothing(ev)])


class AcknowledgesLoadbacks(Scheduler):
    """HOST-8: the runtime acknowledges each loadback; until then the scheduler keeps the
    loaded path pinned on both tiers (its host source and its device destination), whatever
    happens to the request meanwhile. An acknowledgement of a loadback not in flight is
    rejected and changes nothing."""

    features = frozenset({Feature.LOADBACK_ACK})

    def __init__(self, config=None) -> None:
        super().__init__(config)
        self._landing: dict[int, list[int]] = {}  # loadback op -> pins held until its ack

    def _prefill_row(self, r, budget, loadbacks):
        before = len(loadbacks)
        row = super()._prefill_row(r, budget, loadbacks)
        for op in loadbacks[before:]:
            pins = []
            if op.pairs and r.node is not None:
                pins = [self.cache.lock(r.node, Tier.DEVICE), self.cache.lock(r.node, Tier.HOST)]
            self._landing[op.op_id] = pins
        return row

    def advance(self, events):
        acks = [ev for ev in events if isinstance(ev, LoadbackDone)]
        seen: set[int] = set()
        for ev in acks:
            if not _an_id(ev.op_id) or ev.op_id not in self._landing or ev.op_id in seen:
                raise SchedulerError("unknown_op", f"loadback {ev.op_id!r} is not in flight",
                                     event="LoadbackDone")
            seen.add(ev.op_id)
        super().advance([ev for ev in events if not isinstance(ev, LoadbackDone)])
        for ev in acks:
            for handle in self._landing.pop(ev.op_id):
                self.cache.unlock(handle)


class DefersLoadedRows(AcknowledgesLoadbacks):
    """HOST-13, HOST-8: a request admitted with a loadback gets no row in that plan: the loadback is
    listed alone, the request waits for its acknowledgement, and its first row (the one the
    reference would have planned with the loadback, its pages pinned meanwhile) comes in the
    first plan after it. Until then no other request is admitted: the reference publishes the
    loaded pages at once, and another request must not read them before the acknowledgement.
    Requests with Mamba state are planned as the reference plans them."""

    features = frozenset({Feature.LOADBACK_ACK, Feature.DEFERRED_LOADBACK})

    def __init__(self, config=None) -> None:
        super().__init__(config)
        self._held: dict[str, object] = {}  # request -> its first row, not yet handed out
        self._waits: dict[str, int] = {}  # request -> its loadback, not yet acknowledged
        self._defer: set[str] = set()  # requests of this plan whose row waits

    def _ordered(self, *states):
        hide = self._hide_decodes  # no decode row joins a plan its held prefill rows are in
        return [r for r in super()._ordered(*states) if r.rid not in self._held
                and not (hide and r.state is State.DECODING)]

    _hide_decodes = False
    _deferring = False  # a loadback of this plan is deferred: admit nobody after it

    def _prefill_row(self, r, budget, loadbacks):
        fresh = r.state in (State.SUBMITTED, State.RETRACTED, State.PREFETCH_DONE)
        if fresh and (self._waits or self._deferring):
            return None
        before = len(loadbacks)
        row = super()._prefill_row(r, budget, loadbacks)
        if row is not None and self.mamba is None and not self._kin(r) \
                and any(op.rid == r.rid and op.pairs for op in loadbacks[before:]):
            self._deferring = True
            self._defer.add(r.rid)
        return row

    def _kin(self, r) -> bool:
        """Whether another unfinished request shares the first page of ``r``'s prompt: it
        could reach the loaded pages through the tree (a match, or its own publish moving it
        onto the cached copy) before the acknowledgement, so ``r`` is planned at once."""
        p, ns = self.p, r.spec.namespace
        return any(o is not r and o.state is not State.FINISHED and o.spec.namespace == ns
                   and tuple(o.tokens[:p]) == tuple(r.tokens[:p])
                   for o in self.requests.values())

    def next_plan(self):
        ready = [row for rid, row in self._held.items() if rid not in self._waits]
        ready = ready[: self.config.max_batch]
        saved = self.config
        used = sum(len(row.input_tokens) for row in ready)
        # What the held rows take of the batch and budget (a copy, past the config's check
        # that both are positive: a plan the held rows fill plans nothing more).
        cut = copy.copy(saved)
        object.__setattr__(cut, "max_batch", saved.max_batch - len(ready))
        object.__setattr__(cut, "max_tokens", max(saved.max_tokens - used, 0))
        self.config = cut
        self._hide_decodes = bool(ready) and not saved.mixed  # a held row is a prefill
        try:
            plan = super().next_plan()
        finally:
            self.config, self._hide_decodes, self._deferring = saved, False, False
        for row in ready:
            del self._held[row.rid]
        rows = list(ready)
        for row in plan.rows:
            op = next((o.op_id for o in plan.loadbacks if o.rid == row.rid and o.pairs), None)
            if op is not None and row.rid in self._defer:
                self._held[row.rid], self._waits[row.rid] = row, op
            else:
                rows.append(row)
        self._defer = set()
        return replace(plan, rows=tuple(rows))

    def advance(self, events):
        held = [ev for ev in events if isinstance(ev, ExtendResult) and ev.rid in self._held]
        if held:
            raise SchedulerError("no_token_due", f"{held[0].rid} has no row handed out",
                                 rid=held[0].rid, event="ExtendResult")
        super().advance(events)
        done = {ev.op_id for ev in events if isinstance(ev, LoadbackDone)}
        self._waits = {rid: op for rid, op in self._waits.items() if op not in done}
        for rid in [rid for rid in self._held if rid not in self.requests
                    or self.requests[rid].state is State.FINISHED]:
            self._held.pop(rid)
            self._waits.pop(rid, None)


class FlushesWritebacks(Scheduler):
    """HOST-14: every writeback still in flight when the next plan is built is named in that
    plan's flush, so the runtime completes it before the forward and acknowledges it in the
    plan's advance (the source stays pinned until then, as the reference keeps it)."""

    features = frozenset({Feature.FLUSHED_WRITEBACK})

    def __init__(self, config=None) -> None:
        super().__init__(config)
        self._inflight: set[int] = set()  # writebacks handed out, not acknowledged

    def next_plan(self):
        plan = super().next_plan()
        flush = tuple(sorted(self._inflight))
        self._inflight |= {op.op_id for op in plan.writebacks}
        return replace(plan, flush=flush)

    def advance(self, events):
        super().advance(events)
        self._inflight -= {ev.op_id for ev in events if isinstance(ev, WritebackDone)}


class FailedCopyIsFatal(Scheduler):
    """HOST-9: a writeback's acknowledgement means the copy landed (its success flag is not
    read): a failed copy ends the runtime and is never acknowledged."""

    features = frozenset({Feature.FATAL_TRANSFER_FAILURE})

    def _apply(self, ev):
        if isinstance(ev, WritebackDone) and ev.success is not True:
            ev = replace(ev, success=True)
        return super()._apply(ev)


class DeclinesWritebackWithoutRoom(Scheduler):
    """HOST-5: a draining request's writeback is declined when the host pool has too few free
    pages, instead of evicting host pages to make room; the request then simply finishes."""

    features = frozenset()

    def _host_room(self, need: int) -> None:
        return None


class SchedulerLowestFreePageFirst(Scheduler):
    """POOL-3: the scheduler's cache hands out the lowest free page ids first, so requests get
    other pages than the reference gives them."""

    features = frozenset()
    cache_cls = LowestFreePageFirst


# ----------------------------------------------------------------------------- Mamba
class ReservesCheckpointSlot(Scheduler):
    """MAMBA-9: a request is admitted only with room for its working and its checkpoint state
    slots together; with fewer it waits, where the reference admits it and reports the missing
    checkpoint."""

    features = frozenset({Feature.MAMBA_CHECKPOINT_SLOT})

    def _admit(self, r, budget, loadbacks):
        if self.mamba is None:
            return super()._admit(r, budget, loadbacks)
        held = [self.mamba.alloc(Tier.DEVICE, f"request:{r.rid}") for _ in range(2)]
        for slot in held:  # room for both made (evicting unused states), then given back
            if slot is not None:
                self.mamba.free(Tier.DEVICE, slot)
        if None in held:
            return False
        return super()._admit(r, budget, loadbacks)


# ----------------------------------------------------------------------------- vLLM's runtime
class PublishesWhenPlanned(PublishesBeforeForward):
    """PLAN-13: for a runtime that writes each layer's KV for every row of a forward before any
    row of that layer attends, a prompt is published when the plan that computes its last chunk
    is built, so a request admitted later in the same plan reuses pages the forward computes
    (what E-22 forbids on a runtime that reads before the forward writes)."""

    features = frozenset({Feature.SAME_FORWARD_REUSE})


class PreemptsPrefilling(Scheduler):
    """REQ-7: when a prefilling request's next chunk finds no device pages, the newest request
    that holds pages and has no row in the plan yet is pushed off without a copy, itself if no
    other is newer (a prefilling one goes Prefilling to Retracted): its computed full pages stay
    cached in its namespace, the rest is freed, and it is recovered like any retracted request
    (vLLM preempts the last of its running queue so). A request pushes itself off once at most:
    it is recovered behind the requests queued meanwhile, where vLLM puts it first."""

    features = frozenset({Feature.PREEMPTS_PREFILLING})

    def __init__(self, config=None) -> None:
        super().__init__(config)
        self._pushed: set[str] = set()  # pushed itself off once (it is recovered after the
        # requests queued before it, so twice could starve it)
        self._planned: set[str] = set()

    def next_plan(self):
        self._planned: set[str] = set()
        return super().next_plan()

    def _move(self, r, event, to):
        if (r.state, event, to) == (State.PREFILLING, Event.RETRACT_NO_COPY, State.RETRACTED):
            self.transitions.append((r.rid, r.state, event, to))
            r.state = to
            return
        super()._move(r, event, to)

    def _prefill_row(self, r, budget, loadbacks):
        row = super()._prefill_row(r, budget, loadbacks)
        if row is None and r.state is State.PREFILLING and self.mamba is None:
            newer = [o for o in self._ordered(State.PREFILLING, State.DECODING)
                     if o.arrival > r.arrival and o.rid not in self._planned and not o.awaiting]
            victim = max(newer, key=lambda o: o.arrival, default=None)
            if victim is None and r.rid not in self._pushed:  # once: it queues behind others
                victim = r
                self._pushed.add(r.rid)
            if victim is not None:
                self._push_off(victim)
            if victim is not None and victim is not r:
                row = super()._prefill_row(r, budget, loadbacks)
        if row is not None:
            self._planned.add(r.rid)
        return row

    def _decode_row(self, r, writebacks, rows):
        row = super()._decode_row(r, writebacks, rows)
        if row is not None:
            self._planned.add(r.rid)
        return row

    def _push_off(self, victim) -> None:
        self._publish(victim, victim.computed)
        self._free_local(victim)
        self._release_slot(victim)
        self._unlock(victim)
        victim.pages, victim.shared, victim.computed = [], 0, 0
        self._move(victim, Event.RETRACT_NO_COPY, State.RETRACTED)


class MixesEveryBatch(Scheduler):
    """PLAN-3: the scheduler has no unmixed mode, for a runtime with mixed kernels only:
    decode rows join a forward with prefill rows whatever the mixed switch says."""

    features = frozenset({Feature.MIXED_ONLY})

    def __init__(self, config=None) -> None:
        super().__init__(config)
        self.config = replace(self.config, mixed=True)


SCHED_VARIANTS: tuple[type, ...] = (
    FreesBehindWindow, KeepsWindowPrefix, WindowTable, ReadsByConfigClass,
    AnnouncesReusableBoundaries,
    IgnoresUnknownEvents,
    AcknowledgesLoadbacks, DefersLoadedRows, FlushesWritebacks, FailedCopyIsFatal,
    DeclinesWritebackWithoutRoom,
    SchedulerLowestFreePageFirst, ReservesCheckpointSlot, PublishesWhenPlanned,
    PreemptsPrefilling, MixesEveryBatch,
)
