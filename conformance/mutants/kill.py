"""The kill matrix: the suite against every mutant, until an oracle kills it or the budget ends.

A mutant's cases run in the suite's order (hand-written scenarios first, then fuzz cases) and
stop at the first failure: the seconds until then are its time to kill. A mutant no case kills
is reported alive, with the seed of the run, never left out.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Collection
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from kvconf.conformance import __version__
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.mutants import Mutant, all_mutants
from kvconf.conformance.reporting.report import Status
from kvconf.conformance.running.profiles import Budget, Profile
from kvconf.conformance.scheduler.trace import SchedConfig
from kvconf.conformance.trace import write_atomic

FORMAT = "kvconf-kill-matrix/1"


class MutantResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    level: str
    catalog: list[str]
    killed: bool
    case: str | None = None  # the case that killed it
    oracle: str | None = None
    behaviours: list[str] = []
    seconds: float  # until killed, or spent in vain
    examples: int | None = None  # generated traces, when a fuzz case killed it
    trace: str | None = None  # the killing trace, relative to the report
    message: str = ""
    skipped: str | None = None  # why it could not be run here (not counted as alive)


class KillInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kvconf: str
    seed: int
    profile: str
    budget: str
    fuzz_only: bool = False
    started: str
    finished: str | None = None
    interrupted: bool = False


class KillMatrix(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: str = FORMAT
    run_info: KillInfo
    mutants: list[MutantResult] = []
    summary: dict = {}

    def summarize(self) -> KillMatrix:
        killed = [m.seconds for m in self.mutants if m.killed]
        self.summary = {
            "killed": len(killed), "total": len(self.mutants),
            "alive": [m.id for m in self.mutants if not m.killed and not m.skipped],
            "skipped": [m.id for m in self.mutants if m.skipped],
            "median_seconds_to_kill": round(statistics.median(killed), 3) if killed else None,
            "max_seconds_to_kill": round(max(killed), 3) if killed else None,
        }
        return self

    @property
    def ok(self) -> bool:
        return all(m.killed or m.skipped for m in self.mutants)


def level_of(level: str) -> tuple[Feature, object]:
    """The level feature of a mutant's or variant's level, and the config its factory takes."""
    from kvconf.conformance.engine.hybrid import HybridConfig

    if level == "cache":
        return Feature.CACHE, EngineConfig()
    if level == "hybrid":
        return Feature.HYBRID, HybridConfig()
    return Feature.SCHEDULER, SchedConfig()


def kill_one(mutant: Mutant, catalog: set[str], *, seed_value: int, profile: Profile,
             budget: Budget, out_dir: Path | None, fuzz_only: bool = False,
             cases: Collection[str] | None = None) -> MutantResult:
    """Run the suite's cases of the mutant's level against it until one fails (only the fuzz
    cases with ``fuzz_only``: what the generators find without the hand-written scenarios;
    only the cases named in ``cases`` where given)."""
    from kvconf.conformance.running.runner import RunContext, all_cases, not_applicable, run_case

    if mutant.level == "memory":
        return _kill_memory(mutant, catalog)

    factory = mutant.factory()
    level, config = level_of(mutant.level)
    features = frozenset({level}) | factory(config).features
    ctx = RunContext(
        f"mutant:{mutant.name}", factory if level is Feature.CACHE else None, EngineConfig(),
        seed_value, profile, budget, out_dir / mutant.name if out_dir else None,
        sched_factory=factory if level is Feature.SCHEDULER else None, features=features,
        first_only=True,  # one finding decides the verdict; the rest would only cost time
        hybrid_factory=factory if level is Feature.HYBRID else None,
    )
    t0 = time.perf_counter()
    cat = list(mutant.cites(catalog))
    for case in all_cases():
        if (not case.needs <= features or (fuzz_only and not case.fuzz)
                or (cases is not None and case.name not in cases)
                or not_applicable(case, ctx.config) is not None):
            continue
        result = run_case(ctx, case)
        if result.status is Status.FAIL:
            trace = f"{mutant.name}/{result.trace}" if result.trace else None
            return MutantResult(
                id=mutant.name, level=mutant.level, catalog=cat, killed=True, case=case.name,
                oracle=result.oracle, behaviours=result.behaviours,
                seconds=round(time.perf_counter() - t0, 3), examples=result.examples,
                trace=trace, message=result.message,
            )
    return MutantResult(
        id=mutant.name, level=mutant.level, catalog=cat, killed=False,
        seconds=round(time.perf_counter() - t0, 3),
        message=f"alive: no case failed (seed {seed_value}, {profile.name}, {budget})",
    )


def _kill_memory(mutant: Mutant, catalog: set[str]) -> MutantResult:
    """A runtime-side mutant is judged where it matters: its pools built for a CUDA device and
    checked by the harness's own oracles. Without a GPU it is skipped, not counted alive."""
    import torch

    from kvconf.conformance.oracles import Violation
    from kvconf.gpu_harness.memory import check_pinned

    cat = list(mutant.cites(catalog))
    if not torch.cuda.is_available():
        return MutantResult(id=mutant.name, level=mutant.level, catalog=cat, killed=False,
                            seconds=0.0, skipped="needs a CUDA device (kvconf gpu)")
    t0 = time.perf_counter()
    try:
        check_pinned(mutant.factory()(4, 8, 8, None, "cuda"))
    except Violation as v:
        return MutantResult(id=mutant.name, level=mutant.level, catalog=cat, killed=True,
                            case="memory-pools", oracle=v.oracle, behaviours=list(v.behaviours),
                            seconds=round(time.perf_counter() - t0, 3), message=v.message)
    return MutantResult(id=mutant.name, level=mutant.level, catalog=cat, killed=False,
                        seconds=round(time.perf_counter() - t0, 3),
                        message="alive: its pools passed the harness's checks on CUDA")


