"""``kvconf diff BASE HEAD``: the changes between two runs, and its exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvconf.conformance.cli import app
from kvconf.conformance.reporting.diff import diff_reports
from kvconf.conformance.reporting.report import CaseResult, Report, RunInfo, Status

runner = CliRunner()
S = Status


def _write(path: Path, engine: str = "eng", **cases: tuple) -> Path:
    """A run report with one result per case: (status,) or (status, oracle, behaviours)."""
    info = RunInfo(engine=engine, version="1", kvconf="x", features=[], config={}, seed=0,
                   profile="ci", budget="1", started="t")
    results = []
    for name, spec in cases.items():
        status = spec[0]
        oracle = spec[1] if len(spec) > 1 else None
        behaviours = spec[2] if len(spec) > 2 else ["PIN-2"]
        bad = status not in (S.PASS, S.NOT_SUPPORTED)
        results.append(CaseResult(
            case=name.replace("_", "-"), status=status, behaviours=behaviours,
            duration_s=0.1, oracle=oracle, message="broke" if bad else "",
            trace=f"traces/{name}.json" if bad else None, step=2 if bad else None))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(Report(run_info=info, results=results).summarize().model_dump_json())
    return path


def _pair(tmp_path: Path, base: dict, head: dict, head_engine: str = "eng"):
    return (_write(tmp_path / "base" / "r.json", **base),
            _write(tmp_path / "head" / "r.json", head_engine, **head))


def test_every_kind_of_change_is_sorted_out(tmp_path: Path):
    base, head = _pair(tmp_path, dict(
        same=(S.PASS,), breaks=(S.PASS,), unsupported_breaks=(S.NOT_SUPPORTED,),
        fixed=(S.FAIL, "pinning"), worse=(S.FAIL, "pinning"), moved=(S.FAIL, "pinning"),
        kept=(S.FAIL, "pinning"), dropped=(S.PASS,), dropped_fail=(S.FAIL, "pinning")),
        dict(same=(S.PASS,), breaks=(S.CRASH,), unsupported_breaks=(S.FAIL, "content"),
             fixed=(S.PASS,), worse=(S.TIMEOUT,), moved=(S.FAIL, "eviction", ["EVICT-1"]),
             kept=(S.FAIL, "pinning"), added=(S.FAIL, "content")))
    d = diff_reports(base, head)
    names = {k: [c.case for c in getattr(d, k)] for k in (
        "new_failures", "fixes", "status_changes", "finding_changes", "gone", "new")}
    assert names == {"new_failures": ["breaks", "unsupported-breaks"], "fixes": ["fixed"],
                     "status_changes": ["worse"], "finding_changes": ["moved"],
                     "gone": ["dropped", "dropped-fail"], "new": ["added"]}
    assert d.unchanged == 2 and d.regression
    assert d.new_failures[0].head.trace == str(tmp_path / "head" / "traces" / "breaks.json")


def _diff(*args: str):
    return runner.invoke(app, ["diff", *args])


def test_exit_0_without_a_regression_and_a_readable_table(tmp_path: Path):
    base, head = _pair(tmp_path, dict(a=(S.FAIL, "pinning"), b=(S.PASS,), c=(S.FAIL,)),
                       dict(a=(S.PASS,), b=(S.PASS,), d=(S.PASS,)))
    res = _diff(str(base), str(head))
    assert res.exit_code == 0, res.output
    assert "fixed" in res.output and "no regression: 0 new failures, 1 fixes" in res.output
    assert "2 cases gone" not in res.output and "1 cases gone (0 that passed)" in res.output


def test_exit_1_on_a_new_failure_with_its_finding(tmp_path: Path):
    base, head = _pair(tmp_path, dict(a=(S.PASS,)), dict(a=(S.FAIL, "pinning")))
    res = _diff(str(base), str(head))
    assert res.exit_code == 1, res.output
    assert "new failure" in res.output and "[pinning] PIN-2 at step 2: broke" in res.output
    assert "REGRESSION: 1 new failures" in res.output


def test_exit_1_when_a_passing_case_is_gone(tmp_path: Path):
    base, head = _pair(tmp_path, dict(a=(S.PASS,), b=(S.PASS,)), dict(a=(S.PASS,)))
    res = _diff(str(base), str(head), "--json")
    assert res.exit_code == 1, res.output
    doc = json.loads(res.stdout)
    assert doc["format"] == "kvconf-diff/1" and doc["regression"] is True
    assert [c["case"] for c in doc["gone"]] == ["b"] and doc["gone"][0]["head"] is None


def test_identical_runs_are_no_change(tmp_path: Path):
    base, head = _pair(tmp_path, dict(a=(S.PASS,), b=(S.FAIL, "x")),
                       dict(a=(S.PASS,), b=(S.FAIL, "x")))
    res = _diff(str(base), str(head), "--json")
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert doc["unchanged"] == 2 and not doc["regression"] and doc["new_failures"] == []


def test_another_engine_is_refused_unless_allowed(tmp_path: Path):
    base, head = _pair(tmp_path, dict(a=(S.PASS,)), dict(a=(S.PASS,)), head_engine="vllm")
    res = _diff(str(base), str(head))
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1
    assert "run_info.engine is 'vllm'" in res.output and "--allow-engine-change" in res.output
    assert _diff(str(base), str(head), "--allow-engine-change").exit_code == 0


@pytest.mark.parametrize("content, needle", [
    (None, "cannot read report"),
    ("{not json", "invalid JSON"),
    (json.dumps({"format": "kvconf-kill-matrix/1", "mutants": []}), "is not a run report"),
    (json.dumps({"format": "kvconf-report/2", "results": []}), "run_info"),
])
def test_bad_input_is_one_line_exit_2(tmp_path: Path, content, needle):
    good = _write(tmp_path / "good.json", a=(S.PASS,))
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    for args in ((good, bad), (bad, good)):
        res = _diff(*map(str, args))
        assert res.exit_code == 2, res.output
        assert needle in res.output and "bad.json" in res.output
        assert len(res.output.strip().splitlines()) == 1


def test_runs_with_another_seed_are_compared_with_a_note(tmp_path: Path):
    base, head = _pair(tmp_path, dict(a=(S.PASS,)), dict(a=(S.PASS,)))
    doc = json.loads(head.read_text())
    doc["run_info"]["seed"] = 9
    head.write_text(json.dumps(doc))
    res = _diff(str(base), str(head), "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["differ_in"] == ["seed"]
    assert "note: the runs differ in seed" in res.stderr


def test_a_rule_no_longer_judged_has_a_line_of_its_own_and_is_no_regression(tmp_path: Path):
    """BASE's engine declared a host tier, so its passing fuzz case judged HOST-3; HEAD's does
    not, so the same passing case no longer checks it. The cases are unchanged; the rule's
    verdict moved from PASS to not judged, and the diff says so on a line of its own."""
    import judged_report as jr

    before = jr.no_host_tier_report()
    before.results[0].judged = sorted([*jr.JUDGED, "HOST-3"])
    base, head = tmp_path / "base.json", tmp_path / "head.json"
    base.write_text(before.model_dump_json())
    head.write_text(jr.no_host_tier_report().model_dump_json())
    d = diff_reports(base, head)
    assert d.rules_no_longer_judged == ["HOST-3"] and d.rules_newly_judged == []
    assert d.unchanged == 3 and not d.regression and d.changed
    res = _diff(str(base), str(head))
    assert res.exit_code == 0, res.output
    row = next(line for line in res.output.splitlines() if "no longer judged" in line)
    assert "1 rules" in row and "PASS" in row and "not judged" in row and "HOST-3" in row
    assert "rules: 1 no longer judged, 0 newly judged" in res.output
    # The other way round: HOST-3 is newly judged. Against a report older than
    # kvconf-report/5 (no judged), every rule HEAD passes is newly judged.
    assert diff_reports(head, base).rules_newly_judged == ["HOST-3"]
    old = json.loads(head.read_text())
    old["format"] = "kvconf-report/4"
    for r in old["results"]:
        del r["judged"]
    base.write_text(json.dumps(old))
    d = diff_reports(base, head)
    assert d.rules_newly_judged == jr.JUDGED  # a failing case passes nothing
    assert d.rules_no_longer_judged == [] and not d.regression
