"""The kill matrix: the suite against every mutant, until an oracle kills it or the budget ends.

A mutant's cases run in the suite's order (hand-written scenarios first, then fuzz cases) and
stop at the first failure: the seconds until then are its time to kill. A mutant no case kills
is reported alive, with the seed of the run, never left out.

With ``jobs`` workers (``kvconf mutants --jobs N``) the mutants' cases run in the kit's worker
processes (``kvconf.conformance.running.pool``), cut into the units ``kvconf run`` cuts them
into (``kvconf.conformance.running.units``): every mutant's units queue in mutant and suite
order, a free worker takes the next one a verdict may still need, opening that unit's mutant
first when it ran another's. A mutant's verdict is the one ``kill_one`` gives in one process:
its units in order up to the first that fails; a unit that ends later than one past it is
waited for, so the killer case and its finding are the same whichever worker finished first.
A mutant whose engine crashes or hangs gives CRASH or TIMEOUT there, as in ``kvconf run``: it is
killed by that (a finding, spec chapter faults), and the run goes on.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from kvconf.conformance import __version__
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.mutants import Mutant, all_mutants
from kvconf.conformance.reporting.report import CaseResult, Status
from kvconf.conformance.running.cases import Case
from kvconf.conformance.running.profiles import Budget, Profile
from kvconf.conformance.running.units import EngineUnit, Unit, combine, for_engine, place, plan
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
    signature: str | None = None  # the killing finding's (spec chapter faults, "Findings")
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
    jobs: int = 0  # worker processes (0: the kit's own process)
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
    from kvconf.conformance.running.runner import RunContext, run_case

    if mutant.level == "memory":
        return _kill_memory(mutant, catalog)

    factory = mutant.factory()
    level, _ = level_of(mutant.level)
    features = _features(mutant)
    ctx = RunContext(
        f"mutant:{mutant.name}", factory if level is Feature.CACHE else None, EngineConfig(),
        seed_value, profile, budget, out_dir / mutant.name if out_dir else None,
        sched_factory=factory if level is Feature.SCHEDULER else None, features=features,
        first_only=True,  # one finding decides the verdict; the rest would only cost time
        hybrid_factory=factory if level is Feature.HYBRID else None,
    )
    t0 = time.perf_counter()
    cat = list(mutant.cites(catalog))
    for case in _cases_of(features, fuzz_only, cases):
        result = run_case(ctx, case)
        if result.status is Status.FAIL:
            return _killed(mutant, cat, result, time.perf_counter() - t0)
    return _alive(mutant, cat, time.perf_counter() - t0, seed_value, profile, budget)


def _features(mutant: Mutant) -> frozenset[Feature]:
    """What the mutant's engine declares, with its level (from an engine built to ask)."""
    level, config = level_of(mutant.level)
    return frozenset({level}) | mutant.factory()(config).features


def _cases_of(features: frozenset[Feature], fuzz_only: bool,
              names: Collection[str] | None) -> list[Case]:
    """The suite's cases a mutant with ``features`` runs, in suite order."""
    from kvconf.conformance.running.runner import all_cases, not_applicable

    config = EngineConfig()
    return [c for c in all_cases()
            if c.needs <= features and (c.fuzz or not fuzz_only)
            and (names is None or c.name in names) and not_applicable(c, config) is None]


def _killed(mutant: Mutant, cat: list[str], result: CaseResult, seconds: float) -> MutantResult:
    """Killed by ``result``, the case result that did not pass (its traces under the mutant's
    folder)."""
    return MutantResult(
        id=mutant.name, level=mutant.level, catalog=cat, killed=True, case=result.case,
        oracle=result.oracle, behaviours=result.behaviours,
        signature=result.findings[0].signature if result.findings else None,
        seconds=round(seconds, 3), examples=result.examples,
        trace=f"{mutant.name}/{result.trace}" if result.trace else None,
        message=result.message,
    )


