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

from kvconf.conformance.adapters.tokenspeed import TokenSpeedAdapter, tokenspeed_adapter
from kvconf.conformance.adapters.tokenspeed_blockpool import TokenSpeedBlockPoolAdapter
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.oracles import Violation
from kvconf.conformance.oracles.scheduler import RuntimeEventOracle
from kvconf.conformance.running.profiles import get_profile, parse_budget
from kvconf.conformance.running.runner import run_suite
from kvconf.conformance.scheduler.driver import SchedulerDriver
from kvconf.conformance.scheduler.trace import Arrival, SchedConfig, SchedTrace
from kvconf.reference.plan import CopyOp, LoadbackDone, Plan, WritebackDone

SYSTEM = [1, 2, 1, 2, 0, 1, 2, 0]


@pytest.fixture
def blockpool(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "tokenspeed_scheduler", fake_tokenspeed_blockpool)
    monkeypatch.delenv("KVCONF_TOKENSPEED_REVISION", raising=False)  # a stand-in is no revision


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
    from kvconf.conformance.adapters.tokenspeed_blockpool import block_hash
    from kvconf.conformance.oracles.scheduler import SchedEventOracle
    from kvconf.reference.kv_events import EventKind, KVEvent
    from kvconf.reference.plan import ForwardRow

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


def _window_trace() -> SchedTrace:
    """Under a 3-token window a prompt decodes past its window; its twin arrives later."""
    return SchedTrace(
        config=SchedConfig(sliding_window=3),
        arrivals=[Arrival(at=0, rid="first", tokens=[*SYSTEM, 0, 0], new_tokens=6),
                  Arrival(at=3, rid="second", tokens=[*SYSTEM, 2, 2, 1], new_tokens=3)])


class _Rows(TokenSpeedBlockPoolAdapter):
    """The block-pool adapter, keeping every row it hands out."""

    def __init__(self, config: SchedConfig) -> None:
        super().__init__(config)
        self.rows: list = []

    def next_plan(self) -> Plan:
        plan = super().next_plan()
        self.rows.extend(plan.rows)
        return plan


@pytest.mark.behaviours("WIN-3", "PLAN-10")
def test_a_window_becomes_a_sliding_group_whose_table_is_read_by_its_own_rule(blockpool) -> None:
    """A sliding window maps to a SlidingWindow group beside the full one: rows carry a window
    table (holes behind the window keep their index), and the driver reads it for the window's
    positions only."""
    trace = _window_trace()
    engine = _Rows(trace.config)
    assert {Feature.SLIDING_WINDOW, Feature.WINDOW_TABLE} <= engine.features
    assert Feature.MAMBA not in engine.features  # the stand-in has no State family
    SchedulerDriver(engine, trace).run()
    late = [r for r in engine.rows if r.start >= 2 * trace.config.page_size + 2]
    assert late and all(len(r.window_table) == len(r.page_table) for r in late)
    assert all(r.window_table[0] == 0 and r.page_table[0] != 0 for r in late)


class _HoleInWindow(_Rows):
    """A window table with a hole where the row's window reads (position start - 1)."""

    def next_plan(self) -> Plan:
        plan = super().next_plan()
        rows = []
        for r in plan.rows:
            if r.start > self.page_size:
                k = (r.start - 1) // self.page_size
                r = dataclasses.replace(r, window_table=(*r.window_table[:k], 0,
                                                         *r.window_table[k + 1 :]))
            rows.append(r)
        return dataclasses.replace(plan, rows=tuple(rows))


class _NoWindowTable(_Rows):
    def next_plan(self) -> Plan:
        plan = super().next_plan()
        return dataclasses.replace(plan, rows=tuple(dataclasses.replace(r, window_table=())
                                                    for r in plan.rows))


