"""SGLang's UnifiedRadixCache with SWA and Mamba components, at the hybrid cache level: it meets
its expectations, it publishes after the forward (window pages given back before they are
published, pages moved onto the tree's copies), the legal variant that takes the same choice
gives the same hits, and the allowance it declares (MAMBA-11) is what keeps a chunk shape its
scheduler never builds away from it; rows past a prompt run SGLang's decode path (window slots
freed behind the window before the row, Mamba states tracked at mamba_track_interval and kept
only at finish), as the legal variant that takes the same choice does."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kvconf.conformance.adapters.reference_hybrid import ReferenceHybridAdapter
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.hybrid import HybridConfig
from kvconf.conformance.errors import KitError
from kvconf.conformance.hybrid.driver import play_hybrid
from kvconf.conformance.hybrid.generator import WalkStats, search
from kvconf.conformance.hybrid.scenarios import HYBRID_SCENARIOS
from kvconf.conformance.hybrid.trace import AdmitStep, ExtendStep, HybridTrace
from kvconf.conformance.reporting.expectations import compare, load_expectations
from kvconf.conformance.running.profiles import PROFILES, Budget
from kvconf.conformance.running.runner import run_suite, select_cases
from kvconf.conformance.variants.hybrid import DecodeStatesAtInterval, ReleasesBeforePublish
from kvconf.conformance.violation import Violation

ROOT = Path(__file__).resolve().parent.parent
EXPECT = ROOT / "conformance" / "adapters" / "expectations" / "sglang-hybrid.toml"
HAS_SGLANG = importlib.util.find_spec("sglang") is not None
needs_sglang = pytest.mark.skipif(not HAS_SGLANG,
                                  reason="sglang is not installed (.ci/install-peers.sh)")
HYBRID_CASES = ["hybrid-group-hits", "hybrid-resume-from-state", "hybrid-window-release",
                "hybrid-shared-prefix", "hybrid-decode", "fuzz-hybrid", "fuzz-hybrid-tight"]


def _adapter():
    from kvconf.conformance.adapters.sglang_hybrid import SGLangHybridAdapter

    return SGLangHybridAdapter


def test_sglang_hybrid_is_registered_with_its_expectations():
    from kvconf.conformance.adapters import target_of

    assert target_of("sglang-hybrid") == (
        "kvconf.conformance.adapters.sglang_hybrid:SGLangHybridAdapter")
    exp = load_expectations(EXPECT)
    assert exp.engine == "sglang-hybrid" and not exp.by_case()
    assert "sglang-hybrid" in (ROOT / ".ci" / "peers").read_text()


@needs_sglang
@pytest.mark.behaviours("WIN-6", "WIN-3", "WIN-4", "MAMBA-1", "MAMBA-3", "MAMBA-8", "POOL-5")
def test_sglang_hybrid_meets_its_expectations():
    report = run_suite("sglang-hybrid", EngineConfig(), seed_value=0, profile=PROFILES["ci"],
                       budget=Budget(examples=15), report_path=None,
                       cases=select_cases(HYBRID_CASES))
    verdicts = compare(report, load_expectations(EXPECT), EXPECT)
    assert not verdicts["regression"] and not verdicts["improvement"], verdicts
    assert {r.status.value for r in report.results} == {"PASS"}


@needs_sglang
@pytest.mark.behaviours("WIN-4", "WIN-6")
@pytest.mark.parametrize("page_size", [1, 2])
def test_window_pages_go_back_before_they_are_published_as_the_variant_does(page_size):
    """r1 computes 0..4 and 4..8 (in pages); once the second chunk is computed SGLang frees the
    window slots behind the next row's window before it inserts the row, so the window group no
    longer reaches 6 pages where full attention does. ReleasesBeforePublish, the reference
    taking that choice, says the same hits; the reference keeps those pages."""
    trace = HYBRID_SCENARIOS[0].trace(page_size)
    got = play_hybrid(_adapter(), trace)
    variant = play_hybrid(lambda c: ReferenceHybridAdapter(c, cache_cls=ReleasesBeforePublish),
                          trace)
    reference = play_hybrid(ReferenceHybridAdapter, trace)
    p = page_size
    assert got[5] == variant[5] == {"op": "hit", "length": 4 * p, "full": 6 * p,
                                    "window": 4 * p, "mamba": 4 * p}
    assert reference[5]["window"] == 6 * p
    settled = [o["settled"] for o in got if o.get("settled")]
    assert any(page is None for _, win, _ in settled for _, page in win)


@needs_sglang
@pytest.mark.behaviours("TREE-2", "POOL-2")
def test_a_duplicate_moves_the_request_onto_the_cached_copy():
    """Two requests compute the same pages at once: the second to publish has its own freed and
    its row moved onto the first's (checkpoint_into_tree), which the kit judged (TREE-2)."""
    trace = next(sc for sc in HYBRID_SCENARIOS if sc.name == "hybrid-shared-prefix").trace(2)
    log = play_hybrid(_adapter(), trace)
    moved = [o["settled"][0] for o in log if o.get("settled") and o["settled"][0]]
    assert moved and all(page is not None for group in moved for _, page in group)


