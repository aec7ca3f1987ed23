"""The scheduler-level kit tested on itself: the reference passes, planted defects are caught.

Each class in ``planted_sched.PLANTED_SCHED`` is the reference scheduler with one defect. The
hand-written workloads must catch each, and so must the workload fuzzer within a small budget;
``CATCHES`` records which oracle reports it, so a change in attribution is a test failure.
"""

from __future__ import annotations

import importlib.util
import json
from functools import partial
from pathlib import Path

import pytest
from planted_sched import ADAPTER_PLANTED, L3_PLANTED, PLANTED_SCHED

from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.errors import EngineRejected
from kvconf.conformance.oracles import Violation
from kvconf.conformance.running.profiles import get_profile, parse_budget
from kvconf.conformance.running.runner import (
    ADAPTER_FUZZ,
    L3_FUZZ,
    fuzz_namespaces,
    run_suite,
    select_cases,
)
from kvconf.conformance.scheduler.driver import SchedulerDriver
from kvconf.conformance.scheduler.generator import fuzz_sched, play_sched, shrink_sched
from kvconf.conformance.scheduler.scenarios import SCHED_SCENARIOS
from kvconf.conformance.scheduler.trace import SchedConfig, SchedTrace
from kvconf.reference.plan import Abort, Plan
from kvconf.reference.requests import TRANSITIONS
from kvconf.reference.scheduler import Scheduler

TIGHT = SchedConfig(device_pages=10, host_pages=8, max_tokens=6, max_batch=3, max_slots=4)
WINDOW = SchedConfig(sliding_window=3)
UNPUBLISHED = SchedConfig(device_pages=10, host_pages=8, max_tokens=6, max_batch=3,
                          publish_mid_flight=False)
L3_TIGHT = L3_FUZZ.model_copy(update={"host_pages": 4})

# Defect -> (a workload that catches it, the oracle reporting it, a behaviour it cites).
CATCHES = {
    # Seen in the plan itself: the new page is one another row reads (REQ-3, black-box).
    "ReusesPinnedPage": ("sched-mid-flight-reuse", "plan", "REQ-3"),
    "LoadbackAfterForward": ("sched-retract-and-recover", "content", "TREE-2"),
    "FailedWritebackIsDone": ("sched-failed-writebacks", "runtime-events", "REQ-5"),
    "PublishOnlyAtFinish": ("sched-mid-flight-reuse", "reuse", "PLAN-7"),
    # The reference rejects the Abort, so the driver sees a legal call refused.
    "AbortRaisesWhileWritingBack": ("sched-abort-everywhere", "faults", "REQ-4"),
    "OverBudget": ("sched-abort-everywhere", "plan", "PLAN-2"),
    "PublishesUnderWindow": ("sched-sliding-window", "content", "PLAN-8"),
    "RetractsIntoBaseModel": ("sched-retract-own-namespace", "requests", "PLAN-6"),
    "PrefetchDoneNeverPrefills": ("sched-l3-prefetch", "liveness", "L3-2"),
    "IncompletePrefetchLeaks": ("sched-l3-prefetch", "l3", "L3-3"),
    "PrefetchInsertedFromRoot": ("sched-l3-prefetch", "l3", "L3-3"),
    "PrefetchIntoBaseModel": ("sched-l3-prefetch", "l3", "L3-3"),
    "KeysFromAdmission": ("sched-l3-host-moves", "l3", "L3-1"),
    "EvictsBeforePinningHostMatch": ("sched-l3-tight-host", "l3", "L3-4"),
    "BackupSourceUnpinned": ("sched-l3-tight-host", "l3", "L3-5"),
    "MidFlightWithoutKeys": ("sched-l3-prefetch", "l3", "L3-1"),
    "KeysWithoutNamespace": ("sched-l3-prefetch", "l3", "L3-1"),
    "ContinuesInBaseModel": ("sched-adapter-continuations", "requests", "NS-3"),
    "ComputesInBaseModel": ("sched-adapter-continuations", "plan", "NS-3"),
    "AdapterCapCountsQueued": ("sched-adapter-cap", "liveness", "PLAN-9"),
    "IgnoresAdapterCap": ("sched-adapter-cap", "plan", "PLAN-9"),
    # The publisher gives up the pin its Decoding state must hold (D381-2).
    "PublishDropsPin": ("sched-mid-flight-reuse", "requests", "REQ-3"),
    # The cache keeps the copy in flight after the scheduler accepted its acknowledgement.
    "AckAfterAbortDropped": ("sched-abort-everywhere", "transfers", "HOST-10"),
    # Nothing is wrong until the workload is done: at rest a lock is still held.
    "AbortKeepsPin": ("sched-abort-everywhere", "at-rest", "POOL-5"),
    # Its declared hash recomputes (EVENT-4 holds): only comparing namespaces tells (EVENT-5).
    "HashIgnoresNamespace": ("sched-retract-and-recover", "sched-events", "EVENT-5"),
    # A request admitted after the publisher in the same plan reads pages its row computes.
    "PublishesBeforeForward": ("sched-l3-prefetch", "plan", "PLAN-12"),
}


