"""The driver picks each plan's REQ-2 probe by counting the candidates, building only the chosen
one (``SchedulerDriver._chosen_probe``): on played workloads (swarm, L3, window), every probe it
picks is the one a list of every candidate, built in full, would give at that step."""

from __future__ import annotations

import pytest

from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter as R
from kvconf.conformance.running.runner import L3_FUZZ
from kvconf.conformance.scheduler import driver as D
from kvconf.conformance.scheduler.generator import play_sched, seeded_workload
from kvconf.conformance.scheduler.trace import SchedConfig
from kvconf.reference.plan import (
    Abort,
    BackupDone,
    ExtendResult,
    Finish,
    PrefetchDone,
    WritebackDone,
)
from kvconf.reference.requests import Event


def _every_probe(driver: D.SchedulerDriver, step: int) -> list[tuple]:
    """Every candidate in the order tried: the fixed ones, then each (request, event) pair its
    state does not allow."""
    out = [(D.UNKNOWN + "an acknowledgement of an unknown writeback",
            [WritebackDone(10**9 + step, True)], None),
           (D.UNKNOWN + "an Abort of a request never submitted", [Abort(f"nobody-{step}")], None)]
    if driver.l3 is not None:
        out.append((D.UNKNOWN + "a PrefetchDone of an unknown prefetch",
                     [PrefetchDone(10**9 + step, 0)], None))
        out.append((D.UNKNOWN + "a BackupDone of an unknown backup",
                     [BackupDone(10**9 + step, True)], None))
    idle = [r for r in driver.live.values() if not r.finished and not r.due]
    if idle:
        r = idle[step % len(idle)]
        out.append((f"an ExtendResult for {r.rid}, which has no token due",
                    [ExtendResult(r.rid, 0)], None))
    for v in () if driver.snap is None else driver.snap.requests:
        for kind in D._illegal(v.state, bool(v.awaiting)):
            ev = (ExtendResult(v.rid, 0) if kind is Event.EXTEND_RESULT else Finish(v.rid)
                  if kind is Event.FINISH else Abort(v.rid))
            out.append((f"{kind} for {v.rid} in {v.state}", [ev], (v.state.value, kind.value)))
    return out


@pytest.mark.parametrize("config", [None, L3_FUZZ, SchedConfig(sliding_window=3)],
                         ids=["swarm", "l3", "window"])
def test_the_chosen_probe_is_the_one_of_the_full_list(monkeypatch, config):
    chosen = D.SchedulerDriver._chosen_probe
    seen = {"probes": 0, "pairs": 0, "idle": 0}

    def checked(self, step):
        got = chosen(self, step)
        every = _every_probe(self, step)
        assert got == every[step % len(every)], step
        seen["probes"] += 1
        seen["pairs"] += got[2] is not None
        seen["idle"] += got[0].startswith("an ExtendResult for") and got[2] is None
        return got

    monkeypatch.setattr(D.SchedulerDriver, "_chosen_probe", checked)
    for seed in range(8):
        play_sched(R, seeded_workload(seed, config, R.features))
    assert seen["probes"] > 100 and seen["pairs"] > 20 and seen["idle"] > 5, seen
