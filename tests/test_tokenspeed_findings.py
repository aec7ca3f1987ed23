"""The TokenSpeed findings' small traces (docs/tokenspeed/findings/) and their index.

`.ci/tokenspeed` replays every trace that names the revision it judges and requires the status
and rule (or signal) its index entry gives; it needs a build of the engine. What holds without
one is checked here: every trace in the folder is indexed and parses, every entry names a real
rule and revisions that have an expectation file, and each trace is a workload the reference
plays with every oracle holding, so what the engine shows on it is the engine's, not the kit's.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from kvconf.conformance.adapters import sched_engine_factory
from kvconf.conformance.scheduler.generator import play_sched
from kvconf.conformance.scheduler.trace import SchedTrace
from kvconf.conformance.trace import load_any_trace
from kvconf.spec.registry import load_registry

ROOT = Path(__file__).resolve().parent.parent
FINDINGS = ROOT / "docs" / "tokenspeed" / "findings"
EXPECTATIONS = ROOT / "conformance" / "adapters" / "expectations"
ENTRIES = tomllib.loads((FINDINGS / "index.toml").read_text())["finding"]
SIGNALS = {"SIGSEGV", "SIGABRT", "SIGBUS", "SIGFPE", "SIGILL"}


def test_every_trace_is_indexed_once_and_every_entry_has_its_trace():
    listed = [e["trace"] for e in ENTRIES]
    assert len(listed) == len(set(listed))
    assert set(listed) == {p.name for p in FINDINGS.glob("*.json")}


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["trace"])
def test_an_entry_names_a_rule_or_signal_and_judged_revisions(entry):
    rules = load_registry().behaviours
    assert entry["status"] in ("FAIL", "CRASH")
    assert entry["shows"] in (SIGNALS if entry["status"] == "CRASH" else rules), entry["shows"]
    for rev in entry["revisions"]:
        assert (EXPECTATIONS / f"tokenspeed-{rev}.toml").is_file(), rev


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["trace"])
def test_the_reference_plays_each_finding_trace_with_every_oracle_holding(entry):
    trace = load_any_trace(FINDINGS / entry["trace"])
    assert isinstance(trace, SchedTrace)
    play_sched(sched_engine_factory("reference"), trace, determinism=False)