def factory(cls=None):
    return ReferenceSchedulerAdapter if cls is None else partial(ReferenceSchedulerAdapter,
                                                                 scheduler_cls=cls)


@pytest.mark.behaviours("REQ-1", "REQ-2", "REQ-3", "REQ-4", "REQ-5", "PLAN-1", "PLAN-2",
                        "PLAN-3", "PLAN-4", "PLAN-5", "PLAN-6", "PLAN-7", "PLAN-9", "FIN-1",
                        "FIN-2", "LIVE-1", "DET-1", "NS-3")
@pytest.mark.parametrize("sc", SCHED_SCENARIOS, ids=lambda s: s.name)
def test_reference_passes_every_workload(sc) -> None:
    driver = play_sched(factory(), sc.trace)
    assert driver.log, "the workload produced no plans"


@pytest.mark.behaviours("REQ-1", "REQ-3", "PLAN-1", "PLAN-2", "PLAN-4", "PLAN-9", "LIVE-1",
                        "NS-3")
@pytest.mark.parametrize("config", [SchedConfig(), TIGHT, WINDOW, L3_FUZZ, ADAPTER_FUZZ],
                         ids=["default", "tight", "window", "l3", "adapters"])
def test_reference_survives_fuzzing(config) -> None:
    fuzz_sched(factory(), config, 60, None, 7, {}, namespaces=namespaces(config))


def namespaces(config: SchedConfig) -> int:
    return fuzz_namespaces(config, ReferenceSchedulerAdapter.features)


def test_every_planted_defect_has_an_expected_catch() -> None:
    assert set(CATCHES) == set(PLANTED_SCHED)


@pytest.mark.behaviours("REQ-3", "PLAN-5", "REQ-5", "PLAN-7", "REQ-4", "PLAN-2", "PLAN-8",
                        "PLAN-6", "PLAN-9", "NS-3", "L3-1", "L3-2", "L3-3", "L3-4", "L3-5",
                        "HOST-10", "POOL-5")
@pytest.mark.parametrize("name", sorted(PLANTED_SCHED))
def test_a_workload_catches_planted_defect(name: str) -> None:
    workload, oracle, behaviour = CATCHES[name]
    sc = next(s for s in SCHED_SCENARIOS if s.name == workload)
    with pytest.raises(Violation) as e:
        play_sched(factory(PLANTED_SCHED[name]), sc.trace)
    assert e.value.oracle == oracle and behaviour in e.value.behaviours, e.value
    play_sched(factory(), sc.trace)  # and the same workload passes on the reference


@pytest.mark.behaviours("REQ-3", "PLAN-5", "REQ-5", "PLAN-7", "PLAN-2", "PLAN-8", "PLAN-9",
                        "NS-3", "L3-1", "L3-2", "L3-3", "L3-4", "L3-5")
@pytest.mark.parametrize("name", sorted(PLANTED_SCHED))
def test_the_fuzzer_catches_planted_defect(name: str) -> None:
    attempts = (((L3_TIGHT, 1, 300), (L3_TIGHT, 0, 300)) if name in L3_PLANTED else
                ((ADAPTER_FUZZ, 0, 150), (ADAPTER_FUZZ, 1, 150)) if name in ADAPTER_PLANTED else
                ((SchedConfig(), 0, 150), (TIGHT, 1, 150), (WINDOW, 2, 150),
                 (UNPUBLISHED, 3, 150)))
    for config, seed, n in attempts:
        try:
            fuzz_sched(factory(PLANTED_SCHED[name]), config, n, None, seed, {},
                       namespaces=namespaces(config))
        except Violation:
            return
    pytest.fail(f"{name}: {len(attempts)} fuzz campaigns did not catch it")


