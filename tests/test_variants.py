"""The legal variants (``kvconf variants``): each passes what it is owed, each differs from the
reference, the window's false alarm is gone and the defect beside it is still caught."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter
from kvconf.conformance.cli import app
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import ALLOWANCES, Feature
from kvconf.conformance.mutants.kill import level_of
from kvconf.conformance.mutants.window import FreesInsideWindow
from kvconf.conformance.oracles import Violation
from kvconf.conformance.running.profiles import get_profile, parse_budget
from kvconf.conformance.running.runner import RunContext, all_cases, run_case, select_cases
from kvconf.conformance.scheduler.generator import play_sched
from kvconf.conformance.scheduler.scenarios import SCHED_SCENARIOS
from kvconf.conformance.scheduler.trace import Arrival, SchedConfig, SchedTrace
from kvconf.conformance.variants import NOT_BUILT, all_variants, open_rules
from kvconf.conformance.variants import hybrid as hybrid_variants
from kvconf.conformance.variants import scheduler as sched_variants
from kvconf.conformance.variants.matrix import judge_one, run_variants, witness
from kvconf.conformance.variants.scheduler import FailedCopyIsFatal, FreesBehindWindow
from kvconf.reference.kv_events import EventKind
from kvconf.reference.scheduler import Scheduler
from kvconf.spec.audit import audit
from kvconf.spec.registry import load_registry

VARIANTS = {v.name: v for v in all_variants()}
WINDOW_CASES = ("sched-sliding-window", "sched-window-frees-pages", "fuzz-scheduler-window")


def adapter(cls, snapshot: bool = True):
    """The reference adapter over ``cls``, with or without its snapshot (black-box)."""
    feats = ReferenceSchedulerAdapter.features - (set() if snapshot else {Feature.SNAPSHOT})
    return type(f"Over{cls.__name__}", (ReferenceSchedulerAdapter,), {
        "features": feats, "__init__": lambda self, c: ReferenceSchedulerAdapter.__init__(
            self, c, cls)})


def scenario(name: str) -> SchedTrace:
    return next(sc.trace for sc in SCHED_SCENARIOS if sc.name == name)


def run_cases(factory, names, features, budget="20"):
    profile = get_profile("ci")
    ctx = RunContext("t", None, EngineConfig(), 0, profile, parse_budget(budget, profile), None,
                     sched_factory=factory, features=features | {Feature.SCHEDULER})
    return {c.name: run_case(ctx, c) for c in select_cases(list(names))}


@pytest.mark.behaviours("WIN-4", "REQ-3", "PLAN-8", "TREE-2")
@pytest.mark.parametrize("snapshot", [True, False], ids=["white-box", "black-box"])
def test_freeing_pages_behind_the_window_passes_the_window_cases(snapshot) -> None:
    """The issue's false alarm: REQ-3 from the snapshot, PLAN-8 / TREE-2 from the dropped
    marker written through stale slots into pages other requests hold by then."""
    factory = adapter(FreesBehindWindow, snapshot)
    results = run_cases(factory, WINDOW_CASES, factory.features)
    assert {n: r.status.value for n, r in results.items()} == dict.fromkeys(WINDOW_CASES, "PASS")


def doubly_listed(driver) -> list[int]:
    """The plans in which one device page is in the tables of two rows."""
    out = []
    for entry in driver.log:
        if entry[0] != "plan":
            continue
        tables = [set(row[5]) for row in entry[2]]
        if len(set().union(*tables)) < sum(len(t) for t in tables):
            out.append(entry[1])
    return out


@pytest.mark.behaviours("WIN-4")
def test_the_freed_pages_serve_other_requests_at_once() -> None:
    """The variant really hands pages behind the window on: a page sits in two requests'
    tables in one plan (a stale slot in one, live in the other); never so in the reference."""
    trace = scenario("sched-window-frees-pages")
    assert doubly_listed(play_sched(adapter(FreesBehindWindow), trace))
    assert not doubly_listed(play_sched(adapter(Scheduler), trace))


@pytest.mark.behaviours("WIN-4", "REQ-3")
@pytest.mark.parametrize("snapshot", [True, False], ids=["white-box", "black-box"])
def test_freeing_a_page_the_window_still_reads_is_caught(snapshot) -> None:
    """E-19: the mutant frees one page too early; the snapshot shows the page held twice, and
    without one the plan shows another request computing into a page the window reads."""
    with pytest.raises(Violation) as e:
        play_sched(adapter(FreesInsideWindow, snapshot), scenario("sched-window-frees-pages"))
    assert "REQ-3" in e.value.behaviours
    assert e.value.oracle == ("requests" if snapshot else "plan"), e.value


@pytest.mark.behaviours("HOST-9", "REQ-5")
def test_a_failed_copy_never_acknowledged_is_no_req5_finding() -> None:
    """HOST-9: the copy stays the transfer's; REQ-5 judges failures the engine hears of. The
    same variant without its declaration serves what the failed copy left (E-1)."""
    trace = scenario("sched-failed-writebacks")
    declared = VARIANTS["FailedCopyIsFatal"].factory()
    play_sched(declared, trace)
    with pytest.raises(Violation):
        play_sched(adapter(FailedCopyIsFatal), trace)


def published(driver) -> list:
    """Every KV event the engine published in a run, in order."""
    return [ev for drained in driver.published for ev in drained]


@pytest.mark.behaviours("EVENT-8", "EVENT-3", "EVENT-6", "EVENT-7", "MAMBA-3")
@pytest.mark.parametrize("name", ["sched-mamba-reuse", "sched-mamba-retract",
                                  "sched-mamba-tight-slots", "sched-mamba-finish-fallback"])
def test_announcing_only_reusable_boundaries_is_legal_only_when_declared(name) -> None:
    """EVENT-8: with Mamba on, the variant announces a block only while a state of its depth
    is cached, so its BlockStored events name parents never stored; declaring
    sparse_prefix_events it passes, and the same engine without the declaration is caught (a
    parent not stored, EVENT-3, or the stored hashes short of the device tier, EVENT-6)."""
    trace = scenario(name)
    v = VARIANTS["AnnouncesReusableBoundaries"]
    events = published(play_sched(v.factory(), trace))
    stored: set[int] = set()
    unstored_parents = 0
    for ev in events:
        if ev.kind is EventKind.STORED:
            unstored_parents += ev.parent_hash is not None and ev.parent_hash not in stored
            stored.update(ev.block_hashes)
        elif ev.kind is EventKind.REMOVED:
            stored.difference_update(ev.block_hashes)
    reference = published(play_sched(v.reference_factory(), trace))
    blocks = [sum(len(ev.block_hashes) for ev in evs if ev.kind is EventKind.STORED)
              for evs in (events, reference)]
    assert blocks[0] < blocks[1]  # fewer boundaries announced than the tree stores
    if name != "sched-mamba-finish-fallback":  # there a single block is ever announced
        assert unstored_parents
    with pytest.raises(Violation) as e:
        play_sched(v.factory(with_features=False), trace)
    assert e.value.oracle == "sched-events"
    assert set(e.value.behaviours) <= {"EVENT-3", "EVENT-6"}, e.value


def test_without_mamba_the_sparse_announcer_publishes_the_references_events() -> None:
    """Every boundary of a KV-only cache is reusable: the variant's events are the
    reference's, event for event."""
    v = VARIANTS["AnnouncesReusableBoundaries"]
    for name in ("sched-mid-flight-reuse", "sched-retract-and-recover"):
        trace = scenario(name)
        assert not trace.config.mamba
        assert published(play_sched(v.factory(), trace)) == published(
            play_sched(v.reference_factory(), trace))


