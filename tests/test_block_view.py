"""The white-box view of a hash-keyed cache (POOL-7): vLLM's block pool read as blocks, judged by
the block-pool oracle; a planted error in the view fails cases, the view unplanted passes them.

The oracle's own checks are tested on hand-made views without vLLM; the rest needs vLLM
(``.ci/install-peers.sh``) and is skipped without it."""

from __future__ import annotations

import dataclasses
import importlib.util
from types import SimpleNamespace

import pytest

from kvconf.conformance.cache.scenarios import SCENARIOS
from kvconf.conformance.engine.block_snapshot import BlockSnapshot, BlockView, ChainLink, TableView
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.errors import EngineRejected
from kvconf.conformance.oracles.base import Ctx, Violation
from kvconf.conformance.oracles.block_pool import BlockPoolOracle
from kvconf.conformance.running.runner import play
from kvconf.reference.tiers import Tier

HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="vllm is not installed (.ci/install-peers.sh)")


def _scenario(name: str):
    return next(s for s in SCENARIOS if s.name == name)


# ----------------------------------------------------------------- the oracle, on hand-made views
def _view(**kw) -> BlockSnapshot:
    """Blocks 0 (reserved) .. 4, page size 2: hash 0xa is [1, 2], 0xb is [3, 4] after it; block
    1 holds 0xa, blocks 2 and 3 both hold 0xb (a duplicate, TREE-5), block 4 is uncached.
    Nothing is held: every block but the reserved one is in the free queue."""
    base = dict(
        page_size=2,
        blocks=(BlockView(0, 0, ()), BlockView(1, 0, (0xa,)), BlockView(2, 0, (0xb,)),
                BlockView(3, 0, (0xb,)), BlockView(4, 0, ())),
        reserved=(0,), free=(4, 3, 2, 1),
        cached={0xa: (1,), 0xb: (2, 3)},
        links={0xa: ChainLink(None, 0, (1, 2)), 0xb: ChainLink(0xa, 0, (3, 4))},
        tables=(),
    )
    base.update(kw)
    return BlockSnapshot(**base)


def _judge(snap: BlockSnapshot, held=(), locks=()) -> None:
    engine = SimpleNamespace(features=frozenset({Feature.BLOCK_SNAPSHOT}))
    ledger = SimpleNamespace(held=set(held), live_locks=lambda: list(locks), page_size=2)
    ctx = Ctx(0, "match", engine, ledger, after=snap)
    BlockPoolOracle().after_step(ctx)


def _lock(handle, pages, tokens=(1, 2, 3, 4)):
    return SimpleNamespace(handle=handle, pages=tuple(pages), tier=Tier.DEVICE, namespace=0,
                           tokens=tuple(tokens), step=3)


@pytest.mark.behaviours("POOL-7", "TREE-5")
def test_a_duplicate_hash_and_a_lock_on_either_copy_hold():
    _judge(_view())
    held = _view(blocks=(BlockView(0, 0, ()), BlockView(1, 1, (0xa,)), BlockView(2, 0, (0xb,)),
                         BlockView(3, 1, (0xb,)), BlockView(4, 0, ())),
                 free=(4, 2), tables=(TableView(7, (1, 3)),))
    _judge(held, locks=[_lock(7, (1, 3))])


@pytest.mark.behaviours("POOL-7", "POOL-1", "POOL-4", "PIN-1", "EVICT-1")
@pytest.mark.parametrize(("change", "rule"), [
    (dict(blocks=(BlockView(0, 0, ()), BlockView(1, 1, (0xa,)), BlockView(2, 0, (0xb,)),
                  BlockView(3, 0, (0xb,)), BlockView(4, 0, ()))), "POOL-1"),  # free and held
    (dict(free=(4, 3, 2)), "POOL-4"),  # block 1 held by nobody, not free: lost
    (dict(cached={0xa: (1,), 0xb: (2,)}), "POOL-4"),  # block 3 carries 0xb, the map misses it
    (dict(cached={0xb: (2, 3)}, blocks=(BlockView(0, 0, ()), BlockView(1, 0, ()),
                                        BlockView(2, 0, (0xb,)), BlockView(3, 0, (0xb,)),
                                        BlockView(4, 0, ()))), "EVICT-1"),  # a hole in a prefix
    (dict(free=(4, 3, 2, 1, 1)), "POOL-1"),  # listed twice
])
def test_a_view_that_tells_two_stories_fails(change, rule):
    with pytest.raises(Violation) as e:
        _judge(_view(**change))
    assert rule in e.value.behaviours


