"""The cache-level driver: plays a trace against an engine, feeding every call to the oracles.

The driver is the caller a real serving runtime would be: it allocates pages, fills them (writes
content tags into its KV memory, ``kvconf.conformance.runtime.memory``), inserts them, locks what it
uses, performs the copies of transfers when they land, and acknowledges them. It never looks inside
the engine except through ``snapshot()`` for white-box oracles."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvconf.conformance.cache import answers
from kvconf.conformance.cache.answers import CHECKS as ANSWERS
from kvconf.conformance.cache.ledger import Ledger, LockRecord
from kvconf.conformance.cache.tape import REJECTED, Tape, record
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.field_docs import compared
from kvconf.conformance.engine.protocol import CacheEngine, CopyOp, Inserted, Match, match_scope
from kvconf.conformance.errors import EngineRejected, KitError
from kvconf.conformance.faults import call_legal, fits, raised, rejected, wrong_return
from kvconf.conformance.oracles import STEP_ORACLES, Ctx, Oracle, Violation
from kvconf.conformance.oracles.accounting import CounterOracle, RestOracle
from kvconf.conformance.oracles.retention import RetentionOracle
from kvconf.conformance.running import flight
from kvconf.conformance.runtime.content import page_tags
from kvconf.conformance.runtime.memory import MemoryFactory, page_id_space, shadow_memory
from kvconf.conformance.trace import (
    AckStep,
    EvictStep,
    ExtendStep,
    InsertStep,
    LoadbackStep,
    MatchStep,
    ResetStep,
    Step,
    TickStep,
    Trace,
    UnloadStep,
    UnlockStep,
    WritebackStep,
)
from kvconf.reference.kv_events import KVEvent
from kvconf.reference.snapshot import CacheSnapshot
from kvconf.reference.tiers import Tier

_FAULTS = "faults"
# The oracles' hooks (``Oracle``), each called only on the oracles that override it.
HOOKS = ("on_alloc", "on_forward", "on_match", "on_insert", "on_evict", "on_unchanged_call",
         "on_unload", "on_reset", "after_step")


# What each call must return (conformance/protocol.py); None in a tuple means "or None".
RETURNS: dict[str, tuple[type | None, ...]] = {
    "match": (Match,), "insert": (Inserted,), "evict": (int,),
    "start_writeback": (CopyOp, None), "start_loadback": (CopyOp, None), "reset": (bool,),
}


def _check_return(call: str, value: Any, step: int) -> Any:
    """An engine that returns the wrong type is one FAULT-4 violation naming the call and the
    type the protocol expects, not a cascade of AttributeErrors in the oracles."""
    types = RETURNS.get(call)
    if types is None or type(value) in types or fits(value, types):
        return value
    raise wrong_return(f"{call} at step {step}", f"{type(value).__name__} ({value!r:.60})",
                       "conformance/engine/protocol.py", types)


class CacheDriver:
    """Drives one engine instance through steps; raises Violation at the first broken rule."""

    def __init__(
        self,
        engine: CacheEngine,
        config: EngineConfig,
        oracles: Sequence[type[Oracle]] = STEP_ORACLES,
        behaviours: Sequence[str] = (),
        clock: str = "per_step",
        memory: MemoryFactory = shadow_memory,
        expect: bool = True,
    ) -> None:
        """``expect=False`` ignores the trace's expected results (a run judged by the memory
        oracles alone)."""
        self.engine = engine
        self.tick_every_step = clock == "per_step"
        self.config = config
        self.behaviours = tuple(behaviours)
        self.expect = expect
        self.oracles = [o() for o in oracles if o.applies(engine)]
        # Snapshots are for the oracles: a replay with none (DET-1 compares the logs) takes none.
        # A hash-keyed cache's is a block view (POOL-7), which only the block-pool oracle reads.
        self.white = bool(engine.features & {Feature.SNAPSHOT, Feature.BLOCK_SNAPSHOT}) and bool(
            self.oracles)
        self.events_on = Feature.KV_EVENTS in engine.features
        # A method of a feature the engine does not declare is never called (the adapter
        # contract, conformance/engine/contract.py): it may not have one.
        self.host_tier = Feature.HOST_TIER in engine.features
        # Each hook's handlers: only the oracles that override it are called.
        self.hooks: dict[str, list] = {
            h: [getattr(o, h) for o in self.oracles
                if getattr(type(o), h) is not getattr(Oracle, h)] for h in HOOKS}
        # ``after_step`` in a step that acknowledged no copy: the oracles that judge nothing
        # else (``Oracle.after_acks_only``) have nothing to do there.
        # Run both ways by the tests: with ``Oracle.incremental`` off, every one every step.
        self.quiet = [fn for fn in self.hooks["after_step"]
                      if not (fn.__self__.after_acks_only and fn.__self__.incremental)]
        # Each hook's handlers under a name of its own: read on every call the hook is for.
        self._on_alloc, self._on_forward, self._on_match, self._on_insert, self._on_evict = (
            self.hooks[h] for h in ("on_alloc", "on_forward", "on_match", "on_insert",
                                    "on_evict"))
        self._after_all = self.hooks["after_step"]
        # The hooks called in this play ("after_acks": an ``after_step`` with a copy
        # acknowledged) and the rules the driver's own checks judged: what ``judged`` reads.
        self.ran: set[str] = set()
        self.marks: set[str] = set()
        self.ledger = Ledger(
            engine.page_size,
            memory(engine.page_size,
                   *page_id_space(engine, config.device_pages, config.host_pages)),
        )
        self.ledger.sizes = {Tier.DEVICE: config.device_pages, Tier.HOST: config.host_pages}
        # The engine's own counts, read after every step where an oracle judges them (POOL-6).
        self.counting = Feature.COUNTERS in engine.features and any(
            isinstance(o, CounterOracle) for o in self.oracles)
        self.rest = next((o for o in self.oracles if isinstance(o, RestOracle)), None)
        # The kit's account of the pages it inserted, settled at rest (EVICT-7).
        self.retention = next((o for o in self.oracles if isinstance(o, RetentionOracle)), None)
        self.log: list[dict[str, Any]] = []
        # The engine calls of the steps, with their answers, for DET-1's replay
        # (``kvconf.conformance.cache.tape``); None: not recorded.
        self.tape: Tape | None = None
        self.lines: list[str] = []  # the steps as the flight recorder got them, while recording
        self._last = None
        self._clean = False  # no call that may change the engine since ``_last`` was taken
        self._snap = self._snapshot()
        self.ctx = Ctx(-1, "init", engine, self.ledger)

    # ----------------------------------------------------------------- plumbing
    def _snapshot(self):
        """The engine's snapshot now. The last one taken is reused while no call since could
        have changed the engine (``snapshot``, ``counters``, ``drain_events`` and ``block_hash``
        only read it): a step that evicts, say, needs no second snapshot of the same state."""
        if not self.white:
            return None
        if self._clean:
            return self._last
        try:
            self._last = self.engine.snapshot()
        except Exception as e:
            raise raised("snapshot", e) from e
        self._clean = True
        return self._last

    def _counters(self) -> dict[str, int] | None:
        """The engine's counts now, where an oracle judges them (POOL-6). A read: it leaves the
        last snapshot current and is not on the tape (``_call``)."""
        if not self.counting:
            return None
        try:
            return self.engine.counters()
        except EngineRejected as e:
            raise rejected("counters", e) from e
        except Violation:
            raise
        except Exception as e:
            raise raised("counters", e) from e

    def _call(self, call: str, fn, *args, legal: bool = True):
        """Call the engine; a rejection of a legal call or any crash is a FAULT-2 violation.
        The usual answer, of the very type the protocol names (or a call with no type to
        check), is taken as it is; any other goes to ``_check_return``."""
        self._clean = False
        try:
            out = fn(*args)
            types = RETURNS.get(call)
            if types is not None and type(out) not in types:
                out = _check_return(call, out, self.ctx.index)
            check = ANSWERS.get(call)
            if check is not None:  # its fields (FAULT-4)
                check(out, args)
        except EngineRejected as e:
            if legal:
                raise rejected(call, e) from e
            raise
        except Violation:
            raise
        except Exception as e:
            raise raised(call, e) from e
        if self.tape is not None:
            self.tape.append((self.ctx.index, call, *record(call, args, out)))
        return out

    def _drain_events(self) -> list[KVEvent]:
        """The events since the last drain (with ``kv_events``; none without), their shape
        checked (FAULT-4). A read: not on the tape (the step logs the rows)."""
        if not self.events_on:
            return []
        events = call_legal("drain_events", self.engine.drain_events)
        answers.events(events)
        return events

    def _notify(self, hook: str, *args) -> None:
        ctx = self.ctx
        self.ran.add(hook)
        for fn in self.hooks[hook]:
            fn(ctx, *args)

    def _after_step(self) -> None:
        """The oracles' ``after_step``, of those with something to judge in this step."""
        ctx = self.ctx
        self.ran.add("after_acks" if ctx.acks else "after_step")
        for fn in self._after_all if ctx.acks else self.quiet:
            fn(ctx)

    # ----------------------------------------------------------------- engine calls
    def _alloc(self, n: int) -> list[int] | None:
        """``n`` device pages for the caller, evicting once if the pool is short."""
        if n == 0:
            return []
        pages = self._call("alloc", self.engine.alloc, n)
        if pages is None:
            self._evict(Tier.DEVICE, n)
            pages = self._call("alloc", self.engine.alloc, n)
        if pages is None:
            return None
        pages = list(pages)
        ctx = self.ctx
        self.ran.add("on_alloc")
        for fn in self._on_alloc:
            fn(ctx, pages)
        self.ledger.held.update(pages)
        return pages

    def _fill(self, ns: int, tokens: Sequence[int], pages: Sequence[int], first: int) -> None:
        """Write the tags of pages ``first..`` of ``tokens`` (the forward that computes them)."""
        tags = page_tags(ns, tokens, self.engine.page_size)
        self.ledger.remember(ns, tokens, tags)
        self.ledger.memory.write_pages(Tier.DEVICE, pages, tags[first : first + len(pages)])
        ctx = self.ctx
        self.ran.add("on_forward")
        for fn in self._on_forward:
            fn(ctx, pages)

    def _match(self, ns: int, tokens: Sequence[int]) -> Match:
        m = self._call("match", self.engine.match, ns, list(tokens))
        led = self.ledger
        led.queried += len(tokens)
        led.hits += m.device_len
        ctx = self.ctx
        self.ran.add("on_match")
        for fn in self._on_match:
            fn(ctx, ns, tokens, m)
        return m

    def _lock(self, step: int, ns: int, tokens: Sequence[int], m: Match, tier: Tier) -> LockRecord:
        node = m.device_node if tier is Tier.DEVICE else m.host_node
        handle = self._call("lock", self.engine.lock, node, tier)
        n = m.device_len if tier is Tier.DEVICE else m.host_len
        pages = m.device_pages if tier is Tier.DEVICE else m.host_pages
        return LockRecord(step, handle, ns, tier, tuple(tokens[:n]), tuple(pages), node)

    def _unlock(self, rec: LockRecord) -> None:
        self._call("unlock", self.engine.unlock, rec.handle)
        self.ledger.release(rec)

    def _insert(self, ns: int, tokens: Sequence[int], pages: list[int]) -> dict[str, Any]:
        r = self._call("insert", self.engine.insert, ns, list(tokens), list(pages))
        ctx = self.ctx
        self.ran.add("on_insert")
        for fn in self._on_insert:
            fn(ctx, ns, tokens, pages, r)
        self.ledger.held.difference_update(pages)
        return {"cached_len": r.cached_len, "freed": sorted(r.freed)}

    def _evict(self, tier: Tier, n: int) -> int:
        before = self._snapshot()
        freed = self._call("evict", self.engine.evict, tier, n)
        after = self._snapshot()
        ctx = self.ctx
        self.ran.add("on_evict")
        for fn in self._on_evict:
            fn(ctx, tier, n, freed, before, after)
        return freed

    def _ack(self, op: CopyOp, handle: Any, success: bool) -> None:
        """The copy lands (or fails, leaving poison), then the engine hears of it."""
        self.ledger.memory.finish_copy(handle, success)
        if not success and Feature.FATAL_TRANSFER_FAILURE in self.engine.features:
            # HOST-9: the runtime would end; the engine never hears of the copy, which stays
            # in flight for it, its destination poisoned for any read. Nothing at rest is owed
            # past it (``drain``).
            self.ledger.stranded[op.op_id] = op
            return
        self._call("finish_transfer", self.engine.finish_transfer, op.op_id, success)
        self.ctx.acks.append((op, success))

    def _live_lock(self, index: int, ref: int) -> LockRecord:
        rec = self.ledger.locks.get(ref)
        if rec is None or not rec.live:
            raise KitError(f"steps[{index}].step: the lock taken at step {ref} is not held")
        return rec

    # ----------------------------------------------------------------- steps
    def run(self, trace: Trace) -> list[dict[str, Any]]:
        self.tick_every_step = trace.clock == "per_step"
        for i, step in enumerate(trace.steps):
            self.step(i, step)
        return self.log

    def step(self, index: int, step: Step) -> dict[str, Any]:
        if flight.on():  # a worker: the parent holds the trace if the engine kills us here
            line = step.model_dump_json(exclude_none=True)
            flight.step(line)
            if self.tape is not None:  # DET-1's replay announces the same steps
                self.lines.append(line)
        self.ctx = ctx = Ctx(index, step.op, self.engine, self.ledger, before=self._snap)
        try:
            if self.tick_every_step or isinstance(step, TickStep):
                self._call("tick", self.engine.tick)
            out = self._dispatch(index, step)
            events = self._drain_events()
            ctx.events = events
            self._snap = ctx.after = self._snapshot()
            ctx.counters = self._counters()
            if ctx.acks:
                self.ran.add("after_acks")
            for fn in self._after_all if ctx.acks else self.quiet:
                fn(ctx)
            out["events"] = rows = event_rows(events) if events else []
            if self.tape is not None and self.events_on:
                self.tape.append((index, "drain_events", (), (rows, ())))
            if step.expect is not None and self.expect:
                self.marks.update(step.expect.behaviours or self.behaviours)
                _check_expect(step, out, self.behaviours, self._match_cap(step),
                              Feature.PAGE_EVICTION in self.engine.features)
        except Violation as v:
            if v.step is None:
                v.step = index
            raise
        self.log.append(out)
        return out

    def judged(self) -> set[str]:
        """The rules this play judged so far (spec chapter faults, "Verdicts of a rule"): each
        oracle's, given the hooks called (``Oracle.judged``), and the driver's own checks:
        FAULT-2 on every call, the trace's expectations, PIN-3, POOL-5 at rest. Before the
        feature filter (``kvconf.conformance.running.judged``)."""
        out = set(self.marks)
        if self.log or self.ran:
            out.add("FAULT-2")
            for o in self.oracles:
                out |= o.judged(self.ran)
        return out

    def _match_cap(self, step: Step) -> int | None:
        """Whole-page tokens a match of ``step`` may cover when the engine leaves the query's
        last token to compute (TREE-7): a trace's expected lengths are capped at it."""
        if not isinstance(step, (MatchStep, ExtendStep)):
            return None
        scope = match_scope(self.engine, step.tokens)
        if len(scope) == len(step.tokens):
            return None
        return len(scope) // self.engine.page_size * self.engine.page_size

    def _dispatch(self, i: int, step: Step) -> dict[str, Any]:
        p = self.engine.page_size
        if isinstance(step, MatchStep):
            m = self._match(step.ns, step.tokens)
            out = {"op": "match", "device_len": m.device_len, "host_len": m.host_len,
                   "device_pages": list(m.device_pages), "host_pages": list(m.host_pages)}
            if step.lock is not None:
                self.ctx.mid = self._snapshot()
                self.ledger.hold(i, self._lock(i, step.ns, step.tokens, m, step.lock))
            return out
        if isinstance(step, InsertStep):
            pages = self._alloc(len(step.tokens) // p)
            if pages is None:
                return {"op": "insert", "no_space": True}
            self._fill(step.ns, step.tokens, pages, 0)
            return {"op": "insert", "pages": pages, **self._insert(step.ns, step.tokens, pages)}
        if isinstance(step, ExtendStep):
            m = self._match(step.ns, step.tokens)
            rec = self._lock(i, step.ns, step.tokens, m, Tier.DEVICE)
            self.ledger.hold(-1 - i, rec)  # pinned while the step runs; not a trace lock
            try:
                reused = len(m.device_pages)
                pages = self._alloc(len(step.tokens) // p - reused)
                if pages is None:
                    return {"op": "extend", "device_len": m.device_len, "no_space": True}
                self._fill(step.ns, step.tokens, pages, reused)
                ins = self._insert(step.ns, step.tokens, list(m.device_pages) + pages)
            finally:
                if rec.live:
                    self._unlock(rec)
                del self.ledger.locks[-1 - i]
            return {"op": "extend", "device_len": m.device_len, "pages": pages, **ins}
        if isinstance(step, UnlockStep):
            rec = self.ledger.locks.get(step.step)
            if rec is None:
                raise KitError(f"steps[{i}].step: step {step.step} took no lock")
            if rec.live:
                self._unlock(rec)
                return {"op": "unlock", "rejected": False}
            return self._rejected_unlock(rec)
        if isinstance(step, EvictStep):
            return {"op": "evict", "evicted": self._evict(step.tier, step.pages)}
        if isinstance(step, (WritebackStep, LoadbackStep)):
            rec = self._live_lock(i, step.step)
            if not self.host_tier:  # the engine has no transfers to plan: declined, unasked
                return {"op": step.op, "started": False}
            fn = (self.engine.start_writeback if step.op == "writeback"
                  else self.engine.start_loadback)
            before = self._snapshot()
            op = self._call(f"start_{step.op}", fn, rec.node)
            if op is None:
                self._notify("on_unchanged_call", f"start_{step.op}", "declined", before,
                             self._snapshot())
                return {"op": step.op, "started": False}
            # Until the copy lands its destination holds nothing usable: an engine that serves
            # it early must be seen serving garbage, not the stale KV a page held before. A
            # source overwritten before the copy lands poisons its destination too.
            src, dst = ((Tier.DEVICE, Tier.HOST) if op.kind == "writeback"
                        else (Tier.HOST, Tier.DEVICE))
            handle = self.ledger.memory.start_copy(src, dst, op.pairs)
            self.ledger.started[op.op_id] = (rec, i)
            if step.ack == "now":
                self._ack(op, handle, step.success)
            else:
                self.ledger.transfers[i] = op
                self.ledger.copies[i] = handle
            return {"op": step.op, "started": True, "pairs": [list(x) for x in op.pairs]}
        if isinstance(step, TickStep):
            return {"op": "tick"}
        if isinstance(step, UnloadStep):
            if Feature.UNLOAD not in self.engine.features:
                raise KitError(f"steps[{i}].op: unload, and the engine does not declare unload")
            freed = self._call("unload", self.engine.unload, step.ns)
            self._notify("on_unload", step.ns)
            if self.retention is not None:
                self.retention.unloaded_ns(self.ctx, step.ns, freed)
            for rec in self.ledger.live_locks():
                if rec.namespace == step.ns:
                    rec.detached = True
            return {"op": "unload", "freed": freed}
        if isinstance(step, ResetStep):
            if Feature.RESET not in self.engine.features:
                raise KitError(f"steps[{i}].op: reset, and the engine does not declare reset")
            return self._reset()
        if isinstance(step, AckStep):
            op = self.ledger.transfers.pop(step.step, None)
            if op is None:
                raise KitError(f"steps[{i}].step: transfer of step {step.step} is not in flight "
                               "(declined, or acknowledged already)")
            self._ack(op, self.ledger.copies.pop(step.step), step.success)
            return {"op": "ack", "success": step.success}
        raise KitError(f"steps[{i}].op: unknown operation {step.op!r}")

    def in_use(self) -> bool | None:
        """Whether the caller holds part of the cache, as a reset must see it (EVICT-8): True
        for a lock over a page, a copy in flight or a page it holds; None when it holds only
        locks of empty matches, which pin nothing an engine need count (either answer of a
        reset is legal then); False for nothing at all."""
        led = self.ledger
        if led.transfers or led.stranded or led.held:
            return True
        if any(rec.pages for rec in led.live.values()):
            return True
        return None if led.live else False

    def _reset(self) -> dict[str, Any]:
        """A reset: cleared exactly when nothing is in use (EVICT-8, EVICT-9); a refused one
        changes nothing (``ResetOracle``)."""
        busy = self.in_use()
        before = self._snapshot()
        cleared = self._call("reset", self.engine.reset)
        if busy is not None:
            self.marks.add("EVICT-8")
            if cleared is busy:
                raise Violation(
                    _FAULTS, ("EVICT-8",),
                    "reset returned True while the caller holds part of the cache (a lock over "
                    "a page or a copy in flight): a reset that clears must wait until nothing "
                    "is in use" if busy else "reset returned False with nothing in use (no "
                    "lock over a page, no copy in flight, no page held by the caller)",
                )
        self._notify("on_reset", cleared, before, self._snapshot())
        return {"op": "reset", "cleared": cleared}

    def must_refuse(self, rec: LockRecord) -> bool:
        """Whether a second unlock of ``rec`` is one the engine can tell apart (PIN-3). An engine
        that unlocks by node (no ``lock_handles``) cannot tell it from the release of another
        lock at or below that node, nor keeps a count at a root; for it only a non-root node
        with nothing held at or below it qualifies: its count is zero."""
        if Feature.LOCK_HANDLES in self.engine.features:
            return True
        return bool(rec.tokens) and not any(
            x.tier is rec.tier and x.namespace == rec.namespace
            and x.tokens[: len(rec.tokens)] == rec.tokens for x in self.ledger.live_locks())

    def _rejected_unlock(self, rec: LockRecord) -> dict[str, Any]:
        """An unlock of a lock already released: the engine must reject it, changing nothing.
        One the engine cannot tell apart is not sent (a shrunk trace can hold one)."""
        if not self.must_refuse(rec):
            return {"op": "unlock", "rejected": None, "not_sent": True}
        self.marks.add("PIN-3")
        before = self._snapshot()
        try:
            self._call("unlock", self.engine.unlock, rec.handle, legal=False)
        except EngineRejected as e:
            if self.tape is not None:
                self.tape.append((self.ctx.index, "unlock", (rec.handle,), (REJECTED, ())))
            self._notify("on_unchanged_call", "unlock", e.code, before, self._snapshot())
            return {"op": "unlock", "rejected": True}
        raise Violation(
            _FAULTS, ("PIN-3",),
            f"an unlock of the lock taken at step {rec.step}, already released, was accepted",
        )

    # ----------------------------------------------------------------- quiescence
    def _settle(self) -> None:
        """End a phase of the drain as a step ends: events, snapshot, counters, oracles."""
        self.ctx.events = self._drain_events()
        self._snap = self._snapshot()
        self.ctx.after = self._snap
        self.ctx.counters = self._counters()
        self._after_step()

    def drain(self) -> None:
        """Bring the engine to rest and check that everything comes home (POOL-5).

        Acknowledges every transfer in flight and releases every lock: the engine is at rest,
        and its snapshot and counters must show nothing held by anyone. Then it evicts
        everything and allocates every device page at once: an engine that leaked a page
        cannot, whatever it shows.
        """
        if self.ledger.stranded:  # a failed copy ended the runtime (HOST-9): no rest owed
            return
        index = len(self.log)
        self.ctx = Ctx(index, "drain", self.engine, self.ledger, before=self._snap)
        rest = self.rest or RestOracle()
        sizes = self.ledger.sizes
        try:
            for ref, op in sorted(self.ledger.transfers.items()):
                self._ack(op, self.ledger.copies.pop(ref), True)
            self.ledger.transfers.clear()
            for rec in self.ledger.live_locks():
                self._unlock(rec)
            self._settle()
            where = "at rest after the trace"
            if self.rest is not None and isinstance(self._snap, CacheSnapshot):
                self.rest.cache(self._snap, where)
            if self.rest is not None and self.ctx.counters is not None:
                self.rest.counts(self.ctx.counters, sizes, where)
            self.ctx = Ctx(index, "drain", self.engine, self.ledger, before=self._snap)
            size = 1 << 30
            # Device first: an inclusive host tier gives up no host copy of a node still on
            # device (HOST-12), and either order empties any other engine.
            self._evict(Tier.DEVICE, size)
            self._evict(Tier.HOST, size) if Feature.HOST_TIER in self.engine.features else None
            self._settle()
            where = "at rest with everything evicted"
            if self.retention is not None:
                self.retention.emptied(where)
            if self.rest is not None and isinstance(self._snap, CacheSnapshot):
                self.rest.emptied(self._snap, where)
            if self.rest is not None and self.ctx.counters is not None:
                self.rest.counts(self.ctx.counters, sizes, where, empty=True)
            total = self.config.device_pages
            self.marks.add("POOL-5")
            pages = self._call("alloc", self.engine.alloc, total)
            if pages is None:
                raise rest.fail(
                    "POOL-5",
                    f"at rest, with nothing locked or cached, the {total} device pages cannot "
                    "all be allocated: pages leaked",
                )
            self._call("free", self.engine.free, pages)
        except Violation as v:
            if v.step is None:
                v.step = index
            raise


def _event_row(e: KVEvent) -> list[Any]:
    return [e.kind.value, [f"{h:016x}" for h in e.block_hashes]]


def event_rows(events: list[KVEvent]) -> list[list[Any]]:
    """The log's rows of the events a step drained."""
    return [_event_row(e) for e in events]


def _check_expect(step: Step, out: dict[str, Any], behaviours: tuple[str, ...],
                  match_cap: int | None = None, page_eviction: bool = False) -> None:
    """``match_cap``: the most tokens the step's match may cover (TREE-7), when below the query;
    ``page_eviction``: the engine frees exactly what an eviction asks (EVICT-6)."""
    exp = step.expect
    assert exp is not None
    if out.get("not_sent"):
        return
    for field in ("device_len", "host_len", "cached_len", "evicted", "started", "rejected",
                  "cleared"):
        want = getattr(exp, field)
        if want is not None and match_cap is not None and field in ("device_len", "host_len"):
            want = min(want, match_cap)
        if want is not None and field == "evicted" and page_eviction:
            want = min(want, step.pages)  # EVICT-6
        if want is not None and out.get(field) != want:
            raise Violation(
                "expect", tuple(exp.behaviours or behaviours),
                compared(field, out.get(field), want),
            )
