"""The runner: plays the scenario cases and the fuzz cases against one engine into a report.

A result is PASS only when the case ran and every oracle held; a case that needs a feature the
engine lacks is NOT_SUPPORTED, and one written for a larger config than the run's is NOT_APPLICABLE
(both decided before the case runs, from what it declares); a rule broken is FAIL with its minimal
trace saved; a fault of the kit or of the engine's setup is ERROR; an engine that ends its process
is CRASH and one that stops answering is TIMEOUT (spec chapter faults). Cases run in worker
processes (``kvconf.conformance.running.pool``) unless the caller asks for the kit's own process;
either way a case is cut into units (``kvconf.conformance.running.units``) and its result is the
same. An interrupted run still writes what it found."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from hypothesis.errors import HypothesisException

from kvconf.conformance import __version__
from kvconf.conformance.adapters import (
    cache_engine_factory,
    check_engine,
    hybrid_engine_factory,
    sched_engine_factory,
)
from kvconf.conformance.cache.driver import CacheDriver, event_rows
from kvconf.conformance.cache.generator import TraceHolder, fuzz_walks
from kvconf.conformance.cache.scenarios import SCENARIOS
from kvconf.conformance.cache.tape import replay as replay_tape
from kvconf.conformance.engine import contract
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature, Missing
from kvconf.conformance.engine.hybrid import HybridConfig
from kvconf.conformance.errors import EngineUnavailable, KitError, WriteFailed
from kvconf.conformance.hybrid.cases import hybrid_cases
from kvconf.conformance.oracles import (
    MEMORY_ORACLES,
    SCHED_ORACLES,
    STEP_ORACLES,
    Oracle,
    Violation,
)
from kvconf.conformance.reporting.legal_if import annotate
from kvconf.conformance.reporting.report import (
    CaseResult,
    Coverage,
    Report,
    RunInfo,
    Status,
    UnitResult,
    write_report,
)
from kvconf.conformance.running import bounds, flight, judged, progress
from kvconf.conformance.running.cases import (
    Case,
    RunContext,
    engine_traceback,
    fail_result,
)
from kvconf.conformance.running.findings import Collector, finding
from kvconf.conformance.running.profiles import Budget, Profile
from kvconf.conformance.running.seeding import (
    import_independent_draws,
)
from kvconf.conformance.running.shrink import interrupted as shrink_interrupted
from kvconf.conformance.running.shrink import reset_interrupted, shrink
from kvconf.conformance.running.signals import hold_signals, interrupt_inside
from kvconf.conformance.running.units import (
    Shard,
    Unit,
    combine,
    ends,
    failed,
    plan,
    split,
    union,
)
from kvconf.conformance.runtime.memory import MemoryFactory, shadow_memory
from kvconf.conformance.scheduler.generator import fuzz_sched, play_sched, shrink_sched
from kvconf.conformance.scheduler.scenarios import SCHED_SCENARIOS
from kvconf.conformance.scheduler.trace import SchedConfig, SchedTrace
from kvconf.conformance.scheduler.window_cases import (
    window_config_case,
    window_config_fuzz_case,
)
from kvconf.conformance.trace import AckStep, Trace, TransferStep
from kvconf.reference.requests import BY_OP, EXTERNAL, TRANSITIONS, State

FUZZ_BEHAVIOURS = tuple(sorted({b for o in STEP_ORACLES for b in o.behaviours} | {"DET-1"}))


def play(factory, trace: Trace, *, determinism: bool = True,
         memory: MemoryFactory = shadow_memory,
         oracles: Sequence[type[Oracle]] = STEP_ORACLES) -> list[dict]:
    """Play ``trace`` on a fresh engine with the oracles, bring it to rest, then hand a fresh
    engine the same calls (DET-1).
    With the memory oracles alone, the trace's expected results are not checked either."""
    flight.begin(trace)
    driver = CacheDriver(factory(trace.config), trace.config, oracles, behaviours=trace.behaviours,
                         clock=trace.clock, memory=memory,
                         expect=tuple(oracles) != MEMORY_ORACLES)
    driver.tape = []  # the engine's calls, for DET-1's replay (conformance/cache/tape.py)
    try:
        driver.run(trace)
        calls = driver.tape[:]
        driver.drain()
    finally:  # what ran is judged, whether or not it held
        judged.record(driver.judged())
    if determinism:
        judged.record(("DET-1",))
        flight.begin(trace)
        replay_tape(factory(trace.config), calls, trace.steps, driver.lines, event_rows)
    return driver.log


