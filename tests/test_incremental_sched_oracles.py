"""At the scheduler level, the oracles that skip what they judged already (``Oracle.incremental``:
HOST-10's transfers and POOL-6's counts against an unchanged snapshot, the request states and
EVENT-6's device tier against the state of the last snapshot that held, the L3 tree checks) give
the very verdicts of the full checks: seeded swarm workloads are played twice, incremental and
full, against the reference and against every scheduler mutant, and both plays must end the same
way (passed, or the same rule broken with the same message). The L3 tree checks are played on
the L3 fuzz case's workloads too, against the reference and every L3 mutant."""

from __future__ import annotations

from functools import partial

import pytest

from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter as R
from kvconf.conformance.mutants.mamba import PLANTED_MAMBA
from kvconf.conformance.mutants.scheduler import L3_PLANTED, PLANTED_SCHED
from kvconf.conformance.mutants.window import PLANTED_WINDOW
from kvconf.conformance.oracles import Oracle, Violation
from kvconf.conformance.running.runner import L3_FUZZ
from kvconf.conformance.scheduler.generator import play_sched, seeded_workload

MUTANTS = {**PLANTED_SCHED, **PLANTED_MAMBA, **PLANTED_WINDOW}
SEEDS = range(10)


def _verdict(factory, seed: int, incremental: bool, monkeypatch: pytest.MonkeyPatch,
             config=None) -> tuple:
    monkeypatch.setattr(Oracle, "incremental", incremental)
    trace = seeded_workload(seed, config, R.features)
    try:
        driver = play_sched(factory, trace)
    except Violation as v:
        return (v.oracle, v.behaviours, v.message)
    return ("passed", driver.log)


def _same_both_ways(factory, monkeypatch, config=None, seeds=SEEDS) -> list[tuple]:
    """Each seed's workload (swarm, or of ``config``) played incremental and full: the same."""
    outcomes = []
    for seed in seeds:
        full = _verdict(factory, seed, False, monkeypatch, config)
        fast = _verdict(factory, seed, True, monkeypatch, config)
        assert fast == full, seed
        outcomes.append(full)
    return outcomes


def test_incremental_sched_oracles_judge_the_reference_as_the_full_ones(monkeypatch):
    assert all(o[0] == "passed" for o in _same_both_ways(R, monkeypatch))


def test_incremental_sched_oracles_judge_every_scheduler_mutant_as_the_full_ones(monkeypatch):
    found = 0
    for name in sorted(MUTANTS):
        outcomes = _same_both_ways(partial(R, scheduler_cls=MUTANTS[name]), monkeypatch)
        found += any(o[0] != "passed" for o in outcomes)
    assert found >= len(MUTANTS) // 2, "the workloads reach too few mutants to compare verdicts"


# The L3 tree checks (``L3Oracle.tree``, ``L3Runtime.check_tree``) on the L3 fuzz case's
# workloads, which the swarm reaches less often.
def test_incremental_l3_checks_judge_the_reference_as_the_full_ones(monkeypatch):
    outcomes = _same_both_ways(R, monkeypatch, L3_FUZZ, range(8))
    assert all(o[0] == "passed" for o in outcomes)


def test_incremental_l3_checks_judge_every_l3_mutant_as_the_full_ones(monkeypatch):
    found = sum(
        any(o[0] != "passed" for o in _same_both_ways(
            partial(R, scheduler_cls=PLANTED_SCHED[n]), monkeypatch, L3_FUZZ, range(8)))
        for n in sorted(L3_PLANTED))
    assert found >= len(L3_PLANTED) // 2, "the workloads reach too few L3 mutants"
