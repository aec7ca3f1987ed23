"""NOT_APPLICABLE: a case whose declared minimum config the run is below is reported with the
reason, before it runs, never as a FAIL; it never hides a planted defect, and every consumer of
statuses (expectations, JUnit, diff, merge, the compliance report, the pytest plugin, the CLI)
carries it (spec chapter faults, "Statuses of a run")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvconf.conformance.adapters import cache_engine_factory
from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.cache.scenarios import SCENARIOS
from kvconf.conformance.cli import app
from kvconf.conformance.engine.config import EngineConfig, Requires
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.errors import KitError
from kvconf.conformance.oracles import Violation
from kvconf.conformance.reporting.compliance import Inputs, build
from kvconf.conformance.reporting.diff import diff_reports
from kvconf.conformance.reporting.expectations import (
    Known,
    Verdict,
    compare,
    judge,
    load_expectations,
)
from kvconf.conformance.reporting.junit import junit_xml
from kvconf.conformance.reporting.merge import merge_reports
from kvconf.conformance.reporting.report import (
    BAD,
    CaseResult,
    Report,
    RunInfo,
    Status,
    load_report,
    write_report,
)
from kvconf.conformance.running.profiles import Budget, get_profile
from kvconf.conformance.running.runner import Case, play, run_suite, select_cases, unjudged
from kvconf.conformance.running.units import Shard

ROOT = Path(__file__).resolve().parent.parent
S = Status

# The README's config examples, and the cases each is too small for.
SMALL = {
    "page1-dev8": (["page_size=1", "device_pages=8"], {
        "duplicate-insert-frees-caller-pages", "pinned-never-evicted",
        "writeback-refreshes-host-lru", "namespace-isolation", "unload-adapter",
        "reload-adapter-while-held", "events-follow-the-device-tier",
        "reset-waits-then-clears"}),
    "dev1-host1": (["device_pages=1", "host_pages=1"], {sc.name for sc in SCENARIOS}),
}


def kvconf(*args: str):
    return CliRunner().invoke(app, list(args))


def cache_case_args() -> list[str]:
    """--case for every case the engine config reaches (the scheduler cases have their own)."""
    names = [c.name for c in select_cases(None) if Feature.CACHE in c.needs]
    return [a for n in names for a in ("--case", n)]


def evicts_pinned(config):
    """PIN-2 planted (module:factory, so worker processes find it)."""
    from planted import EvictsPinned

    return ReferenceCacheAdapter(config, cache_cls=EvictsPinned)


def shared_namespaces(config):
    """NS-1 planted: every namespace served from the base model's tree."""
    from planted import SharedNamespaces

    return ReferenceCacheAdapter(config, cache_cls=SharedNamespaces)


# ---------------------------------------------------------------------- the README's configs
def test_the_readme_states_the_config_example() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "kvconf run --config page_size=1 --config device_pages=8" in readme


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_configs_give_no_failure_on_the_reference(name: str, tmp_path: Path) -> None:
    """The 7 (and 16) FAILs these configs gave were scenarios whose steps assume a bigger pool:
    now NOT_APPLICABLE with the minimum, the rest PASS, the run exits 0."""
    overrides, too_small = SMALL[name]
    report = tmp_path / "r.json"
    r = kvconf("run", *[a for o in overrides for a in ("--config", o)], "--profile", "ci",
               "--budget", "25", "--quiet", "--jobs", "0", "--report", str(report),
               *cache_case_args())
    assert r.exit_code == 0, r.output
    rep = load_report(report)
    assert not [x.case for x in rep.results if x.status in BAD]
    na = {x.case: x.message for x in rep.results if x.status is S.NOT_APPLICABLE}
    assert set(na) == too_small
    assert all(m.startswith("not applicable at this config: needs ") for m in na.values())
    assert rep.summary[S.NOT_APPLICABLE] == len(too_small)
    assert {x.status for x in rep.results if x.case.startswith("fuzz-")} == {S.PASS}
    assert f"NOT_APPLICABLE: {len(too_small)}" in r.output  # the summary line
    assert "FAIL: 0" in r.output


