"""The worker boundary: engines that exit, abort, crash, hang or raise are judged case by case,
the run goes on, and the report is the same for any number of workers or shards (FAULT-3; spec
chapter faults, "Statuses of a run")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.errors import KitError
from kvconf.conformance.reporting.merge import merge_reports
from kvconf.conformance.reporting.report import CaseResult, Status, UnitResult, load_report
from kvconf.conformance.running.profiles import PROFILES, Budget
from kvconf.conformance.running.runner import all_cases, run_suite, select_cases
from kvconf.conformance.running.units import Shard, combine, parse_shard, plan, split

HERE = Path(__file__).parent
CASES = ["namespace-isolation", "lru-victim-order", "fuzz-cache"]
CI = PROFILES["ci"]


def _run(engine: str, tmp_path: Path, *, cases=CASES, jobs: int = 1, budget: int = 10,
         call_timeout: float = 60.0, shard: Shard | None = None, database=None,
         name: str = "report.json"):
    return run_suite(engine, EngineConfig(), seed_value=0, profile=CI,
                     budget=Budget(examples=budget), report_path=tmp_path / name,
                     cases=select_cases(cases) if cases else None, jobs=jobs,
                     call_timeout=call_timeout, shard=shard, database=database)


def _by_case(report) -> dict[str, CaseResult]:
    return {r.case: r for r in report.results}


def _no_machine_paths(report: Path) -> None:
    """A report names source files relative to where they are imported from: none of this
    machine's folders (the checkout, the virtual environment, the interpreter's) is in it."""
    text = report.read_text()
    assert 'File \\"/' not in text  # an absolute path in a traceback or in stacks
    for folder in {str(Path.cwd()), str(HERE.parent), sys.prefix, sys.base_prefix}:
        assert folder not in text, folder


@pytest.mark.behaviours("FAULT-3")
@pytest.mark.parametrize("engine, signal_name, exit_code", [
    ("ExitsZero", None, 0),  # sys.exit(0) inside insert
    ("ExitsHard", None, 17),  # os._exit(17)
    ("ExitsHardZero", None, 0),  # os._exit(0): a silent exit is never a pass
    ("Aborts", "SIGABRT", None),  # os.abort(), a real signal
    ("Segfaults", "SIGSEGV", None),  # a null dereference through ctypes
])
def test_a_dying_engine_gives_crash_and_the_run_goes_on(tmp_path, engine, signal_name,
                                                       exit_code):
    report = _run(f"faulty_engine:{engine}", tmp_path)
    got = _by_case(report)
    assert set(got) == set(CASES)  # every case still ran
    assert got["lru-victim-order"].status is Status.PASS  # no namespace-1 insert there
    for name in ("namespace-isolation", "fuzz-cache"):
        r = got[name]
        assert r.status is Status.CRASH, (name, r.status, r.message)
        assert r.behaviours == ["FAULT-3"] and r.oracle == "worker"
        assert r.signal == signal_name and r.exit_code == exit_code
        assert "insert of" in (r.output or "")  # the engine's last output
        trace = json.loads((tmp_path / r.trace).read_text())
        ops = [s["op"] for s in trace["steps"]]
        assert ops and ops[-1] in ("insert", "extend")  # up to the step it died in, shrunk
        assert r.steps == len(ops) <= r.found_steps
    if signal_name is not None or engine == "ExitsZero":
        assert 'File "faulty_engine.py"' in got["fuzz-cache"].traceback
    _no_machine_paths(tmp_path / "report.json")
    assert not report.ok


@pytest.mark.behaviours("FAULT-3")
def test_a_silent_engine_gives_timeout_with_its_stacks(tmp_path):
    t0 = time.monotonic()
    report = _run("faulty_engine:Hangs", tmp_path, cases=CASES[:2], call_timeout=1.5)
    got = _by_case(report)
    assert got["lru-victim-order"].status is Status.PASS
    r = got["namespace-isolation"]
    assert r.status is Status.TIMEOUT, r.message
    assert "1.5 s" in r.message and "step" in r.message
    assert "in fault" in r.traceback and 'File "faulty_engine.py"' in r.traceback
    _no_machine_paths(tmp_path / "report.json")
    assert (tmp_path / r.trace).exists()
    assert time.monotonic() - t0 < 30


@pytest.mark.behaviours("FAULT-2")
def test_an_engine_exception_is_a_fail_with_its_traceback(tmp_path):
    report = _run("faulty_engine:Raises", tmp_path, cases=CASES[:2])
    r = _by_case(report)["namespace-isolation"]
    assert r.status is Status.FAIL and "RuntimeError: the engine's own bug" in r.message
    assert 'File "faulty_engine.py"' in r.traceback and "RuntimeError" in r.traceback
    # The kit's own frames by their module's path, wherever the checkout lies.
    assert 'File "kvconf/conformance/' in r.traceback, r.traceback
    _no_machine_paths(tmp_path / "report.json")


def _kvconf(*args: str, cwd: Path = HERE, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvconf.conformance.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, **kw)


@pytest.mark.behaviours("FAULT-3")
def test_exit_codes_and_replay_of_a_crash(tmp_path):
    report = tmp_path / "r.json"
    run = _kvconf("run", "--engine", "faulty_engine:Segfaults", "--profile", "ci", "--quiet",
                  "--case", "namespace-isolation", "--case", "lru-victim-order",
                  "--examples-db", "none", "--report", str(report))
    assert run.returncode == 1, run.stderr
    assert "CRASH" in run.stdout and "SIGSEGV" in run.stdout
    trace = tmp_path / "traces" / "namespace-isolation.json"
    again = _kvconf("replay", str(trace), "--engine", "faulty_engine:Segfaults")
    assert again.returncode == 1 and "CRASH" in again.stdout and "SIGSEGV" in again.stdout
    fine = _kvconf("replay", str(trace), "--engine", "reference")
    assert fine.returncode == 0 and "PASS" in fine.stdout


@pytest.mark.behaviours("FAULT-3")
def test_a_hybrid_engine_that_dies_leaves_a_replayable_trace(tmp_path):
    """The hybrid level records its plays as the cache level does: a worker killed inside a
    hybrid engine leaves the trace up to the step it died in, shrunk, which replays to the same
    crash (and passes on the reference)."""
    cases = ["hybrid-group-hits", "fuzz-hybrid"]
    report = _run("faulty_engine:HybridAborts", tmp_path, cases=cases)
    got = _by_case(report)
    for name in cases:
        r = got[name]
        assert r.status is Status.CRASH, (name, r.status, r.message)
        assert r.signal == "SIGABRT" and "hybrid-level trace" in r.message, r.message
        assert "extends to" in (r.output or "")
        trace = json.loads((tmp_path / r.trace).read_text())
        assert trace["level"] == "hybrid"
        ops = [s["op"] for s in trace["steps"]]
        assert ops and ops[-1] == "extend"  # up to the step it died in, shrunk
        assert r.steps == len(ops) <= r.found_steps
        assert "shrunk in a child process" in r.message
        assert r.findings[0].kind == "extend"
    assert got["fuzz-hybrid"].steps < got["fuzz-hybrid"].found_steps
    trace = tmp_path / got["fuzz-hybrid"].trace
    again = _kvconf("replay", str(trace), "--engine", "faulty_engine:HybridAborts")
    assert again.returncode == 1 and "CRASH" in again.stdout and "SIGABRT" in again.stdout
    fine = _kvconf("replay", str(trace), "--engine", "reference")
    assert fine.returncode == 0 and "PASS" in fine.stdout, fine.stdout + fine.stderr


def _normal(report) -> dict:
    """A report without what legitimately differs between runs: times, worker counts."""
    doc = json.loads(report.model_dump_json())
    for key in ("started", "finished", "jobs", "call_timeout_s", "shard", "merged"):
        doc["run_info"].pop(key)
    for r in doc["results"]:
        r.pop("duration_s")
        for u in r["units"] or []:
            u.pop("duration_s")
    return doc


@pytest.fixture(scope="module")
def one_worker(tmp_path_factory):
    path = tmp_path_factory.mktemp("one")
    return path, _run("reference", path, cases=None, budget=30)


def test_same_seed_same_report_for_any_number_of_workers(one_worker, tmp_path):
    _, one = one_worker
    two = _run("reference", tmp_path, cases=None, budget=30, jobs=2)
    assert _normal(one) == _normal(two)
    assert one.summary[Status.PASS] == len(all_cases())
    assert any(r.units and len(r.units) == 2 for r in one.results)  # units really split


def test_same_seed_same_findings_for_any_number_of_workers(tmp_path):
    cases = ["namespace-isolation", "fuzz-cache", "fuzz-cache-page1", "fuzz-cache-tight"]
    one = _run("faulty_engine:RaisesRarely", tmp_path / "1", cases=cases, budget=60)
    two = _run("faulty_engine:RaisesRarely", tmp_path / "2", cases=cases, budget=60, jobs=2)
    assert _normal(one) == _normal(two)
    fails = [r for r in one.results if r.status is Status.FAIL]
    assert fails
    for r in fails:
        assert (tmp_path / "1" / r.trace).read_text() == (tmp_path / "2" / r.trace).read_text()


def test_shards_merge_into_the_unsharded_report(one_worker, tmp_path):
    whole_dir, whole = one_worker
    paths = []
    for i in (1, 2):
        part = _run("reference", tmp_path / f"s{i}", cases=None, budget=30, shard=Shard(i, 2))
        assert part.run_info.shard == f"{i}/2"
        assert 0 < len(part.results) < len(whole.results) + 1
        paths.append(tmp_path / f"s{i}" / "report.json")
    merged = merge_reports(paths, tmp_path / "merged.json")
    assert _normal(merged) == _normal(whole)
    with pytest.raises(KitError, match="shard 2/2 missing"):
        merge_reports(paths[:1])
    with pytest.raises(KitError, match="not a shard report"):
        merge_reports([whole_dir / "report.json"])


def test_units_split_plan_and_shards():
    assert [u.budget.examples for u in split("f", True, Budget(examples=60), 1)] == [20, 20, 20]
    assert len(split("s", False, Budget(examples=60), 4)) == 1
    timed = split("f", True, Budget(seconds=12), 4)
    assert [u.budget.seconds for u in timed] == [3.0] * 4
    cases = [(c.name, c.fuzz) for c in all_cases()]
    whole = plan(cases, Budget(examples=300), 1)
    parts = [plan(cases, Budget(examples=300), 1, Shard(i, 3)) for i in (1, 2, 3)]
    key = lambda u: (u.case, u.index)  # noqa: E731
    assert sorted((u for p in parts for u in p), key=key) == sorted(whole, key=key)
    assert all(len({u.case for u in p if u.of > 1}) > 3 for p in parts)  # every shard fuzzes
    assert parse_shard("2/3") == Shard(2, 3)
    for bad in ("0/2", "3/2", "x", "1/0"):
        with pytest.raises(KitError, match="--shard"):
            parse_shard(bad)


def _unit_result(i: int, status: Status, examples: int = 5) -> CaseResult:
    return CaseResult(case="f", status=status, behaviours=[], duration_s=1.0, message=f"u{i}",
                      units=[UnitResult(index=i, of=4, status=status, examples=examples,
                                        duration_s=1.0, ops={"match": 1})])


def test_a_case_is_its_units_up_to_the_first_that_ends_it():
    # A CRASH is a finding: it does not end the case, the first bad unit gives its status.
    results = [_unit_result(3, Status.FAIL), _unit_result(0, Status.PASS),
               _unit_result(1, Status.CRASH), _unit_result(2, Status.PASS)]
    r = combine(results, "doc")
    assert r.status is Status.CRASH and r.message == "u1"  # unit 3's FAIL came later in index
    assert [u.index for u in r.units] == [0, 1, 2, 3] and r.examples == 20
    # An ERROR or a TIMEOUT ends it: the units past it are not part of the case.
    results[2] = _unit_result(1, Status.TIMEOUT)
    r = combine(results, "doc")
    assert r.status is Status.TIMEOUT and r.message == "u1"
    assert [u.index for u in r.units] == [0, 1] and r.examples == 10 and r.duration_s == 2.0
    ok = combine([_unit_result(i, Status.PASS) for i in (1, 0)], "doc")
    assert ok.status is Status.PASS and ok.message == "doc; ops played: {'match': 2}"


@pytest.mark.behaviours("FAULT-3")
def test_sigterm_writes_an_interrupted_report(tmp_path):
    report = tmp_path / "r.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvconf.conformance.cli", "run", "--quiet", "--budget", "100000",
         "--examples-db", "none", "--report", str(report)],
        cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (
            report.exists() and load_report(report).results):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "interrupted (SIGTERM)" in err
    doc = load_report(report)
    assert doc.run_info.interrupted and doc.run_info.not_run and doc.results
    assert not [p for p in os.listdir("/tmp") if p.startswith("kvconf-workers-")
                and str(proc.pid) in p]


def test_a_failure_in_the_example_database_replays_first(tmp_path):
    db = str(tmp_path / "examples")
    first = _run("faulty_engine:RaisesRarely", tmp_path / "a", cases=["fuzz-cache"],
                 budget=100, database=db)
    r1 = first.results[0]
    assert r1.status is Status.FAIL and r1.examples > 1
    assert any((tmp_path / "examples").rglob("*"))
    second = _run("faulty_engine:RaisesRarely", tmp_path / "b", cases=["fuzz-cache"],
                  budget=100, database=db)
    assert second.results[0].status is Status.FAIL
    # The stored walk seed plays first, before anything new; then the case searches on for
    # the rest of its budget (findings).
    assert second.results[0].findings[0].example == 1 < r1.findings[0].example


def test_bad_worker_options_are_one_line_errors(tmp_path):
    for args, want in ((("--jobs", "-1"), "--jobs -1"), (("--shard", "3/2"), "--shard"),
                       (("--call-timeout", "0"), "--call-timeout"),
                       (("--examples-db", "nope.module:db"), "--examples-db")):
        run = _kvconf("run", "--case", "lru-victim-order", "--quiet", *args,
                      "--report", str(tmp_path / "r.json"))
        assert run.returncode == 2 and want in run.stderr, (args, run.stderr)
        assert "Traceback" not in run.stderr
    merge = _kvconf("merge", str(tmp_path / "missing.json"), "--report",
                    str(tmp_path / "m.json"))
    assert merge.returncode == 2 and "cannot read report" in merge.stderr


def test_an_interrupted_shrink_keeps_the_best_trace_so_far():
    from kvconf.conformance.oracles import Violation
    from kvconf.conformance.running import shrink as shrinking
    from kvconf.conformance.trace import InsertStep, Trace

    trace = Trace(config=EngineConfig(page_size=1),
                  steps=[InsertStep(ns=0, tokens=[i]) for i in range(8)])
    found = Violation("o", ("PIN-2",), "seen")
    tries = 0

    def replay(t):
        nonlocal tries
        tries += 1
        if tries == 3:
            raise KeyboardInterrupt
        if len(t.steps) >= 2:  # the rule breaks while two steps are left
            raise Violation("o", ("PIN-2",), "still")

    best, v = shrinking.shrink(trace, found, replay, max_replays=100)
    try:
        assert shrinking.interrupted() and tries == 3
        assert 0 < len(best.steps) < len(trace.steps) and v.message == "still"
    finally:
        shrinking.reset_interrupted()


def test_source_paths_are_named_from_their_import_root():
    """Packages by their dotted name, other files from the sys.path entry or site-packages
    they lie in; a path under none is left as it is."""
    from kvconf.conformance.reporting import report
    from kvconf.conformance.reporting.source_paths import relative_paths

    here = Path(report.__file__).resolve()
    text = (f'  File "{here}", line 3, in f\n'
            '/opt/env/lib/python3.11/site-packages/sglang/srt/x.py:7: UserWarning: w\n'
            '  File "/nowhere/y.py", line 1 in g')
    assert relative_paths(text) == (
        '  File "kvconf/conformance/reporting/report.py", line 3, in f\n'
        'sglang/srt/x.py:7: UserWarning: w\n'
        '  File "/nowhere/y.py", line 1 in g')
