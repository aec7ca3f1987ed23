"""Model configs whose sliding window an engine must read as the spec does (WIN-1, D381-6)."""

from __future__ import annotations

import time
from typing import Any

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.errors import EngineRejected
from kvconf.conformance.oracles.base import Violation
from kvconf.conformance.oracles.window import WindowConfigOracle
from kvconf.conformance.scheduler.trace import SchedConfig

# (name, config, the window it states; None = contradictory, to be refused)
MODEL_CONFIGS: tuple[tuple[str, dict[str, Any], int | None], ...] = (
    ("top-level", {"sliding_window": 4}, 4),
    ("nested-text-config", {"text_config": {"sliding_window": 3}}, 3),
    ("both-agree", {"sliding_window": 4, "text_config": {"sliding_window": 4}}, 4),
    ("switched-off", {"use_sliding_window": False, "sliding_window": 4096}, 0),
    ("null-window", {"sliding_window": None}, 0),
    ("full-attention", {"hidden_size": 64}, 0),
    ("levels-disagree", {"sliding_window": 4, "text_config": {"sliding_window": 8}}, None),
    ("switch-without-size", {"text_config": {"use_sliding_window": True}}, None),
)


def check_model_windows(engine) -> int:
    """Every sample config through ``engine.model_window``; returns how many were checked."""
    oracle = WindowConfigOracle()
    for name, cfg, want in MODEL_CONFIGS:
        got, refused = None, None
        try:
            got = engine.model_window(cfg)
        except EngineRejected as e:
            refused = str(e)
        oracle.check(name, cfg, got, refused, want)
    return len(MODEL_CONFIGS)


def window_config_case():
    """The kit case: the engine reads every sample config's window as the spec does."""
    from kvconf.conformance.reporting.report import CaseResult, Status
    from kvconf.conformance.running.runner import Case, _fail

    behaviours = ("WIN-1",)

    def run(ctx) -> CaseResult:
        t0 = time.perf_counter()
        try:
            n = check_model_windows(ctx.sched_factory(SchedConfig()))
        except Violation as v:
            return _fail("sched-window-from-model-config", behaviours, v, t0, None)
        return CaseResult(case="sched-window-from-model-config", status=Status.PASS,
                          behaviours=list(behaviours), steps=n,
                          duration_s=round(time.perf_counter() - t0, 4),
                          message="a model's window is read from the top level and the nested "
                          "text config; contradictory configs are refused (D381-6)")

    return Case("sched-window-from-model-config", behaviours,
                frozenset({Feature.SCHEDULER, Feature.SLIDING_WINDOW, Feature.MODEL_CONFIG}), run)