@pytest.mark.behaviours("TREE-7", "EVICT-6", "POOL-3", "WIN-2", "WIN-3", "WIN-4", "REQ-6",
                        "HOST-5", "HOST-8", "HOST-9", "HOST-11", "HOST-12", "MAMBA-9", "EVENT-8")
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_variant_passes_the_scenarios_of_its_level(name) -> None:
    """The hand-written cases, fast; the whole suite with its fuzz cases is ``kvconf variants``
    (in CI)."""
    v = VARIANTS[name]
    level, cfg = level_of(v.level)
    factory = v.factory()
    features = frozenset({level}) | factory(cfg).features
    profile = get_profile("ci")
    ctx = RunContext("t", factory if v.level == "cache" else None, cfg if v.level == "cache"
                     else EngineConfig(), 0, profile, parse_budget("5", profile), None,
                     sched_factory=factory if v.level == "scheduler" else None,
                     features=features,
                     hybrid_factory=factory if v.level == "hybrid" else None)
    ran = [c for c in all_cases() if level in c.needs and not c.fuzz and c.needs <= features
           and not c.excluded_by & features]
    assert ran
    bad = {c.name: r.message for c in ran if (r := run_case(ctx, c)).status.value != "PASS"}
    assert not bad


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_variant_behaves_unlike_the_reference(name) -> None:
    """A variant the reference's traces cannot tell from the reference proves nothing."""
    assert witness(VARIANTS[name]) is not None


