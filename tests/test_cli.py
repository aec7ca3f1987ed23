"""The ``kvconf`` command line: the main job, replay, schemas, the audit, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.cli import app
from kvconf.conformance.reporting.report import load_report
from kvconf.conformance.trace import load_trace

runner = CliRunner()


def kvconf(*args: str):
    return runner.invoke(app, list(args))


def evicts_pinned(config):
    """A planted engine for the CLI: the reference with PIN-2 broken."""
    from planted import EvictsPinned

    return ReferenceCacheAdapter(config, cache_cls=EvictsPinned)


@pytest.fixture
def planted_engine():
    """Named as module:factory, so the worker processes find it as the CLI does."""
    return f"{__name__}:evicts_pinned"


def test_run_writes_the_report(tmp_path: Path) -> None:
    report = tmp_path / "out" / "report.json"
    r = kvconf("run", "--engine", "reference", "--report", str(report), "--budget", "5",
               "--seed", "3", "--quiet")
    assert r.exit_code == 0, r.output
    rep = load_report(report)
    data = json.loads(report.read_text())
    assert set(data) >= {"run_info", "results", "summary"}
    info = data["run_info"]
    assert info["engine"] == "reference" and info["seed"] == 3 and info["finished"]
    assert info["budget"] == "5 examples"
    for row in data["results"]:
        assert set(row) >= {"case", "status", "behaviours", "message", "duration_s", "trace"}
    assert rep.summary["PASS"] == len(rep.results) > 0
    assert data["summary"]["FAIL"] == 0
    assert "PASS" in r.output  # the closing table


def test_run_fails_and_saves_a_replayable_trace(tmp_path: Path, planted_engine: str) -> None:
    report = tmp_path / "report.json"
    r = kvconf("run", "--engine", planted_engine, "--report", str(report), "--quiet",
               "--case", "pinned-never-evicted", "--case", "fuzz-cache-tight", "--budget", "40")
    assert r.exit_code == 1, r.output
    rep = load_report(report)
    failed = [x for x in rep.results if x.status.value == "FAIL"]
    assert {x.case for x in failed} == {"pinned-never-evicted", "fuzz-cache-tight"}
    for x in failed:
        assert x.trace and x.oracle and x.behaviours
        saved = report.parent / x.trace
        load_trace(saved)  # a valid trace file
        again = kvconf("replay", str(saved), "--engine", planted_engine)
        assert again.exit_code == 1 and "FAIL" in again.output
        clean = kvconf("replay", str(saved), "--engine", "reference")
        assert clean.exit_code == 0, clean.output


@pytest.mark.parametrize("inside", [True, False])
def test_the_table_prints_a_replay_command_that_works_from_here(
        tmp_path: Path, planted_engine: str, monkeypatch, inside: bool) -> None:
    """Each failure's replay command names its trace from the current directory (relative below
    it, absolute elsewhere), not from the report's folder, and runs as printed."""
    import shlex

    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    report = Path("out/report.json") if inside else tmp_path / "elsewhere" / "report.json"
    r = kvconf("run", "--engine", planted_engine, "--report", str(report), "--quiet",
               "--case", "pinned-never-evicted")
    assert r.exit_code == 1, r.output
    trace = ("out/traces/pinned-never-evicted.json" if inside
             else str(tmp_path / "elsewhere" / "traces" / "pinned-never-evicted.json"))
    line = f"replay: kvconf replay {trace} --engine {planted_engine}"
    assert line in r.output.splitlines()
    again = kvconf(*shlex.split(line.removeprefix("replay: kvconf ")))
    assert again.exit_code == 1 and "PIN-2" in again.output, again.output


def test_fuzz_failure_is_shrunk(tmp_path: Path, planted_engine: str) -> None:
    report = tmp_path / "report.json"
    kvconf("run", "--engine", planted_engine, "--report", str(report), "--quiet",
           "--case", "fuzz-cache-tight", "--budget", "60")
    (res,) = load_report(report).results
    assert res.status.value == "FAIL"
    trace = load_trace(report.parent / res.trace)
    assert len(trace.steps) <= 15, f"shrunk trace still has {len(trace.steps)} steps"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("run", "--engine", "nope"), "unknown engine 'nope'"),
        (("run", "--config", "page_size=0"), "config.page_size"),
        (("run", "--config", "colour=blue"), "--config colour: unknown field"),
        (("run", "--config", "page_size"), "expected key=value"),
        (("run", "--budget", "lots"), "--budget 'lots'"),
        (("run", "--profile", "weekly"), "--profile weekly: unknown profile"),
        (("run", "--case", "nope"), "--case nope: unknown case"),
        (("replay", "/does/not/exist.json"), "/does/not/exist.json: cannot read trace"),
        (("replay", "x.json", "--engine", "nope"), "cannot read trace"),
        (("schema", "nope"), "schema 'nope': unknown"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, needle) -> None:
    r = kvconf(*args)
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.output
    assert "Traceback" not in r.output


def test_malformed_trace_names_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(
        '{\n  "format": "kvconf-trace/1",\n  "steps": [\n'
        '    {"op":"insert","tokens":[1,2]},\n'
        '    {"op":"evict","pages":-1}\n  ]\n}\n'
    )
    r = kvconf("replay", str(path))
    assert r.exit_code == 2
    assert f"{path}:5: steps[1].pages" in r.output, r.output
    path.write_text('{"steps": [{"op": "unlock", "step": 0}]}')
    r = kvconf("replay", str(path))
    assert r.exit_code == 2 and "steps[0].step: 0 is not an earlier step" in r.output, r.output


