"""TokenSpeed's block-pool era (today's main) through a stand-in of its binding, and the rules
the kit gained for it: acknowledged loadbacks (HOST-8), acknowledgements that carry no success
flag (HOST-9) and pages a plan zeroes (PLAN-11). The real extension is judged in
``test_tokenspeed_real``; these run without it."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import fake_tokenspeed
import fake_tokenspeed_blockpool
import pytest

from conformance.adapters.tokenspeed import TokenSpeedAdapter, tokenspeed_adapter
from conformance.adapters.tokenspeed_blockpool import TokenSpeedBlockPoolAdapter
from conformance.engine_config import EngineConfig
from conformance.features import Feature
from conformance.oracles import Violation
from conformance.oracles.scheduler import RuntimeEventOracle
from conformance.profiles import get_profile, parse_budget
from conformance.runner import run_suite
from conformance.sched_driver import SchedulerDriver
from conformance.sched_trace import Arrival, SchedConfig, SchedTrace
from reference.plan import CopyOp, LoadbackDone, Plan, WritebackDone

SYSTEM = [1, 2, 1, 2, 0, 1, 2, 0]


@pytest.fixture
def blockpool(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "tokenspeed_scheduler", fake_tokenspeed_blockpool)


def test_one_engine_name_picks_the_adapter_of_the_installed_era(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "tokenspeed_scheduler", fake_tokenspeed_blockpool)
    assert isinstance(tokenspeed_adapter(SchedConfig()), TokenSpeedBlockPoolAdapter)
    monkeypatch.setitem(sys.modules, "tokenspeed_scheduler", fake_tokenspeed)
    assert isinstance(tokenspeed_adapter(SchedConfig()), TokenSpeedAdapter)


@pytest.mark.behaviours("HOST-8", "HOST-9", "PLAN-11", "LIVE-1")
def test_the_blockpool_adapter_speaks_the_documented_surface(tmp_path: Path, blockpool) -> None:
    """The reference behind the block-pool binding's surface passes every scheduler case the
    adapter can run: its conversions (block tables, null page 0, loadback acks, pages to zero)
    hold up."""
    profile = get_profile("ci")
    report = run_suite("tokenspeed", EngineConfig(), seed_value=0, profile=profile,
                       budget=parse_budget("20", profile), report_path=tmp_path / "r.json")
    assert report.run_info.version == "fake-blockpool-0"
    assert {"loadback_ack", "fatal_transfer_failure", "host_tier"} <= set(
        report.run_info.features)
    passed = {r.case for r in report.results if r.status.value == "PASS"}
    assert passed >= {"sched-abort-everywhere", "sched-failed-writebacks",
                      "sched-no-mixed-batches", "fuzz-scheduler", "fuzz-scheduler-tight"}
    assert report.ok, [(r.case, r.message) for r in report.results
                       if r.status.value not in ("PASS", "NOT_SUPPORTED")]


class _Recorder(TokenSpeedBlockPoolAdapter):
    """The block-pool adapter, keeping every event the driver sends it."""

    def __init__(self, config: SchedConfig) -> None:
        super().__init__(config)
        self.sent: list = []

    def advance(self, events) -> None:
        self.sent.extend(events)
        super().advance(events)


def _reuse_trace(acks: list[str]) -> SchedTrace:
    """A prompt finishes and is written through to host; filler evicts it from a small device;
    its twin then loads it back."""
    return SchedTrace(
        config=SchedConfig(device_pages=8, host_pages=16, max_tokens=16), acks=acks,
        arrivals=[Arrival(at=0, rid="a", tokens=[*SYSTEM, 1], new_tokens=2),
                  Arrival(at=4, rid="fill", tokens=[2, 0, 2, 0, 2, 0, 2, 0, 2, 1, 1],
                          new_tokens=2),
                  Arrival(at=9, rid="b", tokens=[*SYSTEM, 2], new_tokens=2)])


@pytest.mark.behaviours("HOST-8")
def test_each_loadback_is_acknowledged_once(blockpool) -> None:
    trace = _reuse_trace(["now"])
    engine = _Recorder(trace.config)
    log = SchedulerDriver(engine, trace).run()
    loaded = [pairs for e in log if e[0] == "plan" for kind, pairs in e[-1]
              if kind == "loadback"]
    acks = [e.op_id for e in engine.sent if isinstance(e, LoadbackDone)]
    assert loaded, "the workload must load a prefix back"
    assert len(acks) == len(loaded) == len(set(acks))


@pytest.mark.behaviours("HOST-9")
def test_a_failed_copy_is_never_acknowledged_where_the_ack_has_no_flag(blockpool) -> None:
    trace = _reuse_trace(["fail"])
    engine = _Recorder(trace.config)
    log = SchedulerDriver(engine, trace).run()
    assert any(kind == "writeback" for e in log if e[0] == "plan" for kind, _ in e[-1])
    assert not any(isinstance(e, WritebackDone) and e.op_id < 10**9 for e in engine.sent)


@pytest.mark.behaviours("HOST-8", "HOST-2", "HOST-9")
def test_transfers_in_flight_are_judged_from_the_plans() -> None:
    oracle = RuntimeEventOracle()
    load = CopyOp(1, "loadback", "", ((5, 3),))
    write = CopyOp(2, "writeback", "", ((4, 7),))
    clean = Plan(2, (), (), ())
    oracle.in_flight(clean, [load], [write], {9})
    with pytest.raises(Violation) as e:
        oracle.in_flight(dataclasses.replace(clean, zero=(3,)), [load], [], set())
    assert e.value.behaviours == ("HOST-8",)
    with pytest.raises(Violation) as e:
        oracle.in_flight(dataclasses.replace(clean, writebacks=(CopyOp(3, "writeback", "",
                                                                       ((6, 5),)),)),
                         [load], [], set())
    assert e.value.behaviours == ("HOST-8",)
    reads = dataclasses.replace(clean, loadbacks=(CopyOp(4, "loadback", "", ((7, 1),)),))
    with pytest.raises(Violation) as e:
        oracle.in_flight(reads, [], [write], set())
    assert e.value.behaviours == ("HOST-2",)
    with pytest.raises(Violation) as e:
        oracle.in_flight(reads, [], [], {7})
    assert e.value.behaviours == ("HOST-9",)


class _ZeroesWhatItReads(TokenSpeedBlockPoolAdapter):
    """A plan that tells the runtime to zero the first page of a row's reused prefix."""

    def next_plan(self) -> Plan:
        plan = super().next_plan()
        for row in plan.rows:
            if row.start >= self.page_size:
                return dataclasses.replace(plan, zero=(*plan.zero, row.page_table[0]))
        return plan


