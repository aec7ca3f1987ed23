"""Per-rule verdicts backed by the checks that ran: every case records under ``judged`` the rules
a check of which ran in it, for the features the engine declares (spec chapter faults, "Verdicts
of a rule"); a rule of a feature the engine does not declare is never judged for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.errors import KitError
from kvconf.conformance.mutants.cache import NewestFirst
from kvconf.conformance.reporting.report import CaseResult, Status, UnitResult, rule_verdicts
from kvconf.conformance.running import judged
from kvconf.conformance.running.profiles import PROFILES, Budget
from kvconf.conformance.running.runner import run_suite, select_cases
from kvconf.conformance.running.units import combine
from kvconf.spec.registry import load_registry

CI = PROFILES["ci"]
# Rules that bind every cache-level engine, whatever it declares, and that a passing fuzz case
# judges black-box (eviction's order is judged there only from a snapshot; the scenarios'
# expected victims judge it black-box).
CORE = {"TREE-1", "TREE-2", "TREE-3", "TREE-5", "PIN-2", "PIN-3", "POOL-1", "POOL-2", "POOL-5",
        "FAULT-2", "DET-1"}


class Bare(ReferenceCacheAdapter):
    """The reference cache declaring nothing but the cache level: no snapshot, host tier,
    events, namespaces, counters or unload (what a first dict-of-prefixes engine offers)."""

    name = "bare"
    features = frozenset()


class BareScheduler(ReferenceSchedulerAdapter):
    """The reference scheduler declaring nothing but the scheduler level, black-box."""

    name = "bare-scheduler"
    level = "scheduler"
    features = frozenset()


class Newest(ReferenceCacheAdapter):
    """The reference cache evicting the most recently used node first (EVICT-2 broken)."""

    name = "newest"

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config, NewestFirst)


def _run(engine: str, tmp_path: Path, cases: list[str] | None, examples: int = 3,
         jobs: int = 0):
    return run_suite(engine, EngineConfig(), seed_value=0, profile=CI,
                     budget=Budget(examples=examples), report_path=tmp_path / "report.json",
                     cases=select_cases(cases) if cases else None, jobs=jobs)


def _gated(features: frozenset[Feature]) -> set[str]:
    """The rules of a feature an engine of ``features`` does not declare."""
    return {b for b, needs in judged.rule_needs().items() if not needs <= features}


def test_every_rule_needs_features_the_kit_knows():
    needs = judged.rule_needs()  # raises a one-line KitError on a name that is no feature
    assert set(needs) == set(load_registry().behaviours)
    # Whole chapters belong to a feature; rules within one to a choice the spec leaves.
    assert all(Feature.HOST_TIER in needs[f"HOST-{i}"] for i in range(1, 15))
    assert all(Feature.KV_EVENTS in needs[f"EVENT-{i}"] for i in range(1, 9))
    assert needs["NS-2"] == {Feature.NAMESPACES, Feature.UNLOAD}
    assert needs["POOL-6"] == {Feature.COUNTERS} and needs["POOL-7"] == {Feature.BLOCK_SNAPSHOT}
    assert needs["TREE-7"] == {Feature.MATCH_LEAVES_LAST}
    assert needs["TREE-1"] == needs["PIN-2"] == needs["DET-1"] == frozenset()


def test_a_feature_name_that_is_no_feature_is_one_line(monkeypatch):
    from kvconf.spec import registry

    reg = registry.load_registry()
    bad = reg.behaviours["PIN-2"].model_copy(update={"needs": ("host_teir",)})
    fake = reg.model_copy(update={"behaviours": {**reg.behaviours, "PIN-2": bad}})
    monkeypatch.setattr(registry, "load_registry", lambda: fake)
    judged.rule_needs.cache_clear()
    try:
        with pytest.raises(KitError, match=r"pinning\.toml: PIN-2\.needs: 'host_teir'"):
            judged.rule_needs()
    finally:
        judged.rule_needs.cache_clear()


def test_allowed_keeps_only_rules_whose_needs_are_declared():
    rules = ["HOST-2", "EVENT-1", "PIN-2", "POOL-6", "NS-1", "TREE-7", "NOPE-1"]
    assert judged.allowed(rules, frozenset()) == ["PIN-2"]
    assert judged.allowed(rules, frozenset({Feature.HOST_TIER, Feature.COUNTERS})) == [
        "HOST-2", "PIN-2", "POOL-6"]


@pytest.mark.behaviours("HOST-2", "EVENT-1", "NS-1", "POOL-6", "POOL-7")
def test_an_engine_that_declares_nothing_is_judged_on_no_rule_of_a_feature(tmp_path):
    report = _run("test_judged:Bare", tmp_path, None)
    gated = _gated(frozenset({Feature.CACHE}))
    ran = [r for r in report.results if r.status is Status.PASS]
    assert {r.case for r in ran} >= {"fuzz-cache", "fuzz-cache-tight", "lru-victim-order"}
    everything: set[str] = set()
    for r in report.results:
        assert r.judged is not None, r.case
        assert r.judged == sorted(r.judged), r.case
        assert not set(r.judged) & gated, (r.case, sorted(set(r.judged) & gated))
        assert not {b for b, s in rule_verdicts(r) if s is Status.PASS} & gated, r.case
        if r.status is Status.NOT_SUPPORTED:
            assert r.judged == [], r.case
        everything |= set(r.judged)
    fuzz = next(r for r in report.results if r.case == "fuzz-cache")
    # What the issue saw: the fuzz case cites every cache rule, and judges none of a feature.
    assert {"HOST-1", "EVENT-1", "NS-1", "POOL-6", "POOL-7"} <= set(fuzz.behaviours)
    assert set(fuzz.judged) >= CORE
    assert CORE | {"EVICT-1", "EVICT-2", "EVICT-3", "EVICT-4", "FAULT-1"} <= everything


@pytest.mark.behaviours("HOST-10", "EVENT-7", "NS-3", "L3-1", "MAMBA-1")
def test_a_scheduler_that_declares_nothing_is_judged_on_no_rule_of_a_feature(tmp_path):
    """The scheduler fuzz cases play a host tier and several namespaces whatever the engine
    declares; none of their rules is judged for an engine that declares neither."""
    report = _run("test_judged:BareScheduler", tmp_path,
                  ["fuzz-scheduler", "fuzz-scheduler-tight", "sched-abort-everywhere"],
                  examples=2)
    gated = _gated(frozenset({Feature.SCHEDULER}))
    for r in report.results:
        assert r.status is Status.PASS, (r.case, r.status, r.message)
        assert not set(r.judged) & gated, (r.case, sorted(set(r.judged) & gated))
        # Black-box: what the plans, the memory and the probes show (the request table's
        # states, REQ-1, need a snapshot).
        assert set(r.judged) >= {"PLAN-1", "PLAN-2", "PLAN-10", "LIVE-1", "POOL-5", "REQ-2",
                                 "FAULT-2", "DET-1"}, (r.case, r.judged)
        assert "REQ-1" not in r.judged
    fuzz = next(r for r in report.results if r.case == "fuzz-scheduler")
    assert {"HOST-2", "NS-1", "EVENT-1"} <= set(fuzz.behaviours)


def test_the_reference_is_judged_on_every_rule_its_cases_cite_that_binds_it(tmp_path):
    """A rule a case cites and the reference's features bind is judged by some case; those
    left are the choices the reference does not take, and POOL-7 (no block snapshot)."""
    report = _run("reference", tmp_path, None, examples=4, jobs=2)
    features = frozenset(Feature(f) for f in report.run_info.features)
    assert all(r.status is Status.PASS for r in report.results)
    cited = {b for r in report.results for b in r.behaviours}
    seen = {b for r in report.results for b in r.judged or ()}
    never = sorted(cited - seen)
    assert set(never) == _gated(features) & cited, never
    assert "POOL-7" in never and "HOST-2" in seen and "EVENT-6" in seen and "L3-3" in seen


@pytest.mark.behaviours("EVICT-2")
def test_a_failing_case_judges_the_rule_it_broke(tmp_path):
    report = _run("test_judged:Newest", tmp_path, ["lru-victim-order", "fuzz-cache"],
                  examples=20)
    for r in report.results:
        assert r.status is Status.FAIL, (r.case, r.status, r.message)
        assert set(r.behaviours) <= set(r.judged), (r.case, r.behaviours)
        assert "EVICT-2" in set(r.judged) | {b for f in r.findings for b in f.behaviours}
        verdicts = dict(rule_verdicts(r))
        assert all(verdicts[b] is Status.FAIL for b in r.behaviours)


def test_workers_bring_back_what_the_case_judged(tmp_path):
    """Any number of workers judge the same rules; a worker's process is watched and bounded,
    so its cases judge FAULT-3 and FAULT-5 too, which a run in kvconf's own process does not."""
    cases = ["lru-victim-order", "fuzz-cache"]
    here = _run("test_judged:Bare", tmp_path / "here", cases)
    one = _run("test_judged:Bare", tmp_path / "one", cases, jobs=1)
    there = _run("test_judged:Bare", tmp_path / "there", cases, jobs=2)
    assert [r.judged for r in one.results] == [r.judged for r in there.results]
    assert all(r.judged for r in there.results)
    for a, b in zip(here.results, there.results, strict=True):
        assert set(b.judged) - set(a.judged) == {"FAULT-3", "FAULT-5"}
        assert set(a.judged) <= set(b.judged)


