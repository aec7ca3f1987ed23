"""SGLang's host tier (HiCache on its UnifiedRadixCache) at the cache level, and the kit's
handling of engines whose failed copies end the runtime (HOST-9) at that level. The SGLang tests
run where sglang is installed (.ci/install-peers.sh) and are skipped otherwise."""

from __future__ import annotations

import importlib
import importlib.util
import random
from pathlib import Path

import pytest

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.reporting.expectations import compare, load_expectations
from kvconf.conformance.reporting.report import Status
from kvconf.conformance.running.profiles import PROFILES, Budget
from kvconf.conformance.running.runner import not_supported, run_suite, select_cases
from kvconf.reference.tiers import Tier

ROOT = Path(__file__).resolve().parent.parent
HAS_SGLANG = importlib.util.find_spec("sglang") is not None
needs_sglang = pytest.mark.skipif(not HAS_SGLANG, reason="sglang is not installed "
                                  "(.ci/install-peers.sh)")
EXPECT = ROOT / "conformance" / "adapters" / "expectations" / "sglang-hicache.toml"


class FatalReference(ReferenceCacheAdapter):
    """The reference declaring that a failed copy ends its runtime (HOST-9)."""

    features = ReferenceCacheAdapter.features | {Feature.FATAL_TRANSFER_FAILURE}


@pytest.mark.behaviours("HOST-9", "HOST-4")
def test_a_case_that_fails_a_copy_is_not_run_for_an_engine_whose_failures_are_fatal():
    """failed-writeback-is-not-success checks the recovery HOST-4 asks of an engine that
    survives a failed copy; an engine declaring fatal_transfer_failure is NOT_SUPPORTED there,
    saying why, and runs every other host case."""
    cases = {c.name: c for c in select_cases(None)}
    moot = not_supported(cases["failed-writeback-is-not-success"], FatalReference.features
                         | {Feature.CACHE}, {})
    assert moot is not None and moot.status is Status.NOT_SUPPORTED
    assert "fatal_transfer_failure" in moot.message
    assert not_supported(cases["failed-writeback-is-not-success"],
                         ReferenceCacheAdapter.features | {Feature.CACHE}, {}) is None
    assert not_supported(cases["writeback-demote-loadback"],
                         FatalReference.features | {Feature.CACHE}, {}) is None


@pytest.mark.behaviours("HOST-9")
def test_the_walk_fails_no_copy_of_an_engine_whose_failures_are_fatal():
    """The cache walk draws a failed copy one time in four, never for such an engine (nothing
    after one is owed), and keeps the other draws of the seed."""
    from kvconf.conformance.cache.walk import CacheWalk

    def draws(factory):
        w = CacheWalk.__new__(CacheWalk)  # the draw under test needs its rng and engine only
        w.rng = random.Random(3)
        w.driver = type("Driver", (), {"engine": factory(EngineConfig())})()
        return [w._success() for _ in range(40)]

    plain, fatal = draws(ReferenceCacheAdapter), draws(FatalReference)
    assert not all(plain) and all(fatal)


@pytest.mark.behaviours("HOST-9")
def test_a_failed_copy_is_never_acknowledged_to_an_engine_whose_failures_are_fatal():
    from kvconf.conformance.cache.driver import CacheDriver
    from kvconf.conformance.trace import Trace

    heard: list = []

    class Listening(FatalReference):
        def finish_transfer(self, op_id, success):
            heard.append((op_id, success))
            return super().finish_transfer(op_id, success)

    steps = Trace.model_validate({"steps": [
        {"op": "insert", "ns": 0, "tokens": [1, 2]},
        {"op": "match", "ns": 0, "tokens": [1, 2, 9], "lock": "device"},
        {"op": "writeback", "step": 1, "ack": "now", "success": False},
        {"op": "writeback", "step": 1, "ack": "now", "success": True}]}).steps
    driver = CacheDriver(Listening(EngineConfig()), EngineConfig())
    outs = [driver.step(i, s) for i, s in enumerate(steps)]
    assert outs[2]["started"] and heard == []  # the engine still holds the first copy
    assert outs[3]["started"] is False  # still in flight for the engine: declined (HOST-5)
    driver.drain()  # the runtime ended at the failed copy: no rest is owed


def test_hicache_engine_is_registered_with_its_expectations():
    from kvconf.conformance.adapters import target_of

    assert target_of("sglang-hicache") == (
        "kvconf.conformance.adapters.sglang_hicache:SGLangHiCacheAdapter")
    exp = load_expectations(EXPECT)
    assert exp.engine == "sglang-hicache"
    # Both host-tier differences are allowances it declares (HOST-11, HOST-12), no known gaps.
    assert "writeback-demote-loadback" not in exp.by_case()
    assert "writeback-refreshes-host-lru" not in exp.by_case()
    assert "content/TREE-2/match" not in exp.signatures()["fuzz-cache"]
    assert "unclassified" not in EXPECT.read_text() and "not yet classified" not in \
        EXPECT.read_text()
    assert "sglang-hicache" in (ROOT / ".ci" / "peers").read_text()
    from kvconf.conformance.adapters.sglang_hicache import SGLangHiCacheAdapter

    assert {Feature.STREAM_ORDERED_LOADBACK, Feature.INCLUSIVE_HOST_TIER} <= \
        SGLangHiCacheAdapter.features


