"""A failure that an undeclared allowance would make legal says which (spec registry
``allowances``; conformance/reporting/legal_if.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import ALLOWANCES, Feature
from kvconf.conformance.reporting.legal_if import legal_if
from kvconf.conformance.reporting.report import Status
from kvconf.conformance.running.profiles import Budget, get_profile
from kvconf.conformance.running.runner import (
    Campaign,
    RunContext,
    run_case,
    select_cases,
    start_report,
)
from kvconf.conformance.variants import all_variants
from kvconf.spec.registry import SPEC_DIR, SpecError, load_registry


def test_every_name_is_an_allowance_and_every_allowance_is_named():
    names = {f.value for f in ALLOWANCES}
    mapped: set[str] = set()
    for b in load_registry().behaviours.values():
        assert set(b.allowances) <= names, b.id
        mapped |= set(b.allowances)
    assert mapped == names, f"allowances no rule names: {sorted(names - mapped)}"


def test_an_unknown_allowance_is_one_line_naming_file_and_field(tmp_path: Path):
    spec = tmp_path / "spec"
    shutil.copytree(SPEC_DIR / "registry", spec / "registry")
    shutil.copy(SPEC_DIR / "catalog.toml", spec / "catalog.toml")
    path = spec / "registry" / "eviction.toml"
    path.write_text(path.read_text().replace('allowances = ["page_eviction"]',
                                             'allowances = ["page_evicton"]', 1))
    with pytest.raises(SpecError) as e:
        load_registry(spec)
    assert str(e.value) == (f"{path}: behaviour[4].allowances: page_evicton not an allowance "
                            "(kvconf.ALLOWANCES)")


def test_the_hint_names_each_undeclared_allowance_and_its_rule():
    assert legal_if(["EVICT-4"], []) == ("; may be legal if the engine declares page_eviction "
                                         "(EVICT-6) or inclusive_host_tier (HOST-12)")
    assert legal_if(["EVICT-4"], ["page_eviction"]) == (
        "; may be legal if the engine declares inclusive_host_tier (HOST-12)")
    assert legal_if(["EVICT-4"], ["page_eviction", "inclusive_host_tier"]) == ""
    assert legal_if(["PIN-2", "EVICT-1"], []) == ""  # no choice makes evicting a pin legal


@pytest.mark.behaviours("EVICT-4", "EVICT-6")
def test_a_run_of_an_undeclared_choice_says_what_would_make_it_legal():
    """The page-by-page variant without ``page_eviction`` fails EVICT-4; the report's message
    names the declaration, and the same variant declaring it passes (no hint on a pass)."""
    variant = next(v for v in all_variants() if v.name == "EvictsPageByPage")
    case = select_cases(["eviction-frees-whole-victims"])[0]
    for declared in (False, True):
        factory = variant.factory(with_features=declared)
        features = frozenset({Feature.CACHE}) | factory(EngineConfig()).features
        ctx = RunContext("x", factory, EngineConfig(), 0, get_profile("ci"), Budget(examples=1),
                         None, features=features, first_only=True)
        result = run_case(ctx, case)
        report = start_report("x", EngineConfig(), "1", features, seed_value=0,
                              profile=get_profile("ci"), budget=Budget(examples=1))
        campaign = Campaign([case], [], report, None)
        campaign._settle(result)
        got = report.results[0]
        if declared:
            assert got.status is Status.PASS and "legal" not in got.message
        else:
            assert got.status is Status.FAIL and got.behaviours == ["EVICT-4"]
            assert got.message.endswith("; may be legal if the engine declares page_eviction "
                                        "(EVICT-6) or inclusive_host_tier (HOST-12)")
            assert all("page_eviction (EVICT-6)" in f.message for f in got.findings)


def page_by_page(config):
    """The page-by-page variant without ``page_eviction`` (module:factory, for replay)."""
    variant = next(v for v in all_variants() if v.name == "EvictsPageByPage")
    return variant.factory(with_features=False)(config)


@pytest.mark.behaviours("EVICT-4")
def test_replay_says_it_too():
    from kvconf.conformance.cache.scenarios import SCENARIOS
    from kvconf.conformance.running.worker import replay_doc

    sc = next(s for s in SCENARIOS if s.name == "eviction-frees-whole-victims")
    doc = replay_doc(f"{__name__}:page_by_page", sc.trace(EngineConfig()))
    assert doc["status"] == "FAIL" and doc["behaviours"] == ["EVICT-4"]
    assert doc["message"].endswith("; may be legal if the engine declares page_eviction (EVICT-6) "
                                   "or inclusive_host_tier (HOST-12)")


ALLOWANCE_VARIANTS = [v for v in all_variants() if v.features & set(ALLOWANCES)]


@pytest.mark.parametrize("variant", ALLOWANCE_VARIANTS, ids=lambda v: v.name)
def test_each_allowance_taken_undeclared_gets_its_hint(variant):
    """The registry's mapping is what an engine meets: the legal variant that takes an
    allowance's choice, run without declaring it, fails some case with a rule whose hint names
    that allowance (its first such case ends the search)."""
    from kvconf.conformance.mutants.kill import level_of
    from kvconf.conformance.running.runner import all_cases
    from kvconf.conformance.variants.matrix import _runs

    factory = variant.factory(with_features=False)
    level, config = level_of(variant.level)
    features = frozenset({level}) | factory(config).features
    ctx = RunContext("x", factory if level is Feature.CACHE else None, EngineConfig(), 0,
                     get_profile("ci"), Budget(examples=20), None,
                     sched_factory=factory if level is Feature.SCHEDULER else None,
                     hybrid_factory=factory if level is Feature.HYBRID else None,
                     features=features, first_only=True)
    taken = {f.value for f in variant.features & set(ALLOWANCES)}
    for case in all_cases():
        if not _runs(variant, features, case):
            continue
        result = run_case(ctx, case)
        if result.status is Status.FAIL and taken & set(
                a for b in result.behaviours for a in load_registry().behaviours[b].allowances):
            hint = legal_if(result.behaviours, [f.value for f in features])
            assert hint.startswith("; may be legal if the engine declares ")
            assert any(f"{name} ({ALLOWANCES[Feature(name)]})" in hint for name in taken), hint
            return
    pytest.fail(f"{variant.name} without {sorted(taken)} broke no rule that names it")
