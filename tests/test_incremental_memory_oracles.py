"""The memory oracles read again only what changed since the last step that held: the page-hash
oracle (TREE-2, EVENT-4) the nodes whose fields changed, whose device pages the runtime's memory
logs as written since (``ShadowMemory.written_since``) and those below them; the pinned-content
oracle (PIN-2) the new locks and those over a page written since. Both give the very verdicts of
their full checks: seeded walks are played twice, incremental and full, against the reference and
every cache mutant (each also with a stray write into the memory at a drawn point, which is what
a defect the engine's own records do not show leaves behind), and both plays must end the same
way: passed, or the same rule broken at the same step with the same message."""

from __future__ import annotations

import random
from functools import partial

import pytest

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.cache.generator import TraceHolder, play_walk
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.mutants.cache import PLANTED
from kvconf.conformance.oracles import Oracle, Violation
from kvconf.conformance.runtime.memory import ShadowMemory
from kvconf.reference.tiers import Tier

CONFIGS = (EngineConfig(), EngineConfig(device_pages=8, host_pages=6),
           EngineConfig(page_size=1))


class StrayWrite(ShadowMemory):
    """A shadow memory that, at its ``at``-th page fill, also writes the fill's first tag into
    another device page drawn from ``rng``: KV landing where it does not belong."""

    def __init__(self, page_size: int, sizes: dict[Tier, int], at: int, rng: random.Random
                 ) -> None:
        super().__init__(page_size, sizes)
        self.at, self.rng, self.fills = at, rng, 0

    def write_pages(self, tier, pages, tags) -> None:
        super().write_pages(tier, pages, tags)
        self.fills += 1
        if self.fills == self.at and tags:
            stray = self.rng.randrange(self.sizes[Tier.DEVICE])
            super().write_pages(Tier.DEVICE, [stray], [tags[0]])


def _memory(seed: int):
    rng = random.Random(seed)
    at = rng.randint(1, 12)
    return lambda p, d, h: StrayWrite(p, {Tier.DEVICE: d, Tier.HOST: h}, at, rng)


def _verdict(factory, config: EngineConfig, seed: int, stray: bool, incremental: bool,
             monkeypatch: pytest.MonkeyPatch) -> tuple:
    monkeypatch.setattr(Oracle, "incremental", incremental)
    holder = TraceHolder()
    kw = {"memory": _memory(seed)} if stray else {}
    try:
        play_walk(factory, config, holder, seed, 40, **kw)
        outcome: tuple = ("passed",)
    except Violation as v:
        outcome = (v.oracle, v.behaviours, v.message, v.step)
    assert holder.last is not None
    return outcome, holder.last.model_dump_json()


def _same_both_ways(factory, seeds, stray: bool, monkeypatch) -> list[tuple]:
    outcomes = []
    for config in CONFIGS:
        for seed in seeds:
            full = _verdict(factory, config, seed, stray, False, monkeypatch)
            fast = _verdict(factory, config, seed, stray, True, monkeypatch)
            assert fast == full, (config, seed, stray)
            outcomes.append(full[0])
    return outcomes


def test_written_since_lists_every_page_changed_in_order():
    mem = ShadowMemory(2, {Tier.DEVICE: 4, Tier.HOST: 4})
    mark = mem.writes
    mem.write_pages(Tier.DEVICE, [1, 2], [7, 8])
    copy = mem.start_copy(Tier.DEVICE, Tier.HOST, [(1, 3)])
    assert mem.written_since(mark) == [(Tier.DEVICE, 1), (Tier.DEVICE, 2), (Tier.HOST, 3)]
    later = mem.writes
    mem.finish_copy(copy, True)
    assert mem.written_since(later) == [(Tier.HOST, 3)]
    assert mem.writes == len(mem.written_since(0))


@pytest.mark.behaviours("TREE-2", "EVENT-4", "PIN-2")
def test_the_reference_gets_the_same_verdicts_both_ways(monkeypatch):
    assert all(o == ("passed",) for o in _same_both_ways(ReferenceCacheAdapter, range(30),
                                                         False, monkeypatch))
    # Stray writes into the memory: found by the memory oracles (or nothing to find, where
    # the page was free), the same both ways.
    outcomes = _same_both_ways(ReferenceCacheAdapter, range(30), True, monkeypatch)
    memory = {"page-hashes", "pinned-content", "content"}
    assert sum(o[0] in memory for o in outcomes) >= 10, "the stray writes were seen too rarely"


@pytest.mark.behaviours("TREE-2", "EVENT-4", "PIN-2")
@pytest.mark.parametrize("name", sorted(PLANTED))
def test_each_cache_mutant_gets_the_same_verdicts_both_ways(name, monkeypatch):
    factory = partial(ReferenceCacheAdapter, cache_cls=PLANTED[name])
    outcomes = _same_both_ways(factory, range(4), False, monkeypatch)
    outcomes += _same_both_ways(factory, range(4), True, monkeypatch)
    assert any(o != ("passed",) for o in outcomes), "every walk passed: nothing was compared"