def _crossing(page_size: int = 2) -> HybridTrace:
    """A chunk from inside page 1 across its end, then a hit at that page's end (shrunk by the
    fuzzer from a walk with the allowance undeclared)."""
    a = [5, 1, 3, 1, 1, 4, 4, 5]
    return HybridTrace(
        config=HybridConfig(page_size=page_size, window=5, pages=40, state_slots=12),
        steps=[AdmitStep(rid="r1", tokens=a), ExtendStep(rid="r1", upto=3),
               ExtendStep(rid="r1", upto=5), AdmitStep(rid="r5", tokens=a[:4] + [4, 4, 4, 2])])


@needs_sglang
@pytest.mark.behaviours("MAMBA-11", "MAMBA-3")
def test_undeclared_aligned_chunks_cache_a_state_one_token_deep():
    """With extra buffers SGLang tracks a chunk's state at prefix_len + k * page, relative to
    the chunk's start: from inside a page that is not a page boundary, and the checkpoint is
    cached under the page-floored key. Its scheduler never builds such a chunk."""
    base = _adapter()

    class Undeclared(base):
        features = base.features - {Feature.MAMBA_ALIGNED_CHUNKS}

    with pytest.raises(Violation) as caught:
        play_hybrid(Undeclared, _crossing())
    assert "MAMBA-3" in caught.value.behaviours
    assert "depth 5, not the state of depth 4" in str(caught.value)
    with pytest.raises(KitError, match="mamba_aligned_chunks"):
        play_hybrid(base, _crossing())


@needs_sglang
@pytest.mark.behaviours("WIN-4", "MAMBA-3", "POOL-5")
@pytest.mark.parametrize("window, mamba", [(True, False), (False, True)])
def test_one_component_beside_full_attention(window, mamba):
    """FULL+SWA and FULL+MAMBA alone build and pass the walks (the cases need both)."""
    for p in (1, 2):
        config = HybridConfig(page_size=p, pages=14, state_slots=12,
                              window=2 * p + 1 if window else 0, mamba=mamba)
        stats = WalkStats()
        search(_adapter(), config, lambda k: k, 30, 10, None, stats)
        assert stats.examples == 10 and stats.ops.get("extend", 0) > 0


@needs_sglang
@pytest.mark.behaviours("WIN-7", "WIN-4", "MAMBA-1", "MAMBA-3")
@pytest.mark.parametrize("page_size", [1, 2])
def test_decode_rows_run_sglangs_decode_path(page_size):
    """In hybrid-decode two requests decode side by side: SGLang's maybe_evict_swa gives back
    window pages before some decode rows, the forward tracks states only where a row ends on
    mamba_track_interval (TRACK_PAGES pages), and what was decoded is cached at finish up to
    the last of them. DecodeStatesAtInterval, the reference taking that choice, serves the
    decoded sequence as SGLang does; the reference, keeping a state at every page, deeper."""
    from kvconf.conformance.adapters.sglang_hybrid import TRACK_PAGES

    p = page_size
    trace = next(sc for sc in HYBRID_SCENARIOS if sc.name == "hybrid-decode").trace(p)
    got = play_hybrid(_adapter(), trace)
    rows = [o for o in got if o["op"] == "decode"]
    assert len(rows) == 13 * p and all(o["room"] for o in rows)
    assert any(o["released"][1] for o in rows)  # window pages given back while decoding
    depths = [d for o in rows for d, _ in o["state"][2]]
    assert depths and all(d % (TRACK_PAGES * p) == 0 for d in depths)
    variant = play_hybrid(lambda c: ReferenceHybridAdapter(c, cache_cls=DecodeStatesAtInterval),
                          trace)
    reference = play_hybrid(ReferenceHybridAdapter, trace)
    last = [i for i, o in enumerate(got) if o["op"] in ("hit", "admit")][-3:]
    assert [got[i] for i in last] == [variant[i] for i in last]
    assert got[last[0]] == {"op": "hit", "length": 16 * p, "full": 16 * p, "window": 16 * p,
                            "mamba": 16 * p}
    assert got[last[2]]["mamba"] == 8 * p < reference[last[2]]["mamba"] == 13 * p
