"""Expectation files: an engine's known gaps, so everything else still gets a clean verdict.

A file (TOML) names the engine and its known failures, each with the case, the status the case
is known to end in, a reason and a link-shaped reference (an issue, a pull request):

    engine = "tokenspeed"

    [[known]]
    case = "fuzz-scheduler-l3"
    status = "NOT_SUPPORTED"
    reason = "PrefetchOp / BackUpOp are not mapped by the adapter yet"
    reference = "https://github.com/example/tokenspeed/issues/12"

A run compared with it says, per case, whether the result was expected, a regression (worse
than expected: a case that should pass failed) or an improvement (a known failure now passes);
any difference, either way, fails the run, so a fixed gap gets its line removed.

An entry may name one finding of a case instead of the whole case, by its signature (spec
chapter faults, "Findings and their signatures"; the report lists each finding's):

    [[known]]
    case = "fuzz-scheduler"
    signature = "faults/HOST-4/workload"
    reason = "failed writebacks are treated as done"
    reference = "https://github.com/example/tokenspeed/issues/40"

A crash is a finding too, named by its signature like any other (the process oracle, FAULT-3,
the kind of step it died in and how the process ended):

    [[known]]
    case = "fuzz-scheduler"
    signature = "worker/FAULT-3/workload/SIGSEGV"
    reason = "the page table is freed while a writeback still reads it"
    reference = "https://github.com/example/tokenspeed/issues/41"

Such an entry's status is FAIL or CRASH, and may be left out (it is not judged: a case's status is
its first finding's, whichever that is). A case with such entries is as expected when it ended
FAIL or CRASH and every finding it made is named; a finding the file does not name is a
regression, named in the result's ``unexpected``, even beside known ones: a known defect, a known
crash included, no longer hides a new one. A case that ended ERROR or TIMEOUT is a regression.
A named finding the run did not make this time is no difference (a search within a budget need
not meet every defect every run), but a case that passes is an improvement, unless every entry
of the case says ``may_pass = true``: a finding the search meets at some budgets only (a fuzz
case at ``--profile ci`` ends before it, at ``default`` it meets it), so one file holds at every
profile. A whole-case entry
(no signature) is judged as before, on the status alone, and cannot be mixed with signature
entries for the same case.

A NOT_APPLICABLE case is always as expected, listed or not: the run's config, not the engine,
kept it from running, so it neither shows a known gap fixed nor a new one, and its line stays for
the runs it applies to. For the same reason a file cannot list a case as NOT_APPLICABLE.
"""

from __future__ import annotations

import re
import tomllib
from enum import Enum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from kvconf.conformance.errors import KitError, read_input
from kvconf.conformance.reporting.report import Report, Status

FINDING_STATUSES = (Status.FAIL, Status.CRASH)  # the statuses of a case that made findings
LINK = re.compile(r"^(https?://\S+|[\w.-]+/[\w.-]+#\d+)$")


