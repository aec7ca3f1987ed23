"""DET-1's replay of a recorded play gives the verdicts the second full play gave.

The second play of a workload used to be a whole driver with every oracle; now it hands a fresh
engine the first play's calls (``kvconf.conformance.scheduler.tape``) and compares the plans and
the probes' answers. These tests play the old way and the new way side by side: on seeded swarm
workloads and every hand-written workload, for the reference and every scheduler mutant, the two
give the same verdict (the same rule, oracle and message, or none); engines that do not answer
alike twice are caught both ways.
"""

from __future__ import annotations

import os
from functools import partial

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter
from kvconf.conformance.mutants import all_mutants
from kvconf.conformance.oracles import Violation
from kvconf.conformance.oracles.determinism import DeterminismOracle
from kvconf.conformance.running.seeding import import_independent_draws, seeded
from kvconf.conformance.scheduler.generator import _driver, play_sched, swarm_workloads
from kvconf.conformance.scheduler.scenarios import SCHED_SCENARIOS
from kvconf.conformance.scheduler.trace import SchedTrace
from kvconf.reference.scheduler import Scheduler

R = ReferenceSchedulerAdapter
SCHED_MUTANTS = [m for m in all_mutants() if m.level == "scheduler"]
LONG_WORKLOADS = {"ci": 12, "default": 100, "nightly": 300}  # per seed, by profile


def _workloads(n: int, seed: int) -> list[SchedTrace]:
    """The swarm's first ``n`` workloads at ``seed``, over every switch the reference offers."""
    out: list[SchedTrace] = []

    @settings(max_examples=n, database=None, deadline=None, phases=(Phase.generate,),
              suppress_health_check=list(HealthCheck))
    @given(trace=swarm_workloads(R.features))
    def draw(trace) -> None:
        out.append(trace)

    with import_independent_draws():
        seeded(draw, seed)()
    return out


SCENARIOS = [sc.trace for sc in SCHED_SCENARIOS]
WORKLOADS = _workloads(24, 0) + SCENARIOS


def _verdict(play) -> tuple | None:
    try:
        play()
    except Violation as v:
        return (v.oracle, v.behaviours, v.message, v.step)
    return None


def _full_replay(factory, trace: SchedTrace) -> None:
    """The old way: the first play, then a second driver with every oracle, logs compared."""
    first = play_sched(factory, trace, determinism=False)
    again = _driver(factory, trace).run()
    DeterminismOracle().compare(first.log, again)


def _compare(factory, traces) -> int:
    """Asserts both ways agree on every workload; returns how many failed (either way)."""
    failed = 0
    for trace in traces:
        old = _verdict(lambda t=trace: _full_replay(factory, t))
        new = _verdict(lambda t=trace: play_sched(factory, t))
        assert old == new, (trace.model_dump_json(), old, new)
        failed += old is not None
    return failed


@pytest.mark.behaviours("DET-1")
def test_the_reference_passes_both_ways() -> None:
    assert _compare(R, WORKLOADS) == 0


@pytest.mark.behaviours("DET-1")
@pytest.mark.parametrize("mutant", SCHED_MUTANTS, ids=[m.name for m in SCHED_MUTANTS])
def test_every_scheduler_mutant_gets_the_same_verdict_both_ways(mutant) -> None:
    _compare(mutant.factory(), WORKLOADS[:12] + SCENARIOS)


@pytest.mark.fuzz
@pytest.mark.behaviours("DET-1")
@pytest.mark.parametrize("mutant", [None, *SCHED_MUTANTS],
                         ids=["reference", *(m.name for m in SCHED_MUTANTS)])
def test_same_verdicts_on_many_workloads(mutant) -> None:
    """The long version (``-m fuzz``): swarm workloads at ``KVCONF_FUZZ_SEEDS`` seeds (default
    three), as many per seed as ``KVCONF_PROFILE`` says (as the suite reads it: ci 12, default
    100, nightly 300), so the README's one-seed smoke at ``ci`` stays short."""
    factory = R if mutant is None else mutant.factory()
    per_seed = LONG_WORKLOADS[os.environ.get("KVCONF_PROFILE", "ci")]
    for seed in range(1, 1 + int(os.environ.get("KVCONF_FUZZ_SEEDS", "3"))):
        _compare(factory, _workloads(per_seed, seed))


class _Alternating(Scheduler):
    """Every second instance admits the latest arrival first: a second play differs."""

    made = 0

    def __init__(self, *a, **k) -> None:
        super().__init__(*a, **k)
        type(self).made += 1
        self.flip = type(self).made % 2 == 0

    def _ordered(self, *states):
        out = super()._ordered(*states)
        return out[::-1] if self.flip else out


class _ProbeFlip(R):
    """Every second instance takes an unknown request's Abort without a word."""

    made = 0

    def __init__(self, *a, **k) -> None:
        super().__init__(*a, **k)
        type(self).made += 1
        self.flip = type(self).made % 2 == 0

    def advance(self, events) -> None:
        if self.flip and any(getattr(e, "rid", "").startswith("nobody-") for e in events):
            return
        super().advance(events)


def _fresh(play):
    """``play`` with the instance counts reset: its first engine is the one that answers right."""
    _Alternating.made = _ProbeFlip.made = 0
    return _verdict(play)


@pytest.mark.behaviours("DET-1")
@pytest.mark.parametrize("engine", [partial(R, scheduler_cls=_Alternating), _ProbeFlip],
                         ids=["plans", "probes"])
def test_an_engine_that_differs_the_second_time_is_caught_both_ways(engine) -> None:
    """The old replay may name another rule its second play broke first; both find it, on the
    same workloads."""
    for trace in WORKLOADS:
        old = _fresh(lambda t=trace: _full_replay(engine, t))
        new = _fresh(lambda t=trace: play_sched(engine, t))
        assert (old is None) == (new is None), (trace.model_dump_json(), old, new)
        if new is not None and old[1] == ("DET-1",):
            assert new == old
    assert any(_fresh(lambda t=trace: play_sched(engine, t)) for trace in WORKLOADS)


@pytest.mark.behaviours("DET-1")
def test_a_probe_answered_otherwise_the_second_time_is_det_1() -> None:
    """The replay tells which probe: the first run rejected it, the second took it."""
    got = [_fresh(lambda t=sc.trace: play_sched(_ProbeFlip, t)) for sc in SCHED_SCENARIOS]
    found = [v for v in got if v is not None]
    assert found and all(v[1] == ("DET-1",) for v in found)
    assert all("was rejected in the first run and accepted in the second" in v[2]
               for v in found)
