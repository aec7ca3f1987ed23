"""What a run shows where no one watches a terminal (a CI log): a line as each case starts and
ends, progress notes of the fuzz units, tables with every name whole; and what an interrupted
run leaves: a partial report, marked interrupted, and no worker left running."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table

from kvconf.conformance.cli import _print_table
from kvconf.conformance.reporting.report import load_report
from kvconf.conformance.running import progress
from kvconf.conformance.running.profiles import Budget

HERE = Path(__file__).parent
CASES = ["sched-window-from-model-config", "duplicate-insert-frees-caller-pages",
         "lru-victim-order", "fuzz-cache", "fuzz-scheduler"]
START = re.compile(r"^\[(\d+)/(\d+)\] start (\S+)$")
END = re.compile(r"^\[(\d+)/(\d+)\] (PASS|FAIL|ERROR|CRASH|TIMEOUT|NOT_SUPPORTED) +(\S+)  "
                 r"\d+\.\ds(  .*)?$")


def _kvconf(*args: str, env: dict | None = None, cwd: Path = HERE) -> subprocess.CompletedProcess:
    """``kvconf`` with its output piped, as a CI job runs it (no terminal)."""
    return subprocess.run([sys.executable, "-m", "kvconf.conformance.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def _events(stderr: str) -> list[tuple[str, int, str]]:
    """The start and end lines: (start or the status, place, case)."""
    got = []
    for line in stderr.splitlines():
        if m := START.match(line):
            got.append(("start", int(m[1]), m[3]))
        elif m := END.match(line):
            got.append((m[3], int(m[1]), m[4]))
    return got


def _case_args(cases: list[str]) -> list[str]:
    return [a for c in cases for a in ("--case", c)]


def _normal(path: Path) -> dict:
    """A report without its times (the one thing that differs between two runs)."""
    doc = json.loads(path.read_text())
    for key in ("started", "finished", "jobs", "call_timeout_s"):
        doc["run_info"].pop(key)
    for r in doc["results"]:
        r.pop("duration_s")
        for u in r["units"] or []:
            u.pop("duration_s")
    return doc


@pytest.mark.parametrize("jobs", [1, 2])
def test_piped_run_prints_a_line_as_each_case_starts_and_ends(tmp_path: Path, jobs: int):
    args = ["run", "--profile", "ci", "--budget", "30", "--examples-db", "none",
            "--jobs", str(jobs), *_case_args(CASES)]
    run = _kvconf(*args, "--report", str(tmp_path / "r.json"))
    assert run.returncode == 0, run.stderr
    events = _events(run.stderr)
    starts = [(k, c) for what, k, c in events if what == "start"]
    ends = [(k, c) for what, k, c in events if what != "start"]
    places = list(enumerate(CASES, 1))
    assert starts == places  # every case starts once, in suite order, numbered k/N
    assert sorted(ends) == places and {what for what, _, _ in events} == {"start", "PASS"}
    assert all(f"/{len(CASES)}]" in line for line in run.stderr.splitlines()
               if line.startswith("["))
    for k, case in places:  # each ends after it starts
        assert events.index(("start", k, case)) < events.index(("PASS", k, case))
    if jobs == 1:  # one worker: one case at a time
        assert events == [e for k, c in places for e in (("start", k, c), ("PASS", k, c))]
    # Display only: the report is the one a quiet run writes.
    quiet = _kvconf(*args, "--quiet", "--report", str(tmp_path / "q.json"))
    assert quiet.returncode == 0 and not _events(quiet.stderr), quiet.stderr
    assert _normal(tmp_path / "r.json") == _normal(tmp_path / "q.json")


@pytest.mark.parametrize("jobs, budget, units", [(2, "2s", 2), (0, "1s", 1)])
def test_fuzz_units_report_their_progress_while_they_run(tmp_path: Path, jobs: int,
                                                         budget: str, units: int):
    run = _kvconf("run", "--case", "fuzz-scheduler", "--budget", budget, "--jobs", str(jobs),
                  "--examples-db", "none", "--report", str(tmp_path / "r.json"),
                  env={progress.EVERY_ENV: "0.2"})
    assert run.returncode == 0, run.stderr
    unit = r"fuzz-scheduler\[\d/2\]" if units == 2 else "fuzz-scheduler"
    note = re.compile(rf"^\[1/1\] {unit}: \d[\d ]* examples, \d[\d ]* steps, "
                      r"\d+(\.\d)?s of 1\.0s$")
    notes = [line for line in run.stderr.splitlines() if note.match(line)]
    assert len(notes) >= 2, run.stderr
    lines = run.stderr.splitlines()
    assert lines.index("[1/1] start fuzz-scheduler") < lines.index(notes[0])
    assert lines.index(notes[-1]) < next(i for i, ln in enumerate(lines) if END.match(ln))


def test_a_hung_case_shows_in_the_log_until_it_times_out(tmp_path: Path):
    run = _kvconf("run", "--engine", "faulty_engine:Hangs", "--case", "lru-victim-order",
                  "--case", "namespace-isolation", "--call-timeout", "1", "--examples-db",
                  "none", "--report", str(tmp_path / "r.json"))
    assert run.returncode == 1, run.stderr
    assert _events(run.stderr) == [("start", 1, "lru-victim-order"),
                                   ("PASS", 1, "lru-victim-order"),
                                   ("start", 2, "namespace-isolation"),
                                   ("TIMEOUT", 2, "namespace-isolation")]
    assert "did not answer for 1 s" in run.stderr


def test_progress_notes_read_as_one_line():
    doc = {"case": "fuzz-scheduler", "unit": "fuzz-scheduler", "phase": "fuzz",
           "examples": 120, "steps": 2310, "elapsed_s": 30.2, "of_examples": None,
           "of_seconds": 120.0}
    assert progress.describe(doc) == "fuzz-scheduler: 120 examples, 2 310 steps, 30s of 120s"
    doc.update(unit="fuzz-cache[2/3]", of_examples=25, of_seconds=None, examples=12,
               elapsed_s=1.25)
    assert progress.describe(doc) == "fuzz-cache[2/3]: 12 of 25 examples, 2 310 steps, 1.2s"
    doc.update(phase="shrink", replays=40)
    assert progress.describe(doc) == "fuzz-cache[2/3]: shrinking a failure, 40 replays, 1.2s"


def test_a_meter_without_a_sink_sends_nothing_and_with_one_sends_at_its_pace(monkeypatch):
    got: list[dict] = []
    monkeypatch.setenv(progress.EVERY_ENV, "0.05")
    meter = progress.Meter("fuzz-cache", "fuzz-cache[1/2]", Budget(examples=25))
    meter.tick(1, 3)  # no sink: nothing to send to
    with progress.sink(got.append):
        meter.tick(2, 6)  # not yet due
        time.sleep(0.06)
        meter.tick(3, 9)
        meter.tick(4, 12)  # just sent: not due again
    meter.tick(5, 15)
    assert [(d["examples"], d["steps"], d["unit"]) for d in got] == [(3, 9, "fuzz-cache[1/2]")]
    monkeypatch.setenv(progress.EVERY_ENV, "soon")
    assert progress.every_s() == progress.EVERY_S


# ---------------------------------------------------------------------- tables
def host_less(config):
    """The reference cache declaring no host tier and no scheduler level: an engine the
    host-tier and scheduler cases cannot judge (module:factory, for ``run_suite``)."""
    from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
    from kvconf.conformance.engine.features import Feature

    engine = ReferenceCacheAdapter(config)
    engine.features = engine.features - {Feature.HOST_TIER, Feature.SCHEDULER}
    return engine


def test_piped_not_supported_cases_are_one_line_per_missing_feature(capsys):
    """Cases an engine cannot run settle before any case starts: piped, they are one line per
    missing feature, with no rule list and no start line each (issue 37's 60-rule lines)."""
    from kvconf.conformance.cli import _case_callbacks, _Lines
    from kvconf.conformance.engine.config import EngineConfig
    from kvconf.conformance.running.profiles import get_profile
    from kvconf.conformance.running.runner import run_suite, select_cases

    names = ["writeback-demote-loadback", "lru-victim-order", "writeback-keeps-host-parent",
             "sched-retract-and-recover"]
    display = _Lines(len(names))
    run_suite(f"{__name__}:host_less", EngineConfig(), seed_value=0, profile=get_profile("ci"),
              budget=Budget(examples=1), report_path=None, cases=select_cases(names),
              **_case_callbacks(display))
    display.close()
    lines = capsys.readouterr().err.splitlines()
    assert lines[:3] == [
        "NOT_SUPPORTED, needs host_tier: 2 cases (writeback-demote-loadback, "
        "writeback-keeps-host-parent)",
        "NOT_SUPPORTED, needs scheduler: 1 case (sched-retract-and-recover)",
        "[1/1] start lru-victim-order",  # numbered among the cases that run
    ]
    assert len(lines) == 4 and END.match(lines[3]) and "PASS" in lines[3]


def test_a_long_group_lists_its_first_cases():
    names = [f"c{i}" for i in range(9)]
    assert progress.unsupported_line("needs host_tier", names) == (
        "NOT_SUPPORTED, needs host_tier: 9 cases (c0, c1, c2, c3, c4, c5, ...)")
    assert progress.unsupported_key("engine lacks host_tier, l3_store; no L3 here") == (
        "needs host_tier, l3_store")
    assert progress.unsupported_key("engine declares x, which makes what the case checks "
                                    "moot") == ("engine declares x, which makes what the case "
                                                "checks moot")


def test_piped_tables_keep_every_name_whole(tmp_path: Path):
    run = _kvconf("run", "--quiet", "--profile", "ci", "--examples-db", "none",
                  *_case_args(CASES[:2]), "--report", str(tmp_path / "r.json"),
                  env={"COLUMNS": "50"})
    assert run.returncode == 0, run.stderr
    assert "…" not in run.stdout
    rows = [ln for ln in run.stdout.splitlines() if ln.startswith("│ ")]
    assert [ln.split()[1] for ln in rows if ln.split()[1] != "│"] == CASES[:2]
    diff = _kvconf("diff", str(tmp_path / "r.json"), str(tmp_path / "r.json"),
                   env={"COLUMNS": "50"})
    assert diff.returncode == 0 and "…" not in diff.stdout


def test_a_table_fits_the_terminal_and_wraps_the_other_columns():
    names = ["sched-window-from-model-config", "duplicate-insert-frees-caller-pages"]

    def table() -> Table:
        t = Table()
        t.add_column("case", no_wrap=True)
        t.add_column("behaviours / message", overflow="fold")
        for n in names:
            t.add_row(n, "PLAN-8, TREE-2, LIVE-1, EVICT-4, EVICT-6, DET-1 " * 2)
        return t

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    piped, tty = io.StringIO(), Tty()
    _print_table(table(), Console(file=piped, width=40, color_system=None))
    _print_table(table(), Console(file=tty, width=60, color_system=None))
    for f in (piped, tty):
        text = f.getvalue()
        assert "…" not in text and all(f" {n} " in text for n in names)
    # Piped, past the console's 40 columns as the names need; on a terminal, within its 60,
    # the behaviours wrapped onto more lines instead.
    assert max(len(line) for line in piped.getvalue().splitlines()) > 40
    assert max(len(line) for line in tty.getvalue().splitlines()) <= 60
    assert tty.getvalue().count("EVICT-4") == 4


# ---------------------------------------------------------------------- interrupts
def _children(pid: int) -> list[int]:
    """The processes ``pid`` started (Linux /proc)."""
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(entry))
    return kids


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended


