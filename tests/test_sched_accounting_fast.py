"""The scheduler-level accounting checks' fast paths give the full checks' verdicts: POOL-6's
one-pass check of the counts (``_fine_sched``) against the full one on counts perturbed every way
a broken engine could report them, and HOST-10 with nothing in flight (only the leak scans run)
still catching a page or state slot a transfer owns."""

from __future__ import annotations

import dataclasses

import pytest

from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter as R
from kvconf.conformance.oracles import Oracle, Violation
from kvconf.conformance.oracles.accounting import CounterOracle, TransferOracle
from kvconf.conformance.scheduler.trace import SchedConfig
from kvconf.reference.plan import ExtendResult, Finish, RequestSpec
from kvconf.reference.tiers import Tier

CONFIG = SchedConfig(device_pages=12, host_pages=8, max_tokens=8, max_batch=3)
SIZES = {Tier.DEVICE: CONFIG.device_pages, Tier.HOST: CONFIG.host_pages}


def _states() -> list[tuple[dict, object]]:
    """(counters, snapshot) after each call of a short run of the reference."""
    engine = R(CONFIG)
    out = [(engine.counters(), engine.snapshot())]
    engine.submit([RequestSpec("a", tuple([1] * 20), 0, 0)])
    out.append((engine.counters(), engine.snapshot()))
    for _ in range(6):
        plan = engine.next_plan()
        out.append((engine.counters(), engine.snapshot()))
        events = [ExtendResult(r.rid, 3) for r in plan.rows if r.samples]
        engine.advance(events)
        out.append((engine.counters(), engine.snapshot()))
    engine.advance([Finish("a")])
    out.append((engine.counters(), engine.snapshot()))
    return out


def _variants(counts: dict) -> list:
    out: list = [counts, dict(counts, extra=1), "not a mapping"]
    for k in counts:
        for v in (counts[k] + 1, counts[k] - 1, -1, True, 1.0, 10**6):
            out.append(dict(counts, **{k: v}))
        out.append({j: w for j, w in counts.items() if j != k})
    return out


def _judge(counts, snap, incremental: bool, monkeypatch) -> object:
    monkeypatch.setattr(Oracle, "incremental", incremental)
    try:
        return CounterOracle().check_sched(counts, snap, SIZES, CONFIG.max_slots, "here")
    except Violation as v:
        return (v.behaviours, v.message)


def test_fine_sched_gives_the_full_checks_verdict(monkeypatch):
    failed = 0
    for counts, snap in _states():
        for variant in _variants(counts):
            full = _judge(variant, snap, False, monkeypatch)
            assert _judge(variant, snap, True, monkeypatch) == full, variant
            failed += isinstance(full, tuple)
    assert failed > 100  # the perturbations do break POOL-6


def _leaked(snap, tier: Tier, page: int):
    pool = snap.cache.pools[tier]
    owners = list(pool.owners)
    owners[page] = "transfer:99"
    pools = dict(snap.cache.pools)
    pools[tier] = dataclasses.replace(pool, owners=tuple(owners))
    return dataclasses.replace(snap, cache=dataclasses.replace(snap.cache, pools=pools))


@pytest.mark.parametrize("tier", [Tier.DEVICE, Tier.HOST])
def test_host10_with_nothing_in_flight_still_finds_a_leaked_page(tier):
    held: dict = {"writeback": {}, "loadback": {}, "l3": {}}
    snap = _states()[-1][1]
    oracle = TransferOracle()
    oracle.check_sched(snap, held, (), "here", between=True)  # at rest: holds
    with pytest.raises(Violation, match="transfer:99, which lists no such page in flight"):
        oracle.check_sched(_leaked(snap, tier, 0), held, (), "here", between=True)