@pytest.mark.behaviours("WIN-3", "PLAN-10", "TREE-2")
def test_a_hole_inside_the_window_or_a_missing_window_table_is_caught(blockpool) -> None:
    trace = _window_trace()
    with pytest.raises(Violation) as e:
        SchedulerDriver(_HoleInWindow(trace.config), trace).run()
    assert e.value.behaviours[:2] == ("WIN-3", "TREE-2")
    with pytest.raises(Violation) as e:
        SchedulerDriver(_NoWindowTable(trace.config), trace).run()
    assert e.value.behaviours == ("PLAN-10",)


@pytest.mark.behaviours("WIN-3")
def test_the_full_table_is_read_in_full_under_a_window_table(blockpool) -> None:
    """With a window table the full-attention table gives every earlier position: a full page
    that another prefix overwrote is caught though it lies behind the window."""

    class _StaleFull(_Rows):
        def next_plan(self) -> Plan:
            plan = super().next_plan()
            rows = tuple(dataclasses.replace(r, page_table=(r.page_table[1], *r.page_table[1:]))
                         if r.kind == "decode" else r for r in plan.rows)
            return dataclasses.replace(plan, rows=rows)

    trace = _window_trace()
    with pytest.raises(Violation) as e:
        SchedulerDriver(_StaleFull(trace.config), trace).run()
    assert e.value.behaviours[0] == "TREE-2"


def test_state_blocks_map_onto_working_and_source_slots(blockpool) -> None:
    """A State group's table: the state of depth start is read from the block of position
    start - 1, the one of depth end left in the block of position end - 1 (chapter mamba)."""
    engine = TokenSpeedBlockPoolAdapter(SchedConfig(page_size=2))
    table = (0, 0, 4, 7, 8)
    assert engine._state_blocks(table, 6, 8) == (7, 4)  # a new block: resumes from another
    assert engine._state_blocks(table, 8, 9) == (8, 7)
    assert engine._state_blocks(table, 9, 10) == (8, -1)  # in place: no source of its own
    assert engine._state_blocks(table, 0, 6) == (4, -1)  # from nothing
    assert engine._state_blocks(table, 10, 11) == (0, 8)  # a block the table lacks: null


@pytest.mark.behaviours("EVENT-8", "EVENT-3", "EVENT-7")
def test_sparse_prefix_events_name_a_parent_by_its_prefix() -> None:
    """Announcing only reusable boundaries (EVENT-8): a stored block may name an unstored parent
    whose hash is its own prefix's, and a reuse owes only its last block; a parent hash that
    names no prefix is still an orphan (EVENT-3)."""
    from kvconf.conformance.adapters.tokenspeed_blockpool import block_hash
    from kvconf.conformance.oracles.scheduler import SchedEventOracle
    from kvconf.reference.kv_events import EventKind, KVEvent
    from kvconf.reference.plan import ForwardRow

    h0 = block_hash(None, 0, (1, 2))
    h1 = block_hash(h0, 0, (1, 2))
    known = {h0: (0, (1, 2))}
    strict = SchedEventOracle(block_hash)
    with pytest.raises(Violation) as e:
        strict.take([KVEvent(EventKind.STORED, (h1,), 0, h0, (1, 2), 2)])
    assert e.value.behaviours == ("EVENT-3",)
    sparse = SchedEventOracle(block_hash, known.get)
    sparse.take([KVEvent(EventKind.STORED, (h1,), 0, h0, (1, 2), 2)])
    row = ForwardRow("b", "prefill", 0, 4, (0,), 4, (1, 2, 3), (), 0, True)
    sparse.reused(Plan(1, (row,), (), ()), row, [1, 2, 1, 2, 0], 2)  # block 0 never announced
    with pytest.raises(Violation) as e:
        strict.reused(Plan(1, (row,), (), ()), row, [1, 2, 1, 2, 0], 2)
    assert e.value.behaviours == ("EVENT-7",)
    with pytest.raises(Violation) as e:
        sparse.take([KVEvent(EventKind.STORED, (h1 ^ 7,), 0, h1 ^ 5, (1, 2), 2)])
    assert e.value.behaviours == ("EVENT-3",)
