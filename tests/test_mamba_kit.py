"""Mamba state through the kit (spec chapter mamba): the reference passes with Mamba on, and
each planted Mamba defect is caught by an oracle while a workload runs."""

from __future__ import annotations

from functools import partial

import pytest
from planted_mamba import PLANTED_MAMBA

from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter
from kvconf.conformance.oracles import Violation
from kvconf.conformance.runtime.memory import POISON, ShadowStates
from kvconf.conformance.scheduler.generator import fuzz_sched, play_sched
from kvconf.conformance.scheduler.scenarios import SCHED_SCENARIOS
from kvconf.conformance.scheduler.trace import SchedConfig, SchedTrace
from kvconf.reference.plan import CopyOp
from kvconf.reference.scheduler import Scheduler
from kvconf.reference.tiers import Tier

MAMBA_TIGHT = SchedConfig(mamba=True, device_pages=10, host_pages=8, max_tokens=6, max_batch=3,
                          max_slots=4, mamba_slots=6, mamba_host_slots=3)

# Defect -> (a workload that catches it, the oracle reporting it, a behaviour it cites).
CATCHES = {
    "MambaUnitsDropped": ("sched-mamba-retract", "mamba-content", "MAMBA-2"),
    "HostEvictionDropsEntry": ("sched-mamba-tight-slots", "mamba-ownership", "MAMBA-5"),
    "ReusesWithoutState": ("sched-mamba-reuse", "mamba-content", "MAMBA-3"),
    "AnyDepthForReuse": ("sched-mamba-retract", "mamba-content", "MAMBA-3"),
    "RetractStateUnprotected": ("sched-mamba-retract", "mamba-content", "MAMBA-1"),
    "SharedResumeSource": ("sched-mamba-reuse", "mamba-content", "MAMBA-6"),
    "FinishKeepsCheckpoint": ("sched-mamba-reuse", "mamba-ownership", "MAMBA-8"),
    "NoWorkingFallback": ("sched-mamba-finish-fallback", "mamba-ownership", "MAMBA-7"),
    "NoReuseWithMamba": ("sched-mamba-reuse", "hybrid-reuse", "MAMBA-10"),
    # The state of a shorter prefix goes at a finish while a slot is free.
    "DropsShorterStates": ("sched-mamba-reuse", "mamba-retention", "MAMBA-12"),
}


def factory(cls=None):
    return ReferenceSchedulerAdapter if cls is None else partial(ReferenceSchedulerAdapter,
                                                                 scheduler_cls=cls)


def scenario(name: str):
    return next(s for s in SCHED_SCENARIOS if s.name == name)


def test_every_planted_mamba_defect_has_an_expected_catch() -> None:
    assert set(CATCHES) == set(PLANTED_MAMBA)


@pytest.mark.behaviours("MAMBA-1", "MAMBA-2", "MAMBA-3", "MAMBA-4", "MAMBA-5", "MAMBA-6",
                        "MAMBA-8", "MAMBA-10", "MAMBA-12")
@pytest.mark.parametrize("name", sorted(PLANTED_MAMBA))
def test_a_mamba_workload_catches_planted_defect(name: str) -> None:
    workload, oracle, behaviour = CATCHES[name]
    sc = scenario(workload)
    with pytest.raises(Violation) as e:
        play_sched(factory(PLANTED_MAMBA[name]), sc.trace)
    assert e.value.oracle == oracle and behaviour in e.value.behaviours, e.value
    play_sched(factory(), sc.trace)


@pytest.mark.behaviours("MAMBA-1", "MAMBA-3", "MAMBA-4", "MAMBA-7", "MAMBA-8")
def test_the_reference_survives_fuzzing_with_mamba() -> None:
    fuzz_sched(factory(), MAMBA_TIGHT, 40, None, 5, {})


@pytest.mark.behaviours("MAMBA-2", "MAMBA-4", "MAMBA-7")
def test_mamba_workloads_move_states_with_the_kv() -> None:
    """The workloads really exercise the chapter: states reused from device and from host,
    state units in writebacks and loadbacks, a recovery from a retract state."""
    kinds: set[str] = set()
    seen: list = []

    class Spy(Scheduler):
        def next_plan(self):
            plan = super().next_plan()
            seen.append(plan)
            return plan

    for name in ("sched-mamba-reuse", "sched-mamba-retract", "sched-mamba-tight-slots"):
        play_sched(factory(Spy), scenario(name).trace)
    for plan in seen:
        for op in (*plan.loadbacks, *plan.writebacks):
            if op.mamba:
                kinds.add(f"{op.kind}{'-retract' if op.retract else ''}")
                assert all(k in ("kv", "mamba") for k, _s, _d in op.units())
        for row in plan.rows:
            if row.mamba_src >= 0:
                kinds.add("resume-in-place")
    assert kinds >= {"loadback", "writeback", "writeback-retract", "resume-in-place"}, kinds


@pytest.mark.behaviours("MAMBA-2")
def test_shadow_states_follow_the_copy_rule() -> None:
    mem = ShadowStates(2, 2)
    mem.write_states(Tier.DEVICE, [0], [7])
    h = mem.start_copy(Tier.DEVICE, Tier.HOST, [(0, 1)])
    assert mem.read_states(Tier.HOST, [1]) == [POISON]
    mem.finish_copy(h, True)
    assert mem.read_states(Tier.HOST, [1]) == [7]
    h = mem.start_copy(Tier.HOST, Tier.DEVICE, [(1, 1)])
    mem.finish_copy(h, False)
    assert mem.read_states(Tier.DEVICE, [1]) == [POISON]
    op = CopyOp(1, "writeback", "r", ((3, 4),), mamba=((0, 1),))
    assert op.units() == (("kv", 3, 4), ("mamba", 0, 1))


def test_mamba_and_l3_are_not_combined() -> None:
    with pytest.raises(ValueError, match=r"config\.mamba"):
        SchedTrace(config=SchedConfig(mamba=True, l3_store=True))


@pytest.mark.behaviours("MAMBA-10")
def test_hybrid_reuse_is_judged_white_box_and_said_unjudged_black_box() -> None:
    """MAMBA-10 is active with Mamba on: the reference reuses every prefix whose KV and state
    its cache holds; without a snapshot the driver says the rule was not judged."""
    from kvconf.conformance.scheduler.driver import SchedulerDriver

    sc = scenario("sched-mamba-reuse")
    driver = play_sched(factory(), sc.trace)
    assert driver.hybrid_reuse is not None and not driver.unjudged

    class BlackBox(ReferenceSchedulerAdapter):
        @property
        def features(self):
            from kvconf.conformance.engine.features import Feature
            return super().features - {Feature.SNAPSHOT}

    d = SchedulerDriver(BlackBox(sc.trace.config), sc.trace)
    assert d.hybrid_reuse is None and d.unjudged and "MAMBA-10" in d.unjudged[0]
