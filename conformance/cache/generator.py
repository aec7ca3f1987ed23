"""A Hypothesis stateful generator of cache-level traces that runs against any adapter.

Each rule appends one trace step and plays it through the driver, so every oracle judges every
step as it happens; Hypothesis shrinks a failing run to a short trace, which the holder keeps.
Tokens come from a tiny alphabet so prompts share prefixes and diverge mid-node often; pools are
small so eviction, declined transfers and allocation failures are common.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvconf.conformance.cache.driver import CacheDriver
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.protocol import CacheEngine
from kvconf.conformance.oracles import STEP_ORACLES, Oracle
from kvconf.conformance.oracles.determinism import DeterminismOracle
from kvconf.conformance.running import flight
from kvconf.conformance.running.progress import Meter
from kvconf.conformance.runtime.memory import MemoryFactory, shadow_memory
from kvconf.conformance.trace import (
    AckStep,
    EvictStep,
    Expect,
    ExtendStep,
    InsertStep,
    LoadbackStep,
    MatchStep,
    Step,
    TickStep,
    Trace,
    UnloadStep,
    UnlockStep,
    WritebackStep,
)
from kvconf.reference.tiers import Tier

EngineFactory = Callable[[EngineConfig], CacheEngine]


@dataclass
class TraceHolder:
    """Keeps the most recent trace: after a failure Hypothesis replays the shrunk one last."""

    last: Trace | None = None
    examples: int = 0
    steps: int = 0
    seen_ops: dict[str, int] = field(default_factory=dict)
    meter: Meter | None = None  # progress notes for the display (conformance.progress)


def _pages(page_size: int, alphabet: int, max_pages: int) -> st.SearchStrategy[list[int]]:
    return st.lists(
        st.lists(st.integers(0, alphabet - 1), min_size=page_size, max_size=page_size),
        min_size=1,
        max_size=max_pages,
    ).map(lambda ps: [t for p in ps for t in p])


def cache_machine(
    factory: EngineFactory,
    config: EngineConfig,
    holder: TraceHolder | None = None,
    *,
    namespaces: int = 2,
    alphabet: int = 3,
    max_pages: int = 6,
    determinism: bool = True,
    memory: MemoryFactory = shadow_memory,
    oracles: Sequence[type[Oracle]] = STEP_ORACLES,
) -> type[RuleBasedStateMachine]:
    """Build a state machine class bound to one engine factory and config."""
    p = config.page_size
    holder = holder if holder is not None else TraceHolder()
    whole = _pages(p, alphabet, max_pages)
    query = st.tuples(whole, st.lists(st.integers(0, alphabet - 1), max_size=p - 1)).map(
        lambda t: t[0] + t[1]
    )
    ns = st.integers(0, namespaces - 1)
    pick = st.integers(0, 1 << 16)

    class CacheTraceMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.trace = Trace(config=config, name="fuzz", clock="explicit")
            flight.begin(self.trace)
            self.engine = factory(config)
            self.driver = CacheDriver(self.engine, config, oracles, clock="explicit",
                                      memory=memory)
            self.failed = False
            self.live: dict[Tier, list[int]] = {Tier.DEVICE: [], Tier.HOST: []}
            self.released: list[int] = []
            self.later: list[int] = []
            self.prompts: list[tuple[int, list[int]]] = []  # what was inserted, to aim matches at
            holder.last = self.trace
            holder.examples += 1

        def _do(self, step: Step) -> dict:
            self.trace.steps.append(step)
            holder.steps += 1
            holder.seen_ops[step.op] = holder.seen_ops.get(step.op, 0) + 1
            if holder.meter is not None:
                holder.meter.tick(holder.examples, holder.steps)
            try:
                out = self.driver.step(len(self.trace.steps) - 1, step)
            except BaseException:
                self.failed = True
                raise
            if out.get("started"):
                key = f"{step.op}:started"
                holder.seen_ops[key] = holder.seen_ops.get(key, 0) + 1
            return out

        @rule(ns=ns, tokens=query, lock=st.sampled_from([None, Tier.DEVICE, Tier.HOST]))
        def match(self, ns: int, tokens: list[int], lock: Tier | None) -> None:
            self._do(MatchStep(ns=ns, tokens=tokens, lock=lock))
            if lock is not None:
                self.live[lock].append(len(self.trace.steps) - 1)

        @precondition(lambda self: self.prompts)
        @rule(k=pick, cut=st.integers(1, max_pages), other_ns=st.booleans(),
              lock=st.sampled_from([None, Tier.DEVICE, Tier.HOST]))
        def match_known(self, k: int, cut: int, other_ns: bool, lock: Tier | None) -> None:
            """Match a prefix of an earlier prompt, in its namespace or (rarely) another."""
            n, tokens = self.prompts[k % len(self.prompts)]
            n = (n + 1) % namespaces if other_ns and namespaces > 1 else n
            self.match(n, tokens[: cut * p], lock)

        @rule(ns=ns, tokens=whole)
        def insert(self, ns: int, tokens: list[int]) -> None:
            self.prompts.append((ns, tokens))
            self._do(InsertStep(ns=ns, tokens=tokens))

        @rule(ns=ns, tokens=whole)
        def extend(self, ns: int, tokens: list[int]) -> None:
            self.prompts.append((ns, tokens))
            self._do(ExtendStep(ns=ns, tokens=tokens))

        @precondition(lambda self: self.prompts)
        @rule(k=pick, cut=st.integers(0, max_pages), suffix=whole)
        def extend_known(self, k: int, cut: int, suffix: list[int]) -> None:
            """A new request sharing a prefix with an earlier one: reuse plus fresh pages."""
            n, tokens = self.prompts[k % len(self.prompts)]
            self.extend(n, tokens[: cut * p] + suffix)

        @precondition(lambda self: self.live[Tier.DEVICE] or self.live[Tier.HOST])
        @rule(k=pick)
        def unlock(self, k: int) -> None:
            locks = self.live[Tier.DEVICE] + self.live[Tier.HOST]
            self._release(locks[k % len(locks)])

        @precondition(lambda self: self._rejectable())
        @rule(k=pick)
        def unlock_again(self, k: int) -> None:
            refs = self._rejectable()
            ref = refs[k % len(refs)]
            self._do(UnlockStep(step=ref, expect=Expect(rejected=True)))

        def _rejectable(self) -> list[int]:
            """Released locks whose second unlock the engine must refuse (PIN-3)."""
            locks = self.driver.ledger.locks
            return [r for r in self.released if self.driver.must_refuse(locks[r])]

        def _release(self, ref: int) -> None:
            for lst in self.live.values():
                if ref in lst:
                    lst.remove(ref)
            self.released.append(ref)
            self._do(UnlockStep(step=ref))

        @precondition(lambda self: self.prompts)
        @rule(k=pick, later=st.booleans())
        def offload(self, k: int, later: bool) -> None:
            """Lock a known prompt on device, write it back to host, let go of the lock."""
            n, tokens = self.prompts[k % len(self.prompts)]
            ref = len(self.trace.steps)
            self.match(n, tokens, Tier.DEVICE)
            self._transfer(WritebackStep, Tier.DEVICE, len(self.live[Tier.DEVICE]) - 1, later, True)
            self._release(ref)

        @precondition(lambda self: any(len(t) > p for _, t in self.prompts))
        @rule(k=pick, cut=st.integers(1, max_pages), host_pages=st.integers(1, 4))
        def offload_deeper(self, k: int, cut: int, host_pages: int) -> None:
            """Write back a prefix, then the whole prompt below it with the ack held back, and
            put the host tier under pressure while that copy is in flight: the copy must still
            land under a host parent (HOST-1, HOST-2)."""
            longer = [(n, t) for n, t in self.prompts if len(t) > p]
            n, tokens = longer[k % len(longer)]
            head = tokens[: min(cut, len(tokens) // p - 1) * p]
            self.match(n, head, Tier.DEVICE)
            head_ref = len(self.trace.steps) - 1
            self._transfer(WritebackStep, Tier.DEVICE, len(self.live[Tier.DEVICE]) - 1, False,
                           True)
            self._release(head_ref)
            ref = len(self.trace.steps)
            self.match(n, tokens, Tier.DEVICE)
            self._transfer(WritebackStep, Tier.DEVICE, len(self.live[Tier.DEVICE]) - 1, True,
                           True)
            self._release(ref)
            self.evict(Tier.HOST, host_pages)

        @precondition(lambda self: len(self.later) >= 1 and len(self.prompts) >= 2)
        @rule(k=pick, j=pick)
        def writeback_race(self, k: int, j: int) -> None:
            """A second writeback completes while an earlier one is still in flight, then the
            earlier one lands a step later: host LRU must follow completion order (HOST-6)."""
            self.tick()
            self.offload(j, False)
            self.tick()
            self.ack(k, True)
            self.evict(Tier.HOST, 1)

        @precondition(lambda self: self.prompts)
        @rule(k=pick, later=st.booleans(), offload=st.booleans())
        def reload(self, k: int, later: bool, offload: bool) -> None:
            """Lock a known prompt on host and load it back, after a round trip if asked:
            written back, then pushed off the device by pressure."""
            n, tokens = self.prompts[k % len(self.prompts)]
            if offload:
                self.offload(k, False)
                self.evict(Tier.DEVICE, config.device_pages)
            self.match(n, tokens, Tier.HOST)
            self._transfer(LoadbackStep, Tier.HOST, len(self.live[Tier.HOST]) - 1, later, True)

        @precondition(lambda self: Feature.UNLOAD in self.engine.features and self.prompts)
        @rule(k=pick)
        def unload(self, k: int) -> None:
            """Unload the adapter of a namespace in use; the kit's locks in it stay held."""
            n, _tokens = self.prompts[k % len(self.prompts)]
            self._do(UnloadStep(ns=n))
            self.prompts = [(m, t) for m, t in self.prompts if m != n] or self.prompts[:0]

        @rule()
        def tick(self) -> None:
            """A new scheduling step: steps between two ticks share one access time."""
            self._do(TickStep())

        @rule(tier=st.sampled_from([Tier.DEVICE, Tier.HOST]), pages=st.integers(0, 4))
        def evict(self, tier: Tier, pages: int) -> None:
            self._do(EvictStep(tier=tier, pages=pages))

        def _transfer(self, cls, tier: Tier, k: int, later: bool, success: bool) -> None:
            ref = self.live[tier][k % len(self.live[tier])]
            out = self._do(cls(step=ref, ack="later" if later else "now", success=success))
            if later and out["started"]:
                self.later.append(len(self.trace.steps) - 1)

        @precondition(lambda self: self.live[Tier.DEVICE])
        @rule(k=pick, later=st.booleans(), success=st.sampled_from([True, True, True, False]))
        def writeback(self, k: int, later: bool, success: bool) -> None:
            self._transfer(WritebackStep, Tier.DEVICE, k, later, success)

        @precondition(lambda self: self.live[Tier.HOST])
        @rule(k=pick, later=st.booleans(), success=st.sampled_from([True, True, True, False]))
        def loadback(self, k: int, later: bool, success: bool) -> None:
            self._transfer(LoadbackStep, Tier.HOST, k, later, success)

        @precondition(lambda self: self.later)
        @rule(k=pick, what=st.sampled_from(["unlock", "evict", "match", "all", "all"]),
              pages=st.integers(1, 4), ack=st.booleans())
        def race(self, k: int, what: str, pages: int, ack: bool) -> None:
            """Races on purpose: while a held-back copy is in flight, act on its own prefix:
            release the caller's lock on it before the ack, evict on its source tier, match it
            again (locked on the other tier), or all of these; then perhaps the ack lands.
            Left to the other rules, the three meet only at budgets far above ``ci``."""
            i = k % len(self.later)
            ref = self.later[i]
            copy = self.trace.steps[ref]
            src = Tier.DEVICE if isinstance(copy, WritebackStep) else Tier.HOST
            held = copy.step  # the caller's lock the copy was started from
            found = self.trace.steps[held]
            if what in ("match", "all") and isinstance(found, MatchStep):
                self.match(found.ns, found.tokens,
                           Tier.HOST if src is Tier.DEVICE else Tier.DEVICE)
            if what in ("unlock", "all") and held in self.live[src]:
                self._release(held)
            if what in ("evict", "all"):
                self.evict(src, pages)
            if ack and ref in self.later:
                self.later.remove(ref)
                self._do(AckStep(step=ref, success=True))

        @precondition(lambda self: self.prompts)
        @rule(k=pick, offload=st.booleans(), what=st.sampled_from(["unlock", "evict", "all"]),
              pages=st.integers(1, 4))
        def loadback_race(self, k: int, offload: bool, what: str, pages: int) -> None:
            """A loadback held back, then a race on its prefix (``race``) before its ack."""
            before = len(self.later)
            self.reload(k, True, offload)
            if len(self.later) > before:
                self.race(len(self.later) - 1, what, pages, False)

        @precondition(lambda self: self.later)
        @rule(k=pick, success=st.sampled_from([True, True, True, False]))
        def ack(self, k: int, success: bool) -> None:
            ref = self.later.pop(k % len(self.later))
            self._do(AckStep(step=ref, success=success))

        @invariant()
        def recorded(self) -> None:
            # Every step is judged as it runs; this keeps the trace the holder reports current.
            holder.last = self.trace

        def teardown(self) -> None:
            if not self.trace.steps or self.failed:
                return
            self.driver.drain()
            if determinism:
                flight.begin(self.trace.model_copy(update={"steps": []}))
                again = CacheDriver(factory(config), config, oracles=(), clock="explicit",
                                    memory=memory)
                for i, s in enumerate(self.trace.steps):
                    again.step(i, s)
                DeterminismOracle().compare(self.driver.log, again.log)

    CacheTraceMachine.__name__ = f"CacheTraceMachine[{getattr(factory, 'name', 'engine')}]"
    return CacheTraceMachine
