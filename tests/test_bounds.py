"""The bounds of a run (spec chapter faults, "The bounds of a run"): never more workers than
units of work, a memory limit per worker that turns a leak into a finding of its own (FAULT-5),
configurations far dearer than the default said or refused, and a run cut short by a failed
write says so in its report."""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvconf.conformance.cli import app
from kvconf.conformance.engine.config import EngineConfig, cost_warning
from kvconf.conformance.errors import KitError, WriteFailed
from kvconf.conformance.reporting import report as report_module
from kvconf.conformance.reporting.report import Status, load_report
from kvconf.conformance.running import bounds, pool
from kvconf.conformance.running.bounds import MiB, parse_memory
from kvconf.conformance.running.profiles import PROFILES, Budget
from kvconf.conformance.running.runner import run_suite, select_cases
from kvconf.conformance.running.units import plan

CI = PROFILES["ci"]
TWO = ["fuzz-cache", "lru-victim-order"]


class CountingPool(pool.Pool):
    """The pool, remembering each instance and how many files its folder held at its close."""

    made: list[CountingPool] = []

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.files_at_close: int | None = None
        CountingPool.made.append(self)

    def close(self) -> None:
        self.files_at_close = sum(1 for _ in self.tmp.iterdir())
        super().close()


@pytest.fixture
def counting(monkeypatch):
    CountingPool.made = []
    monkeypatch.setattr(pool, "Pool", CountingPool)
    return CountingPool.made


def _run(engine: str, tmp_path: Path, cases=TWO, **kw):
    return run_suite(engine, EngineConfig(), seed_value=0, profile=CI,
                     budget=Budget(examples=CI.examples), report_path=tmp_path / "r.json",
                     cases=select_cases(cases), database=None, **kw)


def test_a_thousand_jobs_start_no_more_workers_than_units(counting, tmp_path):
    units = plan(((c.name, c.fuzz) for c in select_cases(TWO)),
                 Budget(examples=CI.examples), 1000)
    assert len(units) == 4  # fuzz-cache's 60 examples are three units
    report = _run("reference", tmp_path, jobs=1000)
    assert [r.status for r in report.results] == [Status.PASS, Status.PASS]
    (p,) = counting
    assert p.spawned <= len(units), p.spawned
    assert p.files_at_close <= 2 * len(units)
    assert not p.tmp.exists()  # the pool's folder goes with it


def test_one_case_starts_one_worker_per_unit_at_most(counting, tmp_path):
    report = _run("reference", tmp_path, cases=["fuzz-cache"], jobs=8)
    assert report.results[0].status is Status.PASS
    assert counting[0].spawned <= 3


def test_cases_the_engine_cannot_run_keep_no_worker(counting, tmp_path):
    """The pool starts at most one worker per planned unit before the engine says what it
    offers, and retires those past the units it can run: a scheduler-level case on a
    cache-only engine is NOT_SUPPORTED and needs none."""
    cases = ["lru-victim-order", "fuzz-scheduler"]
    report = _run("faulty_engine:Raises", tmp_path, cases=cases, jobs=8)
    got = {r.case: r.status for r in report.results}
    assert got == {"lru-victim-order": Status.PASS, "fuzz-scheduler": Status.NOT_SUPPORTED}
    p = counting[0]
    assert p.spawned <= len(plan(((c.name, c.fuzz) for c in select_cases(cases)),
                                 Budget(examples=CI.examples), 8))
    assert p.files_at_close <= 2  # the one worker that ran; the retired ones left nothing


def test_a_crashing_engine_leaves_no_file_per_dead_worker(counting, tmp_path):
    report = _run("faulty_engine:Segfaults", tmp_path, cases=["fuzz-cache"],
                  jobs=1)
    assert report.results[0].status is Status.CRASH
    p = counting[0]
    assert p.spawned >= 3  # a worker per unit, each replaced, and a shrinker
    assert p.files_at_close <= 4, p.files_at_close  # the live worker's and one more pair


def test_jobs_above_the_cpus_are_said(monkeypatch):
    monkeypatch.setattr(bounds.os, "cpu_count", lambda: 4)
    assert bounds.jobs_warning(4) is None
    line = bounds.jobs_warning(1000)
    assert "--jobs 1000" in line and "4 CPUs" in line and "\n" not in line


@pytest.mark.behaviours("FAULT-5")
def test_a_leaking_engine_is_a_memory_finding_and_the_machine_keeps_its_memory(tmp_path):
    """An engine that keeps 50 MB per match meets a 700 MiB limit within a few matches: a FAIL
    of FAULT-5 naming the call and the limit, the run ends promptly, and no worker held more
    than the limit."""
    t0 = time.monotonic()
    report = _run("leaky_engine:Leaks", tmp_path, jobs=1, worker_memory=700 * MiB)
    assert time.monotonic() - t0 < 120
    r = {x.case: x for x in report.results}["fuzz-cache"]
    assert r.status is Status.FAIL and r.behaviours == ["FAULT-5"], r.message
    assert r.message.startswith("match raised MemoryError under the worker memory limit of "
                                "700 MiB"), r.message
    assert any(f.signature == "worker-memory/FAULT-5/match/MemoryError@match"
               for f in r.findings)
    assert report.run_info.worker_memory == "700 MiB"
    # The largest child this test process waited for: a worker, held under the limit.
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 < 800 * MiB


