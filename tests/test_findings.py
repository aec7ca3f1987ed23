"""One finding must not mask the rest (issue 21, class 10).

A fuzz case keeps searching after a failure for the rest of its budget; each distinct finding
(by signature: oracle, rules, kind of step, the engine's error) is shrunk and reported with its
own trace; an expectation file may name a finding's signature, so a known defect no longer hides
a new one; the findings are the same with one worker or two.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.reporting.compliance import build, load_inputs
from kvconf.conformance.reporting.expectations import compare, load_expectations
from kvconf.conformance.reporting.junit import junit_xml
from kvconf.conformance.reporting.report import (
    FORMAT,
    CaseResult,
    Finding,
    Status,
    UnitResult,
    load_report,
)
from kvconf.conformance.running.findings import signature, trace_name
from kvconf.conformance.running.profiles import PROFILES, Budget
from kvconf.conformance.running.runner import play, run_suite, select_cases
from kvconf.conformance.running.units import combine
from kvconf.conformance.trace import load_trace
from kvconf.conformance.violation import Violation

ENGINE = "two_defects:TwoDefects"  # EvictsPinned planted, and inserts of six pages raise


def _run(tmp_path: Path, jobs: int = 0, name: str = "r.json"):
    return run_suite(ENGINE, EngineConfig(), seed_value=0, profile=PROFILES["ci"],
                     budget=Budget(examples=60), report_path=tmp_path / name,
                     cases=select_cases(["fuzz-cache"]), jobs=jobs)


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    out = tmp_path_factory.mktemp("two")
    return out, _run(out)


def _rules(r: CaseResult) -> set[tuple[str, ...]]:
    return {tuple(sorted(f.behaviours)) for f in r.findings}


@pytest.mark.behaviours("FAULT-2", "EVICT-1")
def test_two_independent_defects_are_two_findings_of_one_case(two):
    out, report = two
    r = report.results[0]
    assert r.status is Status.FAIL
    assert {("FAULT-2",), ("EVICT-1", "PIN-2")} <= _rules(r)
    sigs = [f.signature for f in r.findings]
    assert len(sigs) == len(set(sigs)) >= 2 and r.repeats
    # The case's status, message and trace stay its first finding's (back-compatible).
    first = r.findings[0]
    assert (r.oracle, r.message) == (first.oracle, first.message)
    assert load_trace(out / r.trace) == load_trace(out / first.trace)
    # Each finding has its own shrunk trace, named by its signature, that still breaks the same
    # rule at the same kind of step.
    for f in r.findings:
        assert f.trace == f"traces/{trace_name('fuzz-cache', f.signature)}.json"
        trace = load_trace(out / f.trace)
        assert f.steps == len(trace.steps) <= f.found_steps
        with pytest.raises(Violation) as got:
            play(lambda c: __import__("two_defects").TwoDefects(c), trace)
        assert signature(got.value, trace) == f.signature
    assert json.loads((out / "r.json").read_text())["format"] == FORMAT


def test_a_signature_names_oracle_rules_kind_of_step_and_the_engines_error(two):
    _, report = two
    by = {tuple(sorted(f.behaviours)): f for f in report.results[0].findings}
    raised = by[("FAULT-2",)]
    assert raised.signature.startswith("faults/FAULT-2/")
    assert raised.signature.endswith("/RuntimeError@insert") and raised.error
    assert raised.kind in ("insert", "extend")
    pinned = by[("EVICT-1", "PIN-2")]
    assert pinned.signature == f"{pinned.oracle}/EVICT-1+PIN-2/{pinned.kind}"
    assert pinned.error is None


def test_an_expectation_naming_one_finding_still_reports_the_other(two, tmp_path):
    _, report = two
    r = report.results[0]
    known = [f for f in r.findings if f.behaviours == ["FAULT-2"]]
    entries = "".join(f'[[known]]\ncase = "fuzz-cache"\nsignature = "{f.signature}"\n'
                      'reason = "long inserts raise"\nreference = "example/engine#1"\n\n'
                      for f in known)
    path = tmp_path / "known.toml"
    path.write_text(f'engine = "{ENGINE}"\n\n{entries}')
    out = compare(report.model_copy(deep=True), load_expectations(path), path)
    assert out["regression"] == ["fuzz-cache"]
    judged = report.model_copy(deep=True)
    compare(judged, load_expectations(path), path)
    new = judged.results[0].unexpected
    assert new and all("EVICT-1+PIN-2" in s or "FAULT-2" not in s for s in new)
    assert any("EVICT-1+PIN-2" in s for s in new)
    assert "EVICT-1+PIN-2" in junit_xml(judged, tmp_path)
    # Naming every finding: as expected. A whole-case entry still works as before.
    every = "".join(f'[[known]]\ncase = "fuzz-cache"\nsignature = "{f.signature}"\n'
                    'reason = "known"\nreference = "example/engine#1"\n\n' for f in r.findings)
    path.write_text(f'engine = "{ENGINE}"\n\n{every}')
    assert compare(report.model_copy(deep=True), load_expectations(path),
                   path)["expected"] == ["fuzz-cache"]
    path.write_text(f'engine = "{ENGINE}"\n\n[[known]]\ncase = "fuzz-cache"\nstatus = "FAIL"\n'
                    'reason = "known"\nreference = "example/engine#1"\n')
    assert compare(report.model_copy(deep=True), load_expectations(path),
                   path)["expected"] == ["fuzz-cache"]


@pytest.mark.parametrize("text, where", [
    ('[[known]]\ncase = "fuzz-cache"\nreason = "r"\nreference = "a/b#1"\n', "status"),
    ('[[known]]\ncase = "fuzz-cache"\nsignature = "x/A-1/insert"\nstatus = "ERROR"\n'
     'reason = "r"\nreference = "a/b#1"\n', "FAIL"),
    ('[[known]]\ncase = "fuzz-cache"\nsignature = "x/A-1/insert"\nreason = "r"\n'
     'reference = "a/b#1"\n[[known]]\ncase = "fuzz-cache"\nstatus = "FAIL"\nreason = "r"\n'
     'reference = "a/b#1"\n', "keep one kind"),
    ('[[known]]\ncase = "fuzz-cache"\nstatus = "FAIL"\nmay_pass = true\nreason = "r"\n'
     'reference = "a/b#1"\n', "only an entry naming a signature may pass"),
])
def test_signature_entries_are_checked_on_loading(tmp_path, text, where):
    from kvconf.conformance.errors import KitError

    path = tmp_path / "bad.toml"
    path.write_text(f'engine = "e"\n\n{text}')
    with pytest.raises(KitError, match=where):
        load_expectations(path)


def test_a_passing_case_is_expected_only_when_every_entry_may_pass(tmp_path):
    """A finding a search meets at some budgets only: one file holds at every profile."""
    from kvconf.conformance.reporting.expectations import Verdict, judge_findings

    path = tmp_path / "known.toml"
    entry = ('[[known]]\ncase = "fuzz-cache"\nsignature = "{}"\n{}reason = "r"\n'
             'reference = "a/b#1"\n\n')
    may = "may_pass = true\n"
    path.write_text('engine = "e"\n\n' + entry.format("x/A-1/insert", may)
                    + entry.format("x/B-1/insert", may))
    sigs = load_expectations(path).signatures()["fuzz-cache"]
    assert judge_findings(Status.PASS, [], sigs) == (Verdict.EXPECTED, [])
    # It still names what it knows when the search meets it, and nothing else.
    assert judge_findings(Status.FAIL, ["x/A-1/insert"], sigs) == (Verdict.EXPECTED, [])
    assert judge_findings(Status.FAIL, ["x/C-1/insert"], sigs) == (Verdict.REGRESSION,
                                                                    ["x/C-1/insert"])
    path.write_text('engine = "e"\n\n' + entry.format("x/A-1/insert", may)
                    + entry.format("x/B-1/insert", ""))
    sigs = load_expectations(path).signatures()["fuzz-cache"]
    assert judge_findings(Status.PASS, [], sigs) == (Verdict.IMPROVEMENT, [])


def test_the_findings_are_the_same_with_one_worker_or_two(two, tmp_path):
    out, report = two
    want = [(f.signature, (out / f.trace).read_text()) for f in report.results[0].findings]
    for jobs in (1, 2):
        got = _run(tmp_path / str(jobs), jobs=jobs).results[0]
        assert [(f.signature, (tmp_path / str(jobs) / f.trace).read_text())
                for f in got.findings] == want


def test_units_merge_their_findings_by_signature():
    def unit(index: int, status: Status, *sigs: str) -> CaseResult:
        return CaseResult(case="c", status=status, behaviours=[], duration_s=0.0,
                          message=sigs[0] if sigs else "", repeats=1 if sigs else None,
                          findings=[Finding(signature=s, unit=index) for s in sigs],
                          units=[UnitResult(index=index, of=3, status=status)])

    merged = combine([unit(2, Status.FAIL, "a", "c"), unit(0, Status.PASS),
                      unit(1, Status.FAIL, "b", "a")], "passed")
    assert merged.status is Status.FAIL and merged.message == "b"  # the first failing unit's
    assert [(f.signature, f.unit) for f in merged.findings] == [("b", 1), ("a", 1), ("c", 2)]
    assert merged.repeats == 3  # two skipped inside units, one across them
    # A unit that ends the case (ERROR, TIMEOUT) still cuts off the ones after it.
    for ending in (Status.ERROR, Status.TIMEOUT):
        cut = combine([unit(0, Status.FAIL, "a"), unit(1, ending), unit(2, Status.FAIL, "z")],
                      "passed")
        assert [f.signature for f in cut.findings] == ["a"] and len(cut.units) == 2
    # A CRASH does not: it is a finding (its signature names how the process ended), and the
    # units after it count; the case's status is its first bad unit's.
    crash = "worker/FAULT-3/insert/SIGSEGV"
    on = combine([unit(2, Status.FAIL, "z"), unit(0, Status.PASS), unit(1, Status.CRASH, crash)],
                 "passed")
    assert on.status is Status.CRASH and len(on.units) == 3
    assert [(f.signature, f.unit) for f in on.findings] == [(crash, 1), ("z", 2)]


def test_reports_list_every_finding_and_older_formats_load(two, tmp_path):
    out, report = two
    inputs = load_inputs([out / "r.json"])
    md, html = build(inputs, tmp_path / "site")
    text = md.read_text()
    for f in report.results[0].findings:
        assert f.signature in text and f.signature in html.read_text()
    old = json.loads((out / "r.json").read_text())
    old["format"] = "kvconf-report/3"
    for r in old["results"]:
        for key in ("findings", "repeats", "unexpected"):
            r.pop(key, None)
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert load_report(tmp_path / "old.json").results[0].findings == []


@pytest.mark.behaviours("REQ-4", "REQ-5")
def test_a_scheduler_defect_every_workload_meets_first_no_longer_hides_another(tmp_path):
    """TokenSpeed's radix-era revisions: failed writebacks treated as done fail nearly every
    workload first; the refused Abort behind them must be a finding of the same run."""
    from functools import partial

    from two_defects import FailedWritebackAndAbortRaises

    from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter
    from kvconf.conformance.engine.features import Feature
    from kvconf.conformance.running.runner import RunContext, run_case

    profile = PROFILES["ci"]
    ctx = RunContext("t", None, EngineConfig(), 0, profile, Budget(examples=60), tmp_path,
                     sched_factory=partial(ReferenceSchedulerAdapter,
                                           scheduler_cls=FailedWritebackAndAbortRaises),
                     features=frozenset({Feature.SCHEDULER}))
    r = run_case(ctx, select_cases(["fuzz-scheduler"])[0])
    assert r.status is Status.FAIL
    assert {("REQ-5",), ("FAULT-2", "REQ-4")} <= _rules(r)
    for f in r.findings:
        assert (tmp_path / f.trace).is_file() and f.kind == "workload"
    # The kill matrix still stops at the first finding.
    ctx.first_only = True
    assert len(run_case(ctx, select_cases(["fuzz-scheduler"])[0]).findings) == 1


def test_shards_merge_to_the_same_findings_with_their_traces(two, tmp_path):
    from kvconf.conformance.reporting.merge import merge_reports
    from kvconf.conformance.running.units import Shard

    out, report = two
    paths = []
    for i in (1, 2):
        part = run_suite(ENGINE, EngineConfig(), seed_value=0, profile=PROFILES["ci"],
                         budget=Budget(examples=60), report_path=tmp_path / f"s{i}" / "r.json",
                         cases=select_cases(["fuzz-cache"]), jobs=0, shard=Shard(i, 2))
        assert part.results
        paths.append(tmp_path / f"s{i}" / "r.json")
    merged = merge_reports(paths, tmp_path / "m" / "r.json").results[0]
    assert [f.signature for f in merged.findings] == [
        f.signature for f in report.results[0].findings]
    for f in merged.findings:
        assert (tmp_path / "m" / f.trace).read_text() == (out / f.trace).read_text()


CRASHY = "two_defects:CrashesAndEvictsPinned"  # SIGSEGV on long inserts, EvictsPinned planted


def _crash_run(tmp_path: Path, seed: int, jobs: int):
    return run_suite(CRASHY, EngineConfig(), seed_value=seed, profile=PROFILES["ci"],
                     budget=Budget(examples=100), report_path=tmp_path / "r.json",
                     cases=select_cases(["fuzz-cache"]), jobs=jobs).results[0]


@pytest.mark.behaviours("FAULT-3", "EVICT-1")
@pytest.mark.parametrize("seed, first", [(4, Status.FAIL), (0, Status.CRASH)])
def test_a_crash_is_a_finding_and_does_not_end_its_case(tmp_path, seed, first):
    """A known crash no longer hides the rest: the units after the crashing one run and count,
    the crash is a finding with its own signature and shrunk trace, and the case's status is
    its first bad unit's, whichever of the two comes first."""
    one = _crash_run(tmp_path / "1", seed, jobs=1)
    assert one.status is first
    assert {u.status for u in one.units} == {Status.FAIL, Status.CRASH}
    assert len(one.units) == 4  # every unit, those after a crash too
    sigs = [f.signature for f in one.findings]
    crashes = [f for f in one.findings if f.oracle == "worker"]
    assert crashes and all(f.signature.startswith("worker/FAULT-3/") for f in crashes)
    assert all(f.signature.endswith("/SIGSEGV") and f.error == "SIGSEGV" for f in crashes)
    assert any(s.startswith("eviction/EVICT-1+PIN-2/") for s in sigs)
    assert one.findings[0].oracle == ("worker" if first is Status.CRASH else "eviction")
    for f in crashes:  # the crash's shrunk trace, named by its signature, still crashes
        assert f.trace == f"traces/{trace_name('fuzz-cache', f.signature)}.json"
        trace = json.loads((tmp_path / "1" / f.trace).read_text())
        assert f.steps == len(trace["steps"]) <= f.found_steps
        assert f.unit is not None and one.units[f.unit].status is Status.CRASH
    # One worker or two: the same findings, the same traces.
    two = _crash_run(tmp_path / "2", seed, jobs=2)
    assert [f.model_dump() for f in two.findings] == [f.model_dump() for f in one.findings]
    for f in one.findings:
        assert (tmp_path / "2" / f.trace).read_text() == (tmp_path / "1" / f.trace).read_text()
    # An expectation file naming every signature: as expected; naming all but one: that one
    # is a regression (a known crash does not hide a FAIL, nor a known FAIL a crash).
    report = load_report(tmp_path / "1" / "r.json")
    path = tmp_path / "known.toml"

    def entries(named: list[str], status: str = "") -> str:
        return f'engine = "{CRASHY}"\n\n' + "".join(
            f'[[known]]\ncase = "fuzz-cache"\nsignature = "{s}"\n{status}'
            'reason = "known"\nreference = "example/engine#1"\n\n' for s in named)

    path.write_text(entries(sigs))
    assert compare(report.model_copy(deep=True), load_expectations(path),
                   path)["expected"] == ["fuzz-cache"]
    path.write_text(entries(sigs, 'status = "CRASH"\n'))  # a CRASH status is accepted too
    assert compare(report.model_copy(deep=True), load_expectations(path),
                   path)["expected"] == ["fuzz-cache"]
    for left in (crashes[0].signature, next(s for s in sigs if s.startswith("eviction/"))):
        path.write_text(entries([s for s in sigs if s != left]))
        judged = report.model_copy(deep=True)
        assert compare(judged, load_expectations(path), path)["regression"] == ["fuzz-cache"]
        assert judged.results[0].unexpected == [left]


def test_shards_merge_a_crash_and_a_fail_into_the_unsharded_findings(tmp_path):
    from kvconf.conformance.reporting.merge import merge_reports
    from kvconf.conformance.running.units import Shard

    whole = _crash_run(tmp_path / "w", 0, jobs=1)
    paths = []
    for i in (1, 2):
        run_suite(CRASHY, EngineConfig(), seed_value=0, profile=PROFILES["ci"],
                  budget=Budget(examples=100), report_path=tmp_path / f"s{i}" / "r.json",
                  cases=select_cases(["fuzz-cache"]), jobs=1, shard=Shard(i, 2))
        paths.append(tmp_path / f"s{i}" / "r.json")
    merged = merge_reports(paths, tmp_path / "m" / "r.json").results[0]
    assert merged.status is whole.status is Status.CRASH
    assert [u.index for u in merged.units] == [u.index for u in whole.units]
    assert [f.model_dump() for f in merged.findings] == [f.model_dump() for f in whole.findings]
    for f in merged.findings:
        assert (tmp_path / "m" / f.trace).read_text() == (tmp_path / "w" / f.trace).read_text()
    assert (tmp_path / "m" / merged.trace).read_text() == (
        tmp_path / "w" / whole.trace).read_text()
