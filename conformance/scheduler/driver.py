"""The scheduler-level driver: plays the model runtime for an engine that speaks plans and events.

Per plan it submits the workload's arrivals, takes the plan, performs the loadbacks, "runs" the
forward against its KV memory (``kvconf.conformance.runtime.memory``), checking the tag of every
position a row reads and writing the tag of every position it computes; it samples tokens, reports
results, finishes requests after their tokens, performs writebacks and acknowledges them as the
workload says (now, a plan later, or as failed), aborts, and probes the engine with events it must
reject. Every KV position holds a tag for (namespace, tokens[0..i]): a wrong reuse, a copy to the
wrong page, a loadback after the forward or a namespace leak shows up as a wrong tag."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import cache, partial
from typing import Any

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.errors import EngineRejected
from kvconf.conformance.faults import DOCUMENTED, call_legal, raised, wrong_return
from kvconf.conformance.oracles.accounting import CounterOracle, RestOracle, TransferOracle
from kvconf.conformance.oracles.base import Violation
from kvconf.conformance.oracles.mamba import MambaContentOracle, MambaOwnershipOracle
from kvconf.conformance.oracles.retention import MambaRetentionOracle
from kvconf.conformance.oracles.scheduler import (
    HybridReuseOracle,
    Live,
    LivenessOracle,
    PlanOracle,
    RequestStateOracle,
    ReuseOracle,
    RuntimeEventOracle,
    SchedContentOracle,
    SchedEventOracle,
)
from kvconf.conformance.running import flight
from kvconf.conformance.runtime.content import position_tags, prompt_tags
from kvconf.conformance.runtime.memory import (
    DROPPED,
    ZEROED,
    MemoryFactory,
    page_id_space,
    shadow_memory,
    state_id_space,
    state_memory,
)
from kvconf.conformance.scheduler.l3_runtime import L3Runtime
from kvconf.conformance.scheduler.tape import Tape, plan_record
from kvconf.conformance.scheduler.trace import Arrival, SchedConfig, SchedTrace
from kvconf.reference.plan import (
    Abort,
    BackupDone,
    CopyOp,
    ExtendResult,
    Finish,
    LoadbackDone,
    Plan,
    PrefetchDone,
    RequestSpec,
    WritebackDone,
)
from kvconf.reference.requests import TRANSITIONS, Event, State
from kvconf.reference.tiers import Tier

ALPHABET = 4  # sampled tokens come from a tiny alphabet so generated suffixes collide too


UNKNOWN = "unknown:"  # marks a probe whose event names nothing the scheduler holds (REQ-6)
REST_RID = "kvconf-at-rest"  # the request the runtime submits once the workload is at rest
REST_TOKEN = 7919  # its prompt's token: one no workload's prompt or sampled token shares


# The runtime events a probe may try for a request, in the order they are tried.
_PROBED = (Event.EXTEND_RESULT, Event.FINISH, Event.ABORT)


@cache
def _illegal(state: State, awaiting: bool) -> tuple[Event, ...]:
    """The runtime events of ``_PROBED`` a request in ``state`` may not receive (REQ-2): those
    not in the table, an ExtendResult while no token is due, a Finish while one is."""
    return tuple(kind for kind in _PROBED if (state, kind) not in TRANSITIONS
                 or (kind is Event.EXTEND_RESULT and not awaiting)
                 or (kind is Event.FINISH and awaiting))


@cache
def _named(member: State | Event) -> tuple[str, str]:
    """A state's or event's text in a probe's message and its value in the (state, event)
    pair, read once (an Enum member formats and reads its value in Python)."""
    return f"{member}", member.value


def sample(seed: int, rid: str, position: int) -> int:
    """The runtime's token: a function of the request and position, not of the plan order."""
    h = hashlib.blake2b(f"{seed}:{rid}:{position}".encode(), digest_size=4).digest()
    return int.from_bytes(h, "little") % ALPHABET


# Rules a workload judges only where its configuration has what they are about.
_WINDOW_RULES = frozenset({"PLAN-8", "WIN-2", "WIN-3", "WIN-4"})


def _configured(rule: str, c: SchedConfig, mixed: bool, namespaces: set[int]) -> bool:
    """Whether ``rule`` has anything to judge under config ``c`` (``mixed``: the switch as
    played; ``namespaces``: those the workload's requests name)."""
    prefix = rule.split("-", 1)[0]
    if prefix == "L3":
        return c.l3_store
    if prefix == "MAMBA":
        return c.mamba
    if prefix == "NS":
        return namespaces != {0}
    if prefix == "HOST" or rule in ("FIN-2", "REQ-5"):
        return c.host_pages > 0
    if rule in _WINDOW_RULES:
        return bool(c.sliding_window)
    if rule == "PLAN-9":
        return c.max_adapters > 0
    if rule == "PLAN-3":
        return not mixed
    return True


