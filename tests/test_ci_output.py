"""CI-native output: JUnit XML (``--junit``) and the JSON report on standard output
(``--report -``)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.cli import app
from kvconf.conformance.mutants.kill import KillInfo, KillMatrix, MutantResult
from kvconf.conformance.reporting.expectations import compare, load_expectations
from kvconf.conformance.reporting.junit import junit_xml, mutants_junit_xml
from kvconf.conformance.reporting.report import CaseResult, Report, RunInfo, Status

runner = CliRunner()


def evicts_pinned(config):
    """The reference with PIN-2 broken, named as module:factory so workers find it."""
    from planted import EvictsPinned

    return ReferenceCacheAdapter(config, cache_cls=EvictsPinned)


PLANTED = f"{__name__}:evicts_pinned"


def _report(*results: CaseResult, not_run: list[str] | None = None) -> Report:
    info = RunInfo(engine="eng<&>", version="1", kvconf="x", features=[], config={}, seed=4,
                   profile="ci", budget="1", started="t", not_run=not_run or [])
    return Report(run_info=info, results=list(results))


def _case(name: str, status: Status, **kw) -> CaseResult:
    return CaseResult(case=name, status=status, behaviours=kw.pop("behaviours", ["PIN-2"]),
                      duration_s=0.5, **kw)


def _by_name(xml: str) -> tuple[ET.Element, dict[str, ET.Element]]:
    """The suite and its testcases by name, each without its per-rule ``<properties>`` (see
    ``_rules``), so a testcase's children are its verdict alone."""
    root = ET.fromstring(xml)  # valid XML, or this raises
    (suite,) = root.findall("testsuite")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    for c in cases.values():
        for props in c.findall("properties"):
            c.remove(props)
    return suite, cases


def _rules(xml: str) -> dict[str, dict[str, str]]:
    """Per testcase, its per-rule verdicts (its ``<properties>``)."""
    (suite,) = ET.fromstring(xml).findall("testsuite")
    return {c.get("name"): {p.get("name"): p.get("value") for p in c.iter("property")}
            for c in suite.findall("testcase")}


def test_junit_has_a_testcase_per_case_and_the_right_elements():
    nasty = "bad <tag> & \"quote\" ]]> \x1b[31mred\x1b[0m \x00nul"
    rep = _report(
        _case("ok", Status.PASS),
        _case("broken", Status.FAIL, oracle="pinning", step=3, message=nasty,
              trace="traces/broken.json", behaviours=["PIN-2", "EVICT-1"]),
        _case("died", Status.CRASH, message="killed by SIGSEGV", signal="SIGSEGV",
              output="engine said \x07 <boom>", trace="traces/died.json", step=2),
        _case("hung", Status.TIMEOUT, message="silent for 60 s"),
        _case("oops", Status.ERROR, message="could not start"),
        _case("l3", Status.NOT_SUPPORTED, message="needs feature l3"),
        not_run=["later"])
    suite, cases = _by_name(junit_xml(rep, Path("out")))
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"),
            suite.get("skipped")) == ("7", "1", "3", "2")
    assert {c.get("classname") for c in cases.values()} == {"eng<&>"}
    assert list(cases["ok"]) == []
    (fail,) = cases["broken"]
    assert fail.tag == "failure" and fail.get("type") == "FAIL"
    assert fail.get("message").startswith("FAIL PIN-2, EVICT-1: bad <tag> & \"quote\" ]]>")
    assert "\\x1b[31mred" in fail.get("message") and "\\x00nul" in fail.get("message")
    assert "step: 3" in fail.text and f"trace: {Path('out/traces/broken.json')}" in fail.text
    assert f"kvconf replay {Path('out/traces/broken.json')} --engine eng<&>" in fail.text
    (crash,) = cases["died"]
    assert crash.tag == "error" and crash.get("type") == "CRASH"
    assert "signal: SIGSEGV" in crash.text and "engine said \\x07 <boom>" in crash.text
    assert [cases[n][0].tag for n in ("hung", "oops")] == ["error", "error"]
    (skip,) = cases["l3"]
    assert skip.tag == "skipped" and skip.get("message") == "needs feature l3"
    assert cases["later"][0].get("message") == "not run: the run was interrupted"
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["seed"] == "4" and props["engine"] == "eng<&>"


