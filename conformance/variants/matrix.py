"""The legal-variant matrix: the whole suite against every variant, the kit's false alarms counted.

The dual of the kill matrix (``kvconf.conformance.mutants.kill``). Each variant runs every case
of its level that its features allow, in the suite's order, to the end: a PASS is what a legal
engine is owed, anything else (FAIL, ERROR, TIMEOUT, CRASH) is a false alarm. A case whose
needs the variant's features do not meet is not run, exactly as ``kvconf run`` reports it
NOT_SUPPORTED: only a declared feature decides that, never a list of cases. Each variant must
also behave unlike the reference on some hand-written trace (its witness), or it proves nothing.
The rules the spec leaves open (MAY rules, allowances) are listed with the variants that take
them, or as "no variant yet" with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from kvconf.conformance import __version__
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.reporting.report import CaseResult, Status
from kvconf.conformance.running.cases import Case
from kvconf.conformance.running.profiles import Budget, Profile
from kvconf.conformance.running.units import EngineUnit, place
from kvconf.conformance.scheduler.trace import SchedConfig
from kvconf.conformance.trace import write_atomic
from kvconf.conformance.variants import NOT_BUILT, Variant, all_variants, open_rules

FORMAT = "kvconf-variant-matrix/1"
# Verdicts that say the case could not judge this engine; any other verdict but PASS is a false
# alarm. NOT_APPLICABLE, where the runner has it, comes from declared features too.
UNJUDGED = frozenset({"NOT_SUPPORTED", "NOT_APPLICABLE"})


class FalseAlarm(BaseModel):
    model_config = ConfigDict(extra="forbid")

    case: str
    status: str
    oracle: str | None = None
    behaviours: list[str] = []
    message: str = ""
    trace: str | None = None  # relative to the report


class VariantResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    level: str
    rules: list[str]  # the rules it exercises
    features: list[str]  # what it declares beyond the reference adapter
    summary: str = ""
    passed: int = 0
    not_run: list[str] = []  # cases whose needs its features do not meet
    false_alarms: list[FalseAlarm] = []
    witness: str | None = None  # a trace on which it behaves unlike the reference
    seconds: float = 0.0


class RuleRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rule: str
    open_as: str  # "MAY", "allowance <feature>", or both
    variants: list[str] = []
    not_built: str | None = None  # why no variant takes it yet


class VariantInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kvconf: str
    seed: int
    profile: str
    budget: str
    started: str
    finished: str | None = None
    interrupted: bool = False


class VariantMatrix(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: str = FORMAT
    run_info: VariantInfo
    variants: list[VariantResult] = []
    rules: list[RuleRow] = []
    summary: dict = {}

    def summarize(self) -> VariantMatrix:
        alarms = [f"{v.id}: {a.case}" for v in self.variants for a in v.false_alarms]
        run = sum(v.passed + len(v.false_alarms) for v in self.variants)
        self.summary = {
            "variants": len(self.variants),
            "cases_run": run,
            "passed": sum(v.passed for v in self.variants),
            "false_alarms": alarms,
            "false_alarm_rate": round(len(alarms) / run, 4) if run else None,
            "without_witness": [v.id for v in self.variants if v.witness is None],
            "rules_open": len(self.rules),
            "rules_covered": sum(1 for r in self.rules if r.variants),
            "no_variant_yet": [r.rule for r in self.rules if not r.variants],
        }
        return self

    @property
    def ok(self) -> bool:
        """No false alarm, and every variant shown to differ from the reference."""
        return all(not v.false_alarms and v.witness is not None for v in self.variants)


def _probe_features(variant: Variant) -> frozenset[Feature]:
    from kvconf.conformance.mutants.kill import level_of

    level, config = level_of(variant.level)
    return frozenset({level}) | variant.factory()(config).features


def _runs(variant: Variant, features: frozenset[Feature], case: Case) -> bool | None:
    """Whether the variant runs ``case``: None when the case is of another level (the variant
    does not speak it), False when its features do not meet the case's needs (as ``kvconf
    run`` decides NOT_SUPPORTED), True otherwise."""
    from kvconf.conformance.mutants.kill import level_of

    level, _ = level_of(variant.level)
    if level not in case.needs:
        return None
    return case.needs <= features and not case.excluded_by & features


def _verdict(res: VariantResult, case: str, result: CaseResult) -> None:
    """One case's result counted in ``res``: a PASS, a case it could not judge, or a false
    alarm with its trace (under the variant's folder)."""
    status = result.status.value
    if result.status is Status.PASS:
        res.passed += 1
    elif status in UNJUDGED:
        res.not_run.append(case)
    else:
        trace = f"{res.id}/{result.trace}" if result.trace else None
        res.false_alarms.append(FalseAlarm(
            case=case, status=status, oracle=result.oracle,
            behaviours=list(result.behaviours), message=result.message, trace=trace))


def _result_of(variant: Variant) -> VariantResult:
    return VariantResult(id=variant.name, level=variant.level, rules=list(variant.rules),
                         features=sorted(f.value for f in variant.features),
                         summary=variant.summary)


def judge_one(variant: Variant, *, seed_value: int, profile: Profile, budget: Budget,
              out_dir: Path | None) -> VariantResult:
    """Every case of the variant's level its features allow, each to its verdict."""
    from kvconf.conformance.mutants.kill import level_of
    from kvconf.conformance.running.runner import RunContext, all_cases, run_case

    factory = variant.factory()
    features = _probe_features(variant)
    level, _ = level_of(variant.level)
    ctx = RunContext(
        f"variant:{variant.name}", factory if level is Feature.CACHE else None, EngineConfig(),
        seed_value, profile, budget, out_dir / variant.name if out_dir else None,
        sched_factory=factory if level is Feature.SCHEDULER else None, features=features,
        first_only=True,  # one finding decides the verdict; the rest would only cost time
        hybrid_factory=factory if level is Feature.HYBRID else None,
    )
    res = _result_of(variant)
    t0 = time.perf_counter()
    for case in all_cases():
        runs = _runs(variant, features, case)
        if runs is None:
            continue
        if not runs:
            res.not_run.append(case.name)
            continue
        _verdict(res, case.name, run_case(ctx, case))
    res.witness = witness(variant)
    res.seconds = round(time.perf_counter() - t0, 3)
    return res


def _outcome(level: str, factory, trace) -> tuple:
    """What an engine visibly does with a trace: the driver's log (every call's result, every
    plan) and, at the scheduler level, the KV events it published; or the rule the run broke."""
    from kvconf.conformance.oracles.base import Violation

    try:
        if level == "cache":
            from kvconf.conformance.running.runner import play

            return ("log", repr(play(factory, trace, determinism=False)))
        if level == "hybrid":
            from kvconf.conformance.hybrid.driver import play_hybrid

            return ("log", repr(play_hybrid(factory, trace, determinism=False)))
        from kvconf.conformance.scheduler.generator import play_sched

        driver = play_sched(factory, trace, determinism=False)
        return ("log", repr(driver.log), tuple(driver.ignored), repr(driver.published))
    except Violation as v:
        return ("violation", v.oracle, tuple(v.behaviours))


def witness(variant: Variant) -> str | None:
    """The first hand-written trace of the variant's level on which the variant and the
    reference behave differently, both declaring the variant's features (the driver plays them
    alike), else both declaring the reference's alone; None when no trace tells them apart."""
    from kvconf.conformance.cache.scenarios import SCENARIOS
    from kvconf.conformance.scheduler.scenarios import SCHED_SCENARIOS

    for declared in (True, False):
        mine = variant.factory(with_features=declared)
        ref = variant.reference_factory(with_features=declared)
        if variant.level == "cache":
            config = EngineConfig()
            traces = [(sc.name, sc.needs, sc.trace(config)) for sc in SCENARIOS]
            features = mine(config).features
        elif variant.level == "hybrid":
            from kvconf.conformance.engine.hybrid import HybridConfig
            from kvconf.conformance.hybrid.cases import NEEDS
            from kvconf.conformance.hybrid.scenarios import HYBRID_SCENARIOS

            traces = [(sc.name, NEEDS, sc.trace(EngineConfig().page_size))
                      for sc in HYBRID_SCENARIOS]
            features = mine(HybridConfig()).features | {Feature.HYBRID}
        else:
            traces = [(sc.name, sc.needs, sc.trace) for sc in SCHED_SCENARIOS]
            features = mine(SchedConfig()).features
        for name, needs, trace in traces:
            if not needs <= features:
                continue
            if _outcome(variant.level, ref, trace) != _outcome(variant.level, mine, trace):
                return name if declared else f"{name} (each declaring the reference's features)"
        if variant.level == "scheduler" and Feature.MODEL_CONFIG in features:
            name = _config_witness(mine(SchedConfig()), ref(SchedConfig()))
            if name is not None:
                return name if declared else f"{name} (each declaring the reference's features)"
    return None


def _config_witness(mine, ref) -> str | None:
    """The first sample model config whose window the two read differently (WIN-1, WIN-5)."""
    from kvconf.conformance.errors import EngineRejected
    from kvconf.conformance.scheduler.window_cases import MODEL_CONFIGS

    def read(engine, cfg):
        try:
            return ("window", engine.model_window(cfg))
        except EngineRejected as e:
            return ("refused", e.code)

    for name, cfg, _want in MODEL_CONFIGS:
        if read(mine, cfg) != read(ref, cfg):
            return f"model config {name}"
    return None


def rule_rows(variants: list[Variant]) -> list[RuleRow]:
    from kvconf.spec.registry import load_registry

    rows = []
    for rule, why in open_rules(load_registry()).items():
        takers = [v.name for v in variants if rule in v.rules]
        rows.append(RuleRow(rule=rule, open_as=why, variants=takers,
                            not_built=None if takers else NOT_BUILT.get(
                                rule, "no variant yet, and no reason recorded")))
    return rows


@dataclass
class _Judging:
    """One variant's units and what has come back, by place in ``units``."""

    variant: Variant
    res: VariantResult
    units: list[EngineUnit]  # ``engine``: the variant's name
    results: dict[int, CaseResult] = field(default_factory=dict)
    failed_at: dict[str, int] = field(default_factory=dict)  # case -> first failing unit index
    started: float | None = None
    done: bool = False

    def place(self, unit: EngineUnit) -> int:
        return place(self.units, unit)


class _VariantCampaign:
    """The pool's campaign (``Pool.run``) for the variant matrix: every unit of every case a
    variant runs, except a fuzz case's units past its first failing one (as ``run_case`` with
    ``first_only``: one finding decides the verdict)."""

    def __init__(self, judging: dict[str, _Judging], cases: dict[str, Case],
                 finished: Callable[[_Judging], None]) -> None:
        self.judging, self.cases, self.finished = judging, cases, finished

    def wanted(self, unit: EngineUnit) -> bool:
        j = self.judging[unit.engine]
        return unit.index <= j.failed_at.get(unit.case, unit.index)

    def start(self, unit: EngineUnit) -> None:
        j = self.judging[unit.engine]
        if j.started is None:
            j.started = time.perf_counter()

    def note(self, doc: dict, unit: EngineUnit | None = None) -> None:
        pass  # progress notes are for a display; the matrix prints a line per variant

    def add(self, unit: EngineUnit, result: CaseResult) -> None:
        from kvconf.conformance.running.units import failed

        j = self.judging[unit.engine]
        j.results[j.place(unit)] = result
        if failed(result.status):
            j.failed_at[unit.case] = min(j.failed_at.get(unit.case, unit.index), unit.index)
        if all(i in j.results or not self.wanted(u) for i, u in enumerate(j.units)):
            self.finished(j)

    def case_result(self, j: _Judging, case: str) -> CaseResult:
        """The case's result as one process gives it: its units up to the first failing."""
        from kvconf.conformance.running.units import combine

        got = [r for i, r in sorted(j.results.items()) if j.units[i].case == case
               and j.units[i].index <= j.failed_at.get(case, j.units[i].index)]
        return got[0] if not self.cases[case].fuzz else combine(got, self.cases[case].doc)


def _judge_in_workers(variants: list[Variant], *, seed_value: int, profile: Profile,
                      budget: Budget, out_dir: Path | None, jobs: int, call_timeout: float,
                      record: Callable[[VariantResult], None]) -> None:
    """Every variant's units on ``jobs`` worker processes; ``record`` gets each variant's
    result once all its units are in (in any order). Same verdicts as ``judge_one``."""
    from kvconf.conformance.running.pool import WorkerSpec, run_engines
    from kvconf.conformance.running.runner import all_cases
    from kvconf.conformance.running.units import for_engine, plan
    from kvconf.conformance.variants.engines import engine_name

    cases = {c.name: c for c in all_cases()}
    specs = {v.name: WorkerSpec(engine=engine_name(v.name), config=EngineConfig(),
                                seed=seed_value, profile=profile, budget=budget, first_only=True)
             for v in variants}
    judging: dict[str, _Judging] = {}
    for v in variants:
        features = _probe_features(v)
        res, runs = _result_of(v), []
        for case in cases.values():
            verdict = _runs(v, features, case)
            if verdict is False:
                res.not_run.append(case.name)
            elif verdict:
                runs.append((case.name, case.fuzz))
        judging[v.name] = _Judging(v, res, for_engine(v.name, plan(runs, budget, jobs)))

    def finished(j: _Judging) -> None:
        if j.done:
            return
        j.done = True
        res = j.res
        for case in dict.fromkeys(u.case for u in j.units):  # suite order
            _verdict(res, case, campaign.case_result(j, case))
        not_run = set(res.not_run)
        res.not_run = [c for c in cases if c in not_run]  # suite order, as judge_one
        res.witness = witness(j.variant)
        res.seconds = round(time.perf_counter() - (j.started or time.perf_counter()), 3)
        record(res)

    campaign = _VariantCampaign(judging, cases, finished)
    for j in judging.values():
        if not j.units:
            finished(j)
    run_engines([u for j in judging.values() for u in j.units], specs, campaign, out_dir, jobs,
                call_timeout)
    undecided = [n for n, j in judging.items() if not j.done]
    if undecided:  # every unit was run: a fault of the kit
        from kvconf.conformance.errors import KitError

        raise KitError(f"variant matrix: no verdict for {', '.join(undecided)}")


def run_variants(*, seed_value: int, profile: Profile, budget: Budget, report_path: Path | None,
                 names: list[str] | None = None, jobs: int = 0, call_timeout: float = 60.0,
                 on_result: Callable[[VariantResult], None] | None = None) -> VariantMatrix:
    """Every variant (or those named); the report is rewritten after each, the variants in
    their order whatever order they finish in. ``jobs`` is the number of worker processes
    (0: this process, one variant after another, as ``kvconf run --jobs 0``)."""
    from kvconf.conformance.errors import KitError
    from kvconf.conformance.running.runner import now

    if jobs < 0:
        raise KitError(f"--jobs {jobs}: must be 0 (this process) or more workers")

    variants = all_variants()
    if names:
        known = {v.name for v in variants}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise KitError(f"--variant {unknown[0]}: unknown (known: {', '.join(sorted(known))})")
        variants = [v for v in variants if v.name in names]
    out_dir = report_path.parent if report_path is not None else None
    matrix = VariantMatrix(run_info=VariantInfo(kvconf=__version__, seed=seed_value,
                                                profile=profile.name, budget=str(budget),
                                                started=now()),
                           rules=rule_rows(all_variants()))

    def save() -> None:
        from kvconf.conformance.running.signals import hold_signals

        if report_path is not None:
            with hold_signals():  # an interrupt inside pydantic's serializer comes out wrapped
                text = matrix.summarize().model_dump_json(indent=2) + "\n"
            write_atomic(report_path, text)

    order = {v.name: i for i, v in enumerate(variants)}

    def record(res: VariantResult) -> None:
        matrix.variants = sorted([*matrix.variants, res], key=lambda r: order[r.id])
        save()
        if on_result:
            on_result(res)

    try:
        if jobs:
            _judge_in_workers(variants, seed_value=seed_value, profile=profile, budget=budget,
                              out_dir=out_dir, jobs=jobs, call_timeout=call_timeout,
                              record=record)
        else:
            for v in variants:
                record(judge_one(v, seed_value=seed_value, profile=profile, budget=budget,
                                 out_dir=out_dir))
    except KeyboardInterrupt:
        matrix.run_info.interrupted = True
        matrix.run_info.finished = now()
        save()
        raise
    matrix.run_info.finished = now()
    save()
    return matrix.summarize()


def print_matrix(matrix: VariantMatrix, console, report: Path | None) -> None:
    """The legal-variant matrix as two tables: the variants, then the rules left open."""
    from rich.markup import escape
    from rich.table import Table

    info = matrix.run_info
    table = Table(title=f"kvconf variants (seed {info.seed}, {info.profile}, {info.budget})")
    for col in ("variant", "rules", "declares", "PASS", "not run", "false alarms",
                "differs from the reference on"):
        table.add_column(col, justify="right" if col in ("PASS", "not run") else "left",
                         overflow="fold")
    for v in matrix.variants:
        alarms = ("[green]0[/]" if not v.false_alarms else "[red]" + escape("; ".join(
            f"{a.case} {a.status} [{a.oracle}] {', '.join(a.behaviours)}"
            for a in v.false_alarms)) + "[/]")
        table.add_row(f"{v.id} ({v.level})", ", ".join(v.rules), ", ".join(v.features) or "-",
                      str(v.passed), str(len(v.not_run)), alarms,
                      escape(v.witness) if v.witness else "[red]nothing: proves nothing[/]")
    console.print(table)
    rules = Table(title="rules the spec leaves open")
    for col in ("rule", "open as", "variants"):
        rules.add_column(col, overflow="fold")
    for r in matrix.rules:
        rules.add_row(r.rule, r.open_as, ", ".join(r.variants) if r.variants
                      else f"[yellow]no variant yet[/]: {escape(r.not_built or '')}")
    console.print(rules)
    s = matrix.summary
    console.print(
        f"false alarms {len(s['false_alarms'])} in {s['cases_run']} cases run on "
        f"{s['variants']} variants (rate {s['false_alarm_rate']}); open rules with a variant "
        f"{s['rules_covered']}/{s['rules_open']}"
        + (f"; no variant yet: {', '.join(s['no_variant_yet'])}" if s["no_variant_yet"] else "")
        + (f"; not shown to differ: {', '.join(s['without_witness'])}"
           if s["without_witness"] else ""), highlight=False)
    if report is not None:
        console.print(f"report: {report}", highlight=False)
