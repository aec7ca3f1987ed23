"""The runner: plays the scenario cases and the fuzz cases against one engine into a report.

A result is PASS only when the case ran and every oracle held; a case that needs a feature the
engine lacks is NOT_SUPPORTED; a rule broken is FAIL with its minimal trace saved; a fault of the
kit or of the engine's setup is ERROR. An interrupted run still writes what it found.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.errors import HypothesisException
from hypothesis.stateful import get_state_machine_test

from conformance import __version__
from conformance.adapters import cache_engine_factory, check_engine, sched_engine_factory
from conformance.cache_driver import CacheDriver
from conformance.engine_config import EngineConfig
from conformance.errors import EngineUnavailable, KitError
from conformance.features import Feature
from conformance.generators.cache_traces import TraceHolder, cache_machine
from conformance.generators.sched_traces import fuzz_sched, play_sched, shrink_sched
from conformance.memory import MemoryFactory, shadow_memory
from conformance.oracles import MEMORY_ORACLES, SCHED_ORACLES, STEP_ORACLES, Oracle, Violation
from conformance.oracles.determinism import DeterminismOracle
from conformance.profiles import Budget, Profile
from conformance.report import CaseResult, Report, RunInfo, Status, write_report
from conformance.scenarios import SCENARIOS
from conformance.sched_scenarios import SCHED_SCENARIOS
from conformance.sched_trace import SchedConfig, SchedTrace
from conformance.shrink import shrink
from conformance.trace import Trace, dump_trace, write_atomic
from conformance.window_cases import window_config_case
from reference.requests import BY_OP, EXTERNAL, TRANSITIONS, State

FUZZ_BEHAVIOURS = tuple(sorted({b for o in STEP_ORACLES for b in o.behaviours} | {"DET-1"}))


@dataclass
class Case:
    name: str
    behaviours: tuple[str, ...]
    needs: frozenset[Feature]
    run: Callable[[RunContext], CaseResult]
    fuzz: bool = False  # generated traces, not a hand-written scenario


@dataclass
class RunContext:
    engine_name: str
    factory: Callable[[EngineConfig], object]
    config: EngineConfig
    seed: int
    profile: Profile
    budget: Budget
    out_dir: Path | None
    saved: list[Path] = field(default_factory=list)
    sched_factory: Callable[[SchedConfig], object] | None = None
    features: frozenset[Feature] = frozenset()
    exercised: set[tuple[str, str]] = field(default_factory=set)
    illegal: set[tuple[str, str]] = field(default_factory=set)
    memory: MemoryFactory = shadow_memory  # the runtime's KV: a dict, or gpu_harness's tensors
    memory_only: bool = False  # judge by the memory oracles alone

    @property
    def oracles(self) -> Sequence[type[Oracle]]:
        """The cache-level oracles of this run."""
        return MEMORY_ORACLES if self.memory_only else STEP_ORACLES

    def save_trace(self, case: str, trace: Trace | SchedTrace) -> str | None:
        if self.out_dir is None:
            return None
        path = self.out_dir / "traces" / f"{case}.json"
        text = (dump_trace(trace) if isinstance(trace, Trace)
                else trace.model_dump_json(indent=2) + "\n")
        write_atomic(path, text)
        self.saved.append(path)
        return str(path.relative_to(self.out_dir))


def play(factory, trace: Trace, *, determinism: bool = True,
         memory: MemoryFactory = shadow_memory,
         oracles: Sequence[type[Oracle]] = STEP_ORACLES) -> list[dict]:
    """Play ``trace`` on a fresh engine with the oracles, bring it to rest, then replay it.
    With the memory oracles alone, the trace's expected results are not checked either."""
    driver = CacheDriver(factory(trace.config), trace.config, oracles, behaviours=trace.behaviours,
                         clock=trace.clock, memory=memory,
                         expect=tuple(oracles) != MEMORY_ORACLES)
    driver.run(trace)
    driver.drain()
    if determinism:
        again = CacheDriver(factory(trace.config), trace.config, oracles=(), clock=trace.clock,
                            memory=memory)
        again.run(trace)
        DeterminismOracle().compare(driver.log, again.log)
    return driver.log


