"""Model configs whose sliding window an engine must read as the spec does (WIN-1, D381-6; by
its config class where it declares config_class_window, WIN-5): a
hand-written set, and generated ones (``model_configs``) for the fuzz case."""

from __future__ import annotations

import time
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.errors import EngineRejected
from kvconf.conformance.oracles.base import Violation
from kvconf.conformance.oracles.window import WindowConfigOracle
from kvconf.conformance.reporting.report import CaseResult, Status, UnitResult
from kvconf.conformance.running import judged
from kvconf.conformance.running.cases import Case, fail_result
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


def check_model_window(engine, oracle: WindowConfigOracle, name: str, cfg: dict[str, Any],
                       want: int | None) -> None:
    """One config through ``engine.model_window``, judged against the window it states."""
    got, refused = None, None
    try:
        got = engine.model_window(cfg)
    except EngineRejected as e:
        refused = str(e)
    oracle.check(name, cfg, got, refused, want)
    judged.record(oracle.behaviours)  # a check per config: set updates, not a step's cost


def check_model_windows(engine) -> int:
    """Every sample config through ``engine.model_window``; returns how many were checked."""
    oracle = WindowConfigOracle(frozenset(engine.features))
    for name, cfg, want in MODEL_CONFIGS:
        check_model_window(engine, oracle, name, cfg, want)
    return len(MODEL_CONFIGS)


# ----------------------------------------------------------------------------- generated configs
# What one level of a config (the top level, or the nested text_config) states, each with the
# keys that say it: nothing, a window of k, no window (null, or the switch off whatever size is
# kept beside it), or a switch that is on with no size (refused).
NOTHING, BAD = "nothing", "switch on, no size"
# Keys a config carries beside the window, which say nothing about it.
NOISE: dict[str, Any] = {"model_type": "hybrid", "hidden_size": 64, "num_hidden_layers": 2,
                         "vocab_size": 3, "max_position_embeddings": 4096}
SIZES = st.one_of(st.integers(1, 8), st.sampled_from([128, 4096, 32768]))


@st.composite
def _level(draw) -> tuple[dict[str, Any], str | int]:
    """The keys of one level and what they state (NOTHING, BAD or a window, 0 = none)."""
    kind = draw(st.sampled_from(["nothing", "size", "size", "null", "off", "on-without-size"]))
    if kind == "nothing":
        return {}, NOTHING
    if kind == "size":
        k = draw(SIZES)
        return ({"sliding_window": k, "use_sliding_window": True} if draw(st.booleans())
                else {"sliding_window": k}), k
    if kind == "null":
        return {"sliding_window": None}, 0
    if kind == "off":  # a size kept beside the switch is a leftover, not a window
        kept = draw(st.one_of(st.none(), st.just("absent"), SIZES))
        keys: dict[str, Any] = {"use_sliding_window": False}
        if kept != "absent":
            keys["sliding_window"] = kept
        return keys, 0
    return ({"use_sliding_window": True, "sliding_window": None} if draw(st.booleans())
            else {"use_sliding_window": True}), BAD