def scenario_case(sc) -> Case:
    def run(ctx: RunContext) -> CaseResult:
        t0 = time.perf_counter()
        trace = sc.trace(ctx.config)
        try:
            log = play(ctx.factory, trace, memory=ctx.memory, oracles=ctx.oracles)
        except Violation as v:
            path = ctx.save_trace(sc.name, trace)
            return fail_result(sc.name, sc.behaviours, v, t0, path,
                               findings=[finding(v, trace, path, len(trace.steps))])
        except KitError as e:
            if not ctx.memory_only:
                raise
            # Without the expectation checks an engine can leave a hand-written trace behind.
            return CaseResult(
                case=sc.name, status=Status.ERROR, behaviours=list(sc.behaviours),
                duration_s=round(time.perf_counter() - t0, 4),
                message=f"the engine left the scenario's script ({e}); run without "
                        "--memory-only to see the first result it did not expect",
            )
        return CaseResult(
            case=sc.name, status=Status.PASS, behaviours=list(sc.behaviours),
            duration_s=round(time.perf_counter() - t0, 4), steps=len(log),
            message=sc.doc,
        )

    # A failed copy is recovered from only by an engine without fatal_transfer_failure (HOST-4);
    # for one with it the runtime ends there (HOST-9), so such a scenario is not its.
    fails = any(isinstance(s, (TransferStep, AckStep)) and s.success is False for s in sc.steps)
    return Case(sc.name, sc.behaviours, sc.needs | {Feature.CACHE}, run, requires=sc.requires,
                excluded_by=sc.excluded_by | (frozenset({Feature.FATAL_TRANSFER_FAILURE})
                                              if fails else frozenset()))


def run_fuzz(factory, config: EngineConfig, holder: TraceHolder, budget: Budget, steps: int,
             base_seed: int, memory: MemoryFactory = shadow_memory,
             oracles: Sequence[type[Oracle]] = STEP_ORACLES, *, stream: int = 0,
             database=None, on_finding: Callable[[Trace, Violation], None] | None = None
             ) -> None:
    """Run seeded walks (``kvconf.conformance.cache.generator``) under the budget. Without
    ``on_finding`` the first Violation found is raised; with it, each failing walk's (trace,
    violation) goes to ``on_finding`` and the search goes on with the next seed for the rest of
    the budget, so one defect that every walk reaches cannot hide the others. ``stream`` picks
    the seeds (a unit's index); ``database`` is Hypothesis's example store, whose seeds of
    earlier failing walks play first."""
    fuzz_walks(factory, config, holder, budget, steps, base_seed, stream=stream,
               database=database, on_finding=on_finding, memory=memory, oracles=oracles)


def _counted(ctx: RunContext, replay: Callable) -> Callable:
    """A shrinker's ``replay`` that also tells the display how far the shrink has got."""
    return replay if ctx.meter is None else ctx.meter.counting(replay)


def _unit(ctx: RunContext, status: Status, examples: int | None, steps: int | None,
          ops: dict[str, int] | None = None) -> list[UnitResult]:
    index, of = (ctx.unit.index, ctx.unit.of) if ctx.unit is not None else (0, 1)
    return [UnitResult(index=index, of=of, status=status, examples=examples, steps=steps,
                       ops=dict(sorted((ops or {}).items())))]


def _findings_result(name: str, behaviours: Sequence[str], found: Collector, t0: float,
                     examples: int | None, units: list[UnitResult], steps_of) -> CaseResult:
    """A fuzz case's FAIL result: its first finding is the status, message and trace (as
    before findings), every finding is listed."""
    assert found.first is not None
    trace, v, found_steps = found.first
    return fail_result(name, behaviours, v, t0, found.first_path,
                       examples=examples, steps=steps_of(trace), found_steps=found_steps,
                       units=units, findings=found.findings, repeats=found.repeats)


def fuzz_case(name: str, tweak: Callable[[EngineConfig], EngineConfig], doc: str) -> Case:
    def run(ctx: RunContext) -> CaseResult:
        t0 = time.perf_counter()
        config = tweak(ctx.config)
        holder = TraceHolder(meter=ctx.meter)
        budget, stream = ctx.stream()
        replay = _counted(ctx, lambda t: play(ctx.factory, t, memory=ctx.memory,
                                              oracles=ctx.oracles))
        found = Collector(name, lambda t, v: shrink(t, v, replay,
                                                    max_replays=ctx.profile.shrink_replays),
                          ctx.save_trace, lambda t: len(t.steps), lambda: holder.examples,
                          stream)
        try:
            run_fuzz(ctx.factory, config, holder, budget, ctx.profile.steps, ctx.seed,
                     ctx.memory, ctx.oracles, stream=stream, database=ctx.db(name),
                     on_finding=found.add if not ctx.first_only else None)
        except Violation as v:  # the first finding ends the search (``first_only``)
            found.add(holder.last or Trace(config=config), v)
        except HypothesisException as e:
            return CaseResult(case=name, status=Status.ERROR, behaviours=list(FUZZ_BEHAVIOURS),
                              message=f"generator: {e}", duration_s=time.perf_counter() - t0,
                              units=_unit(ctx, Status.ERROR, holder.examples, holder.steps))
        if found.first is not None:
            return _findings_result(
                name, FUZZ_BEHAVIOURS, found, t0, holder.examples,
                _unit(ctx, Status.FAIL, holder.examples, holder.steps, holder.seen_ops),
                lambda t: len(t.steps))
        return CaseResult(
            case=name, status=Status.PASS, behaviours=list(FUZZ_BEHAVIOURS),
            duration_s=round(time.perf_counter() - t0, 4), examples=holder.examples,
            steps=holder.steps,
            message=f"{doc}; ops played: {dict(sorted(holder.seen_ops.items()))}",
            units=_unit(ctx, Status.PASS, holder.examples, holder.steps, holder.seen_ops),
        )

    return Case(name, FUZZ_BEHAVIOURS, frozenset({Feature.CACHE}), run, fuzz=True, doc=doc)


def _tight(c: EngineConfig) -> EngineConfig:
    return c.model_copy(update={"device_pages": min(c.device_pages, 8),
                                "host_pages": min(c.host_pages, 6)})