def test_missing_sglang_makes_hicache_not_supported_with_its_reason(monkeypatch):
    radix = importlib.import_module("kvconf.conformance.adapters.sglang_radix")

    def absent(name: str):
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(radix, "import_module", absent)
    report = run_suite("sglang-hicache", EngineConfig(), seed_value=0, profile=PROFILES["ci"],
                       budget=Budget(examples=1), report_path=None,
                       cases=select_cases(["writeback-demote-loadback"]))
    (r,) = report.results
    assert r.status is Status.NOT_SUPPORTED and "sglang cannot be imported" in r.message


def _adapter():
    from kvconf.conformance.adapters.sglang_hicache import SGLangHiCacheAdapter

    return SGLangHiCacheAdapter(EngineConfig(page_size=2, device_pages=8, host_pages=6))


def _kv(a, slots):
    """SGLang's own K buffer rows (layer 0) at ``slots``."""
    kv = a.allocator.get_kvcache()
    return kv.get_key_buffer(kv.start_layer)[slots].float().clone()


@needs_sglang
@pytest.mark.behaviours("HOST-2", "HOST-3")
def test_hicache_moves_the_kv_itself_and_lands_only_when_acknowledged():
    """The shims replace plumbing only: SGLang's own controller copies its KV to host and back
    (the K rows of a prefix come back equal after a device eviction), the host pool has exactly
    the configured pages, a writeback left in flight is no host copy yet, and a failed copy is
    never acknowledged to SGLang."""
    import torch

    a = _adapter()
    assert a.cc.mem_pool_host.anchor_entry.host_pool.size == 6 * 2
    pages = a.alloc(2)
    slots = a._slots(pages)
    kv = a.allocator.get_kvcache()
    kv.get_key_buffer(kv.start_layer)[slots] = torch.arange(len(slots), dtype=torch.float32
                                                             )[:, None, None].to(torch.bfloat16)
    want = _kv(a, slots)
    a.insert(0, [1, 2, 3, 4], pages)
    m = a.match(0, [1, 2, 3, 4, 9])
    lock = a.lock(m.device_node, Tier.DEVICE)
    op = a.start_writeback(m.device_node)
    assert op is not None and [d for d, _ in op.pairs] == pages
    assert a.match(0, [1, 2, 3, 4]).host_len == 0  # in flight: not a host copy yet
    a.finish_transfer(op.op_id, True)
    assert a.match(0, [1, 2, 3, 4]).host_len == 4
    a.unlock(lock)
    assert a.evict(Tier.DEVICE, 8) == 2
    m = a.match(0, [1, 2, 3, 4, 9])
    assert (m.device_len, m.host_len) == (0, 4)
    host = a.lock(m.host_node, Tier.HOST)
    back = a.start_loadback(m.host_node)
    assert back is not None
    a.finish_transfer(back.op_id, True)
    again = a.match(0, [1, 2, 3, 4])
    assert again.device_len == 4
    assert torch.equal(_kv(a, a._slots(list(again.device_pages))), want)
    a.unlock(host)
    other = a.alloc(1)
    a.insert(0, [5, 6], other)
    m = a.match(0, [5, 6, 9])
    lock = a.lock(m.device_node, Tier.DEVICE)
    failed = a.start_writeback(m.device_node)
    a.finish_transfer(failed.op_id, False)
    assert len(a.cc.ack_write_queue) == 1 and a.match(0, [5, 6]).host_len == 0


@needs_sglang
@pytest.mark.behaviours("HOST-11", "HOST-12")
def test_hicache_serves_a_loadback_early_pinned_and_keeps_host_copies_of_device_nodes():
    """What the two allowances it declares describe, on SGLang itself: a loadback in flight is
    served by a match at once and nothing on device can be evicted until it lands (HOST-11);
    a host eviction beside a node still on device frees nothing (HOST-12)."""
    a = _adapter()
    pages = a.alloc(2)
    a.insert(0, [1, 2, 3, 4], pages)
    m = a.match(0, [1, 2, 3, 4, 9])
    lock = a.lock(m.device_node, Tier.DEVICE)
    op = a.start_writeback(m.device_node)
    a.finish_transfer(op.op_id, True)
    a.unlock(lock)
    assert a.evict(Tier.HOST, 6) == 0  # on device still: its host copy is no host victim
    assert a.evict(Tier.DEVICE, 8) == 2
    m = a.match(0, [1, 2, 3, 4, 9])
    host = a.lock(m.host_node, Tier.HOST)
    back = a.start_loadback(m.host_node)
    a.unlock(host)
    early = a.match(0, [1, 2, 3, 4])
    assert early.device_len == 4  # served before the copy lands
    assert sorted(early.device_pages) == sorted(d for _, d in back.pairs)
    assert a.evict(Tier.DEVICE, 8) == 0 and a.evict(Tier.HOST, 6) == 0  # pinned until it lands
    a.finish_transfer(back.op_id, True)
    assert a.evict(Tier.DEVICE, 8) == 2


@needs_sglang
def test_hicache_meets_its_expectations():
    report = run_suite("sglang-hicache", EngineConfig(), seed_value=0, profile=PROFILES["ci"],
                       budget=Budget(examples=20), report_path=None)
    assert "HiCache" in report.run_info.version
    verdicts = compare(report, load_expectations(EXPECT), EXPECT)
    assert not verdicts["regression"] and not verdicts["improvement"], verdicts
