"""Expectation files and the compliance report (``kvconf run --expect``, ``kvconf report``)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvconf.conformance.cli import app
from kvconf.conformance.errors import KitError
from kvconf.conformance.reporting.expectations import compare, load_expectations
from kvconf.conformance.reporting.report import CaseResult, Report, RunInfo, Status

KNOWN = """engine = "reference"

[[known]]
case = "b"
status = "FAIL"
reason = "known gap"
reference = "https://example.org/issues/7"

[[known]]
case = "c"
status = "FAIL"
reason = "fixed since"
reference = "example/engine#12"
"""


def _report(**statuses: Status) -> Report:
    info = RunInfo(engine="reference", version="x", kvconf="x", features=[], config={}, seed=0,
                   profile="ci", budget="1", started="t")
    return Report(run_info=info, results=[
        CaseResult(case=c, status=s, behaviours=["PIN-2"], duration_s=0.0)
        for c, s in statuses.items()])


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "exp.toml"
    p.write_text(text)
    return p


def test_a_run_is_judged_against_its_expectations_both_ways(tmp_path: Path):
    path = _write(tmp_path, KNOWN)
    exp = load_expectations(path)
    r = _report(a=Status.PASS, b=Status.FAIL, c=Status.PASS, d=Status.NOT_SUPPORTED)
    out = compare(r, exp, path)
    assert out == {"expected": ["a", "b", "d"], "regression": [], "improvement": ["c"]}
    assert not r.ok  # a known failure that passes must have its line removed
    assert r.results[1].known == "known gap (https://example.org/issues/7)"
    r = _report(a=Status.FAIL, b=Status.FAIL, c=Status.FAIL)
    assert compare(r, exp, path)["regression"] == ["a"] and not r.ok
    r = _report(a=Status.PASS, b=Status.FAIL, c=Status.FAIL)
    compare(r, exp, path)
    assert r.ok and r.run_info.expectations["file"] == str(path)


@pytest.mark.parametrize("text, where", [
    (KNOWN.replace("https://example.org/issues/7", "see the wiki"), "known[0].reference"),
    (KNOWN.replace('status = "FAIL"', 'status = "PASS"', 1), "known[0].status"),
    (KNOWN.replace('case = "c"', 'case = "b"'), "known[1].case"),
    (KNOWN + "color = 3\n", "color"),
    ("engine = [", "invalid TOML"),
])
def test_a_bad_expectation_file_names_the_field(tmp_path: Path, text: str, where: str):
    with pytest.raises(KitError) as e:
        load_expectations(_write(tmp_path, text))
    assert where in str(e.value) and "exp.toml" in str(e.value)


def test_expectations_for_another_engine_or_missing_cases_are_refused(tmp_path: Path):
    path = _write(tmp_path, KNOWN.replace('engine = "reference"', 'engine = "vllm"'))
    with pytest.raises(KitError, match="the file is for vllm"):
        compare(_report(b=Status.FAIL, c=Status.FAIL), load_expectations(path), path)
    path = _write(tmp_path, KNOWN)
    with pytest.raises(KitError, match="known case c did not run"):
        compare(_report(b=Status.FAIL), load_expectations(path), path)


def test_kvconf_run_with_expectations_fails_on_an_improvement(tmp_path: Path):
    path = _write(tmp_path, KNOWN.replace('"b"', '"split-keeps-pins"').replace(
        '"c"', '"lru-victim-order"'))
    args = ["run", "--profile", "ci", "--quiet", "--case", "split-keeps-pins", "--case",
            "lru-victim-order", "--expect", str(path), "--report", str(tmp_path / "r.json")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 1, res.output
    assert "2 improvements" in res.output
    data = json.loads((tmp_path / "r.json").read_text())
    assert [r["expectation"] for r in data["results"]] == ["improvement", "improvement"]


def test_kvconf_report_writes_markdown_and_html(tmp_path: Path):
    runner = CliRunner()
    assert runner.invoke(app, ["run", "--profile", "ci", "--quiet", "--case", "split-keeps-pins",
                               "--case", "sched-retract-and-recover",
                               "--report", str(tmp_path / "run" / "r.json")]).exit_code == 0
    assert runner.invoke(app, ["mutants", "--profile", "ci", "--quiet", "--mutant",
                               "SplitDropsPins", "--report",
                               str(tmp_path / "k.json")]).exit_code == 0
    # A passing case passes the rules a check of which ran in it (judged): where the run did
    # not record them, as a report older than kvconf-report/5, they are set here by hand.
    run = json.loads((tmp_path / "run" / "r.json").read_text())
    for x in run["results"]:
        if x["status"] == "PASS" and x.get("judged") is None:
            x["judged"] = x["behaviours"]
    (tmp_path / "run" / "r.json").write_text(json.dumps(run))
    # a failing result of another run, with its trace
    bad = json.loads((tmp_path / "run" / "r.json").read_text())
    bad["run_info"]["engine"] = "other"
    bad["results"][0].update(status="FAIL", behaviours=["PIN-1"], oracle="pinning",
                             message="lost a pin", trace="traces/split.json", step=3)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "traces").mkdir()
    (tmp_path / "other" / "traces" / "split.json").write_text("{}")
    (tmp_path / "other" / "r.json").write_text(json.dumps(bad))
    out = tmp_path / "out"
    res = runner.invoke(app, ["report", str(tmp_path / "run" / "r.json"),
                              str(tmp_path / "other" / "r.json"), str(tmp_path / "k.json"),
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    md = (out / "compliance.md").read_text()
    # the trace is copied into the report folder, under the run's name
    assert "| PIN-1 | MUST | PASS | [FAIL](traces/other-r/split.json) |" in md
    assert (out / "traces" / "other-r" / "split.json").read_text() == "{}"
    assert "kvconf replay" in md and "SplitDropsPins | E-6 | killed" in md
    html = (out / "index.html").read_text()
    assert html.startswith("<!doctype html>") and html.count("<svg") == 3  # 2 graphs, 1 chart
    assert "http" not in html.replace("http://www.w3.org/2000/svg", "")  # self-contained
    # a person reads the failures first: rule, step, what happened, the replay command
    assert html.index("<h2>Failures (1)</h2>") < html.index("Behaviours &times; engines") \
        < html.index("<h2>Runs</h2>")
    fail_row = html[html.index("<table class='f'>"):html.index("</table>",
                                                                html.index("<table class='f'>"))]
    assert "<abbr title=" in fail_row and ">PIN-1</abbr>" in fail_row  # no site: the plain ID
    assert "<td>3</td>" in fail_row and "[pinning] lost a pin" in fail_row
    assert f"kvconf replay {tmp_path / 'other' / 'traces' / 'split.json'} --engine other" \
        in fail_row and "href='traces/other-r/split.json'" in fail_row
    # behaviours no engine was judged on (NOT_SUPPORTED / NOT_APPLICABLE) fold away
    folded = html[html.index("<details>"):html.index("</details>")]
    assert "behaviours no engine was judged on" in folded and ">PIN-1<" not in folded
    # moved elsewhere, every link still opens
    moved = tmp_path / "elsewhere" / "compliance"
    shutil.move(out, moved)
    for href in re.findall(r"href='([^']+)'", (moved / "index.html").read_text()):
        assert (moved / href).is_file(), href


def test_rules_link_to_the_spec_site_when_it_is_given(tmp_path: Path):
    from kvconf.conformance.reporting.compliance import Inputs, build

    inputs = Inputs()
    r = _report(a=Status.FAIL)
    inputs.runs.append((tmp_path / "r.json", r))
    _, html_path = build(inputs, tmp_path / "out", spec_base="../spec/")
    html = html_path.read_text()
    assert "<a href='../spec/pinning/#PIN-2' title=" in html
    res = CliRunner().invoke(app, ["report", str(_save(tmp_path, r)), "--out",
                                   str(tmp_path / "o"), "--spec-url", "https://kv.example/spec"])
    assert res.exit_code == 0, res.output
    assert "href='https://kv.example/spec/pinning/#PIN-2'" in (tmp_path / "o" /
                                                               "index.html").read_text()


def _save(tmp_path: Path, r: Report) -> Path:
    p = tmp_path / "saved.json"
    p.write_text(r.model_dump_json())
    return p


def test_kvconf_report_refuses_unknown_files(tmp_path: Path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"format": "something/1"}))
    res = CliRunner().invoke(app, ["report", str(p), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "x.json: format" in res.output


def test_one_engine_at_several_revisions_gets_a_column_and_a_trace_folder_each(tmp_path: Path):
    """`.ci/tokenspeed` writes one ``report.json`` per revision, in folders named after them:
    each is its own column (by version) and its traces do not overwrite each other's."""
    from kvconf.conformance.reporting.compliance import Inputs, build

    inputs = Inputs()
    for rev in ("main-radix", "pr381"):
        r = _report(a=Status.FAIL)
        r.run_info.version = f"0.1.0 ({rev})"
        r.results[0].trace = "traces/a.json"
        (tmp_path / rev / "traces").mkdir(parents=True)
        (tmp_path / rev / "traces" / "a.json").write_text(json.dumps({"rev": rev}))
        inputs.runs.append((tmp_path / rev / "report.json", r))
    md_path, _ = build(inputs, tmp_path / "out", copy_traces=True)
    md = md_path.read_text()
    assert "| behaviour | level | reference 0.1.0 (main-radix) | reference 0.1.0 (pr381) |" in md
    assert "| main-radix-report.json | reference |" in md
    for rev in ("main-radix", "pr381"):
        copied = tmp_path / "out" / "traces" / f"{rev}-report" / "a.json"
        assert json.loads(copied.read_text()) == {"rev": rev}
