"""The benchmarks print only figures that mean something for the engine measured: no ratio
against a heap an engine does not use, and totals that add steps of one kind only."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def peers():
    return _load("cache_peers")


def test_no_ratio_against_a_heap_the_engine_does_not_use(peers):
    assert peers.ratio(13.0, None, "heap") == "heap not measurable"
    assert peers.ratio(13.0, 0.0071, "heap") == "heap not measurable"  # the Rust core's noise
    assert peers.ratio(None, 32.8, "heap") == "heap not measurable"
    assert peers.ratio(13.0, 32.8, "resident") == "0.40x resident"
    assert peers.per_token(None) == "not measurable"
    # the engine whose tree lives in native code says so; the others are measured
    assert peers.SGLangUnified.heap_measurable is False
    assert peers.Reference.heap_measurable and peers.SGLangRadix.heap_measurable


def test_fuzz_throughput_adds_steps_within_a_level_only():
    ft = _load("fuzz_throughput")
    assert ft.level("fuzz-cache-page1") == "cache"
    assert ft.level("fuzz-scheduler-l3-tight-host") == "scheduler"
    assert ft.level("fuzz-hybrid") == "hybrid"
    assert ft.level("fuzz-scheduler-model-config") == "model-config"
    d = {"fuzz-cache": (2, 100, 1.0), "fuzz-cache-tight": (3, 50, 0.5)}
    assert ft.totals(d, list(d)) == (5, 150, 1.5)