def run_mutants(
    *,
    seed_value: int,
    profile: Profile,
    budget: Budget,
    report_path: Path | None,
    names: list[str] | None = None,
    fuzz_only: bool = False,
    on_result: Callable[[MutantResult], None] | None = None,
    on_start: Callable[[Mutant], None] | None = None,
    on_progress: Callable[[dict], None] | None = None,
) -> KillMatrix:
    """Every mutant (or those named), one after another; the report is rewritten after each.
    ``on_start`` and ``on_result`` see each mutant begin and end, ``on_progress`` the progress
    notes of its fuzz cases (``kvconf.conformance.running.progress``): for a display, never for
    the matrix."""
    from kvconf.conformance.errors import KitError
    from kvconf.conformance.running import progress
    from kvconf.conformance.running.runner import now
    from kvconf.spec.registry import load_registry

    catalog = set(load_registry().catalog)
    mutants = all_mutants()
    if names:
        known = {m.name for m in mutants}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise KitError(f"--mutant {unknown[0]}: unknown (known: {', '.join(sorted(known))})")
        mutants = [m for m in mutants if m.name in names]
    out_dir = report_path.parent if report_path is not None else None
    matrix = KillMatrix(run_info=KillInfo(kvconf=__version__, seed=seed_value,
                                          profile=profile.name, budget=str(budget),
                                          fuzz_only=fuzz_only, started=now()))

    def save() -> None:
        if report_path is not None:
            write_atomic(report_path, matrix.summarize().model_dump_json(indent=2) + "\n")

    try:
        for m in mutants:
            if on_start:
                on_start(m)
            with progress.sink(on_progress):
                res = kill_one(m, catalog, seed_value=seed_value, profile=profile, budget=budget,
                               out_dir=out_dir, fuzz_only=fuzz_only)
            matrix.mutants.append(res)
            save()
            if on_result:
                on_result(res)
    except KeyboardInterrupt:
        matrix.run_info.interrupted = True
        matrix.run_info.finished = now()
        save()
        raise
    matrix.run_info.finished = now()
    save()
    return matrix.summarize()