def _sigint_as_from_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt_when_started(cmd: list[str], report: Path, sig: int, cwd: Path,
                            env: dict | None = None):
    """Start ``cmd``, wait until its report holds a result, send ``sig``; its output, exit
    code, and the worker processes it had. The command starts with SIGINT as a terminal gives
    it: a suite run as a background job of a non-interactive shell ignores SIGINT, and a
    process started with it ignored keeps ignoring it, so Ctrl-C would never reach it."""
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, preexec_fn=_sigint_as_from_a_terminal)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (
            report.exists() and load_report(report).results):
        time.sleep(0.1)
    workers = _children(proc.pid)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err, workers


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interrupted_run_keeps_a_partial_report_and_no_worker(tmp_path: Path, sig: int,
                                                                 code: int):
    report = tmp_path / "r.json"
    rc, _, err, workers = _interrupt_when_started(
        [sys.executable, "-m", "kvconf.conformance.cli", "run", "--jobs", "2", "--budget", "100000",
         "--examples-db", "none", "--report", str(report)], report, sig, HERE)
    name = signal.Signals(sig).name
    assert rc == code, err
    doc = load_report(report)  # valid JSON, every field in place
    assert doc.run_info.interrupted and doc.results and doc.run_info.not_run
    assert not set(doc.run_info.not_run) & {r.case for r in doc.results}
    assert (f"interrupted ({name}): {len(doc.results)} cases finished, "
            f"{len(doc.run_info.not_run)} did not run") in err
    assert len(workers) == 2 and not [w for w in workers if _running(w)]
    assert not list(tmp_path.glob(".r.json.*.tmp"))  # atomic writes leave no half file


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_an_interrupted_pytest_session_keeps_its_report_and_no_worker(tmp_path: Path):
    report = tmp_path / "r.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    rc, out, err, workers = _interrupt_when_started(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--kvconf-engine",
         "reference", "--kvconf-jobs", "2", "--kvconf-budget", "100000",
         "--kvconf-examples-db", "none", "--kvconf-report", str(report)],
        report, signal.SIGTERM, tmp_path, env)
    assert rc == pytest.ExitCode.INTERRUPTED, out + err
    doc = load_report(report)
    assert doc.run_info.interrupted and doc.results and doc.run_info.not_run
    from kvconf.conformance.running.runner import all_cases

    assert len(doc.results) + len(doc.run_info.not_run) == len(all_cases())
    assert len(workers) == 2 and not [w for w in workers if _running(w)]


