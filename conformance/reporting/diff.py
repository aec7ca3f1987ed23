"""``kvconf diff BASE HEAD``: what changed between two runs of an engine, for a pull request's CI.

A PR job runs the suite on the PR and on its base (or keeps the base's report as an artifact)
and asks what the change did: cases that newly fail, failures it fixed, other status changes,
cases gone or new, and failures whose first finding moved to another rule or oracle. A new
failure, or a case that passed and is gone, is a regression (exit 1): the diff judges the change,
not the engine, so known gaps both runs share do not fail it.

Per rule (``verdicts``): a rule BASE passed (a check of it ran and held) that HEAD did not judge
at all is listed as *no longer judged*, one line for them all: the cases still pass, but no check
of the rule ran (a feature no longer declared, a check path no longer reached). It is not a
regression (dropping a feature is the engine's right), but it is never dropped silently. A rule
HEAD passes that BASE did not judge is *newly judged* (every rule HEAD passes, against a report
older than ``kvconf-report/5``).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from kvconf.conformance.errors import KitError, read_input
from kvconf.conformance.reporting.report import (
    BAD,
    FORMATS,
    UNJUDGED,
    CaseResult,
    Report,
    Status,
    load_report,
)
from kvconf.conformance.reporting.verdicts import NOT_JUDGED, run_verdicts
from kvconf.conformance.trace import parse_json

FORMAT = "kvconf-diff/1"
OK = (Status.PASS, *UNJUDGED)  # passed, or not judged (NOT_SUPPORTED, NOT_APPLICABLE)


class Side(BaseModel):
    """One run's result for a case, as the diff shows it."""

    model_config = ConfigDict(extra="forbid")

    status: Status
    oracle: str | None = None
    behaviours: list[str] = []
    step: int | None = None
    message: str = ""
    trace: str | None = None  # as the caller can open it: the report's folder / trace


class Change(BaseModel):
    model_config = ConfigDict(extra="forbid")

    case: str
    base: Side | None = None  # None: the case is new
    head: Side | None = None  # None: the case is gone


class RunRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    engine: str
    version: str
    seed: int
    profile: str
    budget: str


