"""The TokenSpeed adapter against the real extension, where it is installed (built from the
engine's sources; skipped otherwise). A stand-in proves the kit; only this proves the adapter."""

from __future__ import annotations

import importlib.util
from importlib import metadata
from pathlib import Path

import pytest

from kvconf.conformance.adapters.tokenspeed import keeps_mamba_state
from kvconf.conformance.adapters.tokenspeed_blockpool import (
    has_state_groups,
    has_window_groups,
    is_block_pool,
)
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.reporting.report import Status
from kvconf.conformance.running.profiles import get_profile, parse_budget
from kvconf.conformance.running.runner import run_suite, select_cases

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tokenspeed_scheduler") is None,
                                reason="tokenspeed_scheduler is not installed (build it from "
                                "the tokenspeed sources)")

SCHED_CASES = ["sched-abort-everywhere", "sched-failed-writebacks", "sched-no-mixed-batches",
               "fuzz-scheduler", "fuzz-scheduler-tight"]
L3_CASES = ["sched-l3-host-moves", "sched-l3-tight-host", "fuzz-scheduler-l3"]
MAMBA_CASES = ["sched-mamba-reuse", "sched-mamba-tight-slots", "sched-mamba-finish-fallback"]


@pytest.mark.behaviours("FAULT-3", "REQ-6")
def test_the_adapter_speaks_the_real_binding(tmp_path: Path) -> None:
    """Every scheduler case runs past its first step: nothing is ERROR, no result is the adapter
    misreading the binding, a native crash is a CRASH of its case, and what the adapter claims
    matches what the installed build offers."""
    import tokenspeed_scheduler as ts

    profile = get_profile("ci")
    cases = SCHED_CASES + (L3_CASES if hasattr(ts.Cache, "BackUpDoneEvent") else []) \
        + (MAMBA_CASES if keeps_mamba_state(ts) or has_state_groups(ts) else [])
    report = run_suite("tokenspeed", EngineConfig(), seed_value=0, profile=profile,
                       budget=parse_budget("10", profile), report_path=tmp_path / "r.json",
                       cases=select_cases(cases), jobs=1, database=None)
    assert report.run_info.version.startswith(metadata.version("tokenspeed-scheduler"))
    features = set(report.run_info.features)
    assert Feature.IGNORES_UNKNOWN_EVENTS.value in features
    assert (Feature.KV_EVENTS.value in features) == hasattr(ts.Scheduler, "drain_kv_events")
    assert (Feature.NAMESPACES.value in features) == hasattr(ts.RequestSpec(), "lora_id")
    assert (Feature.L3_STORE.value in features) == hasattr(ts.Cache, "BackUpDoneEvent")
    if is_block_pool(ts):  # cache groups: a window group, a State group (today's main)
        assert (Feature.SLIDING_WINDOW.value in features) == has_window_groups(ts)
        assert (Feature.MAMBA.value in features) == has_state_groups(ts)
        return
    assert (Feature.SLIDING_WINDOW.value in features) == hasattr(ts.SchedulerConfig(),
                                                                 "has_sliding_window")
    assert (Feature.MAMBA.value in features) == keeps_mamba_state(ts)
    assert (Feature.MAMBA_CHECKPOINT_SLOT.value in features) == keeps_mamba_state(ts)
    for r in report.results:
        assert r.status is not Status.ERROR, (r.case, r.message, r.traceback)
        assert r.status is not Status.NOT_SUPPORTED, (r.case, r.message)
        for slip in ("AttributeError", "TypeError", "has no attribute", "incompatible function"):
            assert slip not in r.message, (r.case, r.message)