def test_junit_passes_only_the_rules_a_case_judged():
    """An engine that declares no host tier: its passing fuzz case cites host and event rules
    but judged only some; each testcase's properties pass those alone, the rest 'not judged'
    (spec chapter faults, "Verdicts of a rule")."""
    import judged_report as jr

    xml = junit_xml(jr.no_host_tier_report(), Path("out"))
    rules = _rules(xml)
    fuzz = rules["fuzz-cache"]
    assert {b for b, v in fuzz.items() if v == "PASS"} == set(jr.JUDGED)
    assert all(fuzz[b] == "not judged" for b in (*jr.CITED_ONLY, jr.LACKING))
    assert rules["writeback-demote-loadback"] == {jr.LACKING: "NOT_SUPPORTED"}
    # a failing case fails what it broke and passes nothing, not even what else it judged
    assert rules["lru-victim-order"] == {jr.BROKEN: "FAIL"}
    suite, cases = _by_name(xml)
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    # over the rules cited or judged: 2 judged and held, EVICT-2 broken, HOST-1 n/s, 3 not
    # judged (EVICT-1, judged by the failing case alone, among them)
    assert props["rules"] == "2 pass, 1 FAIL, 1 n/s, 3 not judged"
    assert list(cases["fuzz-cache"]) == []  # the case itself passed