@pytest.mark.behaviours("POOL-7", "PIN-1", "PIN-2")
def test_counts_and_tables_are_the_locks_held():
    held = dict(blocks=(BlockView(0, 0, ()), BlockView(1, 1, (0xa,)), BlockView(2, 0, (0xb,)),
                        BlockView(3, 1, (0xb,)), BlockView(4, 0, ())),
                free=(4, 2), tables=(TableView(7, (1, 3)),))
    for locks, rule in (([], "PIN-1"),  # a table for no lock of the caller
                        ([_lock(7, (1, 2))], "PIN-1"),  # a table of other pages than the match's
                        ([_lock(7, (1, 3)), _lock(8, (1, 3))], "PIN-1")):  # a lock with no table
        with pytest.raises(Violation) as e:
            _judge(_view(**held), locks=locks)
        assert rule in e.value.behaviours, e.value
    with pytest.raises(Violation) as e:  # the caller's block counted twice
        _judge(_view(blocks=(*_view().blocks[:4], BlockView(4, 2, ())), free=(3, 2, 1)), held=[4])
    assert "PIN-1" in e.value.behaviours
    gone = dict(held, cached={0xa: (1,), 0xb: (2,)},
                blocks=(*held["blocks"][:3], BlockView(3, 1, ()), held["blocks"][4]))
    with pytest.raises(Violation) as e:  # a locked block no longer cached under its prefix
        _judge(_view(**gone), locks=[_lock(7, (1, 3))])
    assert "PIN-2" in e.value.behaviours


# ----------------------------------------------------------------- vLLM
def _adapters():
    from kvconf.conformance.adapters.vllm_cache import VLLMAdapter

    class Quiet(VLLMAdapter):
        """vLLM with its first two findings set aside (docs/peers.md): events off, a second
        unlock refused; so that a case goes on past them and the view is judged to the end."""

        features = VLLMAdapter.features - {Feature.KV_EVENTS}

        def __init__(self, config):
            super().__init__(config)
            self._released: set[int] = set()

        def unlock(self, handle):
            if handle in self._released:
                raise EngineRejected("not_held", "released already")
            self._released.add(handle)
            super().unlock(handle)

    class CountsOneHigh(Quiet):
        """Every held block's reference count one too high."""

        def snapshot(self):
            s = super().snapshot()
            held = {pg for t in s.tables for pg in t.pages}
            return dataclasses.replace(s, blocks=tuple(
                dataclasses.replace(b, ref=b.ref + 1) if b.id in held else b for b in s.blocks))

    class FreeWhilePinned(Quiet):
        """A block that a lock holds, cached, also listed in the free queue."""

        def snapshot(self):
            s = super().snapshot()
            held = [pg for t in s.tables for pg in t.pages]
            return dataclasses.replace(s, free=s.free + tuple(held[:1]))

    class EvictsNewest(Quiet):
        """Evicts the most recently released block that ends a cached prefix: leaves no hole,
        but is not the engine's own order (the free queue's head)."""

        def evict(self, tier, num_pages):
            done = 0
            while done < num_pages:
                s = self.snapshot()
                parents = {ln.parent for h, ln in s.links.items() if h in s.cached}
                ends = [i for i in s.free if s.blocks[i].hashes and all(
                    h not in parents or len(s.cached[h]) > 1 for h in s.blocks[i].hashes)]
                if not ends:
                    break
                self.mgr.evict_blocks({ends[-1]})
                done += 1
            return done

    return SimpleNamespace(plain=VLLMAdapter, quiet=Quiet, counts=CountsOneHigh,
                           free=FreeWhilePinned, newest=EvictsNewest)