def _alive(mutant: Mutant, cat: list[str], seconds: float, seed_value: int, profile: Profile,
           budget: Budget) -> MutantResult:
    return MutantResult(
        id=mutant.name, level=mutant.level, catalog=cat, killed=False,
        seconds=round(seconds, 3),
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


KILLS = (Status.FAIL, Status.CRASH, Status.TIMEOUT)  # a unit ending so kills its mutant


@dataclass
class _Verdict:
    """One mutant's units in the order its verdict reads them, and what has come back."""

    mutant: Mutant
    units: list[EngineUnit]  # ``engine``: the mutant's name
    results: dict[int, CaseResult] = field(default_factory=dict)  # by place in ``units``
    kill_at: int | None = None  # the lowest place known to kill (units past it are not run)
    errors: dict[str, int] = field(default_factory=dict)  # case -> lowest unit ended in ERROR
    started: float | None = None

    def place(self, unit: Unit) -> int:
        return place(self.units, unit)

    def skipped(self, unit: Unit) -> bool:
        """Past a unit of its case that ended in ERROR: not part of the case (``run_case``)."""
        return unit.index > self.errors.get(unit.case, unit.index)

    def killer(self) -> tuple[int | None, bool]:
        """The place of the unit that kills the mutant, and whether the verdict is known (all
        units before it in, or all units in: alive)."""
        for i, u in enumerate(self.units):
            if self.skipped(u):
                continue
            r = self.results.get(i)
            if r is None:
                return None, False
            if r.status in KILLS:
                return i, True
        return None, True


class _KillCampaign:
    """The pool's campaign (``Pool.run``) for the kill matrix: which units a verdict still
    needs, each mutant's verdict once its units up to the killing one are in."""

    def __init__(self, verdicts: dict[str, _Verdict], cases: dict[str, Case],
                 decided: Callable[[_Verdict, int | None], None],
                 on_start: Callable[[Mutant], None] | None,
                 on_progress: Callable[[str, dict], None] | None) -> None:
        self.verdicts, self.cases = verdicts, cases
        self.decided = decided
        self.done: set[str] = set()
        self.on_start, self.on_progress = on_start, on_progress

    def wanted(self, unit: EngineUnit) -> bool:
        v = self.verdicts[unit.engine]
        return (unit.engine not in self.done and not v.skipped(unit)
                and (v.kill_at is None or v.place(unit) <= v.kill_at))

    def start(self, unit: EngineUnit) -> None:
        v = self.verdicts[unit.engine]
        if v.started is None:
            v.started = time.perf_counter()
            if self.on_start:
                self.on_start(v.mutant)

    def note(self, doc: dict, unit: EngineUnit | None = None) -> None:
        if self.on_progress and unit is not None:
            self.on_progress(unit.engine, doc)

    def add(self, unit: EngineUnit, result: CaseResult) -> None:
        if unit.engine in self.done:
            return
        v = self.verdicts[unit.engine]
        i = v.place(unit)
        v.results[i] = result
        if result.status in KILLS:
            v.kill_at = i if v.kill_at is None else min(v.kill_at, i)
        elif result.status is Status.ERROR:
            v.errors[unit.case] = min(v.errors.get(unit.case, unit.index), unit.index)
        self.settle(v)

    def settle(self, v: _Verdict) -> None:
        at, known = v.killer()
        if known:
            self.done.add(v.mutant.name)
            self.decided(v, at)

    def result(self, v: _Verdict, at: int) -> CaseResult:
        """The killing case's result as one process gives it: its units up to the killer."""
        unit = v.units[at]
        if not self.cases[unit.case].fuzz:
            return v.results[at]
        got = [v.results[i] for i, u in enumerate(v.units[:at + 1]) if u.case == unit.case]
        return combine(got, self.cases[unit.case].doc)


def _drop_stray_traces(folder: Path | None, case: str | None) -> None:
    """Traces a unit past the killer saved before the killer's verdict came in (another case
    that failed sooner in another worker): not this matrix's; the killer's are kept."""
    if folder is None or not (folder / "traces").is_dir():
        return
    for t in (folder / "traces").glob("*.json"):
        if case is None or (t.stem != case and not t.stem.startswith(case + "~")):
            t.unlink(missing_ok=True)


def _run_in_workers(mutants: list[Mutant], catalog: set[str], *, seed_value: int,
                    profile: Profile, budget: Budget, out_dir: Path | None, fuzz_only: bool,
                    jobs: int, call_timeout: float, record: Callable[[MutantResult], None],
                    on_start: Callable[[Mutant], None] | None,
                    on_progress: Callable[[str, dict], None] | None) -> None:
    """Every mutant's units on ``jobs`` worker processes; ``record`` gets each verdict as it
    is known (in any order)."""
    from kvconf.conformance.errors import KitError
    from kvconf.conformance.running.pool import WorkerSpec, run_engines
    from kvconf.conformance.running.runner import all_cases

    specs = {m.name: WorkerSpec(engine=m.engine, config=EngineConfig(), seed=seed_value,
                                profile=profile, budget=budget, first_only=True)
             for m in mutants}
    verdicts: dict[str, _Verdict] = {}
    for m in mutants:
        cases = _cases_of(_features(m), fuzz_only, None)
        units = plan(((c.name, c.fuzz) for c in cases), budget, jobs)
        verdicts[m.name] = _Verdict(m, for_engine(m.name, units))

    def decided(v: _Verdict, at: int | None) -> None:
        m = v.mutant
        seconds = time.perf_counter() - (v.started or time.perf_counter())
        folder = out_dir / m.name if out_dir is not None else None
        cat = list(m.cites(catalog))
        if at is None:
            _drop_stray_traces(folder, None)
            record(_alive(m, cat, seconds, seed_value, profile, budget))
        else:
            result = campaign.result(v, at)
            _drop_stray_traces(folder, result.case)
            record(_killed(m, cat, result, seconds))

    campaign = _KillCampaign(verdicts, {c.name: c for c in all_cases()}, decided, on_start,
                             on_progress)
    for v in verdicts.values():
        if not v.units:  # no case it can run: alive, at once
            campaign.settle(v)
    run_engines([u for v in verdicts.values() for u in v.units], specs, campaign, out_dir, jobs,
                call_timeout)
    undecided = [n for n in verdicts if n not in campaign.done]
    if undecided:  # every unit a verdict needs was run: a fault of the kit
        raise KitError(f"kill matrix: no verdict for {', '.join(undecided)}")


def run_mutants(
    *,
    seed_value: int,
    profile: Profile,
    budget: Budget,
    report_path: Path | None,
    names: list[str] | None = None,
    fuzz_only: bool = False,
    jobs: int = 0,
    call_timeout: float = 60.0,
    on_result: Callable[[MutantResult], None] | None = None,
    on_start: Callable[[Mutant], None] | None = None,
    on_progress: Callable[[str, dict], None] | None = None,
) -> KillMatrix:
    """Every mutant (or those named); the report is rewritten after each verdict, the mutants
    in their order whatever order the verdicts come in. ``jobs`` is the number of worker
    processes (0: this process, one mutant after another, without crash or hang isolation, as
    ``kvconf run --jobs 0``). ``on_start`` and ``on_result`` see each mutant begin and end,
    ``on_progress`` the progress notes of its fuzz cases (the mutant's name and the note,
    ``kvconf.conformance.running.progress``): for a display, never for the matrix."""
    from kvconf.conformance.errors import KitError
    from kvconf.conformance.running import progress
    from kvconf.conformance.running.runner import now
    from kvconf.spec.registry import load_registry

    if jobs < 0:
        raise KitError(f"--jobs {jobs}: must be 0 (this process) or more workers")
    catalog = set(load_registry().catalog)
    mutants = all_mutants()
    if names:
        known = {m.name for m in mutants}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise KitError(f"--mutant {unknown[0]}: unknown (known: {', '.join(sorted(known))})")
        mutants = [m for m in mutants if m.name in names]
    order = {m.name: i for i, m in enumerate(mutants)}
    out_dir = report_path.parent if report_path is not None else None
    matrix = KillMatrix(run_info=KillInfo(kvconf=__version__, seed=seed_value,
                                          profile=profile.name, budget=str(budget),
                                          fuzz_only=fuzz_only, jobs=jobs, started=now()))

    def save() -> None:
        from kvconf.conformance.running.signals import hold_signals

        if report_path is not None:
            with hold_signals():  # an interrupt inside pydantic's serializer comes out wrapped
                text = matrix.summarize().model_dump_json(indent=2) + "\n"
            write_atomic(report_path, text)

    def record(res: MutantResult) -> None:
        matrix.mutants = sorted([*matrix.mutants, res], key=lambda r: order[r.id])
        save()
        if on_result:
            on_result(res)

    try:
        in_process = mutants if jobs == 0 else [m for m in mutants if m.level == "memory"]
        if jobs:  # a memory mutant is judged here, on the harness's pools (``_kill_memory``)
            _run_in_workers([m for m in mutants if m.level != "memory"], catalog,
                            seed_value=seed_value, profile=profile, budget=budget,
                            out_dir=out_dir, fuzz_only=fuzz_only, jobs=jobs,
                            call_timeout=call_timeout, record=record, on_start=on_start,
                            on_progress=on_progress)
        for m in in_process:
            if on_start:
                on_start(m)
            notes = (lambda doc, name=m.name: on_progress(name, doc)) if on_progress else None
            with progress.sink(notes):
                res = kill_one(m, catalog, seed_value=seed_value, profile=profile, budget=budget,
                               out_dir=out_dir, fuzz_only=fuzz_only)
            record(res)
    except KeyboardInterrupt:
        matrix.run_info.interrupted = True
        matrix.run_info.finished = now()
        save()
        raise
    matrix.run_info.finished = now()
    save()
    return matrix.summarize()