def test_junit_reflects_the_expectation_file(tmp_path: Path):
    path = tmp_path / "exp.toml"
    path.write_text('engine = "eng<&>"\n\n'
                    '[[known]]\ncase = "gap"\nstatus = "FAIL"\nreason = "window guard skipped"\n'
                    'reference = "example/engine#3"\n\n'
                    '[[known]]\ncase = "fixed"\nstatus = "FAIL"\nreason = "was broken"\n'
                    'reference = "example/engine#4"\n\n'
                    '[[known]]\ncase = "worse"\nstatus = "FAIL"\nreason = "rule broken"\n'
                    'reference = "example/engine#5"\n')
    rep = _report(_case("gap", Status.FAIL, message="window"),
                  _case("fixed", Status.PASS),
                  _case("worse", Status.CRASH, message="died"),
                  _case("new", Status.FAIL, message="new break"),
                  _case("fine", Status.PASS))
    compare(rep, load_expectations(path), path)
    suite, cases = _by_name(junit_xml(rep, tmp_path))
    assert (suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("3", "0", "1")
    assert cases["gap"][0].tag == "skipped"
    assert cases["gap"][0].get("message") == "expected failure: window guard skipped"
    for name, start in (("fixed", "improvement"), ("worse", "regression"),
                        ("new", "regression: FAIL PIN-2: new break")):
        (node,) = cases[name]
        assert node.tag == "failure" and node.get("message").startswith(start), name
    assert list(cases["fine"]) == []


def test_mutants_junit_fails_a_survivor():
    info = KillInfo(kvconf="x", seed=1, profile="ci", budget="1", started="t")
    matrix = KillMatrix(run_info=info, mutants=[
        MutantResult(id="A", level="cache", catalog=["D1-1"], killed=True, seconds=0.1),
        MutantResult(id="B", level="cache", catalog=["D1-2"], killed=False, seconds=2.0,
                     message="no case failed"),
        MutantResult(id="C", level="sched", catalog=["D1-3"], killed=False, seconds=0.0,
                     skipped="needs torch")])
    suite, cases = _by_name(mutants_junit_xml(matrix))
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    assert list(cases["A"]) == [] and cases["B"][0].tag == "failure"
    assert cases["C"][0].get("message") == "needs torch"


def test_kvconf_run_writes_junit_beside_the_report(tmp_path: Path):
    report, junit = tmp_path / "r.json", tmp_path / "ci" / "junit.xml"
    res = runner.invoke(app, ["run", "--engine", PLANTED, "--quiet", "--case",
                              "pinned-never-evicted", "--case", "lru-victim-order",
                              "--examples-db", "none", "--report", str(report),
                              "--junit", str(junit)])
    assert res.exit_code == 1, res.output
    data = json.loads(report.read_text())
    suite, cases = _by_name(junit.read_text())
    assert set(cases) == {r["case"] for r in data["results"]}
    assert suite.get("failures") == str(data["summary"]["FAIL"]) == "1"
    text = cases["pinned-never-evicted"][0].text
    assert f"trace: {tmp_path / 'traces' / 'pinned-never-evicted.json'}" in text
    assert not list(tmp_path.glob("ci/.junit.xml.*"))  # no temporary file left behind


def test_report_dash_puts_the_json_alone_on_stdout(tmp_path: Path):
    traces = tmp_path / "t"
    res = runner.invoke(app, ["run", "--engine", PLANTED, "--case", "pinned-never-evicted",
                              "--examples-db", "none", "--report", "-", "--traces",
                              str(traces)])
    assert res.exit_code == 1, res.output
    data = json.loads(res.stdout)  # nothing but the report
    assert data["format"] == "kvconf-report/5" and data["summary"]["FAIL"] == 1
    (row,) = data["results"]
    assert row["trace"] == str(traces / "traces" / "pinned-never-evicted.json")
    assert Path(row["trace"]).is_file()  # openable from where the command ran
    assert "pinned-never-evicted" in res.stderr and "FAIL" in res.stderr  # the table
    assert json.loads((traces / "report.json").read_text())["summary"]["FAIL"] == 1


def test_report_dash_without_traces_uses_a_temporary_folder():
    res = runner.invoke(app, ["run", "--quiet", "--case", "lru-victim-order", "--examples-db",
                              "none", "--report", "-"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["summary"]["PASS"] == 1
    assert "working copy and traces:" in res.stderr


@pytest.mark.parametrize("args, needle", [
    (["--traces", "somewhere"], "--traces somewhere: only with --report -"),
    (["--junit", "."], "--junit .: is a directory"),
])
def test_bad_ci_output_options_are_one_line_exit_2(tmp_path: Path, args, needle):
    res = runner.invoke(app, ["run", "--quiet", "--case", "lru-victim-order",
                              "--report", str(tmp_path / "r.json"), *args])
    assert res.exit_code == 2 and needle in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1


def test_kvconf_mutants_writes_junit(tmp_path: Path):
    junit = tmp_path / "k.xml"
    res = runner.invoke(app, ["mutants", "--profile", "ci", "--quiet", "--mutant",
                              "SplitDropsPins", "--report", str(tmp_path / "k.json"),
                              "--junit", str(junit)])
    assert res.exit_code == 0, res.output
    suite, cases = _by_name(junit.read_text())
    assert list(cases) == ["SplitDropsPins"] and suite.get("failures") == "0"


def test_an_interrupted_run_still_emits_its_report_and_junit(tmp_path: Path):
    """SIGTERM (a CI runner's time-out) with --report -: stdout still gets the report the run
    kept, marked interrupted, and the JUnit file lists the cases it did not finish."""
    import signal
    import subprocess
    import sys
    import time

    traces, junit = tmp_path / "t", tmp_path / "j.xml"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvconf.conformance.cli", "run", "--quiet", "--budget", "100000",
         "--examples-db", "none", "--report", "-", "--traces", str(traces), "--junit",
         str(junit)],
        cwd=Path(__file__).resolve().parent.parent, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    work = traces / "report.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (
            work.exists() and json.loads(work.read_text())["results"]):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    stdout, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    doc = json.loads(stdout)
    assert doc["run_info"]["interrupted"] and doc["run_info"]["not_run"] and doc["results"]
    assert not set(doc["run_info"]["not_run"]) & {r["case"] for r in doc["results"]}
    suite, cases = _by_name(junit.read_text())
    assert int(suite.get("tests")) == len(doc["results"]) + len(doc["run_info"]["not_run"])
    assert cases[doc["run_info"]["not_run"][0]][0].tag == "skipped"


def test_the_cli_table_names_a_passing_cases_judged_rules_not_all_it_cites():
    import io

    import judged_report as jr
    from rich.console import Console

    from kvconf.conformance.cli import _print_results

    buf = io.StringIO()
    _print_results(jr.no_host_tier_report(), Console(file=buf, width=200, color_system=None))
    row = next(line for line in buf.getvalue().splitlines() if "fuzz-cache" in line)
    assert "PIN-2, TREE-4; 3 cited, not judged" in row
    assert not any(b in row for b in (*jr.CITED_ONLY, jr.LACKING))