def test_the_message_names_every_unmet_minimum_and_the_runs_value() -> None:
    (na,) = [sc for sc in SCENARIOS if sc.name == "writeback-refreshes-host-lru"]
    assert na.requires.reason(EngineConfig(device_pages=8, host_pages=24)) == (
        "not applicable at this config: needs device_pages >= 9 (this run has 8)")
    assert na.requires.reason(EngineConfig(device_pages=1, host_pages=1)) == (
        "not applicable at this config: needs device_pages >= 9 (this run has 1), "
        "host_pages >= 9 (this run has 1)")
    assert na.requires.reason(EngineConfig()) is None


# ---------------------------------------------------------------------- the declared minimums
@pytest.mark.parametrize("page_size", [1, 3])
def test_each_scenario_declares_the_least_pool_the_reference_passes_at(page_size: int) -> None:
    """The minimums are data next to the scenarios; this holds them to the reference: at the
    minimum it passes, one page below on either tier it does not. So a minimum neither lets a
    scenario judge the pool (too low) nor skips one that could run (too high)."""
    factory = cache_engine_factory("reference")

    def passes(device: int, host: int) -> bool:
        cfg = EngineConfig(page_size=page_size, device_pages=device, host_pages=host)
        try:
            play(factory, sc.trace(cfg))
        except Violation:
            return False
        return True

    for sc in SCENARIOS:
        req = sc.requires
        assert req.page_size == 1, sc.name  # the scenarios scale to every page size
        assert passes(req.device_pages, req.host_pages), sc.name
        if req.device_pages > 1:
            assert not passes(req.device_pages - 1, 24), sc.name
        if req.host_pages > 0:
            assert not passes(24, req.host_pages - 1), sc.name


# ---------------------------------------------------------------------- decided before the run
def _probe_case(calls: list[str], requires: Requires,
                needs: frozenset[Feature] = frozenset({Feature.CACHE})) -> Case:
    def run(ctx) -> CaseResult:
        calls.append("ran")
        return CaseResult(case="probe", status=S.PASS, behaviours=["PIN-2"], duration_s=0.0)

    return Case("probe", ("PIN-2",), needs, run, requires=requires)


def _suite(cases: list[Case], config: EngineConfig, **kw) -> Report:
    prof = get_profile("ci")
    return run_suite("reference", config, seed_value=0, profile=prof,
                     budget=Budget(examples=10), report_path=kw.pop("report_path", None),
                     cases=cases, jobs=0, **kw)


def test_a_precondition_is_not_applicable_with_its_reason_and_the_case_never_runs() -> None:
    calls: list[str] = []
    case = _probe_case(calls, Requires(page_size=2, device_pages=4, host_pages=2))
    rep = _suite([case], EngineConfig(page_size=1, device_pages=3, host_pages=0))
    (r,) = rep.results
    assert calls == [] and r.status is S.NOT_APPLICABLE and rep.ok
    assert r.message == ("not applicable at this config: needs page_size >= 2 (this run has 1), "
                         "device_pages >= 4 (this run has 3), host_pages >= 2 (this run has 0)")
    assert r.behaviours == ["PIN-2"] and r.trace is None
    rep = _suite([case], EngineConfig(page_size=2, device_pages=4, host_pages=2))
    assert calls == ["ran"] and rep.results[0].status is S.PASS


def test_not_supported_is_said_before_not_applicable() -> None:
    """The engine's gap is the news; the config's would hide it."""
    case = _probe_case([], Requires(device_pages=99), frozenset({Feature.CACHE,
                                                                 Feature.HOST_TIER}))
    r = unjudged(case, frozenset({Feature.CACHE}), {}, EngineConfig(device_pages=8))
    assert r is not None and r.status is S.NOT_SUPPORTED and r.message == "engine lacks host_tier"
    r = unjudged(case, frozenset({Feature.CACHE, Feature.HOST_TIER}), {},
                 EngineConfig(device_pages=8))
    assert r is not None and r.status is S.NOT_APPLICABLE


