"""A report of an engine that declares no host tier, no KV events: its passing fuzz case cites
host and event rules (as ``fuzz-cache`` cites every cache rule) but judged only the rules a
check of which ran. Every view must pass only those (spec chapter faults, "Verdicts of a
rule")."""

from __future__ import annotations

from kvconf.conformance.reporting.report import CaseResult, Report, RunInfo, Status

# What the passing fuzz case judged, what it cites without judging, and what no case cites.
JUDGED = ["PIN-2", "TREE-4"]
CITED_ONLY = ["EVENT-1", "HOST-3"]
HELD_IN_FAILURE = "EVICT-1"  # judged by the failing case only: no verdict (it passes nothing)
BROKEN = "EVICT-2"
LACKING = "HOST-1"  # cited by a NOT_SUPPORTED case alone
UNCITED = "HOST-2"


def no_host_tier_report(engine: str = "dict-cache", version: str = "1.0") -> Report:
    info = RunInfo(engine=engine, version=version, kvconf="x", features=["cache"], config={},
                   seed=0, profile="ci", budget="60", started="2026-01-01T00:00:00")
    return Report(run_info=info, results=[
        CaseResult(case="fuzz-cache", status=Status.PASS, duration_s=1.0,
                   behaviours=[*JUDGED, *CITED_ONLY, LACKING], judged=list(JUDGED)),
        CaseResult(case="writeback-demote-loadback", status=Status.NOT_SUPPORTED,
                   behaviours=[LACKING], duration_s=0.0, message="engine lacks host_tier"),
        CaseResult(case="lru-victim-order", status=Status.FAIL, behaviours=[BROKEN],
                   duration_s=0.1, oracle="eviction", step=4, message="evicted the wrong page",
                   judged=[HELD_IN_FAILURE, BROKEN]),
    ]).summarize()
