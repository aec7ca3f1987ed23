"""Bringing your own engine: the ``kvconf.engines`` entry points, the pytest plugin, and the
example engine package (examples/example-engine), none of them installed for the test."""

from __future__ import annotations

import importlib
import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvconf.conformance import adapters
from kvconf.conformance.cli import app
from kvconf.conformance.errors import KitError
from kvconf.conformance.reporting.report import load_report

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_SRC = ROOT / "examples" / "example-engine" / "src"
TESTS = Path(__file__).resolve().parent

ENGINE_MODULE = '''
import os
from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from planted import EvictsPinned


def evicts_pinned(config):
    return ReferenceCacheAdapter(config, cache_cls=EvictsPinned)


class Exits(ReferenceCacheAdapter):
    """Ends its process when it publishes in a namespace other than the base model's."""

    def insert(self, namespace, tokens, pages):
        if namespace != 0:
            os._exit(3)
        return super().insert(namespace, tokens, pages)
'''


def kvconf(*args: str):
    return CliRunner().invoke(app, list(args))


def distribution(root: Path, name: str, engines: dict[str, str]) -> None:
    """An installed package as importlib.metadata sees one: a dist-info with entry points."""
    info = root / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    lines = "".join(f"{k} = {v}\n" for k, v in engines.items())
    (info / "entry_points.txt").write_text(f"[kvconf.engines]\n{lines}")


@pytest.fixture
def site(tmp_path: Path, monkeypatch):
    """A folder on the import path (the workers' too) holding an engine module and packages."""
    root = tmp_path / "site"
    root.mkdir()
    (root / "my_engines.py").write_text(ENGINE_MODULE)
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.syspath_prepend(str(TESTS))
    adapters.registry.cache_clear()
    yield root
    adapters.registry.cache_clear()


# ---------------------------------------------------------------------- entry points
def test_the_bundled_table_is_the_entry_point_table() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert declared["kvconf.engines"] == adapters.BUILTIN
    assert declared["pytest11"] == {"kvconf": "kvconf.conformance.pytest_plugin"}


def test_without_entry_point_metadata_the_builtin_table_serves(monkeypatch) -> None:
    monkeypatch.setattr(adapters.metadata, "entry_points", lambda group: [])
    adapters.registry.cache_clear()
    try:
        assert adapters.known_engines() == sorted(adapters.BUILTIN)
        assert adapters.engine_factory("reference") is adapters._load(
            "kvconf.conformance.adapters.reference_cache:reference")
        assert adapters.sched_engine_factory("reference") is not None
        assert adapters.cache_engine_factory("tokenspeed") is None
    finally:
        adapters.registry.cache_clear()


def test_a_registered_engine_runs_in_workers_and_replays_as_printed(
        site: Path, tmp_path: Path) -> None:
    distribution(site, "my_engines_pkg", {"pins-broken": "my_engines:evicts_pinned"})
    listed = kvconf("engines")
    assert listed.exit_code == 0 and "pins-broken  my_engines:evicts_pinned" in listed.output
    report = tmp_path / "out" / "report.json"
    r = kvconf("run", "--engine", "pins-broken", "--report", str(report), "--quiet",
               "--case", "pinned-never-evicted", "--case", "lru-victim-order")
    assert r.exit_code == 1, r.output
    rep = load_report(report)
    assert rep.run_info.engine == "pins-broken" and rep.run_info.jobs == 1
    (failed,) = [x for x in rep.results if x.status.value == "FAIL"]
    assert {"PIN-2"} <= set(failed.behaviours)
    again = kvconf("replay", str(report.parent / failed.trace), "--engine", "pins-broken")
    assert again.exit_code == 1 and "FAIL" in again.output


def test_a_name_registered_twice_is_one_line(site: Path, tmp_path: Path) -> None:
    distribution(site, "one_pkg", {"twice": "my_engines:evicts_pinned"})
    distribution(site, "two_pkg",
                 {"twice": "kvconf.conformance.adapters.reference_cache:reference"})
    r = kvconf("run", "--engine", "twice", "--report", str(tmp_path / "r.json"))
    assert r.exit_code == 2
    line = r.output.strip()
    assert "\n" not in line and "registered more than once" in line
    assert "one_pkg" in line and "two_pkg" in line
    # The same target from two places (a stale copy of the metadata) is no conflict.
    distribution(site, "three_pkg", {"same": "my_engines:evicts_pinned"})
    distribution(site, "four_pkg", {"same": "my_engines:evicts_pinned"})
    importlib.invalidate_caches()
    adapters.registry.cache_clear()
    assert adapters.target_of("same") == "my_engines:evicts_pinned"


