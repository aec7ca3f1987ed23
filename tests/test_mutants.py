"""``kvconf mutants``: the kill matrix reports every mutant, killed or alive, with what killed it;
the audit holds every mutant to a catalog defect."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvconf.conformance.cli import app
from kvconf.conformance.mutants import all_mutants
from kvconf.conformance.mutants import cache as cache_mutants
from kvconf.conformance.mutants.kill import run_mutants
from kvconf.conformance.running.profiles import get_profile, parse_budget
from kvconf.reference import PrefixCache
from kvconf.spec.audit import audit
from kvconf.spec.registry import load_registry


class Benign(PrefixCache):
    """TREE-1 / E-7: nothing planted at all (a mutant the kit cannot kill)."""


class Unfiled(PrefixCache):
    """PIN-2: a defect the catalog does not name."""


def test_every_mutant_names_a_catalog_defect_and_real_behaviours():
    reg = load_registry()
    for m in all_mutants():
        assert m.cites(reg.catalog), m.name
        assert m.cites(reg.behaviours), m.name
        assert m.summary, m.name


@pytest.mark.behaviours("PIN-2")
def test_kvconf_mutants_writes_the_kill_matrix(tmp_path: Path):
    report = tmp_path / "kill.json"
    res = CliRunner().invoke(app, ["mutants", "--profile", "ci", "--quiet", "--mutant",
                                   "EvictsPinned", "--mutant", "PublishDropsPin",
                                   "--report", str(report)])
    assert res.exit_code == 0, res.output
    data = json.loads(report.read_text())
    assert data["format"] == "kvconf-kill-matrix/1"
    by = {m["id"]: m for m in data["mutants"]}
    assert by["EvictsPinned"]["killed"] and by["EvictsPinned"]["catalog"] == ["E-3"]
    assert by["PublishDropsPin"]["catalog"] == ["D381-2"]
    for m in by.values():
        assert m["oracle"] and m["behaviours"] and m["case"] and m["seconds"] >= 0
    assert data["summary"]["killed"] == 2 and data["summary"]["alive"] == []


def test_a_mutant_nothing_kills_is_reported_alive_with_the_seed(tmp_path: Path, monkeypatch):
    monkeypatch.setitem(cache_mutants.PLANTED, "Benign", Benign)
    profile = get_profile("ci")
    matrix = run_mutants(seed_value=3, profile=profile, budget=parse_budget("5", profile),
                         report_path=tmp_path / "k.json", names=["Benign"])
    (m,) = matrix.mutants
    assert not m.killed and "seed 3" in m.message and m.oracle is None
    assert matrix.summary["alive"] == ["Benign"] and not matrix.ok
    # --jobs 0: a mutant this test adds lives in this process alone, where no worker sees it
    res = CliRunner().invoke(app, ["mutants", "--profile", "ci", "--budget", "5", "--quiet",
                                   "--jobs", "0", "--mutant", "Benign",
                                   "--report", str(tmp_path / "c.json")])
    assert res.exit_code == 1 and "alive: Benign" in res.output


def test_an_unknown_mutant_is_a_usage_error(tmp_path: Path):
    res = CliRunner().invoke(app, ["mutants", "--mutant", "Nope", "--report",
                                   str(tmp_path / "k.json")])
    assert res.exit_code == 2 and "--mutant Nope: unknown" in res.output


def test_the_audit_holds_every_mutant_to_a_catalog_defect(monkeypatch):
    reg = load_registry()
    tests = Path(__file__).parent
    assert not [g for g in audit(reg, tests).gaps if "mutant" in g]
    monkeypatch.setitem(cache_mutants.PLANTED, "Unfiled", Unfiled)
    monkeypatch.delitem(cache_mutants.PLANTED, "TieByNewestSeq")  # the only D248-1 mutant
    gaps = audit(reg, tests).gaps
    assert "mutant Unfiled names no catalog defect" in gaps
    assert "D248-1: no mutant plants it" in gaps


# Issue 21, thin catches: every mutant must also die by a fuzz case, not only by the hand-written
# scenario aimed at it (a rule with a scenario but no fuzz path is caught only by the example
# someone thought of). The fuzz case that kills each one at --profile ci, seed 0, what
# `kvconf mutants --profile ci --fuzz-only` reports; a new mutant needs its line here, that is, a
# generator that reaches its rule. (PageableHostPool, the runtime-side mutant, is judged by the
# GPU harness on CUDA, not by a case.)
FUZZ_KILLS = {
    **dict.fromkeys([
        "CopiesToWrongPages", "EvictableOffByOne", "EvictionDropsHostCopy", "EvictsPinned",
        "HashWithoutNamespace", "IgnoresFailedAck", "LeaksDuplicates", "LoadbackVisibleEarly",
        "MatchOnePageLong",
        "NegativeDepthAtRoot", "NewestFirst", "NoHostRefresh", "RootNotLockableOnHost",
        "SharedNamespaces", "SplitDropsPins", "StoresTwice", "TieByNewestSeq",
        "UnbalancedUnlockAccepted", "UnloadFreesPinned", "UnloadKeepsUnpinned", "UnloadSilent",
        "UnlockDropsTransferPin", "WritebackNeverRetired", "WritebackParentUnpinned",
        "DropsLeafOnUnlock",
    ], "fuzz-cache"),
    **dict.fromkeys([
        "AbortKeepsPin", "AbortRaisesWhileWritingBack", "AckAfterAbortDropped",
        "ComputesInBaseModel", "ContinuesInBaseModel", "FailedWritebackIsDone",
        "HashIgnoresNamespace", "KeysFromAdmission", "OverBudget", "PublishDropsPin",
        "PublishOnlyAtFinish", "PublishesBeforeForward", "ReusesPinnedPage",
    ], "fuzz-scheduler"),
    "LoadbackAfterForward": "fuzz-scheduler-tight",
    "RetractsIntoBaseModel": "fuzz-scheduler-unmixed",
    "FreesInsideWindow": "fuzz-scheduler-window",
    "PublishesUnderWindow": "fuzz-scheduler-window",
    "AdapterCapCountsQueued": "fuzz-scheduler-adapters",
    "IgnoresAdapterCap": "fuzz-scheduler-adapters",
    **dict.fromkeys([
        "BackupSourceUnpinned", "IncompletePrefetchLeaks", "KeysWithoutNamespace",
        "MidFlightWithoutKeys", "PrefetchDoneNeverPrefills", "PrefetchInsertedFromRoot",
        "PrefetchIntoBaseModel",
    ], "fuzz-scheduler-l3"),
    "EvictsBeforePinningHostMatch": "fuzz-scheduler-l3-tight-host",
    **dict.fromkeys([
        "AnyDepthForReuse", "FinishKeepsCheckpoint", "NoReuseWithMamba", "NoWorkingFallback",
        "ReusesWithoutState", "SharedResumeSource",
    ], "fuzz-scheduler-swarm"),
    **dict.fromkeys([
        "HostEvictionDropsEntry", "MambaUnitsDropped", "RetractStateUnprotected",
        "DropsShorterStates",
    ], "fuzz-scheduler-mamba"),
    "WindowFromTopLevelOnly": "fuzz-scheduler-model-config",
    "ReleasesInsideWindow": "fuzz-hybrid",
    "WindowHitOnLastPage": "fuzz-hybrid",
    "HitIgnoresMamba": "fuzz-hybrid",
    "CachesWorkingSlot": "fuzz-hybrid",
    "CombinedStopsShort": "fuzz-hybrid",
    "ReleaseLeaks": "fuzz-hybrid",
    "ResetIgnoresHolders": "fuzz-cache",
    "ResetKeepsHostCopies": "fuzz-cache",
    "ResetSilent": "fuzz-cache",
    "HitsCountHost": "fuzz-cache",
}


def test_every_mutant_names_the_fuzz_case_that_kills_it():
    from kvconf.conformance.running.runner import all_cases

    assert set(FUZZ_KILLS) == {m.name for m in all_mutants() if m.level != "memory"}
    assert set(FUZZ_KILLS.values()) <= {c.name for c in all_cases() if c.fuzz}


@pytest.mark.parametrize("name", sorted(FUZZ_KILLS))
def test_a_fuzz_case_kills_every_mutant(name):
    """The mutant dies by its fuzz case alone, as in the fuzz-only kill matrix (same seed, same
    profile, same units)."""
    from kvconf.conformance.mutants.kill import kill_one

    profile = get_profile("ci")
    mutant = next(m for m in all_mutants() if m.name == name)
    res = kill_one(mutant, set(load_registry().catalog), seed_value=0, profile=profile,
                   budget=parse_budget(None, profile), out_dir=None, fuzz_only=True,
                   cases={FUZZ_KILLS[name]})
    assert res.killed and res.case == FUZZ_KILLS[name], (
        f"{name}: {FUZZ_KILLS[name]} no longer kills it ({res.message}); if another fuzz case "
        "does (kvconf mutants --profile ci --fuzz-only --mutant NAME), name that one here; if "
        "none does, only a scenario catches it: give the generators a path to its rule")