@pytest.mark.behaviours("NS-3", "NS-1")
@pytest.mark.parametrize("name", ["ContinuesInBaseModel", "ComputesInBaseModel"])
def test_a_continuation_in_the_base_model_is_seen_in_the_kv(name: str) -> None:
    """Judged by the KV memory alone: the runtime computes a row with the adapter the row names,
    so a continuation that left its namespace shows as KV of another namespace where it or
    another request reads."""
    sc = next(s for s in SCHED_SCENARIOS if s.name == "sched-adapter-continuations")
    with pytest.raises(Violation) as e:
        play_sched(factory(PLANTED_SCHED[name]), sc.trace, memory_only=True)
    assert e.value.oracle == "content" and "NS-3" in e.value.behaviours, e.value


@pytest.mark.behaviours("PLAN-12", "TREE-2")
def test_a_reuse_within_one_forward_is_seen_in_the_kv() -> None:
    """Judged by the KV memory alone: the rows of a forward read the memory as it was before
    it, so a row reusing pages another row of the same forward computes reads what they held
    (a runtime running the rows one after another would hand it the fresh KV)."""
    sc = next(s for s in SCHED_SCENARIOS if s.name == "sched-l3-prefetch")
    with pytest.raises(Violation) as e:
        play_sched(factory(PLANTED_SCHED["PublishesBeforeForward"]), sc.trace, memory_only=True)
    assert e.value.oracle == "content" and "PLAN-12" in e.value.behaviours, e.value
    assert "same forward" in e.value.message


@pytest.mark.behaviours("REQ-1", "REQ-2")
def test_the_run_reports_transition_coverage(tmp_path: Path) -> None:
    names = [c.name for c in select_cases(None) if c.name.startswith("sched-")]
    profile = get_profile("ci")
    report = run_suite("reference", EngineConfig(), seed_value=0, profile=profile,
                       budget=parse_budget("20", profile), report_path=tmp_path / "r.json",
                       cases=select_cases([*names, "fuzz-scheduler-tight"]))
    assert report.ok, [r.message for r in report.results if r.status.value != "PASS"]
    cov = json.loads((tmp_path / "r.json").read_text())["run_info"]["coverage"]
    assert cov["legal"]["total"] == sum(1 for _ in TRANSITIONS)
    assert cov["legal"]["exercised"] >= cov["legal"]["total"] * 2 // 3, cov["legal"]
    assert cov["illegal"]["tried"] >= 5, cov["illegal"]


@pytest.mark.behaviours("REQ-1")
def test_the_chapter_table_is_the_reference_table() -> None:
    chapter = Path(__file__).resolve().parent.parent / "spec" / "chapters" / "requests.md"
    text = chapter.read_text()
    section = text.split("## The transition table", 1)[1].split("{{", 1)[0]
    rows = set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("state", "") and not cells[0].startswith("-"):
            rows.add((cells[0], cells[1], tuple(cells[2].split(" or "))))
    table = {(s.value, e.value, tuple(t.value for t in to)) for (s, e), to in TRANSITIONS.items()}
    assert rows == table


def test_a_saved_workload_replays(tmp_path: Path) -> None:
    sc = SCHED_SCENARIOS[0]
    path = tmp_path / "w.json"
    path.write_text(sc.trace.model_dump_json(indent=2))
    again = SchedTrace.model_validate_json(path.read_text())
    assert play_sched(factory(), again).log == play_sched(factory(), sc.trace).log


@pytest.mark.skipif(importlib.util.find_spec("tokenspeed_scheduler") is not None,
                    reason="the real tokenspeed_scheduler is installed here")
def test_an_engine_that_is_not_installed_is_not_supported(tmp_path: Path) -> None:
    profile = get_profile("ci")
    report = run_suite("tokenspeed", EngineConfig(), seed_value=0, profile=profile,
                       budget=parse_budget("5", profile), report_path=tmp_path / "r.json")
    statuses = {r.status.value for r in report.results}
    assert statuses == {"NOT_SUPPORTED"}, statuses
    sched = [r for r in report.results if r.case.startswith(("sched-", "fuzz-scheduler"))]
    assert sched and all("tokenspeed_scheduler cannot be imported" in r.message for r in sched)
    assert report.ok  # nothing failed, nothing passed by default


