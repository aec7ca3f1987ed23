"""A plain seeded walk of the cache-level rules: one trace per seed, played as it is drawn.

Each rule appends one or more trace steps and plays them through the driver, so every oracle
judges every step as it happens. The walk draws from ``random.Random(seed)`` alone, never from the
wall clock, a memory address or a set's order: the same seed gives the same trace. Hypothesis only
supplies the seeds (``kvconf.conformance.cache.generator``), which keeps its example database;
shrinking is the kit's own, on the trace (``kvconf.conformance.running.shrink``). A Hypothesis rule
machine drawing the same operations spent most of a fuzz case on its own bookkeeping, and the
engine a few percent (``benchmarks/fuzz_share.py`` measures both).

Swarm selection (each trace enables a random half of the rules, ``swarm_rules``) is there to
be measured, and off by default: with these rules it reached fewer states and killed the cache
mutants more slowly than every rule enabled (``benchmarks/fuzz_swarm.py``); the rules are
already aimed (``offload``, ``race``, ``loadback_race`` compose several operations on one
prefix), so leaving some out only narrows each trace.

Tokens come from a tiny alphabet so prompts share prefixes and diverge mid-node often; pools are
small so eviction, declined transfers and allocation failures are common.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kvconf.conformance.cache import tape
from kvconf.conformance.cache.driver import CacheDriver, event_rows
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.protocol import CacheEngine
from kvconf.conformance.oracles import Oracle
from kvconf.conformance.running import flight, judged
from kvconf.conformance.running.progress import Meter
from kvconf.conformance.runtime.memory import MemoryFactory
from kvconf.conformance.trace import (
    AckStep,
    EvictStep,
    Expect,
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
from kvconf.reference.tiers import Tier

EngineFactory = Callable[[EngineConfig], CacheEngine]

# Every rule of the walk, in a fixed order (the seed picks among them by position).
RULES: tuple[str, ...] = (
    "match", "match_known", "insert", "extend", "extend_known", "unlock", "unlock_again",
    "offload", "offload_deeper", "writeback_race", "reload", "unload", "tick", "evict",
    "writeback", "loadback", "race", "loadback_race", "ack", "reset",
)
# Rules that can always run: a swarm draw keeps at least one, so every trace has a step to take.
ALWAYS = ("match", "insert", "extend", "tick", "evict")
_LOCKS = (None, Tier.DEVICE, Tier.HOST)
# (rules, unloads, resets) -> {the walk's facts: the rules ready} (``CacheWalk._now``): a few
# hundred entries at most, the facts being seven booleans.
_NOW: dict[tuple[tuple[str, ...], bool, bool], dict[tuple[bool, ...], tuple[str, ...]]] = {}
_TIERS = (Tier.DEVICE, Tier.HOST)


@dataclass
class TraceHolder:
    """Keeps the most recent trace: after a failure it is the failing one."""

    last: Trace | None = None
    examples: int = 0
    steps: int = 0
    seen_ops: dict[str, int] = field(default_factory=dict)
    meter: Meter | None = None  # progress notes for the display (conformance.progress)


def swarm_rules(rng: random.Random) -> tuple[str, ...]:
    """A random half of the rules (each kept with probability 1/2), at least one of ``ALWAYS``."""
    on = tuple(r for r in RULES if rng.random() < 0.5)
    if not any(r in ALWAYS for r in on):
        on = (*on, ALWAYS[rng.randrange(len(ALWAYS))])
    return on


class CacheWalk:
    """One trace: a walk of ``rules`` drawn by ``rng``, each played as it is drawn."""

    def __init__(self, rng: random.Random, factory: EngineFactory, config: EngineConfig,
                 holder: TraceHolder, *, rules: Sequence[str] = RULES, namespaces: int = 2,
                 alphabet: int = 3, max_pages: int = 6, memory: MemoryFactory,
                 oracles: Sequence[type[Oracle]]) -> None:
        self.rng = rng
        self.factory, self.config, self.memory = factory, config, memory
        self.holder = holder
        self.rules = tuple(rules)
        self.namespaces, self.alphabet, self.max_pages = namespaces, alphabet, max_pages
        self.p = config.page_size
        self.trace = Trace(config=config, name="fuzz", clock="explicit")
        flight.begin(self.trace)
        self.engine = factory(config)
        self.driver = CacheDriver(self.engine, config, oracles, clock="explicit", memory=memory)
        self.driver.tape = []  # the engine's calls, for DET-1's replay
        self.live: dict[Tier, list[int]] = {Tier.DEVICE: [], Tier.HOST: []}
        self.released: list[int] = []
        self.later: list[int] = []
        self.prompts: list[tuple[int, list[int]]] = []  # what was inserted, to aim matches at
        self.longer = 0  # prompts of more than a page (``offload_deeper`` needs one)
        self.unloads = Feature.UNLOAD in self.engine.features
        self.resets = Feature.RESET in self.engine.features
        # The rules ready under each set of the walk's facts (``_now``), shared by the walks of
        # the same rules and the same ``unloads`` and ``resets``.
        self._seen = _NOW.setdefault((self.rules, self.unloads, self.resets), {})
        # Whether the walk may unlock a released lock again: else no released lock is a fact
        # of its steps (``_facts``).
        self.unlocks_again = "unlock_again" in self.rules
        holder.last = self.trace
        holder.examples += 1

    # ----------------------------------------------------------------- the walk
    def run(self, rules: int) -> None:
        """Play ``rules`` rules, each picked among those of the walk that can run now."""
        for _ in range(rules):
            now = self._now()
            getattr(self, now[self.rng.randrange(len(now))])()

    def _now(self) -> tuple[str, ...]:
        """The rules that can run now, in the walk's order (``_ready_now``). Which ones is a
        function of a few facts of the walk, so each answer is remembered by those facts (the
        ``_facts`` of this step) for every walk of the same rules and engine features."""
        facts = self._facts()
        now = self._seen.get(facts)
        if now is None:
            ready = self._ready_now()
            now = self._seen[facts] = tuple(r for r in self.rules if ready[r]) or tuple(
                r for r in ALWAYS if r in self.rules) or ("tick",)
        return now

    def _facts(self) -> tuple[bool, ...]:
        """Everything ``_ready_now`` reads of the walk, besides its rules and engine features."""
        prompts = self.prompts
        return (bool(prompts), bool(self.later), bool(self.live[Tier.DEVICE]),
                bool(self.live[Tier.HOST]), self.longer > 0, len(prompts) >= 2,
                bool(self.released) and self.unlocks_again and any(map(self.driver.must_refuse, map(
                    self.driver.ledger.locks.__getitem__, self.released))))

    def finish(self, determinism: bool = True) -> None:
        """Bring the engine to rest (POOL-5), then hand a fresh one the same calls (DET-1,
        ``kvconf.conformance.cache.tape``)."""
        if not self.trace.steps:
            return
        calls = self.driver.tape[:] if self.driver.tape is not None else []
        self.driver.drain()
        if determinism:
            judged.record(("DET-1",))
            flight.begin(self.trace)  # a cache-level trace is announced without its steps
            tape.replay(self.factory(self.config), calls, self.trace.steps, self.driver.lines,
                        event_rows)

    def _ready_now(self) -> dict[str, bool]:
        """Every rule's precondition, read once for this step: what the rule needs already
        exists in this walk."""
        prompts, later = bool(self.prompts), bool(self.later)
        device, host = bool(self.live[Tier.DEVICE]), bool(self.live[Tier.HOST])
        return {
            "match": True, "insert": True, "extend": True, "tick": True, "evict": True,
            "match_known": prompts, "extend_known": prompts, "offload": prompts,
            "reload": prompts, "loadback_race": prompts,
            "unlock": device or host,
            "unlock_again": bool(self.released) and "unlock_again" in self.rules
            and any(map(self.driver.must_refuse, map(self.driver.ledger.locks.__getitem__,
                                                     self.released))),
            "offload_deeper": self.longer > 0,
            "writeback_race": later and len(self.prompts) >= 2,
            "unload": self.unloads and prompts,
            "reset": self.resets,
            "writeback": device, "loadback": host, "race": later, "ack": later,
        }

    # ----------------------------------------------------------------- draws
    def _whole(self) -> list[int]:
        """One to ``max_pages`` whole pages of tokens."""
        n = self.rng.randint(1, self.max_pages) * self.p
        return self.rng.choices(range(self.alphabet), k=n)

    def _query(self) -> list[int]:
        """Whole pages and a partial tail of up to a page less one token."""
        tail = self.rng.randint(0, self.p - 1)
        return self._whole() + self.rng.choices(range(self.alphabet), k=tail)

    def _ns(self) -> int:
        return self.rng.randrange(self.namespaces)

    def _pick(self, items: Sequence) -> int:
        return self.rng.randrange(len(items))

    def _coin(self) -> bool:
        return self.rng.random() < 0.5

    def _success(self) -> bool:
        """Three in four copies land; every one lands for an engine whose failed copies end its
        runtime (HOST-9: nothing after one is owed, so the walk draws none). The draw is made
        either way, so the walk's other draws stay those of the same seed."""
        lands = self.rng.randrange(4) != 0
        return lands or Feature.FATAL_TRANSFER_FAILURE in self.driver.engine.features

    # ----------------------------------------------------------------- plumbing
    def _do(self, step: Step) -> dict:
        holder = self.holder
        self.trace.steps.append(step)
        holder.steps += 1
        holder.seen_ops[step.op] = holder.seen_ops.get(step.op, 0) + 1
        if holder.meter is not None:
            holder.meter.tick(holder.examples, holder.steps)
        out = self.driver.step(len(self.trace.steps) - 1, step)
        if out.get("started"):
            key = f"{step.op}:started"
            holder.seen_ops[key] = holder.seen_ops.get(key, 0) + 1
        return out

    def _prompt(self, ns: int, tokens: list[int]) -> None:
        """A prompt inserted: one the later rules may aim at."""
        self.prompts.append((ns, tokens))
        self.longer += len(tokens) > self.p

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

    def _transfer(self, cls, tier: Tier, k: int, later: bool, success: bool) -> None:
        ref = self.live[tier][k % len(self.live[tier])]
        out = self._do(cls(step=ref, ack="later" if later else "now", success=success))
        if later and out["started"]:
            self.later.append(len(self.trace.steps) - 1)

    # ----------------------------------------------------------------- rules
    def match(self, ns: int | None = None, tokens: list[int] | None = None,
              lock: Tier | None = None) -> None:
        if ns is None:
            ns, tokens, lock = self._ns(), self._query(), _LOCKS[self.rng.randrange(3)]
        self._do(MatchStep(ns=ns, tokens=tokens, lock=lock))
        if lock is not None:
            self.live[lock].append(len(self.trace.steps) - 1)

    def match_known(self) -> None:
        """Match a prefix of an earlier prompt, in its namespace or (rarely) another."""
        n, tokens = self.prompts[self._pick(self.prompts)]
        cut = self.rng.randint(1, self.max_pages)
        if self._coin() and self.namespaces > 1:
            n = (n + 1) % self.namespaces
        self.match(n, tokens[: cut * self.p], _LOCKS[self.rng.randrange(3)])

    def insert(self) -> None:
        ns, tokens = self._ns(), self._whole()
        self._prompt(ns, tokens)
        self._do(InsertStep(ns=ns, tokens=tokens))

    def extend(self, ns: int | None = None, tokens: list[int] | None = None) -> None:
        if ns is None:
            ns, tokens = self._ns(), self._whole()
        self._prompt(ns, tokens)
        self._do(ExtendStep(ns=ns, tokens=tokens))

    def extend_known(self) -> None:
        """A new request sharing a prefix with an earlier one: reuse plus fresh pages."""
        n, tokens = self.prompts[self._pick(self.prompts)]
        cut = self.rng.randint(0, self.max_pages)
        self.extend(n, tokens[: cut * self.p] + self._whole())

    def unlock(self) -> None:
        locks = self.live[Tier.DEVICE] + self.live[Tier.HOST]
        self._release(locks[self._pick(locks)])

    def unlock_again(self) -> None:
        refs = self._rejectable()
        self._do(UnlockStep(step=refs[self._pick(refs)], expect=Expect(rejected=True)))

    def offload(self, k: int | None = None, later: bool | None = None) -> None:
        """Lock a known prompt on device, write it back to host, let go of the lock."""
        k = self._pick(self.prompts) if k is None else k
        later = self._coin() if later is None else later
        n, tokens = self.prompts[k % len(self.prompts)]
        ref = len(self.trace.steps)
        self.match(n, tokens, Tier.DEVICE)
        self._transfer(WritebackStep, Tier.DEVICE, len(self.live[Tier.DEVICE]) - 1, later, True)
        self._release(ref)

    def offload_deeper(self) -> None:
        """Write back a prefix, then the whole prompt below it with the ack held back, and
        put the host tier under pressure while that copy is in flight: the copy must still
        land under a host parent (HOST-1, HOST-2)."""
        p = self.p
        longer = [(n, t) for n, t in self.prompts if len(t) > p]
        n, tokens = longer[self._pick(longer)]
        cut = self.rng.randint(1, self.max_pages)
        host_pages = self.rng.randint(1, 4)
        head = tokens[: min(cut, len(tokens) // p - 1) * p]
        self.match(n, head, Tier.DEVICE)
        head_ref = len(self.trace.steps) - 1
        self._transfer(WritebackStep, Tier.DEVICE, len(self.live[Tier.DEVICE]) - 1, False, True)
        self._release(head_ref)
        ref = len(self.trace.steps)
        self.match(n, tokens, Tier.DEVICE)
        self._transfer(WritebackStep, Tier.DEVICE, len(self.live[Tier.DEVICE]) - 1, True, True)
        self._release(ref)
        self.evict(Tier.HOST, host_pages)

    def writeback_race(self) -> None:
        """A second writeback completes while an earlier one is still in flight, then the
        earlier one lands a step later: host LRU must follow completion order (HOST-6)."""
        k = self._pick(self.later)
        self.tick()
        self.offload(self._pick(self.prompts), False)
        self.tick()
        self.ack(k, True)
        self.evict(Tier.HOST, 1)

    def reload(self, k: int | None = None, later: bool | None = None,
               offload: bool | None = None) -> None:
        """Lock a known prompt on host and load it back, after a round trip if asked:
        written back, then pushed off the device by pressure."""
        k = self._pick(self.prompts) if k is None else k
        later = self._coin() if later is None else later
        offload = self._coin() if offload is None else offload
        n, tokens = self.prompts[k]
        if offload:
            self.offload(k, False)
            self.evict(Tier.DEVICE, self.config.device_pages)
        self.match(n, tokens, Tier.HOST)
        self._transfer(LoadbackStep, Tier.HOST, len(self.live[Tier.HOST]) - 1, later, True)

    def unload(self) -> None:
        """Unload the adapter of a namespace in use; the kit's locks in it stay held."""
        n, _tokens = self.prompts[self._pick(self.prompts)]
        self._do(UnloadStep(ns=n))
        self.prompts = [(m, t) for m, t in self.prompts if m != n]
        self.longer = sum(len(t) > self.p for _, t in self.prompts)

    def reset(self) -> None:
        """Reset the cache as things stand (refused while the caller holds part of it), or,
        half the time, once the caller has let go of everything: every held-back copy
        acknowledged, every lock released (EVICT-8, EVICT-9)."""
        if self._coin():
            while self.later:
                self.ack(0, True)
            for ref in self.live[Tier.DEVICE] + self.live[Tier.HOST]:
                self._release(ref)
        self._do(ResetStep())

    def tick(self) -> None:
        """A new scheduling step: steps between two ticks share one access time."""
        self._do(TickStep())

    def evict(self, tier: Tier | None = None, pages: int | None = None) -> None:
        if tier is None:
            tier, pages = _TIERS[self.rng.randrange(2)], self.rng.randint(0, 4)
        self._do(EvictStep(tier=tier, pages=pages))

    def writeback(self) -> None:
        k, later, success = self.rng.randrange(1 << 16), self._coin(), self._success()
        self._transfer(WritebackStep, Tier.DEVICE, k, later, success)

    def loadback(self) -> None:
        k, later, success = self.rng.randrange(1 << 16), self._coin(), self._success()
        self._transfer(LoadbackStep, Tier.HOST, k, later, success)

    def race(self, k: int | None = None, what: str | None = None, pages: int | None = None,
             ack: bool | None = None) -> None:
        """Races on purpose: while a held-back copy is in flight, act on its own prefix:
        release the caller's lock on it before the ack, evict on its source tier, match it
        again (locked on the other tier), or all of these; then perhaps the ack lands.
        Left to the other rules, the three meet only at long traces."""
        if k is None:
            k = self._pick(self.later)
            what = ("unlock", "evict", "match", "all", "all")[self.rng.randrange(5)]
            pages, ack = self.rng.randint(1, 4), self._coin()
        ref = self.later[k]
        copy = self.trace.steps[ref]
        src = Tier.DEVICE if isinstance(copy, WritebackStep) else Tier.HOST
        held = copy.step  # the caller's lock the copy was started from
        found = self.trace.steps[held]
        if what in ("match", "all") and isinstance(found, MatchStep):
            self.match(found.ns, found.tokens, Tier.HOST if src is Tier.DEVICE else Tier.DEVICE)
        if what in ("unlock", "all") and held in self.live[src]:
            self._release(held)
        if what in ("evict", "all"):
            self.evict(src, pages)
        if ack and ref in self.later:
            self.later.remove(ref)
            self._do(AckStep(step=ref, success=True))

    def loadback_race(self) -> None:
        """A loadback held back, then a race on its prefix (``race``) before its ack."""
        k, offload = self._pick(self.prompts), self._coin()
        what = ("unlock", "evict", "all")[self.rng.randrange(3)]
        pages = self.rng.randint(1, 4)
        before = len(self.later)
        self.reload(k, True, offload)
        if len(self.later) > before:
            self.race(len(self.later) - 1, what, pages, False)

    def ack(self, k: int | None = None, success: bool | None = None) -> None:
        k = self._pick(self.later) if k is None else k % len(self.later)
        success = self._success() if success is None else success
        ref = self.later.pop(k)
        self._do(AckStep(step=ref, success=success))
