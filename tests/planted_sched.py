"""Copies of the reference scheduler with one defect planted each, for the kit's self-tests.

Built by subclassing, never by editing the reference; each docstring starts with the behaviours
(and catalog defects) it breaks.
"""

from __future__ import annotations

from dataclasses import replace

from reference.plan import Plan, WritebackDone
from reference.requests import State
from reference.scheduler import Scheduler, SchedulerError


class ReusesPinnedPage(Scheduler):
    """REQ-3 / PIN-2: a new page for a request is one another running request still uses."""

    def _alloc(self, n):
        pages = super()._alloc(n)
        if pages:
            for r in self.requests.values():
                if r.local and r.state in (State.DECODING, State.PREFILLING):
                    self.cache.free([pages[0]])
                    pages[0] = r.local[0]
                    break
        return pages


class LoadbackAfterForward(Scheduler):
    """PLAN-5: a plan's loadbacks are handed out with the next plan, after the forward read."""

    held = ()

    def next_plan(self):
        plan = super().next_plan()
        late, self.held = self.held, plan.loadbacks
        return Plan(plan.step, plan.rows, late, plan.writebacks)


class FailedWritebackIsDone(Scheduler):
    """REQ-5 / E-1: a writeback acknowledged with success = false is treated as a success."""

    def _apply(self, ev):
        if isinstance(ev, WritebackDone):
            ev = WritebackDone(ev.op_id, True)
        super()._apply(ev)


class PublishOnlyAtFinish(Scheduler):
    """PLAN-7 / D381-1: the prompt is published at finish only, whatever the switch says."""

    def _publish(self, r, upto):
        if r.state is State.PREFILL_DONE:
            return None
        return super()._publish(r, upto)


class AbortRaisesWhileWritingBack(Scheduler):
    """REQ-4 / E-2: Abort of a request whose writeback is in flight raises."""

    def _check(self, events):
        for ev in events:
            r = self.requests.get(getattr(ev, "rid", None))
            if type(ev).__name__ == "Abort" and r is not None and r.state is State.WRITING_BACK:
                raise SchedulerError("invalid_transition", "cannot abort while writing back",
                                     r.rid, r.state, "Abort")
        super()._check(events)


class OverBudget(Scheduler):
    """PLAN-2: the token budget is ignored for the second prefill row."""

    def _prefill_row(self, r, budget, loadbacks):
        return super()._prefill_row(r, max(budget, len(r.tokens)), loadbacks)


PLANTED_SCHED = {
    cls.__name__: cls
    for cls in (ReusesPinnedPage, LoadbackAfterForward, FailedWritebackIsDone,
                PublishOnlyAtFinish, AbortRaisesWhileWritingBack, OverBudget)
}


class PublishesUnderWindow(Scheduler):
    """PLAN-8 / D381-4 / D381-5: the window guard is skipped when publishing."""

    def _unguarded(self, fn, *args):
        saved = self.config
        self.config = replace(saved, sliding_window=0)
        try:
            return fn(*args)
        finally:
            self.config = saved

    def _publish(self, r, upto):
        return self._unguarded(super()._publish, r, upto)

    def _apply(self, ev):
        return self._unguarded(super()._apply, ev)


PLANTED_SCHED[PublishesUnderWindow.__name__] = PublishesUnderWindow


class RetractsIntoBaseModel(Scheduler):
    """PLAN-6 / D268-2: a retracted request's own pages are inserted into namespace 0."""

    def _retract_longest(self, writebacks, busy):
        self._retracting = True
        try:
            super()._retract_longest(writebacks, busy)
        finally:
            self._retracting = False

    def _publish(self, r, upto):
        if getattr(self, "_retracting", False) and r.shared == 0:
            real = r.spec
            r.spec = replace(real, namespace=0)
            try:
                return super()._publish(r, upto)
            finally:
                r.spec = real
        return super()._publish(r, upto)


PLANTED_SCHED[RetractsIntoBaseModel.__name__] = RetractsIntoBaseModel