@pytest.mark.behaviours("PLAN-1", "PLAN-2", "PLAN-4", "REQ-2", "LIVE-1")
def test_the_tokenspeed_adapter_speaks_the_documented_surface(tmp_path: Path, monkeypatch) -> None:
    """With a stand-in for the extension (the reference behind its documented Python surface),
    the adapter's conversions hold up: every scheduler case it can run passes."""
    import sys

    import fake_tokenspeed

    monkeypatch.setitem(sys.modules, "tokenspeed_scheduler", fake_tokenspeed)
    monkeypatch.delenv("KVCONF_TOKENSPEED_REVISION", raising=False)  # a stand-in is no revision
    profile = get_profile("ci")
    report = run_suite("tokenspeed", EngineConfig(), seed_value=0, profile=profile,
                       budget=parse_budget("20", profile), report_path=tmp_path / "r.json")
    by = {r.case: r for r in report.results}
    assert report.run_info.version == "fake-0"
    ran = [r for r in report.results if r.status.value == "PASS"]
    assert {r.case for r in ran} >= {"sched-abort-everywhere", "sched-failed-writebacks",
                                     "sched-no-mixed-batches", "fuzz-scheduler",
                                     "fuzz-scheduler-tight"}, {c: r.message for c, r in by.items()}
    assert report.ok, [(r.case, r.message) for r in report.results if r.status.value != "PASS"
                       and r.status.value != "NOT_SUPPORTED"]
    assert by["sched-mid-flight-reuse"].status.value == "PASS"  # PLAN-7 binds every engine
    assert by["sched-adapter-continuations"].status.value == "NOT_SUPPORTED"  # namespaces
    assert by["match-longest-whole-pages"].status.value == "NOT_SUPPORTED"  # no cache level


@pytest.mark.behaviours("PLAN-2", "DET-1")
def test_a_fuzzed_workload_shrinks_and_still_fails() -> None:
    planted = factory(PLANTED_SCHED["OverBudget"])
    holder: dict = {}
    with pytest.raises(Violation) as e:
        fuzz_sched(planted, TIGHT, 200, None, 3, holder)
    found = holder["trace"]
    small, v = shrink_sched(found, e.value, lambda t: play_sched(planted, t), 200)
    assert (v.oracle, v.behaviours) == (e.value.oracle, e.value.behaviours)
    assert len(small.arrivals) <= len(found.arrivals)
    assert len(small.arrivals) <= 2, small.arrivals  # one long prompt is enough to overrun
    with pytest.raises(Violation):
        play_sched(planted, small)
    play_sched(factory(), small)  # the reference passes the same workload


class _IgnoresUnknown(ReferenceSchedulerAdapter):
    """The reference, but an event naming an unknown request or copy is dropped, not rejected,
    as TokenSpeed does (REQ-6); it declares so."""

    features = ReferenceSchedulerAdapter.features | {Feature.IGNORES_UNKNOWN_EVENTS}

    def advance(self, events):
        try:
            super().advance(events)
        except EngineRejected as e:
            if e.code not in ("unknown_request", "unknown_op") or len(events) != 1:
                raise


class _IgnoredAbortStillCounts(_IgnoresUnknown):
    """Declares the allowance, but an ignored Abort is not quite ignored: it stalls the next
    plan (the scheduler changed)."""

    def __init__(self, config):
        super().__init__(config)
        self.stall = False

    def advance(self, events):
        if len(events) == 1 and isinstance(events[0], Abort) and events[0].rid.startswith(
                "nobody"):
            self.stall = True
        super().advance(events)

    def next_plan(self):
        if self.stall:
            self.stall = False
            return Plan(0, (), (), ())
        return super().next_plan()