@st.composite
def _mapping(draw, keys: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``keys`` and some noise in a drawn order (an engine must not depend on key order)."""
    items = list(keys.items()) + [(k, NOISE[k]) for k in sorted(NOISE)
                                  if draw(st.booleans())] + list(extra.items())
    return dict(draw(st.permutations(items)))


@st.composite
def model_configs(draw) -> tuple[str, dict[str, Any], int | None]:
    """A Hugging Face style model config built from what its top level and its nested
    ``text_config`` (absent, empty or stating something) each state, with the window WIN-1
    reads from it: the one window every level that says something states (0 when none does),
    or None where a switch is on with no size or two levels state different windows (to be
    refused). Deterministic under Hypothesis's seed."""
    top_keys, top = draw(_level())
    said = [top]
    nested: dict[str, Any] = {}
    text = draw(st.sampled_from(["absent", "present"]))
    if text == "present":
        sub_keys, sub = draw(_level())
        said.append(sub)
        nested = {"text_config": draw(_mapping(sub_keys, {}))}
    cfg = draw(_mapping(top_keys, nested))
    stated = [w for w in said if w != NOTHING]
    refused = BAD in stated or len(set(stated)) > 1
    want = None if refused else int(stated[0]) if stated else 0
    where = said[1] if len(said) > 1 else "absent"
    return f"generated (top level: {top}; text_config: {where})", cfg, want


def window_config_fuzz_case() -> Case:
    """The fuzz case: generated model configs (``model_configs``), each read by the engine as
    the spec does, so WIN-1 has a fuzz path beside the hand-written set."""
    name, behaviours = "fuzz-scheduler-model-config", ("WIN-1", "WIN-5")
    doc = ("generated model configs (a window at the top level, in text_config or both, null, "
           "switched off or on without a size, beside unrelated keys in any order) are read as "
           "the spec reads them")

    def run(ctx) -> CaseResult:
        from kvconf.conformance.running.seeding import (
            import_independent_draws,
            seeded,
            stream_seed,
        )

        t0 = time.perf_counter()
        budget, stream = ctx.stream()
        engine = ctx.sched_factory(SchedConfig())
        oracle = WindowConfigOracle(frozenset(engine.features))
        index, of = (ctx.unit.index, ctx.unit.of) if ctx.unit is not None else (0, 1)
        seen = [0]
        deadline = None if budget.seconds is None else time.perf_counter() + budget.seconds

        def unit(status: Status) -> list[UnitResult]:
            # a step is one config the engine read (one model_window call per example)
            return [UnitResult(index=index, of=of, status=status, examples=seen[0],
                               steps=seen[0])]

        k = 0
        try:
            with import_independent_draws():
                while True:
                    n = budget.examples - seen[0] if budget.examples is not None else 200
                    if n <= 0:
                        break

                    @settings(max_examples=n, deadline=None, database=ctx.db(name),
                              print_blob=False, suppress_health_check=list(HealthCheck),
                              report_multiple_bugs=False,
                              phases=(Phase.explicit, Phase.reuse, Phase.generate))
                    @given(drawn=model_configs())
                    def test(drawn) -> None:
                        seen[0] += 1
                        check_model_window(engine, oracle, *drawn)

                    seeded(test, stream_seed(ctx.seed, stream, k), ctx.db(name))()
                    k += 1
                    if deadline is None or time.perf_counter() >= deadline:
                        break
        except Violation as v:
            return fail_result(name, behaviours, v, t0, None, examples=seen[0],
                               units=unit(Status.FAIL))
        return CaseResult(case=name, status=Status.PASS, behaviours=list(behaviours),
                          duration_s=round(time.perf_counter() - t0, 4), examples=seen[0],
                          steps=seen[0], message=doc, units=unit(Status.PASS))

    return Case(name, behaviours,
                frozenset({Feature.SCHEDULER, Feature.SLIDING_WINDOW, Feature.MODEL_CONFIG}), run,
                fuzz=True, doc=doc)


def window_config_case():
    """The kit case: the engine reads every sample config's window as the spec does (by its
    config class where it declares config_class_window, WIN-5)."""
    behaviours = ("WIN-1", "WIN-5")

    def run(ctx) -> CaseResult:
        t0 = time.perf_counter()
        try:
            n = check_model_windows(ctx.sched_factory(SchedConfig()))
        except Violation as v:
            return fail_result("sched-window-from-model-config", behaviours, v, t0, None)
        return CaseResult(case="sched-window-from-model-config", status=Status.PASS,
                          behaviours=list(behaviours), steps=n,
                          duration_s=round(time.perf_counter() - t0, 4),
                          message="a model's window is read from the top level and the nested "
                          "text config; contradictory configs are refused (D381-6)")

    return Case("sched-window-from-model-config", behaviours,
                frozenset({Feature.SCHEDULER, Feature.SLIDING_WINDOW, Feature.MODEL_CONFIG}), run)