@pytest.mark.behaviours("FAULT-5")
def test_a_worker_out_of_memory_outside_an_engine_call_is_a_crash_naming_the_limit(tmp_path):
    report = _run("leaky_engine:FillsQuietly", tmp_path, cases=["lru-victim-order"], jobs=1,
                  worker_memory=700 * MiB)
    (r,) = report.results
    assert r.status is Status.CRASH and r.behaviours == ["FAULT-5"], r.message
    assert r.oracle == "worker-memory"
    assert "ran out of memory under the worker memory limit of 700 MiB" in r.message
    assert r.findings[0].signature.endswith("/memory-limit")


def test_worker_memory_sizes():
    assert parse_memory("4GiB") == 4 << 30 and parse_memory("700MiB") == 700 * MiB
    assert parse_memory("512M") == 512 * MiB and parse_memory("0") == 0
    assert parse_memory(None) == bounds.DEFAULT_WORKER_MEMORY
    for bad in ("lots", "-1G", "10MiB"):
        with pytest.raises(KitError, match="--worker-memory"):
            parse_memory(bad)


def test_a_costly_config_warns_and_past_the_hard_bound_needs_force():
    assert cost_warning(EngineConfig()) is None
    line = cost_warning(EngineConfig(device_pages=50_000))
    assert "device_pages=50000" in line and "default 24" in line
    with pytest.raises(KitError, match=r"device_pages=1000000.*--force"):
        cost_warning(EngineConfig(device_pages=1_000_000))
    assert "host_pages=1000000" in cost_warning(EngineConfig(host_pages=1_000_000), force=True)
    r = CliRunner().invoke(app, ["run", "--case", "lru-victim-order", "--quiet",
                                 "--config", "device_pages=1000000", "--report", "/dev/null"])
    assert r.exit_code == 2 and "--force" in r.output and "Traceback" not in r.output


def _failing_writes(monkeypatch, at: int) -> None:
    """The report's writer fails with a full disk at its ``at``-th call, and only then."""
    real, calls = report_module.write_atomic, []

    def write(path, text):
        calls.append(path)
        if len(calls) == at:
            raise WriteFailed(path, "No space left on device")
        return real(path, text)

    monkeypatch.setattr(report_module, "write_atomic", write)


def test_a_failed_write_cuts_the_run_and_its_report_says_so(monkeypatch, tmp_path):
    _failing_writes(monkeypatch, at=2)
    with pytest.raises(KitError, match=r"No space left on device.*cut short.*interrupted"):
        _run("reference", tmp_path, cases=["lru-victim-order", "namespace-isolation",
                                           "fuzz-cache"], jobs=1)
    doc = load_report(tmp_path / "r.json")
    assert doc.run_info.interrupted
    assert doc.run_info.cut == f"write failed: {tmp_path / 'r.json'}: No space left on device"
    assert doc.run_info.not_run and "lru-victim-order" not in doc.run_info.not_run
    assert not doc.ok


def test_a_failed_write_is_one_line_and_exit_2(monkeypatch, tmp_path):
    _failing_writes(monkeypatch, at=1)
    r = CliRunner().invoke(app, ["run", "--case", "lru-victim-order", "--case",
                                 "namespace-isolation", "--quiet", "--examples-db", "none",
                                 "--report", str(tmp_path / "r.json")])
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert "No space left on device" in lines[0] and "cut short" in lines[0]
    assert load_report(tmp_path / "r.json").run_info.cut


def test_write_failed_is_raised_for_an_os_error(monkeypatch, tmp_path):
    from kvconf.conformance import trace

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(trace.tempfile, "mkstemp", full)
    with pytest.raises(WriteFailed) as e:
        trace.write_atomic(tmp_path / "x.json", "{}")
    assert e.value.why == "No space left on device" and e.value.path == str(tmp_path / "x.json")


@pytest.mark.behaviours("FAULT-2")
def test_a_memory_error_far_below_the_limit_is_the_engines_own_exception(monkeypatch):
    """Only a MemoryError at the limit is FAULT-5: one raised with the limit far away (an
    engine's own signal, say), or with no limit at all, is FAULT-2 like any exception."""
    from kvconf.conformance.faults import raised

    monkeypatch.setattr(bounds, "hit", False)
    monkeypatch.setattr(bounds, "limit", 0)
    assert raised("alloc", MemoryError("pool full")).behaviours == ("FAULT-2",)
    monkeypatch.setattr(bounds, "limit", 64 << 30)  # this process holds far less than half
    assert raised("alloc", MemoryError("pool full")).behaviours == ("FAULT-2",)
    monkeypatch.setattr(bounds, "data_size", lambda: 40 << 30)
    v = raised("alloc", MemoryError())
    assert v.behaviours == ("FAULT-5",) and "limit of 64 GiB" in v.message and bounds.hit


def test_a_trace_that_cannot_be_saved_cuts_the_run_too(monkeypatch, tmp_path):
    def full(path, text):
        raise WriteFailed(path, "No space left on device")

    monkeypatch.setattr(pool, "write_atomic", full)  # where the parent saves failing traces
    with pytest.raises(KitError, match="cut short"):
        _run("faulty_engine:Raises", tmp_path, cases=["namespace-isolation",
                                                       "lru-victim-order"], jobs=1)
    info = load_report(tmp_path / "r.json").run_info
    assert info.interrupted and info.cut.startswith(f"write failed: {tmp_path / 'traces'}")
    assert "namespace-isolation" in info.not_run


def test_the_folder_of_a_run_killed_outright_goes_at_the_next_run(tmp_path, monkeypatch):
    monkeypatch.setattr(pool.tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f"{pool.TMP_PREFIX}{dead.pid}-abc"
    live = tmp_path / f"{pool.TMP_PREFIX}{os.getpid()}-def"
    for folder in (stale, live):
        folder.mkdir()
        (folder / "worker-1.log").write_text("")
    pool.remove_stale_folders()
    assert not stale.exists() and live.exists()