def _fail(name, behaviours, v: Violation, t0: float, trace_path, **kw) -> CaseResult:
    return CaseResult(
        case=name,
        status=Status.FAIL,
        behaviours=list(v.behaviours or behaviours),
        message=v.message,
        oracle=v.oracle,
        step=v.step,
        duration_s=round(time.perf_counter() - t0, 4),
        trace=trace_path,
        **kw,
    )


def scenario_case(sc) -> Case:
    def run(ctx: RunContext) -> CaseResult:
        t0 = time.perf_counter()
        trace = sc.trace(ctx.config)
        try:
            log = play(ctx.factory, trace, memory=ctx.memory, oracles=ctx.oracles)
        except Violation as v:
            return _fail(sc.name, sc.behaviours, v, t0, ctx.save_trace(sc.name, trace))
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

    return Case(sc.name, sc.behaviours, sc.needs | {Feature.CACHE}, run)


def fuzz_settings(examples: int, steps: int) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
        report_multiple_bugs=False,
        # Shrinking is ours (conformance.shrink): bounded, and judged on the trace itself.
        phases=(Phase.explicit, Phase.reuse, Phase.generate),
    )


@contextmanager
def _import_independent_draws() -> Iterator[None]:
    """Hypothesis sometimes draws "local constants" harvested from whatever modules happen to be
    imported, so one seed would give different traces under ``kvconf run``, ``pytest`` or an
    engine adapter that imports more. The kit promises same seed, same traces: for the span of a
    fuzz run the harvest is empty. Where Hypothesis has no such hook this does nothing."""
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # pragma: no cover - a Hypothesis without the feature
        yield
        return
    real = getattr(providers, "_get_local_constants", None)
    if real is None or not hasattr(providers, "Constants"):
        yield
        return
    empty = providers.Constants()
    providers._get_local_constants = lambda: empty
    try:
        yield
    finally:
        providers._get_local_constants = real


def run_fuzz(factory, config: EngineConfig, holder: TraceHolder, budget: Budget, steps: int,
             base_seed: int, memory: MemoryFactory = shadow_memory,
             oracles: Sequence[type[Oracle]] = STEP_ORACLES) -> None:
    """Run the stateful generator under the budget; raises the first Violation found."""
    with _import_independent_draws():
        _run_fuzz(factory, config, holder, budget, steps, base_seed, memory, oracles)


def _run_fuzz(factory, config: EngineConfig, holder: TraceHolder, budget: Budget, steps: int,
              base_seed: int, memory: MemoryFactory,
              oracles: Sequence[type[Oracle]]) -> None:
    machine = cache_machine(factory, config, holder, memory=memory, oracles=oracles)
    if budget.examples is not None:
        batches: Iterator[int] = iter([budget.examples])
        deadline = None
    else:
        batches = iter(lambda: 25, None)
        deadline = time.perf_counter() + (budget.seconds or 0)
    for k, n in enumerate(batches):
        test = get_state_machine_test(machine, settings=fuzz_settings(n, steps))
        seed(base_seed * 1_000_003 + k)(test)
        test()
        if deadline is None or time.perf_counter() >= deadline:
            return


def fuzz_case(name: str, tweak: Callable[[EngineConfig], EngineConfig], doc: str) -> Case:
    def run(ctx: RunContext) -> CaseResult:
        t0 = time.perf_counter()
        config = tweak(ctx.config)
        holder = TraceHolder()
        try:
            run_fuzz(ctx.factory, config, holder, ctx.budget, ctx.profile.steps, ctx.seed,
                     ctx.memory, ctx.oracles)
        except Violation as v:
            trace = holder.last or Trace(config=config)
            found = len(trace.steps)
            trace, v = shrink(trace, v, lambda t: play(ctx.factory, t, memory=ctx.memory,
                                                       oracles=ctx.oracles),
                              max_replays=ctx.profile.shrink_replays)
            return _fail(name, FUZZ_BEHAVIOURS, v, t0, ctx.save_trace(name, trace),
                         examples=holder.examples, steps=len(trace.steps),
                         found_steps=found)
        except HypothesisException as e:
            return CaseResult(case=name, status=Status.ERROR, behaviours=list(FUZZ_BEHAVIOURS),
                              message=f"generator: {e}", duration_s=time.perf_counter() - t0)
        return CaseResult(
            case=name, status=Status.PASS, behaviours=list(FUZZ_BEHAVIOURS),
            duration_s=round(time.perf_counter() - t0, 4), examples=holder.examples,
            steps=holder.steps,
            message=f"{doc}; ops played: {dict(sorted(holder.seen_ops.items()))}",
        )

    return Case(name, FUZZ_BEHAVIOURS, frozenset({Feature.CACHE}), run, fuzz=True)


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
            return _fail(sc.name, sc.behaviours, v, t0, ctx.save_trace(sc.name, sc.trace))
        return CaseResult(case=sc.name, status=Status.PASS, behaviours=list(sc.behaviours),
                          duration_s=round(time.perf_counter() - t0, 4), steps=len(log),
                          message=sc.doc)

    return Case(sc.name, sc.behaviours, sc.needs | {Feature.SCHEDULER}, run)


