"""vLLM's KVCacheManager with a full, a sliding-window and a Mamba group (align mode), at the
hybrid cache level: it meets its expectations, its hits are vLLM's own, and the allowance it
declares (MAMBA-11) is what keeps a chunk shape its scheduler never builds away from it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.hybrid import HybridConfig
from kvconf.conformance.hybrid.driver import play_hybrid
from kvconf.conformance.hybrid.trace import AdmitStep, ExtendStep, HybridTrace
from kvconf.conformance.reporting.expectations import compare, load_expectations
from kvconf.conformance.running.profiles import PROFILES, Budget
from kvconf.conformance.running.runner import run_suite, select_cases
from kvconf.conformance.violation import Violation

ROOT = Path(__file__).resolve().parent.parent
HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAS_VLLM,
                                reason="vllm is not installed (.ci/install-peers.sh)")
HYBRID_CASES = ["hybrid-group-hits", "hybrid-resume-from-state", "hybrid-window-release",
                "hybrid-shared-prefix", "fuzz-hybrid", "fuzz-hybrid-tight"]


@needs_vllm
@pytest.mark.behaviours("WIN-6", "WIN-3", "WIN-4", "MAMBA-3")
def test_vllm_hybrid_meets_its_expectations():
    report = run_suite("vllm-hybrid", _config(), seed_value=0,
                       profile=PROFILES["ci"], budget=Budget(examples=20), report_path=None,
                       cases=select_cases(HYBRID_CASES))
    path = ROOT / "conformance" / "adapters" / "expectations" / "vllm-hybrid.toml"
    verdicts = compare(report, load_expectations(path), path)
    assert not verdicts["regression"] and not verdicts["improvement"], verdicts
    assert {r.status.value for r in report.results} == {"PASS"}


def _config():
    from kvconf.conformance.engine.config import EngineConfig

    return EngineConfig()


def _crossing(page_size: int = 2) -> HybridTrace:
    """A chunk from inside page 1 across its end, then a hit at that page's end."""
    a = [5, 1, 3, 1, 1, 4, 4, 5]
    return HybridTrace(
        config=HybridConfig(page_size=page_size, window=5, pages=40, state_slots=12),
        steps=[AdmitStep(rid="r1", tokens=a), ExtendStep(rid="r1", upto=3),
               ExtendStep(rid="r1", upto=8), AdmitStep(rid="r5", tokens=a[:4] + [4, 4, 4, 2])])


@needs_vllm
@pytest.mark.behaviours("MAMBA-11", "MAMBA-3")
def test_undeclared_aligned_chunks_publish_a_state_one_token_short():
    from kvconf.conformance.adapters.vllm_hybrid import VLLMHybridAdapter

    class Undeclared(VLLMHybridAdapter):
        features = VLLMHybridAdapter.features - {Feature.MAMBA_ALIGNED_CHUNKS}

    with pytest.raises(Violation) as e:
        play_hybrid(Undeclared, _crossing())
    assert e.value.behaviours == ("MAMBA-3",)
    assert "holds a state of depth 3, not the state of depth 4" in e.value.message
    from kvconf.conformance.errors import KitError

    with pytest.raises(KitError, match="mamba_aligned_chunks"):
        play_hybrid(VLLMHybridAdapter, _crossing())  # declared: the kit never plays it


@needs_vllm
@pytest.mark.behaviours("WIN-6")
def test_vllm_hits_are_the_coordinators():
    """The per-group hits and the combined hit come from vLLM's coordinator, not the kit."""
    from kvconf.conformance.adapters.vllm_hybrid import VLLMHybridAdapter

    e = VLLMHybridAdapter(HybridConfig(page_size=2, window=5, pages=40))
    a = list(range(1, 17))
    e.admit("r1", 0, a + [42, 42])
    assert e.extend("r1", 8).released == ((), (), ())
    second = e.extend("r1", 16)
    assert len(second.released[1]) == 2  # positions 0..3 lie behind a row from 8 (W = 5)
    e.finish("r1")
    hit = e.hit(0, a + [42])
    assert [g.length for g in hit.groups] == [16, 16, 16] and hit.length == 16
    hit = e.hit(0, a[:12] + [42, 42])  # the Mamba state exists at 8 and 16 only
    assert [g.length for g in hit.groups] == [12, 12, 8] and hit.length == 8