def test_the_plugin_refuses_xdist_in_one_line(tmp_path: Path):
    from types import SimpleNamespace

    from kvconf.conformance.pytest_plugin import distributed

    def config(**options):
        return SimpleNamespace(getoption=lambda name, default=None: options.get(name, default))

    assert distributed(config(dist="load", tx=["popen", "popen"]))
    assert not distributed(config(dist="no", tx=[])) and not distributed(config())
    worker = config()
    worker.workerinput = {}
    assert distributed(worker)
    pytest.importorskip("xdist")
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2",
                        "--kvconf-engine", "reference"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == pytest.ExitCode.USAGE_ERROR, r.stdout + r.stderr
    (line,) = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert "does not support pytest-xdist" in line and "--kvconf-jobs" in line


def test_an_interrupt_keeps_every_unsettled_case_with_a_finding(tmp_path: Path):
    """After an interruption each case not yet settled whose units made a finding is settled
    with it, however many there are (settling one must not upset the walk over the rest)."""
    from kvconf.conformance.engine.config import EngineConfig
    from kvconf.conformance.reporting.report import CaseResult, Status, UnitResult
    from kvconf.conformance.running.profiles import get_profile, parse_budget
    from kvconf.conformance.running.runner import Campaign, select_cases, start_report
    from kvconf.conformance.running.units import Unit

    profile = get_profile("ci")
    budget = parse_budget("4", profile)
    cases = select_cases(["fuzz-cache", "fuzz-cache-tight"])
    units = [Unit(c.name, i, 2, budget) for c in cases for i in range(2)]
    report = start_report("reference", EngineConfig(), "", frozenset(), seed_value=0,
                          profile=profile, budget=budget)
    campaign = Campaign(cases, units, report, tmp_path / "r.json")
    for c in cases:  # the first unit failed, the second never came back
        campaign.add(units[0 if c is cases[0] else 2], CaseResult(
            case=c.name, status=Status.FAIL, behaviours=["TREE-2"], message="found",
            duration_s=0.1,
            units=[UnitResult(index=0, of=2, status=Status.FAIL, duration_s=0.1)]))
    assert campaign.partial and not campaign.settled
    campaign.settle_found()
    assert sorted(campaign.settled) == sorted(c.name for c in cases) and not campaign.partial
    assert all(r.status is Status.FAIL for r in load_report(tmp_path / "r.json").results)


def test_an_interrupt_a_library_wrapped_is_still_an_interrupt():
    """pydantic wraps a KeyboardInterrupt raised in its callbacks; the kit unwraps it, so an
    interrupted unit is never reported as the engine's ERROR."""
    from pydantic import BaseModel, field_serializer

    from kvconf.conformance.running.signals import interrupt_inside

    class Model(BaseModel):
        x: int = 1

        @field_serializer("x")
        def _x(self, v: int) -> int:
            raise KeyboardInterrupt

    with pytest.raises(Exception) as got:
        Model().model_dump_json()
    assert interrupt_inside(got.value)
    assert not interrupt_inside(ValueError("KeyboardInterrupt is only a word here"))
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("while stopping") from None
    except RuntimeError as e:
        assert interrupt_inside(e)  # raised while handling one: __context__ keeps it
