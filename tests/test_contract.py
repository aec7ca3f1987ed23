"""The adapter contract (issue 37): checked up front in one line per problem, methods of
undeclared features never called, answers of the wrong shape named as findings of the call that
gave them, and the protocol reference generated from the protocols' docstrings.

``dict_engine`` is a new user's first engine, written from the docs alone: it declares no
capability and has none of their methods."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dict_engine import DictCache  # tests/ is on the path, as for a user's engine
from typer.testing import CliRunner

from kvconf.conformance.cache import answers
from kvconf.conformance.cli import app
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.contract_doc import render, write
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.protocol import CopyOp, Inserted, Match
from kvconf.conformance.violation import Violation

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent


def kvconf(*args: str):
    return runner.invoke(app, list(args))


class _Without:
    """The dict engine, seen without some of its attributes (as an engine that never had them)."""

    hidden: tuple[str, ...] = ()

    def __init__(self, config: EngineConfig) -> None:
        self._engine = DictCache(config)

    def __getattr__(self, name: str):
        if name in type(self).hidden:
            raise AttributeError(name)
        return getattr(self._engine, name)


class _NoVersion(_Without):
    hidden = ("version",)


def no_version(config: EngineConfig) -> _NoVersion:
    return _NoVersion(config)


class _Everything:
    """Four problems at once: features of str, another page size, an alloc that takes no
    count, and kv_events declared without drain_events."""

    name, version, page_size = "muddled", "0", 3
    features = frozenset({"page_eviction", Feature.KV_EVENTS})

    def __init__(self, config: EngineConfig) -> None:
        self._engine = DictCache(config)

    def __getattr__(self, name: str):
        if name == "drain_events":
            raise AttributeError(name)
        return getattr(self._engine, name)

    def alloc(self) -> list[int]:
        return []

    def block_hash(self, parent, namespace, tokens) -> int:
        return 0


def muddled(config: EngineConfig) -> _Everything:
    return _Everything(config)


class _StrPages(DictCache):
    def alloc(self, n: int):
        got = super().alloc(n)
        return None if got is None else [str(p) for p in got]


def str_pages(config: EngineConfig) -> _StrPages:
    return _StrPages(config)


# -- the contract, up front --------------------------------------------------------------------


def test_an_engine_that_meets_the_contract_is_told_what_it_can_run() -> None:
    r = kvconf("check-engine", "dict_engine:factory")
    assert r.exit_code == 0, r.output
    assert "dict_engine:factory meets the adapter contract" in r.output
    assert "cache level: dict-cache 0.1.0, page_size 2" in r.output
    assert "declares: cache, page_eviction" in r.output
    runs = next(line for line in r.output.splitlines() if line.startswith("can run"))
    assert "fuzz-cache" in runs and "lru-victim-order" in runs
    assert "writeback" not in runs  # a host-tier scenario: needs what it does not declare
    assert "not judged: NOT_SUPPORTED, needs host_tier" in r.output


def test_a_missing_version_is_one_line_in_check_engine_and_in_a_run(tmp_path: Path) -> None:
    r = kvconf("check-engine", f"{__name__}:no_version")
    assert r.exit_code == 1, r.output
    assert r.output.splitlines() == [
        f"{__name__}:no_version: version: missing (a str naming the engine's version, e.g. "
        "'1.2.0' (the report's run_info.version))"]
    r = kvconf("run", "--engine", f"{__name__}:no_version", "--case", "lru-victim-order",
               "--quiet", "--report", str(tmp_path / "r.json"))  # in a worker, as always
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert lines == [f"kvconf: error: {__name__}:no_version: version: missing (a str naming "
                     "the engine's version, e.g. '1.2.0' (the report's run_info.version))"]


def test_every_problem_is_a_line_of_its_own() -> None:
    r = kvconf("check-engine", f"{__name__}:muddled")
    assert r.exit_code == 1, r.output
    lines = r.output.splitlines()
    assert len(lines) == 4, r.output
    assert all(x.startswith(f"{__name__}:muddled: ") for x in lines)
    assert "features: 'page_eviction' is a str, not a kvconf.Feature (write " \
           "Feature.PAGE_EVICTION)" in lines[0]
    assert "page_size: 3, but the engine was built with page_size 2" in lines[1]
    assert "alloc: takes 0 arguments, the kit passes 1 (alloc(n: int) -> list[int] | None)" \
        in lines[2]
    assert "drain_events: missing, needed with kv_events" in lines[3]


def test_the_pytest_plugin_says_the_same_line(tmp_path: Path) -> None:
    (tmp_path / "test_own.py").write_text("def test_own():\n    assert True\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent),
                                                       os.environ.get("PYTHONPATH", "")]))
    env.pop("PYTEST_ADDOPTS", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                        "--kvconf-engine", "test_contract:no_version", "--kvconf-jobs", "0",
                        "--kvconf-case", "lru-victim-order"], cwd=tmp_path, env=env,
                       capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1 and "1 failed, 1 passed" in r.stdout, r.stdout + r.stderr
    assert ("the engine could not be opened: test_contract:no_version: version: missing (a str "
            "naming the engine's version") in r.stdout
    assert "Traceback" not in r.stdout


def test_an_unknown_engine_is_bad_input() -> None:
    r = kvconf("check-engine", "no_such_module:factory")
    assert r.exit_code == 2 and "cannot import 'no_such_module'" in r.output


def test_every_bundled_engine_meets_its_own_contract() -> None:
    r = kvconf("check-engine", "reference")
    assert r.exit_code == 0, r.output
    for level in ("cache", "scheduler", "hybrid"):
        assert f"{level} level: reference" in r.output


# -- methods of undeclared features are never called -----------------------------------------


def test_an_engine_without_the_methods_of_undeclared_features_runs_every_cache_case(
        tmp_path: Path) -> None:
    """The dict engine has no start_writeback, start_loadback, finish_transfer, drain_events,
    snapshot, block_hash, counters or unload: a call of any would be an ERROR."""
    for name in ("start_writeback", "drain_events", "snapshot", "block_hash", "unload"):
        assert not hasattr(DictCache, name)
    report = tmp_path / "r.json"
    r = kvconf("run", "--engine", "dict_engine:factory", "--jobs", "0", "--profile", "ci",
               "--budget", "8", "--quiet", "--report", str(report))
    assert r.exit_code == 0, r.output
    results = json.loads(report.read_text())["results"]
    ran = {x["case"]: x for x in results if x["status"] != "NOT_SUPPORTED"}
    assert {x["status"] for x in ran.values()} == {"PASS"}, ran
    assert {"fuzz-cache", "fuzz-cache-tight", "lru-victim-order"} <= set(ran)
    assert "'writeback'" in ran["fuzz-cache"]["message"]  # the walk's transfers, declined unasked


class _BareScheduler:
    """The reference scheduler declaring nothing, without any method a feature asks for."""

    features = frozenset()

    def __init__(self, config) -> None:
        from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter

        self._engine = ReferenceSchedulerAdapter(config)

    def __getattr__(self, name: str):
        if name in ("drain_events", "snapshot", "counters", "model_window", "block_hash"):
            raise AttributeError(name)
        return getattr(self._engine, name)


def bare_scheduler(config) -> _BareScheduler:
    return _BareScheduler(config)


bare_scheduler.level = "scheduler"


def test_a_scheduler_without_the_methods_of_undeclared_features_runs(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    r = kvconf("run", "--engine", f"{__name__}:bare_scheduler", "--case", "fuzz-scheduler",
               "--case", "sched-mid-flight-reuse", "--jobs", "0", "--budget", "3", "--quiet",
               "--report", str(report))
    assert r.exit_code == 0, r.output
    assert {x["status"] for x in json.loads(report.read_text())["results"]} == {"PASS"}


# -- answers of the wrong shape (FAULT-4) -----------------------------------------------------


@pytest.mark.behaviours("FAULT-4")
def test_an_alloc_of_strings_is_a_finding_of_alloc_naming_the_value(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    r = kvconf("run", "--engine", f"{__name__}:str_pages", "--case", "lru-victim-order",
               "--jobs", "0", "--quiet", "--report", str(report))
    assert r.exit_code == 1, r.output
    (res,) = json.loads(report.read_text())["results"]
    assert res["status"] == "FAIL" and res["behaviours"] == ["FAULT-4"], res
    assert res["message"].startswith("alloc(2) returned ['0', '1'] (list); the protocol")
    assert "TypeError" not in res["message"] and res["step"] == 0
    trace = tmp_path / res["trace"]  # its replay holds the engine to the contract first too
    r = kvconf("replay", str(trace), "--engine", f"{__name__}:no_version", "--in-process")
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    assert f"{__name__}:no_version: version: missing" in r.output


class _NoPlan(_BareScheduler):
    def next_plan(self):
        return None


def no_plan(config) -> _NoPlan:
    return _NoPlan(config)


no_plan.level = "scheduler"


@pytest.mark.behaviours("FAULT-4")
def test_a_scheduler_answer_of_the_wrong_type_is_a_finding_of_its_call(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    r = kvconf("run", "--engine", f"{__name__}:no_plan", "--case", "sched-mid-flight-reuse",
               "--jobs", "0", "--quiet", "--report", str(report))
    assert r.exit_code == 1, r.output
    (res,) = json.loads(report.read_text())["results"]
    assert res["status"] == "FAIL" and res["behaviours"] == ["FAULT-4"], res
    assert res["message"].startswith("next_plan returned NoneType (None); the protocol"), res


@pytest.mark.behaviours("FAULT-4", "POOL-2")
@pytest.mark.parametrize(("call", "out", "args", "rule", "needle"), [
    ("alloc", (0, 1), (2,), "FAULT-4", "alloc(2) returned (0, 1) (tuple)"),  # a tuple is fine
    ("alloc", [0, True], (2,), "FAULT-4", "alloc(2) returned [0, True]"),
    ("alloc", [0], (2,), "POOL-2", "alloc(2) returned 1 pages [0]"),
    ("match", Match(2, 0, ("3",), (), 0, 0), (), "FAULT-4", "match returned device_pages = "
     "('3',) (tuple)"),
    ("match", Match(2.0, 0, (3,), (), 0, 0), (), "FAULT-4", "match returned device_len = 2.0"),
    ("insert", Inserted(None, ()), (), "FAULT-4", "insert returned cached_len = None"),
    ("insert", Inserted(0, [None]), (), "FAULT-4", "insert returned freed = [None]"),
    ("start_writeback", CopyOp(1, "copy", ((0, 1),)), (), "FAULT-4",
     "start_writeback returned kind = 'copy'"),
    ("start_loadback", CopyOp(1, "loadback", ((0,),)), (), "FAULT-4",
     "start_loadback returned pairs = ((0,),)"),
])
def test_each_field_of_an_answer_is_checked(call, out, args, rule, needle) -> None:
    if needle.startswith("alloc(2) returned (0, 1)"):
        answers.CHECKS[call](out, args)  # a tuple of ints is a list of pages
        return
    with pytest.raises(Violation) as e:
        answers.CHECKS[call](out, args)
    assert e.value.behaviours == (rule,) and needle in e.value.message, e.value.message


@pytest.mark.behaviours("FAULT-4")
def test_drained_events_are_a_list_of_kv_events() -> None:
    answers.events([])
    for bad, needle in ((None, "drain_events returned None (NoneType)"),
                        ([("stored", 1)], "drain_events returned an event = ('stored', 1)")):
        with pytest.raises(Violation, match=None) as e:
            answers.events(bad)
        assert e.value.behaviours == ("FAULT-4",) and needle in e.value.message


def test_numpy_style_ints_are_page_ids() -> None:
    class Int64(int):  # an int of another library: Integral, not int itself
        pass

    answers.CHECKS["alloc"]([Int64(1), Int64(2)], (2,))
    answers.CHECKS["match"](Match(Int64(2), 0, (Int64(1),), (), 0, 0), ())


# -- the protocol reference, generated ---------------------------------------------------------


def test_the_committed_protocol_reference_is_the_docstrings() -> None:
    assert write(ROOT / "docs" / "api.md", check=True), "run `kvconf docs protocol`"
    assert kvconf("docs", "protocol", "--check", "--page", str(ROOT / "docs" / "api.md")
                  ).exit_code == 0


def test_a_stale_reference_is_caught(tmp_path: Path) -> None:
    page = tmp_path / "api.md"
    page.write_text((ROOT / "docs" / "api.md").read_text().replace(
        "already cached on device before this insert", "now cached"))
    r = kvconf("docs", "protocol", "--check", "--page", str(page))
    assert r.exit_code == 1 and "stale" in r.output
    assert kvconf("docs", "protocol", "--page", str(page)).exit_code == 0
    assert page.read_text() == (ROOT / "docs" / "api.md").read_text()


def test_the_reference_defines_what_the_issue_found_undefined() -> None:
    text = render()
    for needle in ("| `version` | `str` | a str naming the engine's version",
                   "already cached on device before this insert",
                   "after an empty match too",
                   "| `start_writeback(node: Any) -> CopyOp \\| None` | with `host_tier` |",
                   "It need not declare `cache` in `features`"):
        assert needle in text, needle
