"""The request-state oracle skips a snapshot that shows what the last one that held showed (the
same request views, device pool, tree, locks and copies in flight), and only that: a snapshot
with a changed part is judged in full, and a broken one fails. EVENT-6 skips the same tree only
while no event came. Played workloads compare the
verdicts both ways in ``test_incremental_sched_oracles``; these pin the skip's conditions."""

from __future__ import annotations

import dataclasses

import pytest

from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter as R
from kvconf.conformance.oracles import Oracle, Violation
from kvconf.conformance.oracles.event_stream import StoredBlocks
from kvconf.conformance.oracles.scheduler import RequestStateOracle, SchedEventOracle
from kvconf.conformance.scheduler.trace import SchedConfig
from kvconf.reference.kv_events import EventKind, KVEvent
from kvconf.reference.plan import RequestSpec
from kvconf.reference.tiers import Tier

CONFIG = SchedConfig(device_pages=12, host_pages=8, max_tokens=8, max_batch=3)


def _prefilling() -> tuple[object, object]:
    """Snapshots after a submit and after the plan that starts its request's prefill."""
    engine = R(CONFIG)
    engine.submit([RequestSpec("a", tuple([1] * 20), 0, 0)])
    submitted = engine.snapshot()
    engine.next_plan()
    return submitted, engine.snapshot()


def _judged(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    seen: list[object] = []
    full = RequestStateOracle._check

    def spy(self, phase, before, after, *args) -> None:
        seen.append(after)
        full(self, phase, before, after, *args)

    monkeypatch.setattr(RequestStateOracle, "_check", spy)
    return seen


def _check(oracle: RequestStateOracle, before, after) -> None:
    oracle.check("advance", before, after, {}, CONFIG.page_size, {})


def test_the_same_state_again_is_not_judged_again(monkeypatch):
    judged = _judged(monkeypatch)
    submitted, planned = _prefilling()
    oracle = RequestStateOracle()
    oracle.check("plan", submitted, planned, {}, CONFIG.page_size, {})
    again = dataclasses.replace(planned, step=planned.step + 1)  # same parts, new snapshot
    _check(oracle, planned, again)
    assert judged == [planned]
    monkeypatch.setattr(Oracle, "incremental", False)
    _check(oracle, again, dataclasses.replace(again))
    assert len(judged) == 2  # full checks judge every snapshot


def test_a_changed_pool_is_judged_and_a_leak_fails(monkeypatch):
    judged = _judged(monkeypatch)
    submitted, planned = _prefilling()
    oracle = RequestStateOracle()
    oracle.check("plan", submitted, planned, {}, CONFIG.page_size, {})
    pool = planned.cache.pools[Tier.DEVICE]
    owners = list(pool.owners)
    owners[owners.index("free")] = "caller"  # a page charged to the caller that nobody holds
    pools = dict(planned.cache.pools)
    pools[Tier.DEVICE] = dataclasses.replace(pool, owners=tuple(owners))
    leaked = dataclasses.replace(planned, cache=dataclasses.replace(planned.cache, pools=pools))
    with pytest.raises(Violation, match="charged to the caller"):
        _check(oracle, planned, leaked)
    assert judged == [planned, leaked]


def test_a_snapshot_after_one_not_judged_here_is_judged(monkeypatch):
    judged = _judged(monkeypatch)
    submitted, planned = _prefilling()
    oracle = RequestStateOracle()
    oracle.check("plan", submitted, planned, {}, CONFIG.page_size, {})
    other = dataclasses.replace(planned)  # equal, but not the snapshot that held
    _check(oracle, other, dataclasses.replace(other))
    assert len(judged) == 2


def test_event6_skips_the_same_tree_only_while_no_event_came(monkeypatch):
    """EVENT-6 against the device tier: a snapshot with the tree of the last one that held is
    not compared again until an event changes what is stored; then it is, and fails."""
    compared: list[object] = []
    drift = StoredBlocks.drift

    def spy(self, cache):
        compared.append(cache)
        return drift(self, cache)

    monkeypatch.setattr(StoredBlocks, "drift", spy)
    engine = R(CONFIG)
    oracle = SchedEventOracle()
    snap = engine.snapshot()
    oracle.device(snap, "at first")
    oracle.take([])
    oracle.device(dataclasses.replace(snap), "again")  # same tree, nothing announced
    assert len(compared) == 1
    oracle.take(
        [KVEvent(EventKind.STORED, (7,), 0, None, (1,) * CONFIG.page_size, CONFIG.page_size)]
    )
    with pytest.raises(Violation, match="stored hashes differ"):
        oracle.device(dataclasses.replace(snap), "after an event")
    assert len(compared) == 2
