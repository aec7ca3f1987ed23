"""The L3 tree checks that skip a snapshot whose parts are those of one that held
(``L3Oracle.tree``, ``L3Runtime.check_tree``; ``Oracle.incremental``) give the very verdicts of
the full checks: seeded workloads of the L3 fuzz case are played twice, incremental and full,
against the reference and against every L3 mutant, and both plays must end the same way (passed
with the same plans, or the same rule broken with the same message)."""

from __future__ import annotations

from functools import partial

import pytest

from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter as R
from kvconf.conformance.mutants.scheduler import L3_PLANTED, PLANTED_SCHED
from kvconf.conformance.oracles import Oracle, Violation
from kvconf.conformance.running.runner import L3_FUZZ
from kvconf.conformance.scheduler.generator import play_sched, seeded_workload

SEEDS = range(8)


def _verdict(factory, seed: int, incremental: bool, monkeypatch: pytest.MonkeyPatch) -> tuple:
    monkeypatch.setattr(Oracle, "incremental", incremental)
    trace = seeded_workload(seed, L3_FUZZ, R.features)
    try:
        driver = play_sched(factory, trace)
    except Violation as v:
        return (v.oracle, v.behaviours, v.message)
    return ("passed", driver.log)


def _outcomes(factory, monkeypatch) -> list[tuple]:
    outcomes = []
    for seed in SEEDS:
        full = _verdict(factory, seed, False, monkeypatch)
        assert _verdict(factory, seed, True, monkeypatch) == full, seed
        outcomes.append(full)
    return outcomes


def test_incremental_l3_checks_judge_the_reference_as_the_full_ones(monkeypatch):
    assert all(o[0] == "passed" for o in _outcomes(R, monkeypatch))


def test_incremental_l3_checks_judge_every_l3_mutant_as_the_full_ones(monkeypatch):
    found = sum(
        any(
            o[0] != "passed"
            for o in _outcomes(partial(R, scheduler_cls=PLANTED_SCHED[n]), monkeypatch)
        )
        for n in sorted(L3_PLANTED)
    )
    assert found >= len(L3_PLANTED) // 2, "the workloads reach too few L3 mutants"