def _sched_play(ctx: RunContext, trace: SchedTrace) -> list:
    driver = play_sched(ctx.sched_factory, trace, memory=ctx.memory,
                        memory_only=ctx.memory_only)
    ctx.exercised |= driver.exercised
    ctx.illegal |= driver.illegal
    return driver.log


def sched_scenario_case(sc) -> Case:
    def run(ctx: RunContext) -> CaseResult:
        t0 = time.perf_counter()
        try:
            log = _sched_play(ctx, sc.trace)
        except Violation as v:
            path = ctx.save_trace(sc.name, sc.trace)
            return fail_result(sc.name, sc.behaviours, v, t0, path,
                               findings=[finding(v, sc.trace, path, len(sc.trace.arrivals))])
        return CaseResult(case=sc.name, status=Status.PASS, behaviours=list(sc.behaviours),
                          duration_s=round(time.perf_counter() - t0, 4), steps=len(log),
                          message=sc.doc)

    return Case(sc.name, sc.behaviours, sc.needs | {Feature.SCHEDULER}, run)


# A small host tier, so prefetches evict and backups hold pages other copies want.
L3_FUZZ = SchedConfig(l3_store=True, device_pages=12, host_pages=8, max_tokens=8, max_batch=3)
# One adapter slot per forward (PLAN-9) on a small device, so the cap meets retraction.
ADAPTER_FUZZ = SchedConfig(max_adapters=1, device_pages=12, host_pages=8, max_tokens=8,
                           max_batch=3)
# Mamba state beside KV (chapter mamba), one of two configurations per workload: the rules need
# sizes that exclude each other. A small device retracts, the host tier keeps the KV retraction
# writes back, one host state slot makes every other state compete with a protected retract
# state (MAMBA-4), three device state slots for four requests make checkpoints fail (MAMBA-7);
# a roomy device and budget admit several requests that resume from cached states of their own
# in one plan (MAMBA-6). No window: under one nothing is published, so nothing is reused or
# retracted with a state (Mamba with a window is the swarm's).
MAMBA_FUZZ = (
    SchedConfig(mamba=True, device_pages=8, host_pages=16, max_tokens=8, max_batch=3,
                max_slots=4, mamba_slots=3, mamba_host_slots=1),
    SchedConfig(mamba=True, device_pages=32, host_pages=16, max_tokens=12, max_batch=4,
                max_slots=6, mamba_slots=10, mamba_host_slots=4),
)
SCHED_FUZZ_BEHAVIOURS = tuple(sorted({b for o in SCHED_ORACLES for b in o.behaviours}
                                     | {"DET-1", "TREE-2", "NS-1"}))


def fuzz_namespaces(config: SchedConfig | Sequence[SchedConfig],
                    features: frozenset[Feature]) -> int:
    """Namespaces the fuzzer draws from: one more adapter than the cap allows, so it binds."""
    if Feature.NAMESPACES not in features:
        return 1
    cap = max(c.max_adapters for c in _configs(config))
    return cap + 2 if cap else 2


def _configs(config: SchedConfig | Sequence[SchedConfig]) -> tuple[SchedConfig, ...]:
    return (config,) if isinstance(config, SchedConfig) else tuple(config)


