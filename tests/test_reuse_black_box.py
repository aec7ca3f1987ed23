"""PLAN-7 without a snapshot: the black-box reuse obligation demands only the reuse the runtime
can know was possible. The issue's false alarm: the reference without its snapshot failed
fuzz-scheduler-l3 on PLAN-7, a publisher having been pushed off the device without a copy (no
writeback the runtime could see) before the new request was admitted."""

from __future__ import annotations

import pytest

from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.mutants.scheduler import PublishOnlyAtFinish
from kvconf.conformance.reporting.report import Status
from kvconf.conformance.running.profiles import get_profile, parse_budget
from kvconf.conformance.running.runner import RunContext, run_case, select_cases
from kvconf.reference.scheduler import Scheduler


class NoSnapshot(ReferenceSchedulerAdapter):
    """The reference with its snapshot removed: features lack it, ``snapshot()`` is None."""

    features = ReferenceSchedulerAdapter.features - {Feature.SNAPSHOT}
    scheduler_cls = Scheduler

    def __init__(self, config) -> None:
        super().__init__(config, self.scheduler_cls)

    def snapshot(self):
        return None


class NoSnapshotPublishOnlyAtFinish(NoSnapshot):
    scheduler_cls = PublishOnlyAtFinish


def run(factory, names):
    profile = get_profile("ci")
    ctx = RunContext("t", None, EngineConfig(), 0, profile, parse_budget(None, profile), None,
                     sched_factory=factory, features=factory.features | {Feature.SCHEDULER})
    return {c.name: run_case(ctx, c) for c in select_cases(list(names))}


@pytest.mark.behaviours("PLAN-7", "PLAN-6")
def test_the_reference_without_a_snapshot_passes_fuzz_scheduler_l3() -> None:
    (res,) = run(NoSnapshot, ["fuzz-scheduler-l3"]).values()
    assert res.status is Status.PASS, res.message


@pytest.mark.behaviours("PLAN-7")
@pytest.mark.parametrize("case", ["sched-mid-flight-reuse", "sched-no-mixed-batches"])
def test_publishing_at_finish_is_still_caught_without_a_snapshot(case) -> None:
    """Judged in the admission's plan where the publisher decodes in it; in a forward of
    prefills only (no mixed batches) at the publisher's next row, a decode."""
    (res,) = run(NoSnapshotPublishOnlyAtFinish, [case]).values()
    assert res.status is Status.FAIL and res.oracle == "reuse", res.message
    assert "PLAN-7" in res.behaviours