@pytest.mark.behaviours("REQ-6", "REQ-2")
def test_an_engine_may_ignore_unknown_events_when_it_declares_so() -> None:
    """Ignoring an Abort of an unknown request or an ack of an unknown copy passes when the
    engine declares it; undeclared, the same engine fails REQ-2; declared, an ignored event
    that changes the scheduler fails REQ-6."""
    trace = next(sc.trace for sc in SCHED_SCENARIOS if sc.name == "sched-abort-everywhere")
    driver = play_sched(_IgnoresUnknown, trace)
    assert driver.ignored  # the probes were really ignored, and the replay without them agreed
    undeclared = type("Undeclared", (_IgnoresUnknown,),
                      {"features": ReferenceSchedulerAdapter.features})
    with pytest.raises(Violation) as e:
        play_sched(undeclared, trace)
    assert e.value.behaviours == ("REQ-2",) and "was accepted" in e.value.message
    with pytest.raises(Violation) as e:
        play_sched(_IgnoredAbortStillCounts, trace)
    assert e.value.behaviours == ("REQ-6",), e.value


@pytest.mark.behaviours("REQ-2")
def test_a_probe_finding_never_masks_the_other_checks() -> None:
    """An engine that accepts an illegal probe is still played to the end: the probe's finding is
    raised only when nothing else broke."""
    trace = next(sc.trace for sc in SCHED_SCENARIOS if sc.name == "sched-abort-everywhere")
    undeclared = type("Undeclared", (_IgnoresUnknown,),
                      {"features": ReferenceSchedulerAdapter.features})
    driver = SchedulerDriver(undeclared(trace.config), trace)
    with pytest.raises(Violation) as e:
        driver.run()
    assert driver.probe_finding is e.value
    assert driver.log and driver.log == SchedulerDriver(
        ReferenceSchedulerAdapter(trace.config), trace).run()  # the whole run was played


class _ShortTables(ReferenceSchedulerAdapter):
    """Hands out decode rows whose page table lacks its last page."""

    def next_plan(self):
        from dataclasses import replace

        plan = super().next_plan()
        rows = tuple(replace(r, page_table=r.page_table[:-1]) if r.kind == "decode" else r
                     for r in plan.rows)
        return replace(plan, rows=rows)


@pytest.mark.behaviours("PLAN-10")
def test_a_page_table_that_ends_early_is_a_plan_violation() -> None:
    """Not an error of the kit: the row's table must reach every position it computes, also
    when only the memory oracles judge."""
    trace = next(sc.trace for sc in SCHED_SCENARIOS if sc.name == "sched-no-mixed-batches")
    for memory_only in (False, True):
        with pytest.raises(Violation) as e:
            play_sched(_ShortTables, trace, memory_only=memory_only)
        assert e.value.behaviours == ("PLAN-10",), e.value
        assert "page table" in e.value.message


def test_tokenspeed_expectation_files_name_real_cases_and_source_lines() -> None:
    """Every radix-era revision's expectation file loads, names cases the suite has, and points
    each known gap at the engine's source at that revision (they are judged where the extension
    is built; here they must at least not rot)."""
    from kvconf.conformance.reporting.expectations import load_expectations
    from kvconf.conformance.running.runner import all_cases

    root = Path(__file__).resolve().parent.parent / "conformance" / "adapters" / "expectations"
    files = sorted(root.glob("tokenspeed-*.toml"))
    assert {f.stem for f in files} >= {f"tokenspeed-{r}" for r in (
        "main-radix", "pr381", "pr243", "pr268", "pr293", "pr162")}
    names = {c.name for c in all_cases()}
    for f in files:
        exp = load_expectations(f)
        assert exp.engine == "tokenspeed" and exp.known, f
        for k in exp.known:
            assert k.case in names, (f.name, k.case)
            assert k.reference.startswith("https://github.com/lightseekorg/tokenspeed/blob/")
            assert "/tokenspeed-scheduler/csrc/" in k.reference, (f.name, k.reference)


@pytest.mark.behaviours("FIN-2", "REQ-4")
def test_a_black_box_run_waits_for_the_writeback_after_finish(monkeypatch) -> None:
    """Without a snapshot the driver cannot see a Draining request; its writeback comes in the
    plan after Finish, so the run ends only after a plan with nothing in it (and the states of
    a writeback in flight, an Abort then included, are reached with a black-box engine)."""
    import sys

    import fake_tokenspeed

    from kvconf.conformance.adapters.tokenspeed import TokenSpeedAdapter
    from kvconf.conformance.scheduler.trace import Arrival

    monkeypatch.setitem(sys.modules, "tokenspeed_scheduler", fake_tokenspeed)
    trace = SchedTrace(config=SchedConfig(), acks=["later"],
                       arrivals=[Arrival(at=0, rid="w", tokens=[1, 2, 1, 2, 1, 2, 1],
                                         new_tokens=2)])
    log = SchedulerDriver(TokenSpeedAdapter(trace.config), trace).run()
    copies = [c for entry in log if entry[0] == "plan" for c in entry[-1]]
    assert any(kind == "writeback" for kind, *_ in copies), log
    assert log[-1][0] == "plan" and not log[-1][2] and not log[-1][-1]  # ended on an empty plan