# A small host tier, so prefetches evict and backups hold pages other copies want.
L3_FUZZ = SchedConfig(l3_store=True, device_pages=12, host_pages=8, max_tokens=8, max_batch=3)
# One adapter slot per forward (PLAN-9) on a small device, so the cap meets retraction.
ADAPTER_FUZZ = SchedConfig(max_adapters=1, device_pages=12, host_pages=8, max_tokens=8,
                           max_batch=3)
# Mamba state beside KV under a sliding window, few state slots (chapter mamba).
MAMBA_FUZZ = SchedConfig(mamba=True, sliding_window=4, device_pages=10, host_pages=8, max_tokens=6,
                         max_batch=3, max_slots=4, mamba_slots=6, mamba_host_slots=3)
SCHED_FUZZ_BEHAVIOURS = tuple(sorted({b for o in SCHED_ORACLES for b in o.behaviours}
                                     | {"DET-1", "TREE-2", "NS-1"}))


def fuzz_namespaces(config: SchedConfig, features: frozenset[Feature]) -> int:
    """Namespaces the fuzzer draws from: one more adapter than the cap allows, so it binds."""
    if Feature.NAMESPACES not in features:
        return 1
    return config.max_adapters + 2 if config.max_adapters else 2


def sched_fuzz_case(name: str, config: SchedConfig, doc: str,
                    needs: frozenset[Feature] = frozenset()) -> Case:
    behaviours = tuple(b for b in SCHED_FUZZ_BEHAVIOURS
                       if (config.l3_store or not b.startswith("L3-"))
                       and (config.mamba or not b.startswith("MAMBA-"))
                       and (config.max_adapters or b != "PLAN-9"))

    def run(ctx: RunContext) -> CaseResult:
        t0 = time.perf_counter()
        holder: dict = {}

        def replay(t: SchedTrace) -> list:
            return _sched_play(ctx, t)

        try:
            with _import_independent_draws():
                fuzz_sched(ctx.sched_factory, config, ctx.budget.examples,
                           ctx.budget.seconds, ctx.seed, holder, ctx,
                           namespaces=fuzz_namespaces(config, ctx.features))
        except Violation as v:
            trace = holder["trace"]
            found = len(trace.arrivals)
            trace, v = shrink_sched(trace, v, replay, ctx.profile.shrink_replays // 2)
            return _fail(name, behaviours, v, t0, ctx.save_trace(name, trace),
                         examples=holder.get("examples"), steps=len(trace.arrivals),
                         found_steps=found)
        return CaseResult(case=name, status=Status.PASS, behaviours=list(behaviours),
                          duration_s=round(time.perf_counter() - t0, 4),
                          examples=holder.get("examples"), message=doc)

    return Case(name, behaviours, needs | {Feature.SCHEDULER}, run, fuzz=True)


def all_cases() -> list[Case]:
    cases = [scenario_case(sc) for sc in SCENARIOS]
    cases.append(fuzz_case("fuzz-cache", lambda c: c, "stateful traces at the run's config"))
    cases.append(fuzz_case("fuzz-cache-tight", _tight,
                           "stateful traces with 8 device and 6 host pages"))
    cases.append(fuzz_case("fuzz-cache-page1", lambda c: c.model_copy(update={"page_size": 1}),
                           "stateful traces at page size 1"))
    cases.extend(sched_scenario_case(sc) for sc in SCHED_SCENARIOS)
    cases.append(window_config_case())
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
        "fuzz-scheduler-mamba", MAMBA_FUZZ,
        "workloads with Mamba state slots under a 4-token sliding window, on a small device "
        "with few state slots: retraction, eviction and recovery of states",
        frozenset({Feature.MAMBA, Feature.SLIDING_WINDOW})))
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