class SchedulerDriver:
    def __init__(self, engine, trace: SchedTrace, memory: MemoryFactory = shadow_memory,
                 memory_only: bool = False, probes: str = "all") -> None:
        """``memory_only`` keeps the checks that read the KV memory (and liveness) and drops
        the ones that read plans, snapshots and events: a defect caught then was seen in the
        memory itself."""
        self.engine = engine
        self.trace = trace
        self.config = trace.config
        self.p = engine.page_size
        feats = engine.features
        if Feature.MIXED_ONLY in feats:  # no unmixed mode: judged with the switch on (PLAN-3)
            self.config = trace.config.model_copy(update={"mixed": True})
        self.white = Feature.SNAPSHOT in feats
        # Switches read every plan, read once (a feature test hashes an Enum member in Python).
        self.loadback_ack = Feature.LOADBACK_ACK in feats
        self.deferred_loadback = Feature.DEFERRED_LOADBACK in feats
        self.keeps_prefix = Feature.KEEPS_WINDOW_PREFIX in feats
        self.ignores_unknown = Feature.IGNORES_UNKNOWN_EVENTS in feats
        self.memory_only = memory_only
        # PLAN-13: a runtime that writes a layer's KV for every row before any row attends;
        # a row's reads then see what the whole forward computes.
        self.same_forward = Feature.SAME_FORWARD_REUSE in feats
        self.deferred_reads: list[tuple] | None = None
        self.plans = None if memory_only else PlanOracle(
            self.same_forward, deferred=Feature.DEFERRED_LOADBACK in feats,
            flushed=Feature.FLUSHED_WRITEBACK in feats)
        self.covers = PlanOracle()  # PLAN-10 under --memory-only, where no plan oracle runs
        self.states = (RequestStateOracle(feats) if self.white and not memory_only
                       else None)
        # PLAN-7 holds every engine to mid-flight publish while the workload's switch is on
        # (D381-1): an engine that publishes at finish only fails it, whatever it declares.
        c = trace.config
        # Black-box, a publisher is known pushed off the device only by its retraction's copy:
        # with no host tier there is none, so PLAN-7 needs a snapshot there (said, not skipped).
        owed = not memory_only and c.publish_mid_flight and not c.sliding_window and not c.mamba
        self.reuse = ReuseOracle() if owed and (self.white or c.host_pages) else None
        # MAMBA-10: with Mamba on, states are published at finish (MAMBA-7), so the reuse owed
        # is the deepest prefix whose KV and state of that depth the cache holds; judged from
        # the snapshots before and after the admitting plan. Black-box it cannot be judged: the
        # driver says so (``unjudged``) and the case's message carries it.
        self.hybrid_reuse = (HybridReuseOracle() if not memory_only and c.mamba and self.white
                             else None)
        self.unjudged: list[str] = (
            ["MAMBA-10 (hybrid reuse) not judged: the engine offers no snapshot, so which "
             "states and KV its cache held is unknown"]
            if c.mamba and not self.white and not memory_only else [])
        if c.mamba and not self.white and not memory_only:
            self.unjudged.append("MAMBA-12 (states kept until evicted) not judged: the engine "
                                 "offers no snapshot, so which states its cache dropped is "
                                 "unknown")
        if Feature.MIXED_ONLY in feats and not c.mixed and not memory_only:
            self.unjudged.append("PLAN-3 (unmixed batches) not judged: the engine declares "
                                 "mixed_only, its runtime takes any mix of rows")
        if owed and self.reuse is None:
            self.unjudged.append("PLAN-7 (mid-flight reuse) not judged: with no host tier and "
                                 "no snapshot, a publisher retracted without a copy is unknown")
        self.before_plan = None  # the snapshot before the current plan (MAMBA-10)
        self.events = RuntimeEventOracle()
        # KV events as the runtime reads them (EVENT-1..7), drained after every call.
        # EVENT-8: an engine that announces only reusable boundaries names parents it never
        # stored; the driver tells which prefix such a hash names (with the engine's hash).
        sparse = (Feature.SPARSE_PREFIX_EVENTS in feats
                  and getattr(engine, "block_hash", None) is not None)
        self.kv = (SchedEventOracle(getattr(engine, "block_hash", None),
                                    self._prefix_named if sparse else None)
                   if Feature.KV_EVENTS in feats and hasattr(engine, "drain_events")
                   and not memory_only else None)
        self.chains: dict[int, tuple[int, tuple[int, ...]]] = {}  # block hash -> (ns, prefix)
        self.chained: dict[str, tuple[int, int | None]] = {}  # rid -> (blocks hashed, last)
        self.content = SchedContentOracle()
        self.live: dict[str, Live] = {}
        self.tags: dict[str, list[int]] = {}
        self.left: dict[str, int] = {}  # tokens each request still generates before Finish
        self.started: set[str] = set()
        self.memory = memory(self.p, *page_id_space(engine, trace.config.device_pages,
                                                    trace.config.host_pages))
        # WIN-3: the window's layers read and write a table of their own; nothing is dropped.
        self.window_table = bool(c.sliding_window) and Feature.WINDOW_TABLE in feats
        # A page id the engine reserves as "no page" (holes in its tables): a row never computes
        # into it (PLAN-10).
        self.null: int | None = getattr(engine, "null_page", None)
        # The same id as a Mamba state slot only where states are blocks of the KV pool (the
        # engine numbers them as its pages); otherwise state slots have ids of their own.
        states_are_pages = (getattr(engine, "state_ids", None) is not None
                            and getattr(engine, "state_ids", None) == getattr(engine, "page_ids",
                                                                               None))
        self.null_state: int | None = self.null if states_are_pages else None
        # Under a sliding window (no window table), the KV each request computed and has not
        # yet dropped: position -> (device page, tag), where its row wrote it (WIN-4).
        self.own: dict[str, dict[int, tuple[int, int]]] = {}
        # PLAN-12: a forward is one step. Its rows' reads see the memory as it was before it;
        # what they compute is written once every row has read: (request, pages, slots,
        # positions) of each write this forward computes (read only to name the row a wrong
        # read reuses, ``_computing``), and the writes (and drops) waiting for its end.
        self.computing: list[tuple[str, list[int], list[int], range]] = []
        self.after_forward: list[Any] = []
        self.later: list[tuple[CopyOp, Any]] = []  # writebacks acknowledged a plan later
        # HOST-14: writebacks a plan named in its flush, landed before its forward, each
        # acknowledged in that plan's advance (op id -> (op, the landed copy)).
        self.flushed: dict[Any, tuple[CopyOp, Any]] = {}
        # HOST-13: requests whose loadback came without their row: the plan (and its decode
        # rows) of that admission, against which their first row's reuse is judged (PLAN-7).
        self.admitted: dict[str, tuple[int, frozenset[str]]] = {}
        self.acks = 0
        # HOST-9: an engine whose acknowledgement carries no success flag never hears of a
        # failed copy (the runtime would end); the copies left unacknowledged so.
        self.fatal_failures = Feature.FATAL_TRANSFER_FAILURE in feats
        self.abandoned: list[int] = []
        self.abandoned_pages: set[int] = set()  # host destinations of those copies
        # HOST-8: loadbacks whose acknowledgement waits for the next advance (the ack modes
        # cycle with the writebacks' where the engine declares loadback_ack).
        self.loads_later: list[CopyOp] = []
        # Probes (REQ-2, REQ-6): "all"; "known" leaves out the unknown-id probes the engine may
        # ignore (the replay that shows an ignored event changed nothing); "none" (the replay
        # that judges the run apart from its probes). A probe's finding waits for the end of the
        # run, so it never masks the case's other checks.
        self.probes = probes
        self.ignored: list[str] = []  # unknown-id probes the engine ignored (REQ-6)
        self.probe_finding: Violation | None = None
        self.resting = False  # playing the at-rest request (POOL-5): no REQ-2 probes then
        # Pages holding the remains of a copy the runtime acknowledged as failed, directly or
        # through later copies of them, so a read of them blames REQ-5 / HOST-4 (E-1).
        self.failed_remains: set[tuple[Tier, int]] = set()
        self.log: list[Any] = []
        # The calls this play handed the engine, and its plans: what DET-1's replay hands a
        # fresh engine (``kvconf.conformance.scheduler.tape``).
        self.tape: Tape = []
        # The KV events as drained, a tuple per drain: not part of ``log`` (DET-1 compares
        # that), but what the engine visibly announced (the variant matrix's witness reads it).
        self.published: list[tuple[Any, ...]] = []
        self.exercised: set[tuple[str, str]] = set()  # (state, event) taken
        self.illegal: set[tuple[str, str]] = set()  # (state, event) tried and rejected
        # The L3 store and its transfers (spec chapter l3_store), when the config has one.
        self.l3 = (L3Runtime(trace, self.memory, self.p, self.live, self._tag,
                             checks=not memory_only)
                   if trace.config.l3_store else None)
        # Mamba state slots beside the KV (spec chapter mamba), when the config has them.
        c = trace.config
        self.mstates = (state_memory(self.memory, *state_id_space(engine, c.mamba_slots,
                                                                  c.mamba_host_slots))
                        if c.mamba else None)
        self.mamba_content = MambaContentOracle()
        self.mamba_owners = (MambaOwnershipOracle() if c.mamba and self.white
                             and not memory_only else None)
        self.mamba_kept = (MambaRetentionOracle() if self.mamba_owners is not None
                           else None)  # MAMBA-12: states leave only for an allocation
        # The copies the runtime was handed and has not acknowledged, by kind (op id -> request),
        # and this plan's loadbacks where none is acknowledged (HOST-10).
        self.held_ops: dict[str, dict[Any, str]] = {"writeback": {}, "loadback": {}, "l3": {}}
        self.landing: list[Any] = []
        self.acked_now = 0  # copies the last advance acknowledged
        self.transfers = TransferOracle() if self.white and not memory_only else None
        self.counter = (CounterOracle() if Feature.COUNTERS in feats and not memory_only
                        else None)
        self.rest = RestOracle()
        # Makes a fresh engine of this configuration (``play_sched`` sets it): a request the
        # at-rest engine does not serve is a leak of the workload (POOL-5) only where a fresh
        # engine serves it; where none does, the pools alone keep it out (LIVE-1).
        self.fresh: Any = None
        self.serve_at_rest = True
        self.sizes = {Tier.DEVICE: c.device_pages, Tier.HOST: c.host_pages}
        self.marks: set[str] = set()  # rules the driver's own checks judged (``judged``)
        self.snap = self._snapshot()

    def judged(self) -> set[str]:
        """The rules this play judged (spec chapter faults, "Verdicts of a rule"): those of
        the oracles that took part (``Oracle.judged``: some only where their event happened),
        the driver's own checks (FAULT-2 on every call, FAULT-4 on every plan, PLAN-10, REQ-4,
        LIVE-1, POOL-5 at rest), less what the workload's configuration leaves nothing to judge
        of and what the driver says it could not judge (``unjudged``). Before the feature filter
        (``kvconf.conformance.running.judged``)."""
        if not self.log:
            return set()
        c = self.trace.config
        out = self.marks | {"FAULT-2", "FAULT-4", "PLAN-10"}  # FAULT-4: every plan's type
        for o in (self.plans, self.states, self.reuse, self.hybrid_reuse, self.events, self.kv,
                  self.content, self.mamba_owners, self.mamba_kept, self.transfers,
                  self.counter):
            if o is not None:
                out |= o.judged()
        if c.mamba:
            out |= self.mamba_content.judged()
        if self.l3 is not None and self.l3.checks:
            out |= self.l3.oracle.judged()
        namespaces = {a.ns for a in self.trace.arrivals}
        return {b for b in out if _configured(b, c, self.config.mixed, namespaces)}

    # ----------------------------------------------------------------- plumbing
    def _snapshot(self):
        return self.engine.snapshot() if self.white else None

    def _next_plan(self) -> Plan:
        """The engine's next plan, of the protocol's type (FAULT-4) before anything reads it."""
        plan = call_legal("next_plan", self.engine.next_plan)
        if type(plan) is not Plan and not isinstance(plan, Plan):
            raise wrong_return("next_plan",
                               f"{type(plan).__name__} ({plan!r:.60})",
                               "conformance/engine/protocol.py", (Plan,))
        return plan

    def _tag(self, rid: str, i: int) -> int:
        req, tags = self.live[rid], self.tags[rid]
        if i >= len(tags):
            if not tags:  # a prompt asked for before (the at-rest one) is hashed once
                new = prompt_tags(req.ns, req.tokens)
            else:
                new = position_tags(req.ns, req.tokens, len(tags), tags[-1].to_bytes(8, "little"))
            tags.extend(new)
            self.content.origin.update(dict.fromkeys(new, req.ns))
        return tags[i]

    def _drain(self) -> tuple[Any, ...]:
        """The KV events published since the last drain, kept in ``published``."""
        events = tuple(self.engine.drain_events())
        self.tape.append(("drain",))
        self.published.append(events)
        return events

    def _prefix_named(self, h: int) -> tuple[int, tuple[int, ...]] | None:
        """The (namespace, prefix) whose block hash is ``h``: the whole blocks of every request
        the runtime submitted, its sampled tokens included, hashed with the engine's function
        (EVENT-8); None when no such prefix is known."""
        bh = self.engine.block_hash
        p = self.p
        for rid in sorted(self.live):  # in a fixed order: the first prefix found is the answer
            if h in self.chains:
                break
            req = self.live[rid]
            done, parent = self.chained.get(rid, (0, None))
            for k in range(done, len(req.tokens) // p):
                block = tuple(req.tokens[k * p : (k + 1) * p])
                parent = bh(parent, req.ns, block)
                self.chains.setdefault(parent, (req.ns, tuple(req.tokens[: (k + 1) * p])))
            self.chained[rid] = (max(done, len(req.tokens) // p), parent)
        return self.chains.get(h)

    def _states(self, phase: str, external: dict[str, set[Event]]) -> None:
        after = self._snapshot()
        where = f"after the {phase} of plan {self._at}" if phase != "submit" else \
            "after a submit"
        if self.kv is not None:  # the events up to now against the device tier (EVENT-6)
            self.kv.take(self._drain())
            self.kv.device(after, where)
        if self.states is not None and after is not None:
            self.states.check(phase, self.snap, after, self.live, self.p, external,
                              self.config.sliding_window)
        if self.l3 is not None and after is not None and phase != "submit":
            self.l3.check_tree(after)
        if self.mamba_owners is not None and after is not None:
            done = {rid for rid, evs in external.items() if Event.FINISH in evs}
            self.mamba_owners.check(self.snap, after, done, self.p)
        if self.mamba_kept is not None and after is not None:
            self.mamba_kept.check(self.snap, after, where, phase)
        if phase == "plan":
            self.before_plan = self.snap
        self.snap = after
        self._account(phase, where)

    def _account(self, phase: str, where: str) -> None:
        """The engine's copies in flight against the runtime's (HOST-10) and its counters
        against its state (POOL-6), after every call (``where``: which, for the messages)."""
        if self.transfers is not None and self.snap is not None:
            plan = phase == "plan"
            self.transfers.check_sched(self.snap, self.held_ops, self.landing if plan else (),
                                       where, between=not plan)
        if self.counter is not None:
            counts = call_legal("counters", self.engine.counters)
            self.counter.check_sched(counts, self.snap, self.sizes, self.config.max_slots,
                                     where)

    # ----------------------------------------------------------------- the loop
    def run(self) -> list[Any]:
        """Play the workload; the first broken rule raises. A probe's finding is raised at the
        end, when nothing else broke (``play_sched`` tells a consequence of an accepted probe
        from a failure of its own)."""
        log = self._run()
        # Transition coverage for the report: the engine lists every transition it took, so
        # it is read once, at the end of the workload.
        taken = getattr(self.engine, "transitions", None)
        if taken is not None:
            self.exercised.update(taken())
        if self.probe_finding is not None:
            raise self.probe_finding
        return log

    def _run(self) -> list[Any]:
        arrivals = sorted(self.trace.arrivals, key=lambda a: a.at)
        last_arrival = max((a.at for a in arrivals), default=0)
        for step in range(self.trace.max_plans):
            flight.beat()
            specs = [a for a in arrivals if a.at == step]
            if specs:
                self._submit(specs)
            plan = self._next_plan()
            self._plan(step, plan)
            if step >= last_arrival and self._quiet(plan):
                self._at_rest(step)
                return self.log
        left = sorted(rid for rid, r in self.live.items() if not r.finished)
        if self.abandoned:  # HOST-9: the runtime ends at a failed copy; nothing is owed after it
            self.log.append(("unjudged", f"copies {self.abandoned[:5]} failed and were never "
                             "acknowledged: the runtime would have ended there"))
            return self.log
        if self._fits():
            self.marks.add("LIVE-1")
            states = None if self.snap is None else {v.rid: v.state for v in self.snap.requests}
            # The cap can hold a request back only where the workload has more adapter
            # namespaces than the cap allows in one forward (PLAN-9).
            adapters = {a.ns for a in self.trace.arrivals if a.ns != 0}
            capped = ([rid for rid in left if self.live[rid].ns != 0]
                      if self.config.max_adapters and len(adapters) > self.config.max_adapters
                      else None)
            raise LivenessOracle().stuck(self.trace.max_plans, left, states, capped)
        self.log.append(("unjudged", "a request needs more device pages or state slots than "
                         "the pools have"))
        return self.log

    # ----------------------------------------------------------------- at rest (POOL-5)
    def _at_rest(self, step: int) -> None:
        """The workload is done: every request finished or aborted, every copy acknowledged.
        What the engine shows must hold nothing for anyone, and it must still serve a request
        as large as LIVE-1 promises on a fresh engine. Not judged after a copy that failed and
        was never acknowledged (HOST-9: the runtime would have ended there)."""
        if self.abandoned or self.memory_only:
            return
        self.marks.add("POOL-5")
        where = f"at rest after plan {self._at}"
        if self.white and self.snap is not None:
            self.rest.scheduler(self.snap, self.config.max_slots, where)
        if self.counter is not None:
            counts = call_legal("counters", self.engine.counters)
            counts = self.counter.check_sched(counts, self.snap, self.sizes,
                                              self.config.max_slots, where)
            self.rest.counts(counts, self.sizes, where, slots=self.config.max_slots)
        if self.serve_at_rest:
            self._serve_at_rest(step)

    def _serve_at_rest(self, step: int) -> None:
        """Submit one request that needs all but one device page (the most LIVE-1 promises) and
        play plans until it finishes: pages, pins or slots the workload leaked keep it out."""
        c, p = self.config, self.p
        tokens = (c.device_pages - 1) * p - 1
        if tokens < 1 or (c.mamba and c.mamba_slots < 2
                          and Feature.MAMBA_CHECKPOINT_SLOT in self.engine.features):
            return
        self.marks.add("LIVE-1")
        rest_at = self._at
        self.resting = True  # REQ-2 probes were played through the workload; not again here
        self._submit([Arrival(at=step + 1, rid=REST_RID, ns=0, tokens=[REST_TOKEN] * tokens,
                              new_tokens=1)])
        for k in range(step + 1, step + 1 + self.trace.max_plans):
            flight.beat()
            plan = self._next_plan()
            self._plan(k, plan)
            if self._quiet(plan):
                return
        need = f"it needs {c.device_pages - 1} of the {c.device_pages} device pages"
        if self.fresh is not None and not self._fresh_serves(tokens):
            raise LivenessOracle().fail(
                "LIVE-1", f"at rest after plan {rest_at}, a request of {tokens} tokens ({need}) "
                f"was not served within {self.trace.max_plans} plans, and a fresh engine of "
                "the same configuration does not serve it either: no leak of the workload "
                "keeps it out, the engine does not serve a request its pools hold")
        raise self.rest.fail("POOL-5", f"at rest after plan {rest_at}, a request of {tokens} "
                             f"tokens (it needs {c.device_pages - 1} of the {c.device_pages} "
                             f"device pages) was not served within {self.trace.max_plans} "
                             "plans: the workload left pages, pins or slots held")

    def _fresh_serves(self, tokens: int) -> bool:
        """Whether a fresh engine of this configuration serves the at-rest request alone
        (no probes, no at-rest request of its own); a run that breaks another rule counts as
        served, so only liveness moves the finding off POOL-5."""
        alone = SchedTrace(name=self.trace.name, config=self.config, seed=self.trace.seed,
                           arrivals=[Arrival(at=0, rid=REST_RID, ns=0,
                                             tokens=[REST_TOKEN] * tokens, new_tokens=1)],
                           max_plans=self.trace.max_plans)
        driver = SchedulerDriver(self.fresh(), alone, probes="none")
        driver.serve_at_rest = False
        try:
            driver.run()
        except Violation as v:
            return "LIVE-1" not in v.behaviours
        return True

    def _fits(self) -> bool:
        """LIVE-1 applies when every request alone fits on the device: its whole sequence
        (prompt and generated tokens) in pages, plus the page its next decode would need, and,
        for an engine that reserves a checkpoint slot with each request, its two state slots
        (MAMBA-9)."""
        c = self.config
        if c.mamba and c.mamba_slots < 2 \
                and Feature.MAMBA_CHECKPOINT_SLOT in self.engine.features:
            return False
        return all(-(-(len(a.tokens) + a.new_tokens) // self.p) + 1 <= c.device_pages
                   for a in self.trace.arrivals)

    def _quiet(self, plan: Plan) -> bool:
        if self.abandoned and plan.empty and not self.later and not self.loads_later \
                and not (self.l3 is not None and self.l3.busy()):
            return True  # HOST-9: the runtime ended at its failed copy; nothing moves without it
        if self.later or self.loads_later or any(not r.finished or r.copying
                                                 for r in self.live.values()):
            return False
        if self.l3 is not None and (self.l3.busy() or not plan.empty or self.acked_now):
            return False  # backups of the last writebacks come in the plans after them
        if self.snap is None:
            # Black-box: a finished request's writeback can come in the plan after its Finish
            # (Draining, then WritingBack), so the run is at rest only after a plan with nothing.
            return plan.empty
        # self.snap is the state after this plan's advance: a rejected probe changes nothing.
        # A copy the engine started for its next plan (a backup) is not handed out yet; one
        # that failed and was never acknowledged (HOST-9) stays listed for good, and its request
        # waits for nothing more.
        listed = {op for op, _rid in (*getattr(self.snap, "ops", ()),
                                      *getattr(self.snap, "l3_ops", ()))}
        return all(v.state is State.FINISHED or (v.op is not None and v.op in self.abandoned)
                   for v in self.snap.requests) and not (listed - set(self.abandoned))

    def _submit(self, arrivals) -> None:
        specs = []
        for a in arrivals:
            self.live[a.rid] = Live(a.rid, a.ns, list(a.tokens), len(a.tokens))
            if self.kv is not None:  # EVENT-5 compares every namespace the trace uses
                self.kv.use(a.ns)
            self.tags[a.rid] = []
            self.left[a.rid] = a.new_tokens
            hits = self.l3.hits(a.rid) if self.l3 is not None else 0
            specs.append(RequestSpec(a.rid, tuple(a.tokens), a.ns, hits))
        call_legal("submit", self.engine.submit, specs)
        self.tape.append(("submit", specs))
        self._states("submit", {})

    def _plan(self, step: int, plan: Plan) -> None:
        self._at = plan.step
        record = plan_record(step, plan)
        self.tape.append(("plan", record))
        self._handed(plan)
        if self.plans is not None:
            self.plans.check(plan, self.live, self.config, self.p, self.window_table)
        if not self.memory_only and (self.loads_later or plan.loadbacks):  # HOST-2/8/9
            self.events.in_flight(plan, self.loads_later, [op for op, _h in self.later],
                                  self.abandoned_pages)
        if self.kv is not None:
            for row in plan.rows:
                self.kv.use(row.namespace)
            self.kv.take(self._drain())
            for row in plan.rows:
                if row.kind == "prefill" and row.start == row.reused and row.reused:
                    self.kv.reused(plan, row, self.live[row.rid].tokens, self.p)
        for row in plan.rows:
            if row.samples:
                self.live[row.rid].due = True
        self._states("plan", {})
        self._probe(step + 1)  # states that live only between a plan and its advance
        self.log.append(record)
        loads = [self._start_copy(Tier.HOST, Tier.DEVICE, op) for op in plan.loadbacks]
        for handle in loads:  # landed before the forward (PLAN-5)
            self._finish_copy(handle, True)
        if plan.flush:  # writebacks the runtime completes before the forward (HOST-14)
            self._flush_copies(plan)
        if plan.zero or plan.zero_states:  # fresh pages zeroed before the forward (PLAN-11)
            self._zero(plan)
        w = self.config.sliding_window
        if w and not self.window_table:  # no row of this plan reads these again (WIN-4)
            for row in plan.rows:
                self._drop_behind(row.rid, row.start - w + 1)
        running = frozenset(r.rid for r in plan.rows if r.kind == "decode")  # PLAN-7
        if self.deferred_loadback:  # HOST-13: admitted here
            planned = {r.rid for r in plan.rows}
            for op in plan.loadbacks:
                if op.rid in self.live and op.rid not in planned:
                    self.admitted.setdefault(op.rid, (step, running))
        if self.reuse is not None and self.snap is None:
            self.reuse.next_rows(plan, step)
        self.deferred_reads = [] if self.same_forward else None
        for row in plan.rows:
            req = self.live[row.rid]
            # A row after its deferred loadback reuses what its admission found (HOST-13).
            at, seen = self.admitted.pop(row.rid, (step, running))
            if row.kind == "prefill" and row.rid not in self.started and self.reuse is not None:
                self.reuse.check_admit(row, req, self.live, self.p, at, self.snap, seen)
            if row.kind == "prefill" and row.rid not in self.started \
                    and self.hybrid_reuse is not None:
                self.hybrid_reuse.check_admit(row, req, self.p, self.before_plan, self.snap)
            if row.kind == "prefill" and self.l3 is not None:
                self.l3.first_chunk(row)
            self.started.add(row.rid)
            self._forward(row, req)
            if self.mstates is not None:
                self._forward_state(row, req)
        reads, self.deferred_reads = self.deferred_reads, None
        drops = [f for f in self.after_forward
                 if getattr(f, "func", None) == self._drop_behind] if reads is not None else []
        for write in self.after_forward:  # the forward's end: what it computed lands (PLAN-12)
            if write not in drops:
                write()
        for args in reads or ():  # PLAN-13: each layer's KV is written before it is read
            self._read(*args)
        for drop in drops:  # and dropped behind a window only once the forward has read it
            drop()
        self.after_forward, self.computing = [], []
        events: list = []
        if self.loadback_ack:  # each landed loadback (HOST-8)
            events.extend(self._ack_loads(plan.loadbacks))
        external: dict[str, set[Event]] = {}
        # Backups start before this plan's writebacks: a source page reused by one of them
        # is seen to change while the backup reads it (L3-5).
        l3_due = self.l3.start(plan.l3) if self.l3 is not None else []
        due, failed = self._start_copies(plan.writebacks)
        aborted = self._aborts(step)
        for rid in aborted:  # first: an aborted request's pending result is never reported
            events.append(Abort(rid))
            external.setdefault(rid, set()).add(Event.ABORT)
        for row in plan.rows:
            if not row.samples or row.rid in aborted:
                continue
            req = self.live[row.rid]
            req.due = False
            token = sample(self.trace.seed, row.rid, len(req.tokens))
            req.tokens.append(token)
            events.append(ExtendResult(row.rid, token))
            external.setdefault(row.rid, set()).add(Event.EXTEND_RESULT)
            if row.kind == "prefill":  # its prompt is published now (again, after a recovery)
                req.published_at = step
            self.left[row.rid] -= 1
            if self.left[row.rid] <= 0:
                events.append(Finish(row.rid))
                external[row.rid].add(Event.FINISH)
                req.finished = True
        if self.l3 is not None:
            events.extend(self.l3.land(l3_due))
        events.extend(self._land_copies(due, failed))
        # Cancellations go first, in a call of their own (a runtime passes them on when they
        # arrive), so an engine that refuses one is seen refusing an Abort (REQ-4, E-2).
        cancels = [e for e in events if isinstance(e, Abort)]
        if cancels:
            self.marks.add("REQ-4")
            try:
                self.engine.advance(cancels)
                self.tape.append(("advance", cancels))
            except EngineRejected as e:
                raise Violation("faults", ("FAULT-2", "REQ-4"), "advance rejected a legal "
                                f"Abort of {', '.join(a.rid for a in cancels)}: {e}") from e
            except Exception as e:
                raise Violation("faults", ("FAULT-2", "REQ-4"), "advance raised "
                                f"{type(e).__name__} on a legal Abort of "
                                f"{', '.join(a.rid for a in cancels)}: {e}") from e
        rest = [e for e in events if not isinstance(e, Abort)]
        call_legal("advance", self.engine.advance, rest)
        self.tape.append(("advance", rest))
        self._acknowledged(events)
        if self.kv is not None:
            self.kv.take(self._drain())
        self._states("advance", external)
        after = self.snap
        if not self.memory_only:
            for e in events:
                if isinstance(e, Abort):
                    self.events.aborted(e.rid, after)
            # REQ-5 judges a failure the engine heard of; under HOST-9 it never hears of one
            # (the copy stays unacknowledged, its host pages the transfer's).
            for op, _handle in [] if self.fatal_failures else failed:
                self.content.mark("REQ-5", "HOST-4")
                self.events.failed_copy(op, after)
        self._probe(step)

    def _handed(self, plan: Plan) -> None:
        """The plan's copies are the runtime's now, until it acknowledges them (HOST-10)."""
        held = self.held_ops
        for op in plan.writebacks:
            held["writeback"][op.op_id] = op.rid
        for o in plan.l3:
            held["l3"][o.op_id] = o.rid
        if self.loadback_ack:
            for op in plan.loadbacks:
                held["loadback"][op.op_id] = op.rid
            self.landing = []
        else:  # landed before the forward: the engine may list them until the advance
            self.landing = [op.op_id for op in plan.loadbacks]

    def _acknowledged(self, events: Sequence[Any]) -> None:
        """The copies the advance acknowledged leave the runtime's record (HOST-10)."""
        done: list[Any] = []
        for e in events:
            kind = ("writeback" if isinstance(e, WritebackDone) else "loadback"
                    if isinstance(e, LoadbackDone) else "l3"
                    if isinstance(e, (PrefetchDone, BackupDone)) else None)
            if kind is not None:
                self.held_ops[kind].pop(e.op_id, None)
                done.append(e.op_id)
        self.landing = []
        self.acked_now = len(done)
        if self.plans is not None:
            self.plans.landed(done)
        if self.transfers is not None:
            self.transfers.acknowledged(done, f"in the advance of plan {self._at}")

    def _aborts(self, step: int) -> list[str]:
        """Requests the workload aborts after this plan. Also after Finish while the request
        still has something in flight (E-2): its writeback, or (seen in a snapshot) its
        Draining state; an ``in_flight`` abort waits for the plan its writeback starts in.
        An engine without a snapshot gets aborts only where they are legal from what the
        runtime itself knows."""
        states = None if self.snap is None else {v.rid: v.state for v in self.snap.requests}
        out = []
        for a in self.trace.aborts:
            req = self.live.get(a.rid)
            if req is None or req.aborted or step < a.at or (step > a.at and not a.in_flight):
                continue
            if a.in_flight:  # E-2, reached whenever the engine emits the writeback
                ok = bool(req.copying)
            elif states is not None:
                ok = states.get(a.rid, State.FINISHED) is not State.FINISHED
            else:
                ok = not req.finished or bool(req.copying)
            if ok:
                req.finished = req.aborted = True
                req.due = False
                out.append(a.rid)
        return out

    def _forward(self, row, req: Live) -> None:
        """Check what the row reads, write what it computes; under a sliding window W the row
        reads only the W - 1 positions before it, and afterwards the runtime drops the
        request's own KV more than W behind (positions it computed, not those it reused:
        ``_drop_behind``). With a window table (WIN-3) the full table gives every earlier
        position, the window table the W - 1 before, both receive what the row computes, and
        nothing is dropped."""
        p, ns = self.p, req.ns
        n = len(row.input_tokens)
        w = self.config.sliding_window
        if self.plans is None:  # the plan oracle checked it already when it is on (PLAN-10)
            self.covers.table_covers(self._at, row, p)
        if self.window_table and not row.window_table:
            raise self.covers.fail("PLAN-10", f"plan {self._at}: the {row.kind} row of "
                                   f"{row.rid} has no window table (WIN-3)")
        if list(row.input_tokens) != req.tokens[row.start : row.start + n]:
            raise self.content.tokens(row, req.tokens[row.start : row.start + n])
        first = max(0, row.start - w + 1) if w else 0
        if self.window_table:
            self._read(row, ns, row.page_table, range(row.start))
            self._read(row, ns, row.window_table, range(first, row.start), window=True)
        else:
            self._read(row, ns, row.page_table, range(first, row.start))
        writes = range(row.start, row.start + n)
        tags = self._computed(row, req, writes)
        for table in (row.page_table, row.window_table) if self.window_table else (row.page_table,):
            pages = [table[i // p] for i in writes]
            if self.null is not None and self.null in pages:
                i = writes[pages.index(self.null)]
                raise self.covers.fail("PLAN-10", f"plan {self._at}: the {row.kind} row of "
                                       f"{row.rid} computes position {i} into the null page "
                                       f"{self.null} of its table {list(table)}")
            slots = [i % p for i in writes]
            self.computing.append((row.rid, pages, slots, writes))
            self.after_forward.append(partial(self.memory.write, Tier.DEVICE, pages, slots,
                                              tags))
        if w and not self.window_table:
            own = self.own.setdefault(row.rid, {})
            if row.kind == "prefill" and row.start == row.reused:  # an admission: a new table
                own.clear()
            # A runtime that keeps the window-equivalent prefix never drops the first w (WIN-2).
            keep = w if self.keeps_prefix else 0
            own.update((i, (row.page_table[i // p], t))
                       for i, t in zip(writes, tags, strict=True) if i >= keep)
            self.after_forward.append(partial(self._drop_behind, row.rid, row.start + n - w))

    def _drop_behind(self, rid: str, upto: int) -> None:
        """The runtime drops the request's own KV before position ``upto``, each position once,
        and only where it still lies: in the page the request's row computed it into, holding
        that row's tag. The engine may have freed such a page behind the window and handed it
        on (WIN-4): then it holds its new owner's KV, or will before anyone reads it, and the
        marker would fall on KV that is not the request's."""
        own = self.own.get(rid)
        gone = sorted(i for i in own if i < upto) if own else ()
        if not gone:
            return
        p = self.p
        where = [own.pop(i) for i in gone]
        got = self.memory.read(Tier.DEVICE, [pg for pg, _t in where], [i % p for i in gone])
        still = [(pg, i % p) for i, (pg, t), now in zip(gone, where, got, strict=True)
                 if now == t]
        if still:
            self.memory.write(Tier.DEVICE, [pg for pg, _s in still], [s for _pg, s in still],
                              [DROPPED] * len(still))

    def _read(self, row, ns: int, table: Sequence[int], reads: range,
              window: bool = False) -> None:
        """Every position in ``reads`` holds its own tag in the page ``table`` gives it (the
        window table's reads are WIN-3's)."""
        if not reads:
            return  # nothing read (a first chunk): nothing to compare
        if self.deferred_reads is not None:  # PLAN-13: read once the forward has written
            self.deferred_reads.append((row, ns, table, reads, window))
            return
        p = self.p
        got = self.memory.read(Tier.DEVICE, [table[i // p] for i in reads],
                               [i % p for i in reads])
        # All as they should be: compared at once (the tags are computed in order).
        if reads[-1] < len(self.live[row.rid].tokens):
            self._tag(row.rid, reads[-1])
            if list(got) == self.tags[row.rid][reads.start : reads.stop]:
                return
        for i, tag in zip(reads, got, strict=True):
            if tag != self._tag(row.rid, i):
                page = table[i // p]
                other = self._computing().get((page, i % p))
                if other is not None:
                    raise self.content.same_forward(row, i, page, *other)
                if tag == DROPPED:
                    raise self.content.dropped(row, i, page)
                raise self.content.wrong(row, ns, i, page, tag, window,
                                         failed=(Tier.DEVICE, page) in self.failed_remains)

    def _computing(self) -> dict[tuple[int, int], tuple[str, int]]:
        """(page, slot) -> (request, position) this forward computes, the last write of a slot
        winning (PLAN-12); built only to name it in a finding."""
        out: dict[tuple[int, int], tuple[str, int]] = {}
        for rid, pages, slots, writes in self.computing:
            out.update(((pg, sl), (rid, i)) for pg, sl, i in zip(pages, slots, writes,
                                                                 strict=True))
        return out

    def _ack_loads(self, loads: Sequence[CopyOp]) -> list[LoadbackDone]:
        """Acknowledge the loadbacks held back last time and this plan's, except those the
        workload holds back to the next advance (its "later" acks; a loadback has landed before
        the forward, so "fail" acknowledges it now)."""
        due, self.loads_later = self.loads_later, []
        modes = self.trace.acks or ["now"]
        for op in loads:
            mode = modes[self.acks % len(modes)]
            self.acks += 1
            (self.loads_later if mode == "later" else due).append(op)
        return [LoadbackDone(op.op_id) for op in due]

    def _zero(self, plan: Plan) -> None:
        """Zero the plan's fresh pages and state slots (PLAN-11): a page a row of this plan
        reads (from any of its tables, its state slots included), or one a loadback of this plan
        just filled, must not be among them; a row that reads a zeroed position later shows up
        in the content check."""
        p, w = self.p, self.config.sliding_window
        landed = {d for op in plan.loadbacks for _s, d in op.pairs}
        landed_states = {d for op in plan.loadbacks for _s, d in op.mamba}
        zero, zero_states = set(plan.zero), set(plan.zero_states)
        for row in plan.rows:
            first = max(0, row.start - w + 1) if w else 0
            full = range(row.start) if self.window_table else range(first, row.start)
            read = {row.page_table[i // p] for i in full} | landed
            if row.window_table:
                read |= {row.window_table[i // p] for i in range(first, row.start)}
            states = set(landed_states)
            if row.mamba >= 0 and row.start:
                states.add(row.mamba_src if row.mamba_src >= 0 else row.mamba)
            bad = sorted(read & zero) or sorted(states & zero_states)
            if bad:
                raise self.content.zeroed(row, bad[0])
        self.memory.write_pages(Tier.DEVICE, list(plan.zero), [ZEROED] * len(plan.zero))
        if self.mstates is not None and plan.zero_states:
            self.mstates.write_states(Tier.DEVICE, list(plan.zero_states),
                                      [ZEROED] * len(plan.zero_states))

    def _start_copy(self, src: Tier, dst: Tier, op: CopyOp) -> tuple[Any, Any, Any]:
        """One copy op, all its units: KV pages, and Mamba states by their own kind (D162-1)."""
        kv = self.memory.start_copy(src, dst, op.pairs)
        mamba = getattr(op, "mamba", ())
        st = (self.mstates.start_copy(src, dst, mamba)
              if self.mstates is not None and mamba else None)
        # Which destinations would carry the remains of a failed copy on (REQ-5): the new copy
        # decides what its destination holds.
        carried = [(dst, d) for s, d in op.pairs if (src, s) in self.failed_remains]
        self.failed_remains.difference_update((dst, d) for _s, d in op.pairs)
        return kv, st, (dst, tuple(d for _s, d in op.pairs), carried)

    def _finish_copy(self, handle: tuple[Any, Any, Any], success: bool) -> None:
        kv, st, (dst, pages, carried) = handle
        if success:
            self.failed_remains.update(carried)
        else:  # acknowledged as failed: what its destinations hold is its remains
            self.failed_remains.update((dst, d) for d in pages)
        self.memory.finish_copy(kv, success)
        if st is not None and self.mstates is not None:
            self.mstates.finish_copy(st, success)

    def _state_tag(self, row, req: Live, depth: int) -> int:
        """The tag of the state at ``depth``: (namespace of the row, tokens[0..depth])."""
        if row.namespace == req.ns:
            return self._tag(row.rid, depth - 1)
        return position_tags(row.namespace, req.tokens[:depth], 0, None)[depth - 1]

    def _forward_state(self, row, req: Live) -> None:
        """A row resumes the request's recurrent state at depth ``start`` (from its cached
        source or its working slot), and leaves the state at its end depth in the working slot,
        and at ``checkpoint_depth`` in its checkpoint slot (MAMBA-1)."""
        assert self.mstates is not None
        mamba = getattr(row, "mamba", -1)
        if mamba < 0:
            return
        if self.null_state is not None and mamba == self.null_state:
            raise self.covers.fail("PLAN-10", f"plan {self._at}: the {row.kind} row of "
                                   f"{row.rid} leaves its state in the null slot {mamba}")
        if row.start:
            src = row.mamba_src if row.mamba_src >= 0 else mamba
            got = self.mstates.read_states(Tier.DEVICE, [src])[0]
            if got != self._state_tag(row, req, row.start):
                own = {self._tag(row.rid, i): i + 1 for i in range(len(req.tokens))}
                raise self.mamba_content.wrong(row, row.start, src, got, own)
        end = row.start + len(row.input_tokens)
        later = self.after_forward  # written at the forward's end, as its KV is (PLAN-12)
        later.append(partial(self.mstates.write_states, Tier.DEVICE, [mamba],
                             [self._state_tag(row, req, end)]))
        if row.checkpoint >= 0:
            later.append(partial(self.mstates.write_states, Tier.DEVICE, [row.checkpoint],
                                 [self._state_tag(row, req, row.checkpoint_depth)]))

    def _computed(self, row, req: Live, writes: range) -> list[int]:
        """The KV a row computes: with the adapter the row names, so a continuation in another
        namespace than its request's writes KV of that namespace (NS-3)."""
        if row.namespace == req.ns:
            if not writes:
                return []
            self._tag(row.rid, writes[-1])  # computes every tag up to it
            return self.tags[row.rid][writes.start : writes.stop]
        tags = position_tags(row.namespace, req.tokens[: writes.stop], 0, None)[writes.start :]
        self.content.origin.update(dict.fromkeys(tags, row.namespace))
        return tags

    def _flush_copies(self, plan: Plan) -> None:
        """HOST-14: the writebacks the plan names in its flush land before its forward, which
        may compute into their source pages: those held back from an earlier plan now, this
        plan's own started and landed here. Each is acknowledged in this plan's advance."""
        names = set(plan.flush)
        keep = []
        for op, handle in self.later:
            if op.op_id in names:
                self._finish_copy(handle, True)
                self.flushed[op.op_id] = (op, handle)
            else:
                keep.append((op, handle))
        self.later = keep
        for op in plan.writebacks:
            if op.op_id in names:
                handle = self._start_copy(Tier.DEVICE, Tier.HOST, op)
                self._finish_copy(handle, True)
                self.flushed[op.op_id] = (op, handle)

    def _start_copies(self, writebacks: Sequence[CopyOp]) -> tuple[list, list]:
        """This plan's writebacks are in flight; returns the copies acknowledged in this advance
        (the ones held back last time included), split into landed and failed, each with the
        memory's copy."""
        failed: list[tuple[CopyOp, Any]] = []
        due, self.later = self.later, []
        for op in writebacks:
            if op.op_id in self.flushed:  # landed before the forward (HOST-14)
                continue
            handle = self._start_copy(Tier.DEVICE, Tier.HOST, op)
            if self.l3 is not None:
                self.l3.overwritten([d for _s, d in op.pairs])
            if op.rid in self.live:
                self.live[op.rid].copying.add(op.op_id)
                if op.retract:  # pushed off the device: its pins are gone
                    self.live[op.rid].published_at = None
                    if self.reuse is not None:
                        self.reuse.retracted(op.rid)
            modes = self.trace.acks or ["now"]
            mode = modes[self.acks % len(modes)]
            self.acks += 1
            if mode == "later":
                self.later.append((op, handle))
            else:
                (due if mode == "now" else failed).append((op, handle))
        return due, failed

    def _land_copies(self, due: list, failed: list) -> list:
        out: list = []
        flushed, self.flushed = list(self.flushed.values()), {}
        for op, _handle in flushed:  # landed before the forward (HOST-14)
            out.append(WritebackDone(op.op_id, True))
        for op, handle in due:
            self._finish_copy(handle, True)
            out.append(WritebackDone(op.op_id, True))
        for op, handle in failed:
            self._finish_copy(handle, False)
            if self.fatal_failures:  # never acknowledged: the runtime would end here (HOST-9)
                self.abandoned.append(op.op_id)
                self.abandoned_pages.update(d for _s, d in op.pairs)
            else:
                out.append(WritebackDone(op.op_id, False))
        for op, _handle in flushed + due + failed:
            if op.rid in self.live:
                self.live[op.rid].copying.discard(op.op_id)
        return out

    def _fixed_probe(self, step: int, k: int, idle: list[Live]
                     ) -> tuple[str, list, tuple[str, str] | None]:
        """The ``k``-th of the illegal events tried whatever the states (``_fixed_count`` of
        them): black-box ones, and an ExtendResult for a request with no token due (one of
        ``idle``). Every plan tries one probe, so only the chosen one is made."""
        if k == 0:
            return (UNKNOWN + "an acknowledgement of an unknown writeback",
                    [WritebackDone(10**9 + step, True)], None)
        if k == 1:
            return (UNKNOWN + "an Abort of a request never submitted", [Abort(f"nobody-{step}")],
                    None)
        if self.l3 is not None:
            if k == 2:
                return (UNKNOWN + "a PrefetchDone of an unknown prefetch",
                        [PrefetchDone(10**9 + step, 0)], None)
            if k == 3:
                return (UNKNOWN + "a BackupDone of an unknown backup",
                        [BackupDone(10**9 + step, True)], None)
        r = idle[step % len(idle)]
        return (f"an ExtendResult for {r.rid}, which has no token due", [ExtendResult(r.rid, 0)],
                None)

    def _fixed_count(self, idle: bool) -> int:
        """How many fixed probes there are (``_fixed_probe``): two black-box ones, two more with
        an L3 store, and one more while some request has no token due (``idle``)."""
        return 2 + (2 if self.l3 is not None else 0) + (1 if idle else 0)

    def _chosen_probe(self, step: int) -> tuple[str, list, tuple[str, str] | None]:
        """The illegal event to try after this call, in turn over the fixed ones and, with a
        snapshot, every (request, runtime event) its state does not allow (so each illegal
        pair gets tried). Only the chosen one is built: the pairs are counted, not made."""
        idle = [r for r in self.live.values() if not r.finished and not r.due]
        fixed = self._fixed_count(bool(idle))
        views = () if self.snap is None else self.snap.requests
        kinds = [_illegal(v.state, bool(v.awaiting)) for v in views]
        k = step % (fixed + sum(map(len, kinds)))
        if k < fixed:
            return self._fixed_probe(step, k, idle)
        k -= fixed
        i = 0
        while k >= len(kinds[i]):  # the k-th (request, event) pair
            k -= len(kinds[i])
            i += 1
        v, kind = views[i], kinds[i][k]
        ev = (ExtendResult(v.rid, 0) if kind is Event.EXTEND_RESULT else Finish(v.rid)
              if kind is Event.FINISH else Abort(v.rid))
        (kind_text, kind_value), (state_text, state_value) = _named(kind), _named(v.state)
        return f"{kind_text} for {v.rid} in {state_text}", [ev], (state_value, kind_value)

    def _probe(self, step: int) -> None:
        """Events the engine must reject without changing anything (REQ-2)."""
        if self.memory_only or self.probes == "none" or self.resting:
            return
        what, events, pair = self._chosen_probe(step)
        unknown = what.startswith(UNKNOWN)
        what = what.removeprefix(UNKNOWN)
        may_ignore = unknown and self.ignores_unknown
        if may_ignore and self.probes == "known":
            return  # the replay without the events the engine ignores (REQ-6)
        if pair is not None:
            self.illegal.add(pair)
        # The state the probe must leave unchanged: the snapshot just taken after the plan or
        # the advance (only reads, ``counters`` and ``drain_events``, came since).
        before = self.snap
        try:
            self.engine.advance(events)
        except EngineRejected:
            self.tape.append(("probe", events, "rejected"))
            try:
                self.events.rejected(what, before, self._snapshot())
            except Violation as v:
                v.probe = True
                self.probe_finding = self.probe_finding or v
            return
        except Exception as e:
            raise raised(what, e, DOCUMENTED) from e
        self.tape.append(("probe", events, "accepted"))
        if may_ignore:  # ignored: the replay without it must give the same plans (REQ-6)
            self.ignored.append(what)
            return
        finding = self.events.accepted_illegal(what)
        finding.step = step
        finding.probe = True
        self.probe_finding = self.probe_finding or finding