def test_report_path_that_is_a_directory(tmp_path: Path) -> None:
    r = kvconf("run", "--report", str(tmp_path), "--case", "lru-victim-order")
    assert r.exit_code == 2 and "is a directory" in r.output


def test_schemas_are_json_schema() -> None:
    for what, title in (("trace", "Trace"), ("report", "Report")):
        r = kvconf("schema", what)
        assert r.exit_code == 0
        schema = json.loads(r.output)
        assert schema["title"] == title and "properties" in schema


def test_spec_audit_json_shape() -> None:
    r = kvconf("spec", "audit", "--json")
    data = json.loads(r.output)
    assert set(data) >= {"behaviours", "catalog", "gaps"}
    assert data["behaviours"] >= 30
    assert "D248-1" in data["catalog"] and "EVICT-3" in data["catalog"]["D248-1"]
    # Every catalog entry is listed, and each is guarded by at least one behaviour.
    assert {"D162-7", "D243-3", "D381-6"} <= set(data["catalog"])
    assert all(ids for ids in data["catalog"].values()), data["catalog"]
    assert data["gaps"] == [], data["gaps"]
    assert r.exit_code == 0


def test_spec_audit_reports_gaps(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text(
        'import pytest\n\n@pytest.mark.behaviours("PIN-1", "NOPE-9")\ndef test_x():\n    pass\n'
    )
    r = kvconf("spec", "audit", "--json", "--tests", str(tmp_path))
    assert r.exit_code == 1
    gaps = json.loads(r.output)["gaps"]
    assert any("NOPE-9" in g for g in gaps)
    assert any(g == "PIN-2: no test cites it" for g in gaps)
    assert not any(g.startswith("PIN-1:") for g in gaps)


def test_engines_lists_reference() -> None:
    r = kvconf("engines")
    assert r.exit_code == 0 and "reference" in r.output.split()


def test_spec_audit_names_a_test_file_it_cannot_parse(tmp_path: Path) -> None:
    (tmp_path / "test_broken.py").write_text("def test_x(:\n    pass\n")
    r = kvconf("spec", "audit", "--json", "--tests", str(tmp_path))
    assert r.exit_code == 1 and "Traceback" not in r.output
    gaps = json.loads(r.output)["gaps"]
    assert any(g.startswith("test file test_broken.py:1: cannot parse") for g in gaps), gaps


def _no_l3():
    """The reference scheduler declaring no L3 store (a scheduler-level engine factory)."""
    from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter
    from kvconf.conformance.engine.features import Feature

    class NoL3(ReferenceSchedulerAdapter):
        features = ReferenceSchedulerAdapter.features - {Feature.L3_STORE}

    return NoL3


NoL3 = _no_l3()
NoL3.level = "scheduler"


def test_replay_refuses_a_trace_that_plays_a_switch_the_engine_lacks(tmp_path: Path) -> None:
    """A scheduler trace with the L3 store on, replayed on an engine that declares none, is not
    played (it would fail for reasons that say nothing of the engine): NOT_SUPPORTED, exit 2,
    naming the switch. The engine that declares it plays the same trace."""
    from kvconf.conformance.scheduler.trace import SchedConfig, SchedTrace

    trace = SchedTrace(name="l3", config=SchedConfig(l3_store=True, host_pages=8), seed=0,
                       arrivals=[{"at": 0, "rid": "a", "ns": 0, "tokens": [1, 2, 3, 4],
                                  "new_tokens": 1}])
    path = tmp_path / "t.json"
    path.write_text(trace.model_dump_json())
    r = kvconf("replay", str(path), "--engine", "test_cli:NoL3", "--in-process")
    assert r.exit_code == 2, r.output
    assert "NOT_SUPPORTED" in r.output and "l3_store" in r.output
    ok = kvconf("replay", str(path), "--engine", "reference", "--in-process")
    assert ok.exit_code == 0, ok.output


def _no_host():
    from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter
    from kvconf.conformance.engine.features import Feature

    class NoHost(ReferenceSchedulerAdapter):
        features = ReferenceSchedulerAdapter.features - {Feature.HOST_TIER}

    return NoHost


NoHost = _no_host()
NoHost.level = "scheduler"


def test_replay_plays_host_pages_on_an_engine_without_a_host_tier(tmp_path: Path) -> None:
    """Host pages in a trace's configuration are room an engine without a host tier leaves
    unused, as the run path's fixed cases assume (fuzz-scheduler has 32 host pages and runs on
    every scheduler-level engine): replay plays such a trace instead of refusing it."""
    from kvconf.conformance.scheduler.trace import SchedConfig, SchedTrace

    trace = SchedTrace(name="host", config=SchedConfig(host_pages=8), seed=0,
                       arrivals=[{"at": 0, "rid": "a", "ns": 0, "tokens": [1, 2, 3, 4],
                                  "new_tokens": 1}])
    path = tmp_path / "t.json"
    path.write_text(trace.model_dump_json())
    r = kvconf("replay", str(path), "--engine", "test_cli:NoHost", "--in-process")
    assert r.exit_code == 0, r.output
    assert "NOT_SUPPORTED" not in r.output
