"""Opt-in fuzz campaign: the whole kit against the clean reference over many seeds.

Run with ``KVCONF_PROFILE=nightly python -m pytest -m fuzz``. The budget per fuzz case and seed
comes from the kit profile named by ``KVCONF_PROFILE``; a failure keeps its shrunk trace in the
report under the test's temporary folder and names it in the assertion message.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.running.profiles import get_profile, parse_budget
from kvconf.conformance.running.runner import run_suite

SEEDS = range(int(os.environ.get("KVCONF_FUZZ_SEEDS", "4")))


@pytest.mark.fuzz
@pytest.mark.behaviours("DET-1", "POOL-1", "PIN-1", "EVICT-2", "HOST-1", "EVENT-6", "TREE-2")
@pytest.mark.parametrize("seed", SEEDS)
def test_reference_survives_a_campaign(seed: int, tmp_path: Path) -> None:
    profile = get_profile(os.environ.get("KVCONF_PROFILE", "ci"))
    report = run_suite(
        "reference", EngineConfig(), seed_value=1000 + seed, profile=profile,
        budget=parse_budget(None, profile), report_path=tmp_path / "report.json",
    )
    bad = [r for r in report.results if r.status.value != "PASS"]
    assert not bad, "; ".join(
        f"{r.case}: {r.status.value} [{r.oracle}] {r.message} (trace {tmp_path / (r.trace or '')})"
        for r in bad
    )
