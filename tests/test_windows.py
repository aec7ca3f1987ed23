"""A model's sliding window from its config (WIN-1, D381-6), checked through the kit."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest
from planted_window import WindowFromTopLevelOnly

from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.model_config import model_window, with_model_window
from kvconf.conformance.errors import KitError
from kvconf.conformance.mutants.scheduler import PLANTED_SCHED
from kvconf.conformance.oracles import Violation
from kvconf.conformance.running.profiles import get_profile, parse_budget
from kvconf.conformance.running.runner import run_suite, select_cases
from kvconf.conformance.scheduler.generator import play_sched
from kvconf.conformance.scheduler.scenarios import SCHED_SCENARIOS
from kvconf.conformance.scheduler.trace import SchedConfig
from kvconf.conformance.scheduler.window_cases import MODEL_CONFIGS, check_model_windows
from kvconf.reference.scheduler import Scheduler


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


class _PublishesWindowPrefix(Scheduler):
    """A scheduler for a runtime that keeps the first W positions (WIN-2): under a window it
    publishes, mid-flight and at finish, the whole pages within them, and nothing past them."""

    def __init__(self, config):
        super().__init__(config)
        self.w = config.sliding_window

    def _publish(self, r, upto):
        if not self.w:
            return super()._publish(r, upto)
        cap = max(r.shared, self.w // self.p) * self.p  # whole pages in the first W positions
        saved = self.config
        self.config = replace(saved, sliding_window=0)
        try:
            return super()._publish(r, min(upto, cap))
        finally:
            self.config = saved

    def _apply(self, ev):  # mid-flight publish under the window too (capped by _publish)
        saved = self.config
        self.config = replace(saved, sliding_window=0)
        try:
            return super()._apply(ev)
        finally:
            self.config = saved


class _WindowPrefixAdapter(ReferenceSchedulerAdapter):
    features = ReferenceSchedulerAdapter.features | {Feature.KEEPS_WINDOW_PREFIX}

    def __init__(self, config, scheduler_cls=_PublishesWindowPrefix):
        super().__init__(config, scheduler_cls)


@pytest.mark.behaviours("WIN-2", "PLAN-8")
def test_a_runtime_that_keeps_the_window_prefix_is_judged_by_it() -> None:
    """Publishing the pages within the first W positions passes when the engine declares the
    runtime that keeps them, fails when it does not, and publishing past them fails either
    way."""
    trace = next(sc.trace for sc in SCHED_SCENARIOS if sc.name == "sched-sliding-window")
    wide = trace.model_copy(update={"config": trace.config.model_copy(
        update={"sliding_window": 4})})
    play_sched(_WindowPrefixAdapter, wide)  # declared: no violation
    undeclared = type("Undeclared", (_WindowPrefixAdapter,),
                      {"features": ReferenceSchedulerAdapter.features})
    with pytest.raises(Violation) as e:
        play_sched(undeclared, wide)
    assert "PLAN-8" in e.value.behaviours
    everything = type("PublishesAll", (_WindowPrefixAdapter,), {"__init__": lambda self, c: (
        ReferenceSchedulerAdapter.__init__(self, c, PLANTED_SCHED["PublishesUnderWindow"]))})
    with pytest.raises(Violation) as e:
        play_sched(everything, wide)
    assert "PLAN-8" in e.value.behaviours