def test_an_in_flight_abort_waits_for_the_writeback_whenever_it_comes(monkeypatch) -> None:
    """E-2 is reached on an engine that emits a finished request's writeback a plan later than
    the reference does: the Abort goes out with the plan the writeback starts in, not before
    (the request is still prefilling then) and not after (the copy has landed then)."""
    import sys

    import fake_tokenspeed

    from kvconf.conformance.adapters.tokenspeed import TokenSpeedAdapter
    from kvconf.conformance.scheduler.trace import AbortAt, Arrival
    from kvconf.reference.plan import Abort

    monkeypatch.setitem(sys.modules, "tokenspeed_scheduler", fake_tokenspeed)
    seen: list[tuple[bool, bool]] = []  # per plan: a writeback in it, an Abort after it

    class Recording(TokenSpeedAdapter):
        def next_plan(self):
            plan = super().next_plan()
            seen.append((bool(plan.writebacks), False))
            return plan

        def advance(self, events):
            if any(isinstance(e, Abort) and e.rid == "w" for e in events):  # not a probe's
                seen[-1] = (seen[-1][0], True)
            return super().advance(events)

    trace = SchedTrace(config=SchedConfig(), acks=["later"],
                       arrivals=[Arrival(at=0, rid="w", tokens=[1, 2, 1, 2, 1, 2, 1],
                                         new_tokens=2)],
                       aborts=[AbortAt(at=0, rid="w", in_flight=True)])
    SchedulerDriver(Recording(trace.config), trace).run()
    aborted = [i for i, (_, abort) in enumerate(seen) if abort]
    assert len(aborted) == 1 and aborted[0] > 0, seen
    assert seen[aborted[0]][0], f"the Abort went out without a writeback in flight: {seen}"


@pytest.mark.behaviours("REQ-2", "REQ-5")
def test_a_probe_finding_never_ends_the_fuzz_search() -> None:
    """An engine that accepts an illegal event on every workload (TokenSpeed's ExtendResult)
    fails a probe in the first one; the search goes on without probes and finds its other
    defect (here E-1), which is the case's finding; the probe's is kept in the message."""
    from kvconf.conformance.mutants.scheduler import FailedWritebackIsDone
    from kvconf.reference.plan import ExtendResult
    from kvconf.reference.scheduler import SchedulerError

    class AcceptsEverything(FailedWritebackIsDone):
        def advance(self, events):
            try:
                return super().advance(events)
            except SchedulerError:
                if len(events) == 1 and isinstance(events[0], ExtendResult):
                    return None  # swallowed: the probe's event is taken as legal (REQ-2)
                raise

    holder: dict = {}
    with pytest.raises(Violation) as e:
        # Seed 2: its first failing workload accepts a probe and breaks nothing else.
        fuzz_sched(factory(AcceptsEverything), SchedConfig(), 150, None, 2, holder)
    assert "REQ-2" not in e.value.behaviours, e.value
    assert "accepted a probe" in e.value.message, e.value.message
    # Without the second defect, the probe's finding is the case's, found on the first workload.
    holder = {}

    class OnlyProbes(AcceptsEverything):
        _apply = FailedWritebackIsDone.__mro__[1]._apply

    with pytest.raises(Violation) as e:
        fuzz_sched(factory(OnlyProbes), SchedConfig(), 20, None, 0, holder)
    assert "REQ-2" in e.value.behaviours and e.value.probe, e.value