def test_units_combined_judge_the_union_and_an_old_report_judges_nothing():
    def unit(k: int, judged_: list[str] | None) -> CaseResult:
        return CaseResult(case="fuzz-cache", status=Status.PASS, behaviours=["PIN-2", "TREE-1"],
                          duration_s=0.0,
                          judged=judged_, units=[UnitResult(index=k, of=2, status=Status.PASS)])

    both = combine([unit(0, ["PIN-2"]), unit(1, ["TREE-1"])], "doc")
    assert both.judged == ["PIN-2", "TREE-1"]
    old = combine([unit(0, None), unit(1, None)], "doc")
    assert old.judged is None and rule_verdicts(old) == []


def test_judged_by_the_memory_oracles_alone_is_what_they_check(tmp_path):
    """``kvconf gpu --memory-only``: only the memory oracles (and the drivers' own checks) ran,
    so a rule of the other oracles is not judged however the case ends."""
    report = run_suite("reference", EngineConfig(), seed_value=0, profile=CI,
                       budget=Budget(examples=3), report_path=tmp_path / "report.json",
                       cases=select_cases(["lru-victim-order", "fuzz-cache", "fuzz-scheduler"]),
                       memory_only=True)
    by = {r.case: r for r in report.results}
    assert all(r.status is Status.PASS for r in report.results)
    fuzz = set(by["fuzz-cache"].judged)
    assert {"TREE-2", "PIN-2", "EVENT-4", "POOL-5", "FAULT-2"} <= fuzz  # content, pins, hashes
    assert not fuzz & {"EVICT-2", "TREE-1", "POOL-4", "POOL-6", "EVENT-1", "HOST-10"}
    # The scenario's expected victims are not checked either: nothing judges eviction there.
    assert not {"EVICT-1", "EVICT-2", "EVICT-4"} & set(by["lru-victim-order"].judged)
    sched = set(by["fuzz-scheduler"].judged)
    assert "TREE-2" in sched and not sched & {"PLAN-1", "REQ-1", "REQ-2", "EVENT-1", "POOL-6"}


@pytest.mark.behaviours("HOST-7")
def test_host_pools_beside_a_gpu_judge_host_7_and_beside_a_cpu_nothing():
    """``kvconf gpu``: HOST-7 is judged where a host pool with pages is built for copies with a
    CUDA device (the pinned-host oracle), and nowhere else."""
    from kvconf.conformance.oracles.pinned import PinnedHostOracle

    class Pinned:  # the two methods of a torch tensor the oracle reads
        def numel(self) -> int:
            return 8

        def is_pinned(self) -> bool:
            return True

    for device, pools, want in (("cpu", [Pinned()], set()), ("cuda", [], set()),
                                ("cuda", [Pinned()], {"HOST-7"})):
        with judged.sink() as seen:
            PinnedHostOracle().check("TensorMemory", pools, device)
        assert seen == want, device