class Known(BaseModel):
    model_config = ConfigDict(extra="forbid")

    case: str
    status: Status = Status.FAIL  # required for a whole-case entry (checked on loading)
    signature: str | None = None  # one finding of the case, not the whole case
    # A finding a search meets at some budgets only (a fuzz case at --profile ci may end before
    # it): the case passing is then no improvement, so one file holds at every profile.
    may_pass: bool = False
    reason: str
    reference: str

    @field_validator("reason")
    @classmethod
    def _reason(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must say why")
        return v

    @field_validator("reference")
    @classmethod
    def _reference(cls, v: str) -> str:
        if not LINK.match(v):
            raise ValueError("must be a link (https://...) or owner/repo#N")
        return v

    @field_validator("status")
    @classmethod
    def _status(cls, v: Status) -> Status:
        if v is Status.PASS:
            raise ValueError("a known failure cannot be PASS")
        if v is Status.NOT_APPLICABLE:
            raise ValueError("NOT_APPLICABLE is decided by the run's config, not the engine: "
                             "there is nothing to expect")
        return v


class Expectations(BaseModel):
    model_config = ConfigDict(extra="forbid")

    engine: str
    known: list[Known] = []

    def by_case(self) -> dict[str, Known]:
        """The whole-case entries."""
        return {k.case: k for k in self.known if k.signature is None}

    def signatures(self) -> dict[str, dict[str, Known]]:
        """The finding entries: case -> signature -> entry."""
        out: dict[str, dict[str, Known]] = {}
        for k in self.known:
            if k.signature is not None:
                out.setdefault(k.case, {})[k.signature] = k
        return out


class Verdict(str, Enum):
    EXPECTED = "expected"  # as the file says (or PASS / NOT_SUPPORTED for an unlisted case,
    # or NOT_APPLICABLE for any case)
    REGRESSION = "regression"  # worse than expected
    IMPROVEMENT = "improvement"  # a known failure that no longer fails that way


def _toml_line(text: str, loc: tuple) -> int | None:
    """Line of ``known[i].field`` or a top-level ``field`` in an expectation file."""
    lines = text.splitlines()
    start, end = 0, len(lines)
    if len(loc) >= 2 and loc[0] == "known" and isinstance(loc[1], int):
        heads = [n for n, line in enumerate(lines) if re.match(r"\s*\[\[\s*known\s*\]\]", line)]
        if loc[1] >= len(heads):
            return None
        start = heads[loc[1]]
        end = next((n for n in range(start + 1, len(lines))
                    if lines[n].lstrip().startswith("[")), len(lines))
        key = loc[2] if len(loc) > 2 else None
        if key is None:
            return start + 1
    else:
        key = loc[0] if loc else None
    for n in range(start, end):
        if key is not None and re.match(rf"\s*{re.escape(str(key))}\s*=", lines[n]):
            return n + 1
    return start + 1 if start else None


def load_expectations(path: Path) -> Expectations:
    """Read and check an expectation file; every failure is one line naming the file, the
    line and the field."""
    text = read_input(path, "expectations")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise KitError(f"{path}: invalid TOML: {e}") from None
    try:
        exp = Expectations.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        loc = tuple(first["loc"])
        where = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in loc).lstrip(".")
        line = _toml_line(text, loc)
        place = f"{path}:{line}" if line else str(path)
        raise KitError(f"{place}: {where}: {first['msg'].removeprefix('Value error, ')}") from None
    seen: set[tuple[str, str | None]] = set()
    kinds: dict[str, bool] = {}  # case -> named by signature entries
    for i, k in enumerate(exp.known):
        if k.signature is None and "status" not in data["known"][i]:
            line = _toml_line(text, ("known", i))
            raise KitError(f"{path}:{line}: known[{i}].status: a whole-case entry (no "
                           "signature) must name the status the case is known to end in")
        if k.signature is not None and k.status not in FINDING_STATUSES:
            line = _toml_line(text, ("known", i, "status"))
            raise KitError(f"{path}:{line}: known[{i}].status: an entry naming a signature "
                           "is a known finding, so its status is FAIL or CRASH (or left out), "
                           f"not {k.status.value}")
        if (k.case, k.signature) in seen:
            line = _toml_line(text, ("known", i, "case"))
            what = k.case if k.signature is None else f"{k.case} {k.signature}"
            raise KitError(f"{path}:{line}: known[{i}].case: {what} is listed twice")
        if kinds.setdefault(k.case, k.signature is not None) != (k.signature is not None):
            line = _toml_line(text, ("known", i, "case"))
            raise KitError(f"{path}:{line}: known[{i}].case: {k.case} has both a whole-case "
                           "entry and entries naming signatures; keep one kind")
        if k.may_pass and k.signature is None:
            line = _toml_line(text, ("known", i, "may_pass"))
            raise KitError(f"{path}:{line}: known[{i}].may_pass: only an entry naming a "
                           "signature may pass (a finding a search meets at some budgets); "
                           "a whole-case entry states the status the case ends in")
        seen.add((k.case, k.signature))
    return exp


def check_cases(exp: Expectations, path: Path, engine: str, cases: list[str]) -> None:
    """Before a run: the file is for this engine and names only cases the kit has, so a typo
    stops the run at once (exit 2) instead of after it."""
    from kvconf.conformance.running.runner import all_cases

    if exp.engine != engine:
        raise KitError(f"{path}: engine: the file is for {exp.engine}, the run is of {engine}")
    names = {c.name for c in all_cases()} | set(cases)
    text = path.read_text(encoding="utf-8")
    for i, k in enumerate(exp.known):
        if k.case not in names:
            line = _toml_line(text, ("known", i, "case"))
            raise KitError(f"{path}:{line}: known[{i}].case: {k.case} is not a case of the kit")