class Diff(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: str = FORMAT
    base: RunRef
    head: RunRef
    new_failures: list[Change] = []  # PASS / NOT_* -> FAIL / CRASH / TIMEOUT / ERROR
    fixes: list[Change] = []  # FAIL / CRASH / TIMEOUT / ERROR -> PASS
    status_changes: list[Change] = []  # any other change of status
    finding_changes: list[Change] = []  # failed both times, first finding on another rule
    gone: list[Change] = []  # in BASE, not in HEAD
    new: list[Change] = []  # in HEAD, not in BASE
    rules_no_longer_judged: list[str] = []  # PASS in BASE, not judged in HEAD
    rules_newly_judged: list[str] = []  # not judged in BASE, PASS in HEAD
    unchanged: int = 0
    regression: bool = False
    # seed, profile, budget, config: a change there alone moves fuzz findings (and, for config,
    # which cases are NOT_APPLICABLE)
    differ_in: list[str] = []

    @property
    def changed(self) -> bool:
        return bool(self.new_failures or self.fixes or self.status_changes
                    or self.finding_changes or self.gone or self.new
                    or self.rules_no_longer_judged or self.rules_newly_judged)

    def gone_that_passed(self) -> list[Change]:
        return [c for c in self.gone if c.base is not None and c.base.status is Status.PASS]


def load_run(path: Path) -> Report:
    """A run report, or a one-line error that says what the file is instead."""
    data = parse_json(read_input(path, "report"), str(path))
    fmt = data.get("format") if isinstance(data, dict) else None
    if fmt not in FORMATS:
        raise KitError(f"{path}: format: {fmt!r} is not a run report ({', '.join(FORMATS)})")
    return load_report(path)


def _side(r: CaseResult, where: Path) -> Side:
    return Side(status=r.status, oracle=r.oracle, behaviours=r.behaviours, step=r.step,
                message=r.message, trace=str(where.parent / r.trace) if r.trace else None)


def _ref(path: Path, r: Report) -> RunRef:
    i = r.run_info
    return RunRef(path=str(path), engine=i.engine, version=i.version, seed=i.seed,
                  profile=i.profile, budget=i.budget)


def _finding(s: Side) -> tuple[str | None, list[str]]:
    """What a failure is about: the oracle and the rules it cited (steps and wording may
    move with shrinking; the rule broken is what a reviewer cares about)."""
    return s.oracle, sorted(s.behaviours)


def diff_reports(base_path: Path, head_path: Path, allow_engine_change: bool = False) -> Diff:
    """Compare two run reports case by case, in HEAD's order (then BASE's cases gone)."""
    base, head = load_run(base_path), load_run(head_path)
    if base.run_info.engine != head.run_info.engine and not allow_engine_change:
        raise KitError(f"{head_path}: run_info.engine is {head.run_info.engine!r}, but "
                       f"{base_path} has {base.run_info.engine!r} (--allow-engine-change "
                       "compares them anyway)")
    d = Diff(base=_ref(base_path, base), head=_ref(head_path, head))
    d.differ_in = [k for k in ("seed", "profile", "budget", "config")
                   if getattr(base.run_info, k) != getattr(head.run_info, k)]
    before = {r.case: r for r in base.results}
    after = {r.case: r for r in head.results}
    for name, h in after.items():
        hs = _side(h, head_path)
        b = before.get(name)
        if b is None:
            d.new.append(Change(case=name, head=hs))
            continue
        bs = _side(b, base_path)
        change = Change(case=name, base=bs, head=hs)
        if b.status in OK and h.status in BAD:
            d.new_failures.append(change)
        elif b.status in BAD and h.status is Status.PASS:
            d.fixes.append(change)
        elif b.status is not h.status:
            d.status_changes.append(change)
        elif h.status in BAD and _finding(bs) != _finding(hs):
            d.finding_changes.append(change)
        else:
            d.unchanged += 1
    for name, b in before.items():
        if name not in after:
            d.gone.append(Change(case=name, base=_side(b, base_path)))
    rules = dict.fromkeys(b for r in (*base.results, *head.results)
                          for b in [*r.behaviours, *(r.judged or ())])
    was, now = run_verdicts(base, rules), run_verdicts(head, rules)
    d.rules_no_longer_judged = [b for b in rules if was[b].status is Status.PASS
                                and now[b].status is None]
    d.rules_newly_judged = [b for b in rules if was[b].status is None
                            and now[b].status is Status.PASS]
    d.regression = bool(d.new_failures or d.gone_that_passed())
    return d


def _show(s: Side | None) -> str:
    if s is None:
        return "-"
    return s.status.value


def _detail(c: Change) -> str:
    """The finding of the side that failed (HEAD's first), with where to replay it."""
    s = c.head if c.head is not None and c.head.status in BAD else c.base
    if s is None or s.status not in BAD:
        return ""
    where = f" at step {s.step}" if s.step is not None else ""
    text = f"[{s.oracle or '-'}] {', '.join(s.behaviours)}{where}: {s.message}"
    if c.base is not None and c.head is not None and c.base.status in BAD and (
            c.head.status in BAD):
        text = (f"was [{c.base.oracle or '-'}] {', '.join(c.base.behaviours)}; now "
                f"[{c.head.oracle or '-'}] {', '.join(c.head.behaviours)}{where}: "
                f"{c.head.message}")
    return text + (f" (trace {s.trace})" if s.trace else "")


def diff_table(d: Diff):
    """The changes as a rich table, regressions first."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"kvconf diff {d.base.engine} {d.base.version} -> {d.head.engine} "
                  f"{d.head.version}")
    for col in ("change", "case", "base", "head", "finding"):  # a case name never wraps
        table.add_column(col, overflow="fold", no_wrap=col == "case")
    passed = {c.case for c in d.gone_that_passed()}
    rows = ([("[bold red]new failure[/]", c) for c in d.new_failures]
            + [("[bold red]gone[/]" if c.case in passed else "gone", c) for c in d.gone]
            + [("[yellow]finding changed[/]", c) for c in d.finding_changes]
            + [("[yellow]status changed[/]", c) for c in d.status_changes]
            + [("[green]fixed[/]", c) for c in d.fixes]
            + [("new", c) for c in d.new])
    for label, c in rows:
        table.add_row(label, escape(c.case), _show(c.base), _show(c.head), escape(_detail(c)))
    for label, rules, was, now in (
            ("[yellow]no longer judged[/]", d.rules_no_longer_judged, "PASS", NOT_JUDGED),
            ("newly judged", d.rules_newly_judged, NOT_JUDGED, "PASS")):
        if rules:  # one line for them all: the rules, not cases
            table.add_row(label, f"{len(rules)} rules", was, now, escape(", ".join(rules)))
    return table


def diff_summary(d: Diff) -> str:
    counts = (f"{len(d.new_failures)} new failures, {len(d.fixes)} fixes, "
              f"{len(d.status_changes)} other status changes, {len(d.finding_changes)} "
              f"findings changed, {len(d.gone)} cases gone ({len(d.gone_that_passed())} that "
              f"passed), {len(d.new)} new, {d.unchanged} unchanged; rules: "
              f"{len(d.rules_no_longer_judged)} no longer judged, {len(d.rules_newly_judged)} "
              "newly judged")
    return ("REGRESSION: " if d.regression else "no regression: ") + counts