def transition_coverage(ctx: RunContext) -> dict:
    """Which (state, event) pairs of the request table the run took, and which illegal runtime
    events it tried (and saw rejected) in which state."""
    legal = sorted((s.value, e.value) for s, e in TRANSITIONS)
    illegal = sorted((s.value, e.value) for s in State for e in EXTERNAL
                     if (s, e) not in TRANSITIONS and e not in BY_OP)
    took = sorted(set(legal) & ctx.exercised)
    tried = sorted(set(illegal) & ctx.illegal)
    return {
        "legal": {"exercised": len(took), "total": len(legal),
                  "missed": [f"{s} --{e}-->" for s, e in sorted(set(legal) - ctx.exercised)]},
        "illegal": {"tried": len(tried), "total": len(illegal),
                    "missed": [f"{s} x {e}" for s, e in sorted(set(illegal) - ctx.illegal)]},
    }


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


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
    memory: MemoryFactory = shadow_memory,
    memory_only: bool = False,
    memory_info: dict | None = None,
) -> Report:
    """Run cases against ``engine``; the report is rewritten atomically after every case.

    ``memory`` is the runtime's KV memory (``kvconf gpu`` passes torch pools); with
    ``memory_only`` the cases are judged by the oracles that read that memory alone."""
    check_engine(engine)
    factory = cache_engine_factory(engine)
    sched_factory = sched_engine_factory(engine)
    features: frozenset[Feature] = frozenset()
    version = ""
    unavailable: dict[Feature, str] = {}  # level -> why it cannot run here
    for level, make, cfg in ((Feature.CACHE, factory, config),
                             (Feature.SCHEDULER, sched_factory, SchedConfig())):
        if make is None:
            continue
        try:
            probe = make(cfg)
        except EngineUnavailable as e:
            unavailable[level] = f"engine {engine} is not available: {e}"
            continue
        except KitError:
            raise
        except Exception as e:
            raise KitError(
                f"engine {engine}: cannot start with config {cfg.model_dump()}: {e}"
            ) from None
        features = features | {level} | probe.features
        version = version or str(probe.version)
    if Feature.CACHE not in features:
        factory = None
    if Feature.SCHEDULER not in features:
        sched_factory = None
    out_dir = report_path.parent if report_path is not None else None
    ctx = RunContext(engine, factory, config, seed_value, profile, budget, out_dir,
                     sched_factory=sched_factory, features=features, memory=memory,
                     memory_only=memory_only)
    report = Report(
        run_info=RunInfo(
            engine=engine, version=version or "unavailable", kvconf=__version__,
            features=sorted(f.value for f in features), config=config.model_dump(),
            seed=seed_value, profile=profile.name, budget=str(budget), started=now(),
            memory=None if memory_info is None else {**memory_info, "memory_only": memory_only},
        )
    )
    try:
        for case in cases if cases is not None else all_cases():
            if on_start:
                on_start(case)
            missing = case.needs - features
            if missing:
                result = CaseResult(
                    case=case.name, status=Status.NOT_SUPPORTED, behaviours=list(case.behaviours),
                    message=next((unavailable[f] for f in missing if f in unavailable),
                                 "engine lacks " + ", ".join(sorted(f.value for f in missing))),
                    duration_s=0.0,
                )
            else:
                t0 = time.perf_counter()
                try:
                    result = case.run(ctx)
                except KitError:
                    raise
                except Exception as e:
                    result = CaseResult(
                        case=case.name, status=Status.ERROR, behaviours=list(case.behaviours),
                        message=f"{type(e).__name__}: {e}", duration_s=time.perf_counter() - t0,
                    )
            report.results.append(result)
            if ctx.exercised or ctx.illegal:
                report.run_info.coverage = transition_coverage(ctx)
            if report_path is not None:
                write_report(report, report_path)
            if on_result:
                on_result(result)
    except KeyboardInterrupt:
        report.run_info.interrupted = True
        report.run_info.finished = now()
        if report_path is not None:
            write_report(report, report_path)
        raise
    report.run_info.finished = now()
    if report_path is not None:
        write_report(report, report_path)
    return report.summarize()