@pytest.mark.behaviours("REQ-5", "HOST-4", "TREE-2")
def test_a_black_box_engine_that_keeps_a_failed_writeback_is_blamed_for_it() -> None:
    """Without a snapshot only the KV shows E-1: a later request reads what the failed copy
    left. The kit follows the failed copy's pages through later copies, so the finding names
    the rule the engine broke (REQ-5, HOST-4), not only the bad read (TREE-2)."""
    from kvconf.conformance.mutants.scheduler import FailedWritebackIsDone

    class BlackBox(ReferenceSchedulerAdapter):
        def __init__(self, config) -> None:
            super().__init__(config, scheduler_cls=FailedWritebackIsDone)
            self.features = self.features - {Feature.SNAPSHOT}

        def snapshot(self):
            return None

    with pytest.raises(Violation) as e:  # a tiny device, so the kept host copy is loaded back
        fuzz_sched(BlackBox, TIGHT, 300, None, 0, {})
    assert e.value.oracle == "content", e.value
    assert {"REQ-5", "HOST-4", "TREE-2"} <= set(e.value.behaviours), e.value


def test_a_later_prefill_chunk_reuses_nothing(monkeypatch) -> None:
    """TokenSpeed's extend_prefix_lens counts a request's earlier chunks as well as its cache
    hit; only the admission's row reuses (the kit checks reuse, EVENT-7 and L3-3 on it)."""
    import sys

    import fake_tokenspeed

    from kvconf.conformance.adapters.tokenspeed import TokenSpeedAdapter
    from kvconf.conformance.scheduler.trace import Arrival

    monkeypatch.setitem(sys.modules, "tokenspeed_scheduler", fake_tokenspeed)
    trace = SchedTrace(config=SchedConfig(max_tokens=4),
                       arrivals=[Arrival(at=0, rid="long", tokens=[1, 2] * 6, new_tokens=1)])
    adapter = TokenSpeedAdapter(trace.config)
    log = SchedulerDriver(adapter, trace).run()
    rows = [r for entry in log if entry[0] == "plan" for r in entry[2]]
    chunks = [(start, reused) for _rid, kind, start, _n, reused, *_ in rows if kind == "prefill"]
    assert len(chunks) >= 3 and chunks[0] == (0, 0), chunks
    assert all(reused == 0 for _start, reused in chunks[1:]), chunks


class _ServesShortPromptsOnly(Scheduler):
    """Admits no prompt longer than half the device: nothing leaks, but a fresh engine does not
    serve the at-rest request either (the Mamba chunk-checkpoint defect of TokenSpeed's radix
    era has this shape: a state slot pinned per prefill chunk)."""

    def _admit(self, r, budget, loadbacks):
        if len(r.tokens) > self.config.device_pages * self.p // 2:
            return False
        return super()._admit(r, budget, loadbacks)


@pytest.mark.behaviours("POOL-5", "LIVE-1")
def test_at_rest_request_no_fresh_engine_serves_is_liveness_not_a_leak() -> None:
    """The at-rest request is a leak of the workload (POOL-5) only where a fresh engine of the
    same configuration serves it; where none does it is a liveness failure (LIVE-1)."""
    trace = SchedTrace(config=SchedConfig(device_pages=8, host_pages=0), arrivals=[],
                       max_plans=40)
    play_sched(factory(), trace, determinism=False)  # the reference serves it
    with pytest.raises(Violation) as e:
        play_sched(factory(_ServesShortPromptsOnly), trace, determinism=False)
    assert e.value.oracle == "liveness" and e.value.behaviours == ("LIVE-1",), e.value
    assert "a fresh engine" in e.value.message
@pytest.mark.behaviours("DET-1")
def test_a_failure_hypothesis_cannot_repeat_is_still_the_engines() -> None:
    """Hypothesis plays a failing example again before it reports it; an engine that does not
    fail the same way twice (found on TokenSpeed pr162's Mamba workloads: DET-1, then a pass)
    makes it raise FlakyFailure, which the kit took for a fault of its generator (ERROR). The
    fuzz loops' seeded tests raise the rule the engine broke instead."""
    from hypothesis import Phase, given, settings
    from hypothesis import strategies as st

    from kvconf.conformance.running.seeding import seeded

    plays = [0]

    @settings(max_examples=20, database=None, phases=(Phase.generate,))
    @given(st.integers())
    def test(_x: int) -> None:
        plays[0] += 1
        if plays[0] == 3:  # the third example fails, and passes when played again
            raise Violation("determinism", ("DET-1",), "step 4 differs between two runs")

    with pytest.raises(Violation) as e:
        seeded(test, 0)()
    assert e.value.behaviours == ("DET-1",) and "did not fail the same way" in e.value.message