@pytest.mark.parametrize("engine, says", [
    ("no-such-engine", "unknown engine 'no-such-engine' (known: "),
    ("os:sep", "str is not callable"),
    ("no_such_module_x:factory", "cannot import 'no_such_module_x'"),
    ("os:no_such_attr", "module 'os' has no 'no_such_attr'"),
])
def test_bad_engines_are_one_line(engine: str, says: str, tmp_path: Path) -> None:
    r = kvconf("run", "--engine", engine, "--report", str(tmp_path / "r.json"))
    line = r.output.strip()
    assert r.exit_code == 2 and says in line and "\n" not in line, r.output
    if "unknown" in says:
        assert "reference, sglang-hicache, sglang-hybrid, sglang-radix," in line
        assert "or module:factory" in line
    with pytest.raises(KitError, match="engine"):
        adapters.check_engine(engine)


# ---------------------------------------------------------------------- the pytest plugin
def pytest_in(folder: Path, *args: str, pythonpath: list[Path] = ()) -> subprocess.CompletedProcess:
    """``python -m pytest`` in ``folder`` as a user runs it (the plugin found by entry point)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(p) for p in pythonpath] + [str(TESTS), os.environ.get("PYTHONPATH", "")]))
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's project: an engine module and a test of its own."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "my_engines.py").write_text(ENGINE_MODULE)
    (root / "test_own.py").write_text("def test_own():\n    assert True\n")
    return root


def test_without_an_engine_the_plugin_adds_nothing(project: Path) -> None:
    r = pytest_in(project, "--collect-only", "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "test_own.py::test_own" in r.stdout and "kvconf::" not in r.stdout
    assert "1 test collected" in r.stdout


def test_cases_are_items_and_a_failure_says_what_broke_and_how_to_replay(
        project: Path) -> None:
    r = pytest_in(project, "--kvconf-engine", "my_engines:evicts_pinned",
                  "--kvconf-case", "pinned-never-evicted", "--kvconf-case", "lru-victim-order",
                  "--kvconf-case", "fuzz-scheduler-window", "--kvconf-budget", "3", "-rA")
    out = r.stdout
    assert r.returncode == 1, out + r.stderr
    assert "1 failed, 2 passed, 1 skipped" in out  # test_own, lru-victim-order; no scheduler
    assert "FAIL at step" in out and "PIN-2" in out and "evicted from device while pinned" in out
    # On CI (the CI variable set) pytest repeats the whole message in the short summary.
    (replay,) = {ln for ln in out.splitlines() if ln.startswith("replay: ")}
    assert replay == ("replay: kvconf replay kvconf-report/traces/pinned-never-evicted.json "
                      "--engine my_engines:evicts_pinned")
    cmd = shlex.split(replay.removeprefix("replay: "))
    again = subprocess.run([sys.executable, "-m", "kvconf.conformance.cli", *cmd[1:]], cwd=project,
                           capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, PYTHONPATH=str(TESTS)))
    assert again.returncode == 1 and "FAIL" in again.stdout, again.stdout + again.stderr
    rep = load_report(project / "kvconf-report" / "report.json")
    assert {x.case: x.status.value for x in rep.results} == {
        "pinned-never-evicted": "FAIL", "lru-victim-order": "PASS",
        "fuzz-scheduler-window": "NOT_SUPPORTED"}


def test_a_crash_fails_its_item_and_pytest_goes_on(project: Path) -> None:
    r = pytest_in(project, "--kvconf-engine", "my_engines:Exits", "--kvconf-case",
                  "namespace-isolation", "--kvconf-case", "lru-victim-order")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 failed, 2 passed" in r.stdout
    assert "CRASH" in r.stdout and "exited with code 3" in r.stdout


def test_expectations_become_xfail_and_a_fixed_gap_is_an_improvement(project: Path) -> None:
    (project / "known.toml").write_text(
        'engine = "my_engines:evicts_pinned"\n'
        '[[known]]\ncase = "pinned-never-evicted"\nstatus = "FAIL"\n'
        'reason = "PIN-2 planted"\nreference = "https://example.org/issue/1"\n'
        '[[known]]\ncase = "lru-victim-order"\nstatus = "FAIL"\n'
        'reason = "was broken once"\nreference = "https://example.org/issue/2"\n')
    r = pytest_in(project, "--kvconf-engine", "my_engines:evicts_pinned",
                  "--kvconf-expect", "known.toml", "--kvconf-case", "pinned-never-evicted",
                  "--kvconf-case", "lru-victim-order", "-rxX")
    out = r.stdout
    assert r.returncode == 1, out + r.stderr
    assert "1 failed, 1 passed, 1 xfailed" in out
    assert "FAIL as expected: PIN-2 planted" in out
    assert "IMPROVEMENT" in out and "remove its entry from known.toml" in out
    rep = load_report(project / "kvconf-report" / "report.json")
    assert rep.run_info.expectations["improvement"] == ["lru-victim-order"]


def test_signature_entries_are_judged_by_the_plugin_as_by_kvconf_run(project: Path) -> None:
    """A case named by its findings: the finding named is an xfail, a case that passes with
    entries that may pass is a pass, and one whose finding the file does not name fails."""
    ref = 'reference = "https://example.org/issue/1"\n'
    (project / "known.toml").write_text(
        'engine = "my_engines:evicts_pinned"\n'
        '[[known]]\ncase = "pinned-never-evicted"\nsignature = "eviction/EVICT-1+PIN-2/evict"\n'
        'reason = "PIN-2 planted"\n' + ref
        + '[[known]]\ncase = "lru-victim-order"\nsignature = "eviction/EVICT-3/evict"\n'
        'may_pass = true\nreason = "met at some budgets"\n' + ref)
    r = pytest_in(project, "--kvconf-engine", "my_engines:evicts_pinned",
                  "--kvconf-expect", "known.toml", "--kvconf-case", "pinned-never-evicted",
                  "--kvconf-case", "lru-victim-order", "-rxX")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 passed, 1 xfailed" in r.stdout  # the project's own test, and lru-victim-order
    assert "FAIL as expected: eviction/EVICT-1+PIN-2/evict: PIN-2 planted" in r.stdout
    (project / "known.toml").write_text(
        'engine = "my_engines:evicts_pinned"\n'
        '[[known]]\ncase = "pinned-never-evicted"\nsignature = "eviction/EVICT-2/evict"\n'
        'reason = "another defect"\n' + ref)
    r = pytest_in(project, "--kvconf-engine", "my_engines:evicts_pinned",
                  "--kvconf-expect", "known.toml", "--kvconf-case", "pinned-never-evicted")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "REGRESSION: findings the file does not name: eviction/EVICT-1+PIN-2/evict" in r.stdout
    rep = load_report(project / "kvconf-report" / "report.json")
    assert rep.run_info.expectations["regression"] == ["pinned-never-evicted"]


def test_the_plugin_judges_as_kvconf_run_does(project: Path, site: Path, tmp_path: Path) -> None:
    """Same seed, same units, same traces: the item results are the run's results."""
    cases = ["fuzz-cache-tight", "pinned-never-evicted"]
    report = tmp_path / "cli" / "report.json"
    kvconf("run", "--engine", "my_engines:evicts_pinned", "--report", str(report), "--quiet",
           "--seed", "5", "--budget", "20", "--examples-db", "none",
           *[a for c in cases for a in ("--case", c)])
    r = pytest_in(project, "--kvconf-engine", "my_engines:evicts_pinned", "--kvconf-seed", "5",
                  "--kvconf-budget", "20", "--kvconf-examples-db", "none",
                  *[a for c in cases for a in ("--kvconf-case", c)])
    assert r.returncode == 1, r.stdout + r.stderr
    cli = load_report(report)
    plug = load_report(project / "kvconf-report" / "report.json")
    assert plug.run_info.examples_db == "none" and plug.run_info.seed == 5

    def seen(rep):
        return [(x.case, x.status.value, x.steps, x.examples, x.message, x.judged)
                for x in rep.results]

    assert seen(plug) == seen(cli)
    assert all(x.judged for x in plug.results)  # the rules the items' checks ran for


