"""A model's sliding window from its config (WIN-1, D381-6), checked through the kit."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
from planted_window import WindowFromTopLevelOnly

from conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter
from conformance.engine_config import EngineConfig
from conformance.errors import KitError
from conformance.model_config import model_window, with_model_window
from conformance.oracles import Violation
from conformance.profiles import get_profile, parse_budget
from conformance.runner import run_suite, select_cases
from conformance.sched_trace import SchedConfig
from conformance.window_cases import MODEL_CONFIGS, check_model_windows


@pytest.mark.behaviours("WIN-1")
@pytest.mark.parametrize(("name", "cfg", "want"), MODEL_CONFIGS, ids=[c[0] for c in MODEL_CONFIGS])
def test_the_kit_reads_each_sample_as_stated(name, cfg, want) -> None:
    if want is None:
        with pytest.raises(KitError, match="sliding_window"):
            model_window(cfg)
    else:
        assert model_window(cfg) == want


@pytest.mark.behaviours("WIN-1")
def test_a_config_file_switches_the_window_on(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "hybrid", "text_config": {"sliding_window": 3}}))
    assert with_model_window(SchedConfig(), path).sliding_window == 3
    path.write_text(json.dumps({"sliding_window": 4, "text_config": {"sliding_window": 8}}))
    with pytest.raises(KitError, match=r"config.json: contradictory .*text_config.sliding_window"):
        model_window(path)
    path.write_text(json.dumps({"sliding_window": "big"}))
    with pytest.raises(KitError, match="sliding_window: 'big'"):
        model_window(path)
    path.write_text("[1]")
    with pytest.raises(KitError, match="JSON object"):
        model_window(path)


@pytest.mark.behaviours("WIN-1")
def test_the_kit_case_passes_the_reference_and_catches_a_top_level_reader(tmp_path) -> None:
    assert check_model_windows(ReferenceSchedulerAdapter(SchedConfig())) == len(MODEL_CONFIGS)
    planted = partial(ReferenceSchedulerAdapter, scheduler_cls=WindowFromTopLevelOnly)
    with pytest.raises(Violation) as e:
        check_model_windows(planted(SchedConfig()))
    assert e.value.oracle == "window-config" and "WIN-1" in e.value.behaviours
    assert "nested-text-config" in e.value.message
    profile = get_profile("ci")
    report = run_suite("reference", EngineConfig(), seed_value=0, profile=profile,
                       budget=parse_budget("5", profile), report_path=tmp_path / "r.json",
                       cases=select_cases(["sched-window-from-model-config"]))
    assert report.ok and report.results[0].status.value == "PASS"
