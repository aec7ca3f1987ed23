"""The peer-engine adapters without the peers: a missing engine is NOT_SUPPORTED with its reason,
the stand-in modules, and the two allowances the peers need from the kit (unlock by node, PIN-3;
a namespace seeded at a chain's root, EVENT-5). With SGLang installed, its adapter runs too."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

from kvconf.conformance.adapters import stand_ins
from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.cache.scenarios import SCENARIOS
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.errors import EngineRejected
from kvconf.conformance.oracles.base import Ctx
from kvconf.conformance.oracles.events import EventOracle
from kvconf.conformance.oracles.eviction import PageEvictionOracle
from kvconf.conformance.reporting.expectations import compare, load_expectations
from kvconf.conformance.reporting.report import Status
from kvconf.conformance.running.profiles import PROFILES, Budget
from kvconf.conformance.running.runner import play, run_suite, select_cases
from kvconf.conformance.trace import MatchStep, Trace, UnlockStep
from kvconf.reference import CacheError
from kvconf.reference.kv_events import EventKind, KVEvent, block_hash
from kvconf.reference.tiers import Tier

ROOT = Path(__file__).resolve().parent.parent
HAS_SGLANG = importlib.util.find_spec("sglang") is not None
HAS_VLLM = importlib.util.find_spec("vllm") is not None


def _scenario(name: str):
    return next(s for s in SCENARIOS if s.name == name)


def test_missing_peer_is_not_supported_with_its_reason(monkeypatch):
    mod = importlib.import_module("kvconf.conformance.adapters.sglang_radix")

    def absent(name: str):
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(mod, "import_module", absent)
    report = run_suite("sglang-radix", EngineConfig(), seed_value=0, profile=PROFILES["ci"],
                       budget=Budget(examples=1), report_path=None,
                       cases=select_cases(["match-longest-whole-pages", "fuzz-cache"]))
    assert {r.status for r in report.results} == {Status.NOT_SUPPORTED}
    assert all("sglang cannot be imported" in r.message for r in report.results)
    assert report.run_info.version == "unavailable"


def test_missing_vllm_is_not_supported_with_its_reason(monkeypatch):
    mod = importlib.import_module("kvconf.conformance.adapters.vllm_cache")

    def absent(name: str):
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(mod, "import_module", absent)
    for engine in ("vllm", "vllm-salt"):
        report = run_suite(engine, EngineConfig(), seed_value=0, profile=PROFILES["ci"],
                           budget=Budget(examples=1), report_path=None,
                           cases=select_cases(["match-longest-whole-pages", "fuzz-cache"]))
        assert {r.status for r in report.results} == {Status.NOT_SUPPORTED}
        assert all("vllm cannot be imported" in r.message for r in report.results)


def test_stand_in_modules_answer_anything_and_never_shadow():
    finder = stand_ins._Finder(frozenset({"kvconf_absent_pkg"}))
    sys.meta_path.append(finder)
    try:
        sub = importlib.import_module("kvconf_absent_pkg.transforms")
        assert sub.Compose([sub.ToTensor()]) is not None

        class Model(sub.Module):  # usable as a base class
            pass

        assert Model() is not None
        assert finder.find_spec("json") is None
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if n.startswith("kvconf_absent_pkg")]:
            del sys.modules[name]


class NodeUnlockReference(ReferenceCacheAdapter):
    """The reference unlocked by node: no lock handles. ``lenient`` accepts every unlock, as an
    engine without a check on its counts does."""

    name = "node-unlock"
    features = ReferenceCacheAdapter.features - {Feature.LOCK_HANDLES}
    lenient = False

    def unlock(self, handle: int) -> None:
        try:
            super().unlock(handle)
        except EngineRejected:
            if not self.lenient:
                raise


class LenientNodeUnlock(NodeUnlockReference):
    lenient = True


@pytest.mark.behaviours("PIN-3")
def test_node_unlocking_engine_must_refuse_an_unlock_at_count_zero():
    trace = _scenario("unbalanced-unlock-rejected").trace(EngineConfig())
    play(NodeUnlockReference, trace)
    with pytest.raises(Exception) as e:
        play(LenientNodeUnlock, trace)
    assert "PIN-3" in str(e.value)


@pytest.mark.behaviours("PIN-3")
def test_unlocks_a_node_engine_cannot_tell_apart_are_not_sent():
    """A second release of a root lock, or of a lock with another held below it, is not sent to
    an engine without lock handles (a shrunk trace can hold one); with handles it is."""
    steps = [MatchStep(tokens=[], lock=Tier.DEVICE), UnlockStep(step=0),
             UnlockStep(step=0, expect={"rejected": True})]
    trace = Trace(config=EngineConfig(), steps=steps, clock="explicit")
    log = play(LenientNodeUnlock, trace)
    assert log[-1].get("not_sent") is True
    log = play(ReferenceCacheAdapter, trace)
    assert log[-1]["rejected"] is True


class RootSeeded:
    """Block hashes whose namespace seeds only the first block of a chain (SGLang's salt)."""

    def __init__(self, ignore_namespace: bool = False) -> None:
        self.ignore = ignore_namespace

    def block_hash(self, parent, namespace, tokens):
        ns = 0 if self.ignore or parent is not None else namespace
        return block_hash(parent, ns, tokens)


def _stored(engine, ns: int, pages: list[list[int]]) -> KVEvent:
    hashes, parent = [], None
    for toks in pages:
        parent = engine.block_hash(parent, ns, toks)
        hashes.append(parent)
    return KVEvent(EventKind.STORED, tuple(hashes), ns, None,
                   tuple(t for p in pages for t in p), len(pages[0]))


@pytest.mark.behaviours("EVENT-5")
def test_a_namespace_may_seed_only_the_chain_root():
    seeded = RootSeeded()
    oracle = EventOracle()
    events = [_stored(seeded, 0, [[1, 2], [3, 4]]), _stored(seeded, 1, [[1, 2], [3, 4]])]
    oracle.after_step(Ctx(0, "insert", seeded, None, events=events))  # type: ignore[arg-type]
    blind = RootSeeded(ignore_namespace=True)
    # Namespaces are compared where the trace used them (both here), every pair of them.
    with pytest.raises(Exception) as e:
        EventOracle().after_step(Ctx(0, "insert", blind, None,  # type: ignore[arg-type]
                                     events=[_stored(blind, 0, [[1, 2], [3, 4]]),
                                             _stored(blind, 1, [[1, 2], [3, 4]])]))
    assert "EVENT-5" in str(e.value)


def test_reference_refuses_by_node_too():
    """The fake above is honest: the reference's own unlock rejects a released lock."""
    a = NodeUnlockReference(EngineConfig())
    pages = a.alloc(1)
    a.insert(0, [1, 2], pages)
    h = a.lock(a.match(0, [1, 2]).device_node, Tier.DEVICE)
    a.unlock(h)
    with pytest.raises((EngineRejected, CacheError)):
        a.unlock(h)


def _peer(engine: str, installed: bool, package: str):
    return pytest.param(engine, marks=pytest.mark.skipif(
        not installed, reason=f"{package} is not installed (.ci/install-peers.sh)"))


@pytest.mark.parametrize("engine", [
    _peer("sglang-radix", HAS_SGLANG, "sglang"), _peer("sglang-radix-salt", HAS_SGLANG, "sglang"),
    _peer("sglang-unified", HAS_SGLANG, "sglang"),
    _peer("vllm", HAS_VLLM, "vllm"), _peer("vllm-salt", HAS_VLLM, "vllm"),
])
def test_peer_meets_its_expectations(engine):
    report = run_suite(engine, EngineConfig(), seed_value=0, profile=PROFILES["ci"],
                       budget=Budget(examples=20), report_path=None)
    if engine == "sglang-unified":
        assert "TreeCore" in report.run_info.version  # which tree core ran is reported
    path = ROOT / "conformance" / "adapters" / "expectations" / f"{engine}.toml"
    verdicts = compare(report, load_expectations(path), path)
    assert not verdicts["regression"] and not verdicts["improvement"], verdicts


class LeavesLastReference(ReferenceCacheAdapter):
    """The reference matching as an engine that leaves the query's last token to compute."""

    name = "leaves-last"
    features = ReferenceCacheAdapter.features | {Feature.MATCH_LEAVES_LAST}

    def match(self, namespace, tokens):
        m = super().match(namespace, list(tokens)[:-1])
        self.cache.query_tokens += 1 if tokens else 0  # it was asked the whole query (POOL-8)
        return m


class ClaimsLeavesLast(ReferenceCacheAdapter):
    """Declares match_leaves_last but covers the whole query: the declaration is checked."""

    name = "claims-leaves-last"
    features = ReferenceCacheAdapter.features | {Feature.MATCH_LEAVES_LAST}


class UndeclaredLeavesLast(LeavesLastReference):
    features = ReferenceCacheAdapter.features


@pytest.mark.behaviours("TREE-7", "TREE-1")
@pytest.mark.parametrize("case", ["match-longest-whole-pages", "split-keeps-pins",
                                  "pinned-never-evicted", "lru-victim-order",
                                  "duplicate-insert-frees-caller-pages"])
def test_a_match_may_leave_the_last_token_when_declared(case):
    """Expected lengths are capped at the query less its last token, and a scenario whose lock
    extent matters ends its query with a page nobody holds, so it pins the same pages."""
    play(LeavesLastReference, _scenario(case).trace(EngineConfig()))


@pytest.mark.behaviours("TREE-7", "TREE-1")
def test_the_match_answer_is_judged_by_the_declaration():
    trace = _scenario("split-keeps-pins").trace(EngineConfig())  # matches a whole held query
    with pytest.raises(Exception) as e:
        play(ClaimsLeavesLast, trace)
    assert "TREE-7" in str(e.value)
    with pytest.raises(Exception) as e:
        play(UndeclaredLeavesLast, trace)
    assert "TREE-1" in str(e.value)


class ClaimsPageEviction(ReferenceCacheAdapter):
    """Declares page_eviction but frees whole nodes: the declaration is checked."""

    name = "claims-page-eviction"
    features = ReferenceCacheAdapter.features | {Feature.PAGE_EVICTION}


@pytest.mark.behaviours("EVICT-6", "EVICT-4")
def test_page_eviction_frees_at_most_what_is_asked():
    trace = _scenario("eviction-frees-whole-victims").trace(EngineConfig())
    play(ReferenceCacheAdapter, trace)
    with pytest.raises(Exception) as e:
        play(ClaimsPageEviction, trace)
    assert "EVICT-6" in str(e.value)
    oracle = PageEvictionOracle()
    oracle.on_evict(None, Tier.DEVICE, 2, 2, None, None)
    with pytest.raises(Exception) as e:
        oracle.on_evict(None, Tier.DEVICE, 1, 3, None, None)
    assert "EVICT-6" in str(e.value)


@pytest.mark.skipif(not HAS_VLLM, reason="vllm is not installed (.ci/install-peers.sh)")
@pytest.mark.behaviours("EVENT-1", "EVENT-6")
def test_vllm_announces_a_duplicate_block_twice_and_its_removal_while_cached():
    """The finding on vLLM, reduced: one page inserted twice is stored twice; evicting one copy
    announces its removal while a match still finds the other."""
    from kvconf.conformance.adapters.vllm_cache import VLLMAdapter

    a = VLLMAdapter(EngineConfig(page_size=2, device_pages=4))
    for _ in range(2):
        a.insert(0, [1, 1], a.alloc(1))
    stored = [e.block_hashes for e in a.drain_events()]
    assert len(stored) == 2 and stored[0] == stored[1]
    assert a.evict(Tier.DEVICE, 1) == 1
    assert [e.kind for e in a.drain_events()] == [EventKind.REMOVED]
    assert a.match(0, [1, 1, 9, 9]).device_len == 2


@pytest.mark.behaviours("EVENT-6")
def test_a_match_serving_a_block_announced_removed_is_caught_without_a_snapshot():
    """Black-box EVENT-6: what a match serves from the device tier must be stored by the events
    so far, as vLLM's duplicate shows when one copy's removal is announced."""
    from kvconf.conformance.cache.ledger import Ledger
    from kvconf.conformance.engine.protocol import Match
    from kvconf.conformance.runtime.memory import shadow_memory

    class Hashes:
        page_size = 2
        block_hash = staticmethod(block_hash)

    engine, ledger = Hashes(), Ledger(2, shadow_memory(2, 4, 0))
    h = block_hash(None, 0, [1, 1])
    stored = KVEvent(EventKind.STORED, (h,), 0, None, (1, 1), 2)
    served = Match(2, 0, (1,), (), 0, 0)
    oracle = EventOracle()
    oracle.after_step(Ctx(0, "insert", engine, ledger, events=[stored]))  # type: ignore[arg-type]
    oracle.on_match(Ctx(1, "match", engine, ledger), 0, [1, 1, 9, 9], served)  # type: ignore
    oracle.after_step(Ctx(1, "match", engine, ledger))  # type: ignore[arg-type]
    removed = KVEvent(EventKind.REMOVED, (h,))
    oracle.after_step(Ctx(2, "evict", engine, ledger, events=[removed]))  # type: ignore
    oracle.on_match(Ctx(3, "match", engine, ledger), 0, [1, 1, 9, 9], served)  # type: ignore
    with pytest.raises(Exception) as e:
        oracle.after_step(Ctx(3, "match", engine, ledger))  # type: ignore[arg-type]
    assert "EVENT-6" in str(e.value)


def test_missing_unified_cache_is_not_supported_with_its_reason(monkeypatch):
    """sglang-unified goes through the same import gate, then its own: either failing reports
    every case NOT_SUPPORTED with the reason, whether sglang is installed or not."""
    radix = importlib.import_module("kvconf.conformance.adapters.sglang_radix")
    unified = importlib.import_module("kvconf.conformance.adapters.sglang_unified")

    def absent(name: str):
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(unified, "import_module", absent)
    cases = select_cases(["match-longest-whole-pages", "unbalanced-unlock-rejected"])
    report = run_suite("sglang-unified", EngineConfig(), seed_value=0, profile=PROFILES["ci"],
                       budget=Budget(examples=1), report_path=None, cases=cases)
    assert {r.status for r in report.results} == {Status.NOT_SUPPORTED}
    assert all("cannot be imported" in r.message for r in report.results)
    monkeypatch.setattr(radix, "import_module", absent)
    report = run_suite("sglang-unified", EngineConfig(), seed_value=0, profile=PROFILES["ci"],
                       budget=Budget(examples=1), report_path=None, cases=cases)
    assert {r.status for r in report.results} == {Status.NOT_SUPPORTED}
    assert all("sglang cannot be imported" in r.message for r in report.results)
    assert report.run_info.version == "unavailable"


def test_unified_engine_is_registered_with_its_expectations():
    from kvconf.conformance.adapters import target_of

    assert target_of("sglang-unified") == (
        "kvconf.conformance.adapters.sglang_unified:SGLangUnifiedAdapter")
    path = ROOT / "conformance" / "adapters" / "expectations" / "sglang-unified.toml"
    exp = load_expectations(path)
    assert exp.engine == "sglang-unified"
    assert "unbalanced-unlock-rejected" in exp.by_case()
    ci = (ROOT / ".ci" / "peers").read_text()
    assert "sglang-unified" in ci


@pytest.mark.skipif(not HAS_SGLANG, reason="sglang is not installed (.ci/install-peers.sh)")
def test_sglang_unified_frees_only_the_callers_duplicates():
    """The engine frees duplicates itself; the adapter reports what it freed, and passes the
    caller's protected prefix (the tree's own pages) so those are never freed."""
    from kvconf.conformance.adapters.sglang_unified import SGLangUnifiedAdapter

    a = SGLangUnifiedAdapter(EngineConfig(page_size=2, device_pages=6))
    assert Feature.LOCK_HANDLES not in a.features
    first = a.alloc(2)
    assert a.insert(0, [1, 2, 3, 4], first).freed == ()
    m = a.match(0, [1, 2, 3, 4, 5, 6])
    assert (m.device_len, m.device_pages) == (4, tuple(first))
    new = a.alloc(1)
    ins = a.insert(0, [1, 2, 3, 4, 5, 6], list(m.device_pages) + new)
    assert (ins.cached_len, ins.freed) == (4, ())
    dup = a.alloc(3)
    ins = a.insert(0, [1, 2, 3, 4, 5, 6], dup)
    assert (ins.cached_len, sorted(ins.freed)) == (6, sorted(dup))
    assert a.match(0, [1, 2, 3, 4, 5, 6]).device_pages == (*first, *new)


@pytest.mark.skipif(not HAS_SGLANG, reason="sglang is not installed (.ci/install-peers.sh)")
def test_sglang_unified_receipt_names_a_node_not_a_lock():
    """Why lock_handles is not declared: two locks of one node get equal receipts, and a second
    release of the first is taken as the release of the other."""
    from kvconf.conformance.adapters.sglang_unified import SGLangUnifiedAdapter

    a = SGLangUnifiedAdapter(EngineConfig(page_size=2, device_pages=4))
    a.insert(0, [1, 2], a.alloc(1))
    node = a.match(0, [1, 2]).device_node
    h1, h2 = a.lock(node, Tier.DEVICE), a.lock(node, Tier.DEVICE)
    assert a._locks[h1] == a._locks[h2]
    a.unlock(h1)
    a.unlock(h1)  # accepted: h2's count is gone with it
    assert a.evict(Tier.DEVICE, 1) == 1


@pytest.mark.skipif(not HAS_SGLANG, reason="sglang is not installed (.ci/install-peers.sh)")
@pytest.mark.behaviours("PIN-1", "POOL-1")
def test_sglang_radix_snapshot_is_read_from_its_tree_and_judged():
    """The snapshot gives each namespace its own root, lists the adapter's live locks and
    SGLang's own counts; a snapshot with one count off fails the ownership oracle."""
    import dataclasses

    from kvconf.conformance.adapters.sglang_radix import SGLangRadixAdapter

    a = SGLangRadixAdapter(EngineConfig(page_size=2, device_pages=8))
    for ns in (0, 1):
        a.insert(ns, [1, 1, 2, 2], a.alloc(2))
    h = a.lock(a.match(1, [1, 1, 2, 2]).device_node, Tier.DEVICE)
    snap = a.snapshot()
    assert set(snap.roots) == {0, 1} and snap.roots[0] != snap.roots[1]
    leaves = [n for n in snap.nodes if n.parent is not None]
    assert sorted((n.namespace, n.device_ref) for n in leaves) == [(0, 0), (1, 1)]
    assert all(n.parent == snap.roots[n.namespace] for n in leaves)
    assert [lk.handle for lk in snap.locks] == [h]
    assert sorted(snap.pools[Tier.DEVICE].owners).count("free") == 4

    class OffByOne(SGLangRadixAdapter):
        def snapshot(self):
            s = super().snapshot()
            return dataclasses.replace(s, nodes=tuple(
                dataclasses.replace(n, device_ref=n.device_ref + 1) if n.parent is not None
                else n for n in s.nodes))

    trace = _scenario("split-keeps-pins").trace(EngineConfig())
    play(SGLangRadixAdapter, trace)
    with pytest.raises(Exception) as e:
        play(OffByOne, trace)
    assert "PIN-1" in str(e.value)


class HidesFreedDuplicates(ReferenceCacheAdapter):
    """Frees the caller's duplicates but reports none, and offers no snapshot."""

    name = "hides-freed"
    features = ReferenceCacheAdapter.features - {Feature.SNAPSHOT}

    def insert(self, namespace, tokens, pages):
        r = super().insert(namespace, tokens, pages)
        return type(r)(r.cached_len, ())


@pytest.mark.behaviours("TREE-5", "POOL-1")
def test_an_insert_that_frees_more_than_it_reports_is_caught_without_a_snapshot():
    """The pages an insert keeps stay the tree's until an eviction; an allocation that returns
    one before then shows the insert freed it silently."""
    trace = _scenario("duplicate-insert-frees-caller-pages").trace(EngineConfig())
    play(type("Blind", (ReferenceCacheAdapter,), {
        "features": ReferenceCacheAdapter.features - {Feature.SNAPSHOT}}), trace)
    with pytest.raises(Exception) as e:
        play(HidesFreedDuplicates, trace)
    assert "TREE-5" in str(e.value)


@pytest.mark.skipif(not HAS_VLLM, reason="vllm is not installed (.ci/install-peers.sh)")
@pytest.mark.behaviours("EVICT-8", "EVICT-9", "EVENT-9")
def test_vllm_resets_as_the_spec_says():
    """vLLM's ``reset_prefix_cache`` refuses while a block is in use and clears everything with
    an AllBlocksCleared otherwise: the reset scenarios pass, judging the three rules."""
    from kvconf.conformance.adapters.vllm_cache import VLLMAdapter

    assert Feature.RESET in VLLMAdapter.features
    for name in ("reset-waits-then-clears", "reset-announces-cleared"):
        sc = next(s for s in SCENARIOS if s.name == name)
        play(VLLMAdapter, sc.trace(EngineConfig(page_size=2, device_pages=24)))