def test_a_bad_option_is_a_usage_error(project: Path) -> None:
    r = pytest_in(project, "--kvconf-engine", "no-such-engine")
    assert r.returncode == 4
    assert "kvconf: unknown engine 'no-such-engine'" in r.stderr


# ---------------------------------------------------------------------- the example package
def test_the_example_engine_passes_what_it_declares(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE_SRC))
    report = tmp_path / "report.json"
    r = kvconf("run", "--engine", "kvconf_example_engine.adapter:factory", "--quiet",
               "--report", str(report), "--budget", "10", "--case", "lru-victim-order",
               "--case", "unbalanced-unlock-rejected", "--case", "fuzz-cache-tight",
               "--case", "events-follow-the-device-tier")
    assert r.exit_code == 0, r.output
    got = {x.case: x.status.value for x in load_report(report).results}
    assert got == {"lru-victim-order": "PASS", "unbalanced-unlock-rejected": "PASS",
                   "fuzz-cache-tight": "PASS", "events-follow-the-device-tier": "NOT_SUPPORTED"}


def test_the_example_engine_tests_run_through_the_plugin(tmp_path: Path) -> None:
    example = ROOT / "examples" / "example-engine"
    declared = tomllib.loads((example / "pyproject.toml").read_text())
    assert declared["project"]["entry-points"]["kvconf.engines"] == {
        "example-engine": "kvconf_example_engine.adapter:factory"}
    r = pytest_in(example, "tests", "--kvconf-engine", "kvconf_example_engine.adapter:factory",
                  "--kvconf-case", "duplicate-insert-frees-caller-pages", "--kvconf-case",
                  "fuzz-cache-page1", "--kvconf-budget", "5",
                  "--kvconf-report", str(tmp_path / "report.json"), pythonpath=[EXAMPLE_SRC])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4 passed" in r.stdout