def sched_fuzz_case(name: str, config: SchedConfig | Sequence[SchedConfig] | None, doc: str,
                    needs: frozenset[Feature] = frozenset()) -> Case:
    """A scheduler fuzz case at one configuration, at one of several drawn per workload, or
    with ``config`` None the swarm: each workload draws its configuration from the switches
    the engine declares."""
    cs = _configs(config) if config is not None else ()
    # What the configurations switch on, read once: ``all_cases`` builds every case for each
    # mutant the kill matrix runs.
    l3, mamba, cap = (any(c.l3_store for c in cs), any(c.mamba for c in cs),
                      any(c.max_adapters for c in cs))
    behaviours = SCHED_FUZZ_BEHAVIOURS if config is None else tuple(
        b for b in SCHED_FUZZ_BEHAVIOURS
        if (l3 or not b.startswith("L3-"))
        and (mamba or not b.startswith("MAMBA-"))
        and (cap or b != "PLAN-9"))

    def run(ctx: RunContext) -> CaseResult:
        t0 = time.perf_counter()
        holder: dict = {}

        def replay(t: SchedTrace) -> list:
            return _sched_play(ctx, t)

        budget, stream = ctx.stream()
        found = Collector(name, lambda t, v: shrink_sched(t, v, _counted(ctx, replay),
                                                          ctx.profile.shrink_replays // 2),
                          ctx.save_trace, lambda t: len(t.arrivals),
                          lambda: holder.get("examples"), stream)
        try:
            with import_independent_draws():
                fuzz_sched(ctx.sched_factory, config, budget.examples, budget.seconds,
                           ctx.seed, holder, ctx,
                           namespaces=fuzz_namespaces(config, ctx.features) if config else 1,
                           stream=stream, database=ctx.db(name),
                           on_finding=found.add if not ctx.first_only else None)
        except Violation as v:  # the first finding ends the search (``first_only``)
            found.add(holder["trace"], v)
        if found.first is not None:
            return _findings_result(name, behaviours, found, t0, holder.get("examples"),
                                    _unit(ctx, Status.FAIL, holder.get("examples"),
                                          holder.get("steps", 0)),
                                    lambda t: len(t.arrivals))
        notes = sorted(holder.get("unjudged", ()))  # rules the workloads could not judge
        return CaseResult(case=name, status=Status.PASS, behaviours=list(behaviours),
                          duration_s=round(time.perf_counter() - t0, 4),
                          examples=holder.get("examples"), steps=holder.get("steps", 0),
                          message="; ".join([doc, *notes]),
                          units=_unit(ctx, Status.PASS, holder.get("examples"),
                                      holder.get("steps", 0)))

    return Case(name, behaviours, needs | {Feature.SCHEDULER}, run, fuzz=True, doc=doc)


def all_cases() -> list[Case]:
    cases = [scenario_case(sc) for sc in SCENARIOS]
    cases.append(fuzz_case("fuzz-cache", lambda c: c, "stateful traces at the run's config"))
    cases.append(fuzz_case("fuzz-cache-tight", _tight,
                           "stateful traces with 8 device and 6 host pages"))
    cases.append(fuzz_case("fuzz-cache-page1", lambda c: c.model_copy(update={"page_size": 1}),
                           "stateful traces at page size 1"))
    cases.extend(sched_scenario_case(sc) for sc in SCHED_SCENARIOS)
    cases.append(window_config_case())
    cases.append(window_config_fuzz_case())
    cases.append(sched_fuzz_case("fuzz-scheduler", SchedConfig(),
                                 "workloads with shared prefixes, aborts, held and failed acks"))
    cases.append(sched_fuzz_case(
        "fuzz-scheduler-tight",
        SchedConfig(device_pages=10, host_pages=8, max_tokens=6, max_batch=3, max_slots=4),
        "workloads on a tiny device: eviction, retraction and recovery"))
    cases.append(sched_fuzz_case(
        "fuzz-scheduler-unmixed",
        SchedConfig(mixed=False, publish_mid_flight=False, page_size=1, device_pages=16),
        "workloads without mixed batches or mid-flight publish, at page size 1"))
    cases.append(sched_fuzz_case(
        "fuzz-scheduler-unpublished",
        SchedConfig(device_pages=10, host_pages=8, max_tokens=6, max_batch=3,
                    publish_mid_flight=False),
        "workloads on a tiny device without mid-flight publish: retraction of unshared KV"))
    cases.append(sched_fuzz_case(
        "fuzz-scheduler-window", SchedConfig(sliding_window=3),
        "workloads under a 3-token sliding window: nothing computed may be published",
        frozenset({Feature.SLIDING_WINDOW})))
    cases.append(sched_fuzz_case(
        "fuzz-scheduler-adapters", ADAPTER_FUZZ,
        "workloads over three adapters and the base model with one adapter slot per forward, "
        "on a small device", frozenset({Feature.NAMESPACES, Feature.ADAPTER_CAP})))
    cases.append(sched_fuzz_case(
        "fuzz-scheduler-l3", L3_FUZZ,
        "workloads over an L3 store: prefetches that land, stop short or are lost, backups "
        "acknowledged late, on a small host tier", frozenset({Feature.L3_STORE})))
    cases.append(sched_fuzz_case(
        "fuzz-scheduler-l3-tight-host", L3_FUZZ.model_copy(update={"host_pages": 4}),
        "workloads over an L3 store with a 4-page host tier: every prefetch must make room on "
        "host, so the order of pinning and eviction shows", frozenset({Feature.L3_STORE})))
    cases.append(sched_fuzz_case(
        "fuzz-scheduler-swarm", None,
        "workloads each on a configuration of its own, drawn from the switches the engine "
        "declares (Mamba, L3, window, namespaces, adapter cap, host tier, mid-flight publish, "
        "mixed batches) and from page, pool and batch sizes: every pair of switches together"))
    cases.append(sched_fuzz_case(
        "fuzz-scheduler-mamba", MAMBA_FUZZ,
        "workloads with Mamba state slots that extend finished requests' sequences, some in "
        "waves that resume in one plan, each on a small device with one host state slot "
        "(retraction, protected retract states, eviction and recovery of states, failed "
        "checkpoints) or on a roomy one (several resumes per plan)",
        frozenset({Feature.MAMBA})))
    cases.extend(hybrid_cases())
    return cases


def select_cases(names: list[str] | None) -> list[Case]:
    cases = all_cases()
    if not names:
        return cases
    known = {c.name: c for c in cases}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise KitError(f"--case {unknown[0]}: unknown case (known: {', '.join(known)})")
    return [known[n] for n in names]


def transition_coverage(cover: Coverage | None, features=None) -> dict | None:
    """Which (state, event) pairs of the request table the run took, and which illegal runtime
    events it tried (and saw rejected) in which state; with the engine's ``features`` (names),
    which pairs of the configuration switches it declares the fuzz cases played together."""
    if cover is None:
        return None
    out = _state_coverage(cover)
    if features is not None and cover.pairs:
        from kvconf.conformance.engine.features import parse_features
        from kvconf.conformance.scheduler.generator import declared_pairs

        known = {f.value for f in Feature}
        want = declared_pairs(parse_features([f for f in features if f in known]))
        reached = {tuple(p) for p in cover.pairs}
        out["feature_pairs"] = {
            "reached": sum(1 for p in want if p in reached), "total": len(want),
            "missed": [f"{a}+{b}" for a, b in want if (a, b) not in reached]}
    return out


def _state_coverage(cover: Coverage) -> dict:
    exercised = {tuple(p) for p in cover.exercised}
    tried_any = {tuple(p) for p in cover.illegal}
    legal = sorted((s.value, e.value) for s, e in TRANSITIONS)
    illegal = sorted((s.value, e.value) for s in State for e in EXTERNAL
                     if (s, e) not in TRANSITIONS and e not in BY_OP)
    took = sorted(set(legal) & exercised)
    tried = sorted(set(illegal) & tried_any)
    return {
        "legal": {"exercised": len(took), "total": len(legal),
                  "missed": [f"{s} --{e}-->" for s, e in sorted(set(legal) - exercised)]},
        "illegal": {"tried": len(tried), "total": len(illegal),
                    "missed": [f"{s} x {e}" for s, e in sorted(set(illegal) - tried_any)]},
    }


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class Opened:
    """An engine ready to run cases: its context, what it offers, and why a level cannot run."""

    ctx: RunContext
    version: str
    unavailable: dict[Feature, Missing]  # a level or feature -> why it cannot run here


def _lacks(engine: str, probe) -> dict[Feature, str]:
    """The features an engine level says it lacks, each with why (its ``lacks`` mapping):
    the reason a NOT_SUPPORTED case gives, rather than the bare feature name."""
    declared = getattr(probe, "lacks", None) or {}
    if not isinstance(declared, Mapping):
        raise KitError(f"engine {engine}: lacks must map a feature to why the engine lacks it, "
                       f"not {type(declared).__name__}")
    out: dict[Feature, str] = {}
    for key, why in declared.items():
        try:
            feature = Feature(key)
        except ValueError:
            raise KitError(f"engine {engine}: lacks names {key!r}, not a feature (known: "
                           f"{', '.join(f.value for f in Feature)})") from None
        if not isinstance(why, str) or not why.strip():
            raise KitError(f"engine {engine}: lacks[{feature.value!r}] must say why, in words")
        out[feature] = " ".join(why.split())
    return out


def open_engine(engine: str, config: EngineConfig, *, seed_value: int, profile: Profile,
                budget: Budget, memory: MemoryFactory = shadow_memory,
                memory_only: bool = False, database=None,
                out_dir: Path | None = None) -> Opened:
    """Find ``engine``, start each level once to learn its features and version."""
    check_engine(engine)
    factory = cache_engine_factory(engine)
    sched_factory = sched_engine_factory(engine)
    hybrid_factory = hybrid_engine_factory(engine)
    features: frozenset[Feature] = frozenset()
    version = ""
    unavailable: dict[Feature, Missing] = {}
    lacking: dict[Feature, str] = {}  # a feature the engine says why it lacks
    for level, make, cfg in ((Feature.CACHE, factory, config),
                             (Feature.SCHEDULER, sched_factory, SchedConfig()),
                             (Feature.HYBRID, hybrid_factory, HybridConfig())):
        if make is None:
            continue
        try:
            probe = make(cfg)
        except EngineUnavailable as e:
            unavailable[level] = Missing(f"engine {engine} is not available: {e}")
            continue
        except KitError:
            raise
        except Exception as e:
            raise KitError(
                f"engine {engine}: cannot start with config {cfg.model_dump()}: {e}"
            ) from None
        contract.require(engine, probe, level, cfg)  # every problem, a line each
        features = features | {level} | probe.features
        version = version or str(probe.version)
        for feature, why in _lacks(engine, probe).items():
            if feature in probe.features or feature is level:
                raise KitError(f"engine {engine}: declares {feature.value} and says it lacks "
                               f"it (lacks: {why})")
            lacking.setdefault(feature, why)  # another level of it may offer it still
    for feature, why in lacking.items():
        if feature not in features:
            unavailable.setdefault(feature, Missing(f"{feature.value}: {why}", lacked=True))
    if Feature.CACHE not in features:
        factory = None
    if Feature.SCHEDULER not in features:
        sched_factory = None
    if Feature.HYBRID not in features:
        hybrid_factory = None
    ctx = RunContext(engine, factory, config, seed_value, profile, budget, out_dir,
                     sched_factory=sched_factory, features=features, memory=memory,
                     memory_only=memory_only, database=database, hybrid_factory=hybrid_factory)
    return Opened(ctx, version, unavailable)


def run_unit(ctx: RunContext, case: Case, unit: Unit | None) -> CaseResult:
    """Run one unit of ``case`` in this process. An exception of the engine outside any driver
    call (its factory, say) is ERROR with its traceback; a kit error propagates."""
    ctx.unit = unit
    ctx.exercised, ctx.illegal, ctx.pairs = set(), set(), set()
    if case.fuzz:
        ctx.meter = progress.Meter(case.name, unit.label if unit else case.name,
                                   unit.budget if unit else ctx.budget)
    t0 = time.perf_counter()
    seen: set[str] = set()
    try:
        with judged.sink() as seen:
            result = case.run(ctx)
    except KitError:
        raise
    except Exception as e:
        if interrupt_inside(e):
            raise KeyboardInterrupt from None
        if isinstance(e, MemoryError) and bounds.limit:
            raise  # the worker's limit met outside an engine call: its CRASH (FAULT-5)
        result = CaseResult(
            case=case.name, status=Status.ERROR, behaviours=list(case.behaviours),
            message=f"{type(e).__name__}: {e}", duration_s=time.perf_counter() - t0,
            traceback=engine_traceback(e), units=_unit(ctx, Status.ERROR, None, None)
            if case.fuzz else None)
    finally:
        ctx.unit = None
        ctx.meter = None
    if result.status in (Status.PASS, Status.FAIL):  # its calls came back: the process held
        seen.update(judged.process_rules(bool(bounds.limit)))
    result.judged = judged_of(result, seen, ctx.features)
    if ctx.exercised or ctx.illegal or ctx.pairs:
        result.coverage = Coverage(exercised=sorted(ctx.exercised), illegal=sorted(ctx.illegal),
                                   pairs=sorted(ctx.pairs))
        if result.units:
            result.units[0].coverage = result.coverage
    if result.units:
        result.units[0].duration_s = result.duration_s
    return result


def judged_of(result: CaseResult, seen: set[str], features: frozenset[Feature]) -> list[str]:
    """The rules a unit judged (spec chapter faults, "Verdicts of a rule"): those its checks
    ran for (``seen``) that bind an engine of ``features``, and the rules it found broken,
    which a check of judged however they are gated."""
    broken = {b for f in result.findings for b in f.behaviours}
    if result.status is Status.FAIL:
        broken.update(result.behaviours)
    return sorted(set(judged.allowed(seen, features)) | broken)


def run_case(ctx: RunContext, case: Case) -> CaseResult:
    """Every unit of ``case`` in this process, in order, until one ends the case; with
    ``ctx.first_only`` (the kill matrix) until one fails."""
    results = []
    for unit in split(case.name, case.fuzz, ctx.budget, 1):
        results.append(run_unit(ctx, case, unit))
        if (failed if ctx.first_only else ends)(results[-1].status):
            break
    return results[0] if not case.fuzz else combine(results, case.doc)


def not_supported(case: Case, features: frozenset[Feature],
                  unavailable: dict[Feature, Missing]) -> CaseResult | None:
    """The NOT_SUPPORTED result of a case the engine cannot run, or None when it can."""
    moot = sorted(f.value for f in case.excluded_by & features)
    if moot:
        return CaseResult(
            case=case.name, status=Status.NOT_SUPPORTED, behaviours=list(case.behaviours),
            message=f"engine declares {', '.join(moot)}, which makes what the case checks moot",
            duration_s=0.0, judged=[])
    missing = sorted(case.needs - features, key=lambda f: f.value)
    if not missing:
        return None
    # A level that could not start here says so alone; a feature the engine says why it lacks
    # (``lacks``) adds its reason to the bare list.
    reasons = [unavailable[f] for f in missing if f in unavailable]
    down = next((r.why for r in reasons if not r.lacked), None)
    why = "; ".join(r.why for r in reasons)
    return CaseResult(
        case=case.name, status=Status.NOT_SUPPORTED, behaviours=list(case.behaviours),
        message=down or ("engine lacks " + ", ".join(f.value for f in missing)
                         + (f"; {why}" if why else "")),
        duration_s=0.0, judged=[],
    )


def not_applicable(case: Case, config: EngineConfig) -> CaseResult | None:
    """The NOT_APPLICABLE result of a case the run's config is too small for (its declared
    ``requires``), or None when it applies. Decided before the case runs, from the config
    alone: an outcome never makes a case NOT_APPLICABLE, so it cannot hide a failure."""
    reason = case.requires.reason(config)
    if reason is None:
        return None
    return CaseResult(case=case.name, status=Status.NOT_APPLICABLE,
                      behaviours=list(case.behaviours), message=reason, duration_s=0.0, judged=[])


def unjudged(case: Case, features: frozenset[Feature], unavailable: dict[Feature, Missing],
             config: EngineConfig) -> CaseResult | None:
    """Why ``case`` is not run here: NOT_SUPPORTED (the engine lacks what it needs; said first,
    being about the engine) or NOT_APPLICABLE (the config is below what it is written for);
    None when it runs."""
    return not_supported(case, features, unavailable) or not_applicable(case, config)


class Campaign:
    """The parent's side of a run: the units to run, their results as they come, and the report
    rewritten (atomically) each time a case is settled. Cases settle in any order; the report
    lists them in suite order."""

    def __init__(self, cases: Sequence[Case], units: Sequence[Unit], report: Report,
                 report_path: Path | None, on_start=None, on_result=None, on_plan=None,
                 on_progress=None) -> None:
        self.cases = {c.name: c for c in cases}
        self.order = {c.name: i for i, c in enumerate(cases)}
        self.units = list(units)
        self.expected: dict[str, list[int]] = {}
        for u in self.units:
            self.expected.setdefault(u.case, []).append(u.index)
        self.partial: dict[str, list[CaseResult]] = {}
        self.settled: dict[str, CaseResult] = {}
        self.started: set[str] = set()
        self.report = report
        self.report_path = report_path
        self.on_start, self.on_result = on_start, on_result
        self.on_progress = on_progress
        if on_plan:  # the display numbers the cases this run (or shard) plays
            on_plan([c.name for c in cases if c.name in self.expected])

    def note(self, doc: progress.Note, unit: Unit | None = None) -> None:
        """A running unit's progress note, for the display (never for the report)."""
        if self.on_progress:
            self.on_progress(doc)

    def wanted(self, unit: Unit) -> bool:
        """False once the case is settled (a lower unit ended it): the unit need not run."""
        return unit.case not in self.settled

    def start(self, unit: Unit) -> None:
        if unit.case not in self.started:
            self.started.add(unit.case)
            if self.on_start:
                self.on_start(self.cases[unit.case])

    def add(self, unit: Unit, result: CaseResult) -> None:
        """A unit's result; settles its case when every unit that decides it is in."""
        if unit.case in self.settled:
            return  # a unit past the first failing one: never part of the case
        case = self.cases[unit.case]
        if result.units is None:  # a hand-written case, or one the engine cannot run
            return self._settle(result)
        got = self.partial.setdefault(unit.case, [])
        got.append(result)
        have = {r.units[0].index: r for r in got}
        for k in self.expected[unit.case]:
            if k not in have:
                return
            if ends(have[k].status):
                break
        self._settle(combine(got, case.doc, self.expected[unit.case]))

    def settle_found(self) -> None:
        """After an interruption: a case not settled keeps a finding its units made."""
        for name, got in list(self.partial.items()):  # settling a case drops it from partial
            if name not in self.settled and any(failed(r.status) for r in got):
                self._settle(combine(got, self.cases[name].doc, None))

    def _settle(self, result: CaseResult) -> None:
        annotate(result, self.report.run_info.features)  # which allowance would make it legal
        self.settled[result.case] = result
        self.partial.pop(result.case, None)
        self.report.results = sorted(self.settled.values(), key=lambda r: self.order[r.case])
        self.report.run_info.coverage = transition_coverage(
            union(r.coverage for r in self.report.results), self.report.run_info.features)
        self.write()
        if self.on_result:
            self.on_result(result)

    def write(self) -> None:
        if self.report_path is not None:
            write_report(self.report, self.report_path)

    @property
    def pending(self) -> list[str]:
        return sorted({u.case for u in self.units} - set(self.settled), key=self.order.get)


def clear_traces(out_dir: Path, cases: Sequence[Case]) -> None:
    """Remove the saved traces an earlier run left for the cases this run plays, so a stale
    trace beside the report never passes for one of this run's findings."""
    for case in cases:
        (out_dir / "traces" / f"{case.name}.json").unlink(missing_ok=True)
        for old in (out_dir / "traces").glob(f"{case.name}~*.json"):  # findings' traces
            old.unlink(missing_ok=True)


def start_report(engine: str, config: EngineConfig, version: str,
                 features: frozenset[Feature], *, seed_value: int, profile: Profile,
                 budget: Budget, memory_info: dict | None = None, memory_only: bool = False,
                 jobs: int = 0, shard: Shard | None = None, call_timeout: float = 60.0,
                 database: str | None = None,
                 worker_memory: int = bounds.DEFAULT_WORKER_MEMORY) -> Report:
    """A report with no result yet: what was run, on what, how (``run_suite`` and the pytest
    plugin write the same one)."""
    return Report(
        run_info=RunInfo(
            engine=engine, version=version or "unavailable", kvconf=__version__,
            features=sorted(f.value for f in features), config=config.model_dump(),
            seed=seed_value, profile=profile.name, budget=str(budget), started=now(),
            memory=None if memory_info is None else {**memory_info, "memory_only": memory_only},
            jobs=jobs, shard=None if shard is None else str(shard),
            call_timeout_s=None if jobs == 0 else call_timeout, examples_db=database,
            worker_memory=None if jobs == 0 else bounds.describe(worker_memory),
        )
    )


def _cut_short(cut: WriteFailed, campaign: Campaign, pending: list[str]) -> KitError:
    """The one line a run cut short by a failed write ends with, once its report says so (when
    the report can be written at all)."""
    try:
        campaign.write()
    except WriteFailed as again:
        return KitError(f"{cut}; the run was cut short there, and its report could not be "
                        f"written either ({again.why})")
    left = f"{len(pending)} case{'s' * (len(pending) != 1)} did not finish"
    where = f" ({campaign.report_path})" if campaign.report_path is not None else ""
    return KitError(f"{cut}; the run was cut short there: its report{where} is marked "
                    f"interrupted, {left}")


def run_suite(
    engine: str,
    config: EngineConfig,
    *,
    seed_value: int,
    profile: Profile,
    budget: Budget,
    report_path: Path | None,
    cases: list[Case] | None = None,
    on_start: Callable[[Case], None] | None = None,
    on_result: Callable[[CaseResult], None] | None = None,
    on_plan: Callable[[list[str]], None] | None = None,
    on_progress: Callable[[progress.Note], None] | None = None,
    memory: MemoryFactory = shadow_memory,
    memory_only: bool = False,
    memory_info: dict | None = None,
    memory_spec: tuple[str, dict] | None = None,
    jobs: int = 0,
    shard: Shard | None = None,
    call_timeout: float = 60.0,
    database: str | None = None,
    worker_memory: int = bounds.DEFAULT_WORKER_MEMORY,
) -> Report:
    """Run cases against ``engine``; the report is rewritten atomically after every case.

    ``jobs`` is the number of worker processes (``kvconf.conformance.running.pool``); 0 runs the
    cases in this process, without isolation (a debugger's choice). ``shard`` runs one slice of
    the work. ``memory`` is the runtime's KV memory (``kvconf gpu`` passes torch pools, and
    ``memory_spec``, how a worker builds the same); with ``memory_only`` the cases are judged
    by the oracles that read that memory alone. ``database`` is Hypothesis's example database
    (a folder, ``module:attr``, or None for none), shared by the workers. ``worker_memory``
    bounds each worker's data in bytes (0: no limit; ``kvconf.conformance.running.bounds``), and
    no more workers start than the run has units of work. A report or trace that cannot be
    written cuts the run short: its report (if it can be written still) says so (``cut``,
    ``interrupted``, ``not_run``) and the run stops with the one-line WriteFailed.

    For a display: ``on_plan`` gets the names of the cases this run plays, in order, before
    any starts; ``on_start`` and ``on_result`` each case as it starts and settles (a case
    the engine or config cannot run settles without a start); ``on_progress`` the progress
    notes of running fuzz units (``kvconf.conformance.running.progress``)."""
    from kvconf.conformance.running.examples_db import open_database

    cases = cases if cases is not None else all_cases()
    check_engine(engine)
    reset_interrupted()
    out_dir = report_path.parent if report_path is not None else None
    if out_dir is not None:
        clear_traces(out_dir, cases)
    if jobs < 0:
        raise KitError(f"--jobs {jobs}: must be 0 (this process) or more workers")
    pool = None
    campaign = None
    try:
        if jobs == 0:
            opened = open_engine(engine, config, seed_value=seed_value, profile=profile,
                                 budget=budget, memory=memory, memory_only=memory_only,
                                 database=open_database(database), out_dir=out_dir)
            features, version, unavailable = (opened.ctx.features, opened.version,
                                              opened.unavailable)
        else:
            from kvconf.conformance.running.pool import Pool, WorkerSpec

            if memory is not shadow_memory and memory_spec is None:
                raise KitError("this memory cannot be rebuilt in a worker; run with --jobs 0")
            spec = WorkerSpec(engine=engine, config=config, seed=seed_value, profile=profile,
                              budget=budget, memory_spec=memory_spec, memory_only=memory_only,
                              database=database, worker_memory=worker_memory)
            # Never more workers than units of work (before the engine says which cases it
            # cannot run: the pool retires the rest once it knows).
            most = len(plan(((c.name, c.fuzz) for c in cases), budget,
                            jobs * (shard.count if shard else 1), shard))
            pool = Pool(spec, jobs, call_timeout, most)
            features, version, unavailable = pool.open()
        report = start_report(engine, config, version, features, seed_value=seed_value,
                              profile=profile, budget=budget, memory_info=memory_info,
                              memory_only=memory_only, jobs=jobs, shard=shard,
                              call_timeout=call_timeout, database=database,
                              worker_memory=worker_memory)
        skipped = {c.name: r for c in cases
                   if (r := unjudged(c, features, unavailable, config)) is not None}
        streams = max(1, jobs) * (shard.count if shard else 1)
        units = plan(((c.name, c.fuzz and c.name not in skipped) for c in cases), budget,
                     streams, shard)
        campaign = Campaign(cases, units, report, report_path, on_start, on_result, on_plan,
                            on_progress)
        by_name = {c.name: c for c in cases}
        todo = []
        for u in units:
            if u.case in skipped:  # settled unstarted: a display groups them (never run)
                campaign.add(u, skipped[u.case])
            else:
                todo.append(u)
        if pool is None:
            with progress.sink(on_progress):
                for u in todo:
                    if campaign.wanted(u):
                        campaign.start(u)
                        campaign.add(u, run_unit(opened.ctx, by_name[u.case], u))
                        if shrink_interrupted():  # the finding was kept; now stop
                            raise KeyboardInterrupt
        else:
            pool.retire_beyond(len(todo))
            pool.run(todo, campaign, out_dir)
    except BaseException as stop:
        cut = stop if isinstance(stop, WriteFailed) else None
        if cut is None and not isinstance(stop, KeyboardInterrupt) and not interrupt_inside(stop):
            raise
        with hold_signals():  # a second Ctrl-C must not cut the report or leave workers
            if campaign is None:  # stopped while the engine opened: nothing ran
                report = start_report(engine, config, "", frozenset(), seed_value=seed_value,
                                      profile=profile, budget=budget, memory_info=memory_info,
                                      memory_only=memory_only, jobs=jobs, shard=shard,
                                      call_timeout=call_timeout, database=database,
                                      worker_memory=worker_memory)
                campaign = Campaign(cases, [], report, report_path)
                pending = [c.name for c in cases]
            else:
                campaign.settle_found()
                pending = campaign.pending
            report.run_info.interrupted = True
            report.run_info.not_run = pending
            report.run_info.finished = now()
            if cut is not None:
                report.run_info.cut = f"write failed: {cut.path}: {cut.why}"
                raise _cut_short(cut, campaign, pending) from None
            campaign.write()
        if isinstance(stop, KeyboardInterrupt):
            raise
        raise KeyboardInterrupt from None  # one a library wrapped: an interrupt all the same
    finally:
        if pool is not None:
            with hold_signals():
                pool.close()
    report.run_info.finished = now()
    campaign.write()
    return report.summarize()