@pytest.mark.parametrize("name", sorted(SMALL))
@pytest.mark.parametrize(("factory", "scenario", "rule"), [
    ("evicts_pinned", "pinned-never-evicted", "PIN-2"),
    ("shared_namespaces", "namespace-isolation", None),
])
def test_a_planted_defect_under_a_small_config_is_still_caught(
        name: str, factory: str, scenario: str, rule: str | None, tmp_path: Path) -> None:
    """NOT_APPLICABLE must not hide a bug: the scenario aimed at the defect does not fit, the
    fuzz cases still run at that config and fail on the planted rule."""
    overrides, too_small = SMALL[name]
    assert scenario in too_small
    report = tmp_path / "r.json"
    r = kvconf("run", "--engine", f"{__name__}:{factory}",
               *[a for o in overrides for a in ("--config", o)], "--profile", "ci",
               "--budget", "60", "--seed", "0", "--quiet", "--report", str(report),
               "--case", scenario, "--case", "fuzz-cache")
    assert r.exit_code == 1, r.output
    got = {x.case: x for x in load_report(report).results}
    assert got[scenario].status is S.NOT_APPLICABLE
    assert got["fuzz-cache"].status is S.FAIL
    if rule is not None:
        assert rule in got["fuzz-cache"].behaviours


def test_at_its_minimum_a_scenario_runs_and_fails_on_a_planted_defect(tmp_path: Path) -> None:
    """An outcome never turns into NOT_APPLICABLE: at exactly the declared pool the scenario
    is judged, and the defect is a FAIL."""
    report = tmp_path / "r.json"
    r = kvconf("run", "--engine", f"{__name__}:evicts_pinned", "--config", "page_size=1",
               "--config", "device_pages=9", "--quiet", "--report", str(report),
               "--case", "pinned-never-evicted")
    assert r.exit_code == 1, r.output
    (x,) = load_report(report).results
    assert x.status is S.FAIL and "PIN-2" in x.behaviours


# ---------------------------------------------------------------------- consumers
def _report(config: dict | None = None, **cases: Status) -> Report:
    info = RunInfo(engine="eng", version="1", kvconf="x", features=[], config=config or {},
                   seed=0, profile="ci", budget="1", started="t")
    return Report(run_info=info, results=[
        CaseResult(case=n.replace("_", "-"), status=s, behaviours=["PIN-2"], duration_s=0.0,
                   message="not applicable at this config: needs device_pages >= 9 (this run "
                   "has 8)" if s is S.NOT_APPLICABLE else "", trace="traces/x.json"
                   if s in BAD else None, oracle="pinning" if s in BAD else None,
                   judged=["PIN-2"] if s is S.PASS else None)  # a passing case checked it
        for n, s in cases.items()]).summarize()


def test_expectations_take_not_applicable_as_expected_and_refuse_to_list_it(
        tmp_path: Path) -> None:
    known = Known(case="c", status=S.FAIL, reason="r", reference="o/r#1")
    assert judge(S.NOT_APPLICABLE, None) is Verdict.EXPECTED
    assert judge(S.NOT_APPLICABLE, known) is Verdict.EXPECTED  # not run: no fix, no new gap
    assert judge(S.FAIL, None) is Verdict.REGRESSION
    f = tmp_path / "known.toml"
    f.write_text('engine = "eng"\n\n[[known]]\ncase = "c"\nstatus = "NOT_APPLICABLE"\n'
                 'reason = "small"\nreference = "o/r#1"\n')
    with pytest.raises(KitError, match=r"known.toml:5: known\[0\]\.status: NOT_APPLICABLE is "
                       "decided by the run's config"):
        load_expectations(f)
    f.write_text('engine = "eng"\n\n[[known]]\ncase = "c"\nstatus = "FAIL"\n'
                 'reason = "planted"\nreference = "o/r#1"\n')
    rep = _report(c=S.NOT_APPLICABLE, d=S.PASS)
    out = compare(rep, load_expectations(f), f)
    assert out["expected"] == ["c", "d"] and rep.ok
    assert rep.results[0].known is None  # the known gap was not looked at