@pytest.mark.behaviours("EVENT-8")
def test_the_witness_reads_the_events_a_scheduler_publishes() -> None:
    """The sparse announcer plans exactly as the reference does; what it announces tells it
    apart, declaring what it declares (not only by failing without the declaration)."""
    assert witness(VARIANTS["AnnouncesReusableBoundaries"]) == "sched-mamba-reuse"


def test_a_variant_that_is_the_reference_has_no_witness(monkeypatch) -> None:
    class Same(Scheduler):
        """WIN-4: nothing changed at all."""

        features = frozenset()

    monkeypatch.setattr(sched_variants, "SCHED_VARIANTS", (Same,))
    (v,) = [v for v in all_variants() if v.name == "Same"]
    assert witness(v) is None


def test_each_variant_declares_the_allowances_of_the_rules_it_names() -> None:
    """An allowance holds an engine to its other rule only where it declares the feature, so
    a variant naming that rule declares it, and declares no allowance whose rule it omits."""
    rule_of = {f: r for f, r in ALLOWANCES.items()}
    for v in VARIANTS.values():
        for feature, rule in rule_of.items():
            assert (feature in v.features) == (rule in v.rules), (v.name, feature)


def test_every_open_rule_has_a_variant_or_a_reason() -> None:
    rules = open_rules(load_registry())
    taken = {r for v in VARIANTS.values() for r in v.rules}
    assert set(rules) <= taken | set(NOT_BUILT)
    assert not set(NOT_BUILT) & taken
    assert "WIN-4" in rules and rules["HOST-8"] == "allowance loadback_ack"


def test_an_illegal_engine_in_the_matrix_is_a_false_alarm(tmp_path: Path, monkeypatch) -> None:
    """The matrix counts every non-PASS verdict: a defective "variant" fails it, exit 1."""
    monkeypatch.setattr(sched_variants, "SCHED_VARIANTS", (FreesInsideWindow,))
    profile = get_profile("ci")
    matrix = run_variants(seed_value=0, profile=profile, budget=parse_budget("3", profile),
                          report_path=tmp_path / "v.json", names=["FreesInsideWindow"])
    (v,) = matrix.variants
    assert v.false_alarms and not matrix.ok
    assert any(a.case == "sched-window-frees-pages" for a in v.false_alarms)
    assert matrix.summary["false_alarms"][0].startswith("FreesInsideWindow: ")


@pytest.mark.behaviours("WIN-4")
def test_kvconf_variants_writes_the_matrix(tmp_path: Path) -> None:
    report = tmp_path / "variants.json"
    res = CliRunner().invoke(app, ["variants", "--profile", "ci", "--budget", "3", "--quiet",
                                   "--variant", "FreesBehindWindow", "--variant",
                                   "MatchLeavesLast", "--report", str(report)])
    assert res.exit_code == 0, res.output
    data = json.loads(report.read_text())
    assert data["format"] == "kvconf-variant-matrix/1"
    by = {v["id"]: v for v in data["variants"]}
    assert by["FreesBehindWindow"]["rules"] == ["WIN-4"] and not by["FreesBehindWindow"][
        "false_alarms"]
    assert by["FreesBehindWindow"]["passed"] >= 20 and by["FreesBehindWindow"]["witness"]
    assert by["MatchLeavesLast"]["features"] == ["match_leaves_last"]
    rules = {r["rule"]: r for r in data["rules"]}
    assert rules["EVENT-8"]["variants"] == ["AnnouncesReusableBoundaries"]
    assert not any(r["not_built"] for r in data["rules"])
    assert "no variant yet" not in res.output and data["summary"]["false_alarms"] == []