@pytest.mark.behaviours("PLAN-11")
def test_a_plan_that_zeroes_a_page_a_row_reads_is_caught(blockpool) -> None:
    trace = SchedTrace(arrivals=[Arrival(at=0, rid="a", tokens=[*SYSTEM, 1], new_tokens=3)])
    SchedulerDriver(TokenSpeedBlockPoolAdapter(trace.config), trace).run()  # clean: passes
    with pytest.raises(Violation) as e:
        SchedulerDriver(_ZeroesWhatItReads(trace.config), trace).run()
    assert "PLAN-11" in e.value.behaviours
    assert Feature.LOADBACK_ACK in TokenSpeedBlockPoolAdapter(trace.config).features


@pytest.mark.behaviours("EVENT-7", "EVENT-2", "EVENT-4")
def test_reuse_of_an_unannounced_block_and_a_hash_off_its_chain_are_caught() -> None:
    from conformance.adapters.tokenspeed_blockpool import block_hash
    from conformance.oracles.scheduler import SchedEventOracle
    from reference.kv_events import EventKind, KVEvent
    from reference.plan import ForwardRow

    oracle = SchedEventOracle(block_hash)
    h0 = block_hash(None, 0, (1, 2))
    oracle.take([KVEvent(EventKind.STORED, (h0,), 0, None, (1, 2), 2)])
    row = ForwardRow("b", "prefill", 0, 4, (0,), 4, (1, 2, 3), (), 0, True)
    plan = Plan(1, (row,), (), ())
    with pytest.raises(Violation) as e:  # block 1 ([1, 2, 1, 2][2:4]) was never announced
        oracle.reused(plan, row, [1, 2, 1, 2, 0], 2)
    assert e.value.behaviours == ("EVENT-7",)
    landed = dataclasses.replace(plan, loadbacks=(CopyOp(1, "loadback", "", ((5, 2),)),))
    oracle.reused(landed, row, [1, 2, 1, 2, 0], 2)  # loaded back by this plan: not yet owed
    h1 = block_hash(h0, 0, (1, 2))
    oracle.take([KVEvent(EventKind.STORED, (h1,), 0, h0, (1, 2), 2)])
    oracle.reused(plan, row, [1, 2, 1, 2, 0], 2)
    with pytest.raises(Violation) as e:
        oracle.take([KVEvent(EventKind.STORED, (h1 ^ 1,), 0, h1, (0, 0), 2)])
    assert e.value.behaviours == ("EVENT-4",)
    oracle.take([KVEvent(EventKind.REMOVED, (h1,))])
    with pytest.raises(Violation) as e:
        oracle.take([KVEvent(EventKind.REMOVED, (h1,))])
    assert e.value.behaviours == ("EVENT-2",)