@needs_vllm
@pytest.mark.behaviours("POOL-7", "PIN-1")
def test_vllm_view_is_read_from_its_block_pool():
    a = _adapters().plain(EngineConfig(page_size=2, device_pages=8))
    for ns in (0, 1):
        a.insert(ns, [1, 1, 2, 2], a.alloc(2))
    a.insert(0, [1, 1, 2, 2], a.alloc(2))  # a duplicate of namespace 0's blocks (TREE-5)
    m = a.match(1, [1, 1, 2, 2, 3])
    h = a.lock(m.device_node, Tier.DEVICE)
    s = a.snapshot()
    assert s.reserved == (0,) and len(s.blocks) == 9
    assert [t.handle for t in s.tables if t.pages] == [h]
    assert [t.pages for t in s.tables if t.pages] == [m.device_pages]
    assert [s.blocks[g].ref for g in m.device_pages] == [1, 1]
    assert sorted(len(ids) for ids in s.cached.values()) == [1, 1, 2, 2]  # ns 0 twice
    assert {ln.namespace for ln in s.links.values()} == {0, 1}
    assert set(s.free) == {b.id for b in s.blocks if b.id and not b.ref}
    assert len(s.chain(1, (1, 1, 2, 2))) == 2 and len(s.chain(2, (1, 1, 2, 2))) == 0


@needs_vllm
@pytest.mark.behaviours("POOL-7", "POOL-1", "PIN-1", "EVICT-2")
@pytest.mark.parametrize("case", ["split-keeps-pins", "pinned-never-evicted"])
def test_a_planted_error_in_vllm_view_fails_the_case(case):
    """The view is live: one count too high fails PIN-1, a pinned block listed free POOL-1,
    an eviction out of the engine's own order EVICT-2; the view unplanted passes."""
    ad = _adapters()
    trace = _scenario(case).trace(EngineConfig())
    play(ad.quiet, trace)
    for planted, rule in ((ad.counts, "PIN-1"), (ad.free, "POOL-1")):
        with pytest.raises(Violation) as e:
            play(planted, trace)
        assert rule in e.value.behaviours and e.value.oracle == "block-pool", e.value


@needs_vllm
@pytest.mark.behaviours("POOL-7", "EVICT-2", "PIN-1")
def test_vllm_view_holds_over_fuzzed_walks_and_a_planted_error_fails_them():
    """Past the first two findings the fuzz walks pass with the view judged at every step
    (duplicates, pins and evictions included); a count one too high, or an eviction from the
    free queue's tail, fails them."""
    from kvconf.conformance.running.cases import RunContext
    from kvconf.conformance.running.profiles import PROFILES, Budget
    from kvconf.conformance.running.runner import run_case, select_cases

    ad = _adapters()

    def statuses(factory):
        ctx = RunContext("t", factory, EngineConfig(), 0, PROFILES["ci"], Budget(examples=10),
                         None, features=factory.features | {Feature.CACHE})
        results = {c.name: run_case(ctx, c) for c in select_cases(["fuzz-cache",
                                                                    "fuzz-cache-tight"])}
        return {k: (r.status.value, r.behaviours) for k, r in results.items()}

    assert {k: v[0] for k, v in statuses(ad.quiet).items()} == {
        "fuzz-cache": "PASS", "fuzz-cache-tight": "PASS"}
    for planted, rule in ((ad.counts, "PIN-1"), (ad.newest, "EVICT-2")):
        got = statuses(planted)
        assert all(s == "FAIL" for s, _ in got.values()), got
        assert all(rule in b for _, b in got.values()), got
