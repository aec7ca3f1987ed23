"""Every fuzz case reports the steps it played, so throughput figures are never a rate of zero:
operations at the cache and hybrid levels, plans at the scheduler level, config reads for the
model-config case."""

from __future__ import annotations

from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.reporting.report import Status
from kvconf.conformance.running.profiles import PROFILES, Budget
from kvconf.conformance.running.runner import run_suite, select_cases

CASES = ["fuzz-scheduler", "fuzz-scheduler-mamba", "fuzz-scheduler-model-config"]


def test_scheduler_fuzz_cases_count_their_plans(tmp_path):
    report = run_suite("reference", EngineConfig(), seed_value=0, profile=PROFILES["ci"],
                       budget=Budget(examples=3), report_path=tmp_path / "r.json",
                       cases=select_cases(CASES), jobs=0)
    by = {r.case: r for r in report.results}
    assert set(by) == set(CASES)
    for name, r in by.items():
        assert r.status is Status.PASS, (name, r.message)
        assert r.steps and r.steps > 0, name
        assert sum(u.steps or 0 for u in r.units or ()) == r.steps, name
    # a scheduler workload plays several plans each; a config read is one call each
    assert by["fuzz-scheduler"].steps > by["fuzz-scheduler"].examples
    assert by["fuzz-scheduler-model-config"].steps == by["fuzz-scheduler-model-config"].examples
