"""Reset (EVICT-8, EVICT-9, EVENT-9): the reference's, the kit's checks of it, its mutants, and
the choice the spec leaves open (a lock of an empty match may count as in use or not)."""

from __future__ import annotations

import random
from functools import partial

import pytest

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.cache.scenarios import SCENARIOS
from kvconf.conformance.cache.walk import CacheWalk, TraceHolder
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.field_docs import meaning
from kvconf.conformance.errors import KitError
from kvconf.conformance.mutants.cache import (
    ResetIgnoresHolders,
    ResetKeepsHostCopies,
    ResetSilent,
)
from kvconf.conformance.oracles import STEP_ORACLES, Violation
from kvconf.conformance.reporting.step_words import answer, describe_expect
from kvconf.conformance.running.runner import play
from kvconf.conformance.runtime.memory import shadow_memory
from kvconf.conformance.trace import MatchStep, ResetStep, Trace
from kvconf.reference import CacheConfig, PrefixCache, Tier
from kvconf.reference.kv_events import EventKind

RESET_SCENARIOS = [sc for sc in SCENARIOS if Feature.RESET in sc.needs]


def _factory(cls: type[PrefixCache] = PrefixCache):
    return partial(ReferenceCacheAdapter, cache_cls=cls)


@pytest.mark.behaviours("EVICT-8", "EVICT-9", "EVENT-9")
def test_the_reference_refuses_while_held_and_clears_when_idle() -> None:
    cache = PrefixCache(CacheConfig(page_size=2, device_pages=8, host_pages=8))
    pages = cache.alloc(2)
    assert cache.reset() is False  # the caller holds two pages
    cache.insert(0, [1, 2, 3, 4], pages)
    m = cache.match(0, [1, 2, 3, 4])
    handle = cache.lock(m.device_node, Tier.DEVICE)
    cache.drain_events()
    before = cache.snapshot()
    assert cache.reset() is False and cache.snapshot() == before
    assert cache.drain_events() == []  # a refused reset announces nothing
    cache.unlock(handle)
    assert cache.reset() is True
    assert [e.kind for e in cache.drain_events()] == [EventKind.CLEARED]
    assert cache.match(0, [1, 2, 3, 4]).device_len == 0
    assert cache.counters()["available_device"] == 8 and cache.counters()["cached_device"] == 0


@pytest.mark.behaviours("EVICT-8", "EVICT-9", "EVENT-9")
@pytest.mark.parametrize("sc", RESET_SCENARIOS, ids=lambda sc: sc.name)
def test_the_reset_scenarios_pass_on_the_reference(sc) -> None:
    log = play(_factory(), sc.trace(EngineConfig(page_size=2, device_pages=24, host_pages=24)))
    assert [r["cleared"] for r in log if r["op"] == "reset"] == [False, True]


@pytest.mark.behaviours("EVICT-8", "EVICT-9", "EVENT-9")
@pytest.mark.parametrize(("cls", "rule"), [(ResetIgnoresHolders, "EVICT-8"),
                                           (ResetKeepsHostCopies, "EVICT-9"),
                                           (ResetSilent, "EVENT-9")])
def test_each_reset_mutant_fails_its_rule_in_a_scenario(cls, rule: str) -> None:
    found = []
    for sc in RESET_SCENARIOS:
        try:
            play(_factory(cls), sc.trace(EngineConfig(device_pages=24, host_pages=24)))
        except Violation as v:
            found.append(v)
    assert any(rule in v.behaviours for v in found), [(v.behaviours, v.message) for v in found]


class _CountsEmptyLocks(PrefixCache):
    """A legal choice (EVICT-8): any lock held, an empty match's too, keeps a reset out."""

    def in_use(self) -> bool:
        return super().in_use() or bool(self._locks.items())


@pytest.mark.behaviours("EVICT-8")
@pytest.mark.parametrize("cls", [PrefixCache, _CountsEmptyLocks])
def test_with_only_an_empty_match_locked_either_answer_is_legal(cls) -> None:
    trace = Trace(config=EngineConfig(), steps=[
        MatchStep(tokens=[1, 2], lock=Tier.DEVICE), ResetStep(), MatchStep(tokens=[1, 2])])
    log = play(_factory(cls), trace)
    assert log[1]["cleared"] is (cls is PrefixCache)


@pytest.mark.behaviours("EVICT-8", "EVICT-9", "EVENT-9")
def test_the_walk_plays_resets_both_refused_and_cleared_and_the_reference_holds() -> None:
    answers: list[bool] = []
    for seed in range(12):
        walk = CacheWalk(random.Random(seed), _factory(), EngineConfig(device_pages=16,
                                                                       host_pages=8),
                         TraceHolder(), memory=shadow_memory, oracles=STEP_ORACLES)
        walk.run(30)
        walk.finish()
        mine = [r["cleared"] for r in walk.driver.log if r["op"] == "reset"]
        judged = walk.driver.judged()
        assert ("EVENT-9" in judged) is bool(mine)  # judged where a reset ran, else not
        assert ("EVICT-9" in judged) is (True in mine)  # judged where one cleared
        answers += mine
    assert True in answers and False in answers


class _NoReset(ReferenceCacheAdapter):
    features = ReferenceCacheAdapter.features - {Feature.RESET}


def test_an_engine_without_reset_is_never_reset_nor_judged_on_it() -> None:
    for seed in range(6):
        walk = CacheWalk(random.Random(seed), _NoReset, EngineConfig(), TraceHolder(),
                         memory=shadow_memory, oracles=STEP_ORACLES)
        walk.run(30)
        assert all(s.op != "reset" for s in walk.trace.steps)
        assert not {"EVICT-8", "EVICT-9", "EVENT-9"} & walk.driver.judged()
    with pytest.raises(KitError, match="reset, and the engine does not declare reset"):
        play(_NoReset, Trace(config=EngineConfig(), steps=[ResetStep()]))


def test_a_reset_step_reads_in_words_and_its_field_says_what_it_means() -> None:
    assert answer({"op": "reset", "cleared": True, "events": [["AllBlocksCleared", []]]}) == (
        "clears the cache; 1 AllBlocksCleared")
    assert answer({"op": "reset", "cleared": False, "events": []}) == "refuses the reset"
    assert describe_expect({"cleared": False}) == "expects refused"
    assert meaning("cleared").startswith("cleared: what reset returned")
    assert "Drop the whole cache" in meaning("cleared")


def test_an_engine_that_declares_reset_without_the_method_is_told_in_one_line() -> None:
    from kvconf.conformance.engine.contract import problems

    class _Claims(_NoReset):
        features = ReferenceCacheAdapter.features

    engine = _Claims(EngineConfig())
    engine.reset = None  # declared, but nothing to call
    (line,) = problems(engine, Feature.CACHE)
    assert line.startswith("reset: missing, needed with reset (reset() -> bool: Drop the whole")
    assert problems(_NoReset(EngineConfig()), Feature.CACHE) == []