def judge(status: Status, known: Known | None) -> Verdict:
    """One case's verdict: ``status`` against its known failure (None: the case is not listed,
    so it must pass or be NOT_SUPPORTED). NOT_APPLICABLE is expected either way: the case did
    not run, so it says nothing about the known failure."""
    if status is Status.NOT_APPLICABLE:
        return Verdict.EXPECTED
    if known is None:
        ok = status in (Status.PASS, Status.NOT_SUPPORTED)
        return Verdict.EXPECTED if ok else Verdict.REGRESSION
    if status is known.status:
        return Verdict.EXPECTED
    return Verdict.IMPROVEMENT if status is Status.PASS else Verdict.REGRESSION


def judge_findings(status: Status, findings: list[str],
                   known: dict[str, Known]) -> tuple[Verdict, list[str]]:
    """A case named by signature entries: its verdict, and the signatures of its findings the
    entries do not name (its regressions). A FAIL or CRASH with every finding named is
    expected; a PASS is an improvement unless every entry of the case may pass (a finding the
    search meets at some budgets only); any other status (ERROR, TIMEOUT, ...) is not a
    finding the file knows."""
    if status is Status.NOT_APPLICABLE:
        return Verdict.EXPECTED, []
    if status is Status.PASS:
        sometimes = all(k.may_pass for k in known.values())
        return (Verdict.EXPECTED if sometimes else Verdict.IMPROVEMENT), []
    if status not in FINDING_STATUSES:
        return Verdict.REGRESSION, []
    new = [f for f in findings if f not in known]
    return (Verdict.REGRESSION if new else Verdict.EXPECTED), new


def compare(report: Report, exp: Expectations, path: Path,
            selected: list[str] | None = None, partial: bool = False) -> dict[str, list[str]]:
    """Stamp every result with its verdict; returns the cases per verdict (for the summary).
    With ``selected`` (a ``--case`` subset) the entries for other cases are ignored; otherwise
    a known failure naming a case the run does not have is an error of the file, unless the
    run is ``partial`` (pytest chose which cases to run)."""
    if exp.engine != report.run_info.engine:
        raise KitError(f"{path}: engine: the file is for {exp.engine}, the run is of "
                       f"{report.run_info.engine}")
    known = exp.by_case()
    named = exp.signatures()
    if selected is not None:
        known = {c: k for c, k in known.items() if c in set(selected)}
        named = {c: k for c, k in named.items() if c in set(selected)}
    ran = {r.case for r in report.results}
    missing = sorted((set(known) | set(named)) - ran)
    if (missing and not partial and not report.run_info.interrupted
            and report.run_info.shard is None):
        selected = len(ran)
        raise KitError(f"{path}: known case {missing[0]} did not run (the run had {selected} "
                       "cases; a --case selection must include every listed case)")
    out: dict[str, list[str]] = {v.value: [] for v in Verdict}
    for r in report.results:
        if r.case in named:
            sigs = named[r.case]
            findings = [f.signature for f in r.findings]
            if not findings and r.status in FINDING_STATUSES:  # an older report, no findings
                findings = [f"(a {'crash' if r.status is Status.CRASH else 'failure'} "
                            "without a signature)"]
            verdict, new = judge_findings(r.status, findings, sigs)
            r.unexpected = new or None
            hit = [sigs[f] for f in findings if f in sigs]
            if hit and r.status is not Status.NOT_APPLICABLE:
                r.known = "; ".join(f"{k.signature}: {k.reason} ({k.reference})" for k in hit)
        else:
            k = known.get(r.case)
            verdict = judge(r.status, k)
            if k is not None and r.status is not Status.NOT_APPLICABLE:
                r.known = f"{k.reason} ({k.reference})"
        r.expectation = verdict.value
        out[verdict.value].append(r.case)
    report.run_info.expectations = {"file": str(path), **out}
    return out
