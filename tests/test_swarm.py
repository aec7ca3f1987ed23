"""Swarm configuration fuzzing: fuzz-scheduler-swarm draws each workload's configuration from
what the engine declares, so every pair of declared switches is played together, and the report
says which pairs a run reached (MAMBA-10, PLAN-9, L3-1, WIN-4 are judged in those mixes)."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest

from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.mutants.mamba import NoReuseWithMamba
from kvconf.conformance.oracles import Violation
from kvconf.conformance.reporting.report import Coverage
from kvconf.conformance.running.profiles import get_profile, parse_budget
from kvconf.conformance.running.runner import (
    not_supported,
    run_suite,
    select_cases,
    transition_coverage,
)
from kvconf.conformance.running.seeding import import_independent_draws
from kvconf.conformance.scheduler.generator import (
    declared_pairs,
    fuzz_sched,
    missing_switches,
    offered,
)
from kvconf.conformance.scheduler.scenarios import SCHED_SCENARIOS

R = ReferenceSchedulerAdapter


@pytest.mark.behaviours("MAMBA-10", "PLAN-9", "L3-1", "WIN-4", "PLAN-7")
def test_the_swarm_reaches_every_declared_pair_at_ci(tmp_path: Path) -> None:
    """The CI check: at --profile ci the reference passes the swarm and every pair of the
    switches it declares is played together (the report's feature_pairs; the CLI prints it)."""
    profile = get_profile("ci")
    report = run_suite("reference", EngineConfig(), seed_value=0, profile=profile,
                       budget=parse_budget(None, profile), report_path=tmp_path / "r.json",
                       cases=select_cases(["fuzz-scheduler-swarm"]))
    assert report.ok, [r.message for r in report.results]
    pairs = json.loads((tmp_path / "r.json").read_text())["run_info"]["coverage"][
        "feature_pairs"]
    assert pairs["total"] == len(declared_pairs(R.features)) == 27
    assert pairs["missed"] == [] and pairs["reached"] == pairs["total"], pairs


def test_a_pair_never_reached_is_listed() -> None:
    cover = Coverage(pairs=[("mamba", "mixed")])
    got = transition_coverage(cover, [f.value for f in R.features])["feature_pairs"]
    assert got["reached"] == 1 and "host_tier+mamba" in got["missed"]
    assert "l3_store+mamba" not in got["missed"]  # never combined (chapter mamba)


def test_the_swarm_draws_only_declared_switches_and_is_deterministic() -> None:
    bare = frozenset({Feature.SCHEDULER, Feature.SNAPSHOT})
    assert offered(bare) == ["publish_mid_flight", "mixed"]
    runs = []
    for _ in range(2):
        holder: dict = {}
        with import_independent_draws():
            fuzz_sched(R, None, 15, None, 3, holder, features=bare)
        assert all(a not in {"mamba", "l3_store", "sliding_window", "namespaces"}
                   for p in holder["pairs"] for a in p)
        runs.append((holder["trace"], sorted(holder["pairs"])))
    assert runs[0] == runs[1]


@pytest.mark.behaviours("MAMBA-10")
def test_the_swarm_catches_lost_hybrid_reuse() -> None:
    """NoReuseWithMamba (E-20) passes the old Mamba fuzz case (its window publishes nothing);
    the swarm's Mamba workloads without a window catch it."""
    with pytest.raises(Violation) as e, import_independent_draws():
        fuzz_sched(partial(R, scheduler_cls=NoReuseWithMamba), None, 120, None, 2, {},
                   features=R.features)
    assert "MAMBA-10" in e.value.behaviours


def test_require_pairs_fails_a_run_that_never_mixed_a_declared_pair(tmp_path: Path) -> None:
    """--require-pairs turns a blind spot into a failed run: fuzz-scheduler alone plays one
    configuration, so most pairs are never reached and the run exits 1 naming them, though
    every case passed; without the flag the same run exits 0."""
    from typer.testing import CliRunner

    from kvconf.conformance.cli import app

    args = ["run", "--engine", "reference", "--case", "fuzz-scheduler", "--budget", "5",
            "--quiet", "--examples-db", "none", "--report", str(tmp_path / "r.json")]
    strict = CliRunner().invoke(app, [*args, "--require-pairs"])
    assert strict.exit_code == 1, strict.output
    assert "declared feature pairs never reached" in strict.output
    assert "host_tier+mamba" in strict.output
    assert CliRunner().invoke(app, args).exit_code == 0
def _drawn(n: int = 60) -> list[str]:
    """The swarm's first ``n`` workloads at seed 0, drawn as a fuzz run draws them."""
    from hypothesis import HealthCheck, Phase, given, settings

    from kvconf.conformance.running.seeding import seeded
    from kvconf.conformance.scheduler.generator import swarm_workloads

    seen: list[str] = []

    @settings(max_examples=n, database=None, deadline=None, phases=(Phase.generate,),
              suppress_health_check=list(HealthCheck))
    @given(trace=swarm_workloads(R.features))
    def draw(trace) -> None:
        seen.append(trace.model_dump_json())

    with import_independent_draws():
        seeded(draw, 0)()
    return seen


@pytest.mark.behaviours("DET-1")
def test_draws_made_outside_a_fuzz_run_do_not_change_it() -> None:
    """Same seed, same traces, whatever ran before in the process: Hypothesis caches the
    constants a draw may take, the loaded modules' harvest included, so a draw outside a fuzz
    run (another test, a direct call of a generator) changed the next run's workloads, and a
    mutant the swarm killed alone survived it in the whole test suite."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    before = _drawn()

    # Draws of the kind the workloads make (a trace's seed is one of 0..1000), outside a run:
    # some take a constant of the loaded modules, and Hypothesis caches the ones in range.
    @settings(max_examples=20, database=None, deadline=None, phases=(Phase.generate,),
              suppress_health_check=list(HealthCheck))
    @given(st.lists(st.integers(0, 1000), min_size=50, max_size=50))
    def outside(_xs) -> None:
        pass

    outside()
    assert _drawn() == before


def _sched_cases_with_traces():
    """Every scheduler case that plays a fixed configuration, with a workload on it: each
    scenario's own trace, each fixed fuzz case's configuration(s) under a one-request workload."""
    from kvconf.conformance.running import runner
    from kvconf.conformance.scheduler.trace import SchedConfig, SchedTrace

    def on(config: SchedConfig) -> SchedTrace:
        return SchedTrace(name="w", config=config, seed=0,
                          arrivals=[{"at": 0, "rid": "a", "ns": 0, "tokens": [1, 2],
                                     "new_tokens": 1}])

    fuzz_configs = {
        "fuzz-scheduler": [SchedConfig()],
        "fuzz-scheduler-l3": [runner.L3_FUZZ], "fuzz-scheduler-adapters": [runner.ADAPTER_FUZZ],
        "fuzz-scheduler-window": [SchedConfig(sliding_window=3)],
        "fuzz-scheduler-mamba": list(runner.MAMBA_FUZZ)}
    cases = {c.name: c for c in select_cases(None)}
    for sc in SCHED_SCENARIOS:
        yield cases[sc.name], sc.trace
    for name, configs in fuzz_configs.items():
        for c in configs:
            yield cases[name], on(c)


@pytest.mark.parametrize("lacks", [Feature.HOST_TIER, Feature.L3_STORE, Feature.MAMBA,
                                   Feature.SLIDING_WINDOW, Feature.NAMESPACES])
def test_replay_refuses_exactly_what_the_run_path_does_not_run(lacks: Feature) -> None:
    """``kvconf replay`` refuses a trace for a switch (missing_switches) only where the run path
    makes the case that plays it NOT_SUPPORTED: host pages alone never are (fuzz-scheduler's
    default configuration has 32 and runs without a host tier), the L3 store, Mamba and a
    window are."""
    features = R.features - {lacks}
    checked = 0
    for case, trace in _sched_cases_with_traces():
        refused = bool(missing_switches(features, trace))
        skipped = not_supported(case, features, {}) is not None
        if refused:  # never a trace the run path plays on this engine
            assert skipped, (case.name, missing_switches(features, trace))
        if lacks in {Feature.L3_STORE, Feature.MAMBA, Feature.SLIDING_WINDOW} \
                and lacks in case.needs:  # and a trace of a case that needs such a switch is
            assert refused, case.name
        checked += 1
    assert checked > 10
    plain = next(t for c, t in _sched_cases_with_traces() if c.name == "fuzz-scheduler")
    assert plain.config.host_pages > 0 and missing_switches(features, plain) == []


@pytest.mark.behaviours("PLAN-3")
def test_a_mixed_only_engine_has_no_mixed_pairs_and_every_workload_is_mixed() -> None:
    """An engine that declares mixed_only computes every batch mixed (PLAN-3): the swarm offers
    it no mixed switch, so no pair with ``mixed`` is counted toward its coverage (a workload
    with the switch off would have played it on), and each drawn configuration says mixed, as
    it is played."""
    from kvconf.conformance.scheduler.draws import SeededDraws
    from kvconf.conformance.scheduler.generator import draw_swarm_config

    only = R.features | {Feature.MIXED_ONLY}
    assert "mixed" in offered(R.features) and "mixed" not in offered(only)
    assert not any("mixed" in p for p in declared_pairs(only))
    assert len(declared_pairs(only)) == len(declared_pairs(R.features)) - 7  # 7 other switches
    seen = [draw_swarm_config(SeededDraws(seed), only)[0].mixed for seed in range(30)]
    plain = [draw_swarm_config(SeededDraws(seed), R.features)[0].mixed for seed in range(30)]
    assert not all(plain)  # the same draws leave mixed off for an engine that has the switch
    assert seen and all(seen)