def test_junit_skips_not_applicable_with_its_reason_with_or_without_expectations(
        tmp_path: Path) -> None:
    rep = _report(small=S.NOT_APPLICABLE, ok=S.PASS, broken=S.FAIL)
    f = tmp_path / "known.toml"
    f.write_text('engine = "eng"\n\n[[known]]\ncase = "small"\nstatus = "FAIL"\n'
                 'reason = "planted"\nreference = "o/r#1"\n[[known]]\ncase = "broken"\n'
                 'status = "FAIL"\nreason = "planted"\nreference = "o/r#2"\n')
    for judged, counts in ((False, ("1", "1")), (True, ("2", "0"))):
        if judged:  # the known FAIL of "broken" is skipped as expected; "small" as before
            compare(rep, load_expectations(f), f)
        root = ET.fromstring(junit_xml(rep, tmp_path))
        (suite,) = root.findall("testsuite")
        cases = {c.get("name"): c for c in suite.findall("testcase")}
        (skip,) = [e for e in cases["small"] if e.tag != "properties"]
        assert skip.tag == "skipped" and skip.get("message") == (
            "not applicable at this config: needs device_pages >= 9 (this run has 8)")
        assert (suite.get("skipped"), suite.get("failures")) == counts


def test_diff_counts_not_applicable_as_not_judged_and_names_the_config(tmp_path: Path) -> None:
    base = tmp_path / "base" / "r.json"
    head = tmp_path / "head" / "r.json"
    write_report(_report({"device_pages": 8}, a=S.NOT_APPLICABLE, b=S.FAIL, c=S.NOT_APPLICABLE,
                         d=S.PASS), base)
    write_report(_report({"device_pages": 24}, a=S.FAIL, b=S.NOT_APPLICABLE,
                         c=S.NOT_APPLICABLE, d=S.NOT_APPLICABLE), head)
    d = diff_reports(base, head)
    assert [c.case for c in d.new_failures] == ["a"]
    assert [c.case for c in d.status_changes] == ["b", "d"] and not d.fixes
    assert d.unchanged == 1 and d.regression and d.differ_in == ["config"]
    r = kvconf("diff", str(base), str(head), "--json")
    assert r.exit_code == 1 and json.loads(r.stdout)["differ_in"] == ["config"]


def test_shards_merge_to_the_unsharded_statuses(tmp_path: Path) -> None:
    cases = [c for c in select_cases(None) if not c.fuzz and Feature.CACHE in c.needs]
    config = EngineConfig(page_size=1, device_pages=8)
    whole = _suite(cases, config)
    paths = []
    for i in (1, 2):
        path = tmp_path / f"s{i}" / "report.json"
        _suite(cases, config, shard=Shard(i, 2), report_path=path)
        paths.append(path)
    merged = merge_reports(paths, tmp_path / "merged" / "report.json")
    assert [(r.case, r.status, r.message) for r in merged.results] == [
        (r.case, r.status, r.message) for r in whole.results]
    assert merged.summary[S.NOT_APPLICABLE] == len(SMALL["page1-dev8"][1]) and merged.ok


def test_the_compliance_report_shows_not_applicable_and_no_failure_for_it(
        tmp_path: Path) -> None:
    path = tmp_path / "run" / "report.json"
    write_report(_report(small=S.NOT_APPLICABLE, ok=S.PASS), path)
    md, html = build(Inputs(runs=[(path, load_report(path))]), tmp_path / "out")
    text = md.read_text()
    assert "NOT_APPLICABLE 1" in text and "| PIN-2 | MUST NOT | PASS |" in text  # judged first
    assert "## Failures\n\nNone." in text
    write_report(_report(small=S.NOT_APPLICABLE), path)
    md, html = build(Inputs(runs=[(path, load_report(path))]), tmp_path / "out")
    page = html.read_text()
    assert "<td class='NOT_APPLICABLE'" in page and "td.NOT_APPLICABLE" in page
    folded = page[page.index("<details>"):page.index("</details>")]
    assert "NOT_APPLICABLE" in folded and ">PIN-2<" in folded  # nothing judged it


def test_the_pytest_plugin_skips_not_applicable_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "test_own.py").write_text("def test_own():\n    assert True\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--kvconf-engine",
         "reference", "--kvconf-config", "page_size=1", "--kvconf-config", "device_pages=8",
         "--kvconf-case", "pinned-never-evicted", "--kvconf-case", "lru-victim-order",
         "--kvconf-jobs", "0", "-rs"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 passed, 1 skipped" in r.stdout
    assert ("NOT_APPLICABLE: not applicable at this config: needs device_pages >= 9 (this run "
            "has 8)") in r.stdout