@pytest.mark.behaviours("WIN-4")
def test_worker_processes_give_the_matrix_one_process_gives(tmp_path: Path) -> None:
    """``--jobs 2`` runs the variants' units on the kit's workers: every verdict, case list and
    witness is the one the in-process matrix has, the variants in their order."""
    profile = get_profile("ci")
    names = ["FreesBehindWindow", "MatchLeavesLast", "KeepsWindowPages"]

    def matrix(jobs: int) -> list[dict]:
        m = run_variants(seed_value=0, profile=profile, budget=parse_budget("4", profile),
                         report_path=tmp_path / f"j{jobs}" / "v.json", names=names, jobs=jobs)
        return [v.model_dump(exclude={"seconds"}) for v in m.variants]

    alone, pooled = matrix(0), matrix(2)
    assert [v["id"] for v in pooled] == sorted(names, key=lambda n: list(VARIANTS).index(n))
    assert pooled == alone
    assert all(v["passed"] and v["witness"] and not v["false_alarms"] for v in pooled)


def test_an_unknown_variant_is_a_usage_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["variants", "--variant", "Nope", "--report",
                                   str(tmp_path / "v.json")])
    assert res.exit_code == 2 and "--variant Nope: unknown" in res.output


def test_the_audit_holds_every_variant_to_an_open_rule(monkeypatch) -> None:
    reg = load_registry()
    tests = Path(__file__).parent
    assert not [g for g in audit(reg, tests).gaps if "variant" in g]

    class Stray(Scheduler):
        """PLAN-2 / NOPE-1: a rule that is not open, and one that does not exist."""

        features = frozenset({Feature.LOADBACK_ACK})

    monkeypatch.setattr(sched_variants, "SCHED_VARIANTS",
                        (*sched_variants.SCHED_VARIANTS, Stray))
    gaps = audit(reg, tests).gaps
    assert "variant Stray names unknown IDs NOPE-1" in gaps
    assert "variant Stray names no rule the spec leaves open" in gaps
    assert "variant Stray declares loadback_ack but does not name HOST-8" in gaps
    monkeypatch.setattr(sched_variants, "SCHED_VARIANTS", ())
    monkeypatch.setattr(hybrid_variants, "HYBRID_VARIANTS", ())
    assert "WIN-4: no legal variant takes it, and no reason is recorded" in audit(reg, tests).gaps


def test_the_judged_variant_runs_only_what_its_features_allow() -> None:
    """Nothing is left out by name: a case is not run only where its needs exceed the
    variant's declared features (none here: the reference adapter offers every feature)."""
    profile = get_profile("ci")
    res = judge_one(VARIANTS["MatchLeavesLast"], seed_value=0, profile=profile,
                    budget=parse_budget("3", profile), out_dir=None)
    assert res.not_run == [] and res.passed == sum(1 for c in all_cases()
                                                  if Feature.CACHE in c.needs)


@pytest.mark.behaviours("PLAN-10", "WIN-3")
def test_a_state_slot_numbered_like_the_null_page_is_no_false_alarm() -> None:
    """The null page is a page id: a Mamba state slot with the same number is only "the null
    slot" where the engine numbers its states as pages of the KV pool (TokenSpeed's block pool,
    ``state_ids``). Found by the swarm on WindowTable: with two device pages its null page is 2,
    and the second request's working state slot is 2 too."""
    t = SchedTrace(config=SchedConfig(mamba=True, device_pages=2, host_pages=0, mamba_slots=4,
                                      mamba_host_slots=0, max_batch=2),
                   arrivals=[Arrival(at=0, rid="a", tokens=[1]),
                             Arrival(at=0, rid="b", tokens=[2])])
    play_sched(VARIANTS["WindowTable"].factory(), t)
