"""The kit tested on itself: the clean reference passes, every planted defect is caught.

Each class in ``planted.PLANTED`` is the reference with one defect; its docstring starts with the
behaviours it breaks. The scenario cases must catch every one of them, and the stateful fuzzer
(``run_fuzz``) must catch them within a small budget; the defects it needs a long campaign for
are listed in ``SLOW_FUZZ`` and run only with ``-m fuzz``. Where the violation the kit reports
names a different behaviour than the docstring, ``REPORTED_UNDER`` says which and why, so a change
in attribution shows up as a test failure.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
from hypothesis import settings
from other_end_pool import OtherEndPool
from planted import PLANTED

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.cache.generator import TraceHolder
from kvconf.conformance.cache.scenarios import SCENARIOS
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.oracles import Violation
from kvconf.conformance.running.profiles import Budget
from kvconf.conformance.running.runner import play, run_fuzz
from kvconf.conformance.running.shrink import shrink, signature
from kvconf.conformance.trace import Trace, dump_trace, load_trace
from kvconf.reference import PrefixCache
from kvconf.spec import load_registry

TIGHT = EngineConfig(device_pages=8, host_pages=6)
FUZZ_EXAMPLES = 300  # per planted defect and attempt; run_fuzz does not shrink
FUZZ_STEPS = 30


def factory_for(cls: type[PrefixCache]) -> Callable[[EngineConfig], ReferenceCacheAdapter]:
    return partial(ReferenceCacheAdapter, cache_cls=cls)


def doc_ids(cls: type) -> set[str]:
    """Behaviour IDs named before the colon of the class docstring (catalog IDs dropped)."""
    head = (cls.__doc__ or "").split(":", 1)[0]
    known = load_registry().behaviours
    return {b for b in re.findall(r"\b[A-Z][A-Z0-9]*-[0-9]+\b", head) if b in known}


def scenario_violations(cls: type[PrefixCache], page_size: int = 2) -> dict[str, Violation]:
    found: dict[str, Violation] = {}
    for sc in SCENARIOS:
        try:
            play(factory_for(cls), sc.trace(EngineConfig(page_size=page_size)))
        except Violation as v:
            found[sc.name] = v
    return found


def profile_budget() -> tuple[int, int]:
    """Examples and steps of the loaded Hypothesis profile (KVCONF_PROFILE, see conftest)."""
    return settings.default.max_examples, settings.default.stateful_step_count


# ------------------------------------------------------------------------------ clean reference
@pytest.mark.behaviours(
    "TREE-1", "TREE-2", "TREE-3", "TREE-4", "TREE-5", "TREE-6", "PIN-1", "PIN-2", "PIN-3",
    "POOL-4", "EVICT-1", "EVICT-2", "EVICT-3", "EVICT-4", "EVICT-5", "HOST-1", "HOST-2",
    "HOST-3", "HOST-4", "HOST-6", "NS-1", "EVENT-1", "EVENT-2", "EVENT-3", "EVENT-4", "EVENT-5",
    "EVENT-6", "DET-1", "FAULT-1",
)
@pytest.mark.parametrize("page_size", [1, 2, 3])
def test_clean_reference_passes_every_scenario(page_size):
    assert SCENARIOS
    for sc in SCENARIOS:
        log = play(ReferenceCacheAdapter, sc.trace(EngineConfig(page_size=page_size)))
        assert len(log) == len(sc.steps), sc.name


@pytest.mark.behaviours("POOL-1", "POOL-2", "POOL-4", "PIN-1", "PIN-2", "TREE-1", "TREE-2",
                        "EVICT-2", "EVENT-6", "HOST-5", "DET-1", "FAULT-2")
@pytest.mark.parametrize(
    "config",
    [EngineConfig(), TIGHT, EngineConfig(page_size=1), EngineConfig(page_size=3, device_pages=12)],
    ids=["default", "tight", "page1", "page3"],
)
def test_clean_reference_passes_a_short_fuzz_run(config):
    examples, steps = profile_budget()
    holder = TraceHolder()
    run_fuzz(ReferenceCacheAdapter, config, holder, Budget(examples=examples), steps, 7)
    assert holder.examples >= examples
    assert holder.seen_ops.get("match", 0) and holder.seen_ops.get("evict", 0)


class OtherFreePages(PrefixCache):
    """A correct engine that picks different free pages than the reference (POOL-3)."""

    def __init__(self, config=None) -> None:
        super().__init__(config)
        self.pools = {t: OtherEndPool(t, p.size) for t, p in self.pools.items()}


@pytest.mark.behaviours("POOL-3")
def test_any_choice_of_free_pages_is_accepted():
    differs = False
    for sc in SCENARIOS:
        trace = sc.trace(EngineConfig(page_size=2))
        mine = play(factory_for(OtherFreePages), trace)
        ref = play(ReferenceCacheAdapter, trace)
        differs |= [r.get("pages") for r in mine] != [r.get("pages") for r in ref]
    assert differs, "the alternative engine should really pick other pages"
    examples, steps = profile_budget()
    run_fuzz(factory_for(OtherFreePages), TIGHT, TraceHolder(), Budget(examples=examples),
             steps, 3)


# ------------------------------------------------------------------------------ planted defects
# Defect -> (a scenario that catches it, the oracle that reports it, the behaviour reported).
SCENARIO_CATCHES: dict[str, tuple[str, str, str]] = {
    "EvictsPinned": ("pinned-never-evicted", "eviction", "EVICT-1"),
    "NewestFirst": ("lru-victim-order", "eviction", "EVICT-2"),
    "TieByNewestSeq": ("equal-times-oldest-node-first", "eviction", "EVICT-3"),
    "LeaksDuplicates": ("duplicate-insert-frees-caller-pages", "ownership", "POOL-4"),
    "SplitDropsPins": ("split-keeps-pins", "match", "TREE-4"),
    "IgnoresFailedAck": ("failed-writeback-is-not-success", "faults", "HOST-4"),
    "NoHostRefresh": ("writeback-refreshes-host-lru", "eviction", "HOST-6"),
    "MatchOnePageLong": ("match-longest-whole-pages", "content", "TREE-2"),
    "HashWithoutNamespace": ("namespace-isolation", "events", "EVENT-5"),
    "UnbalancedUnlockAccepted": ("unbalanced-unlock-rejected", "faults", "PIN-3"),
    "StoresTwice": ("writeback-demote-loadback", "events", "EVENT-1"),
    "SharedNamespaces": ("namespace-isolation", "content", "NS-1"),
    # The driver poisons a transfer's destination pages when it starts, so device pages that
    # join the tree before the copy landed hold garbage: the memory oracle sees it in the tree
    # before any match serves it.
    "LoadbackVisibleEarly": ("writeback-demote-loadback", "page-hashes", "TREE-2"),
    # Its expectation (nothing evictable on host) fires first; without it the ownership oracle
    # reports HOST-1 at the ack, when the copied pages land under a parent with no host copy.
    "WritebackParentUnpinned": ("writeback-keeps-host-parent", "expect", "HOST-2"),
    "UnloadKeepsUnpinned": ("unload-adapter", "unload", "NS-2"),
    "UnloadFreesPinned": ("unload-adapter", "pinning", "PIN-2"),
    "UnloadSilent": ("unload-adapter", "events", "EVENT-6"),
    "NegativeDepthAtRoot": ("namespace-isolation", "match", "TREE-3"),
    # The driver sees a legal lock refused: FAULT-2, with the scenario that locks a root on host.
    "RootNotLockableOnHost": ("pinned-never-evicted", "faults", "FAULT-2"),
    # The ack step itself: the engine still lists the copy the caller just acknowledged.
    "WritebackNeverRetired": ("writeback-demote-loadback", "transfers", "HOST-10"),
    # The counter drifts at the drain's eviction, where the snapshot shows the true count.
    "EvictableOffByOne": ("match-longest-whole-pages", "counters", "POOL-6"),
    # The host source the copy still reads is freed by the eviction: its pages' owner is wrong.
    "UnlockDropsTransferPin": ("loadback-keeps-host-source", "ownership", "HOST-3"),
    # The leaf its lock held is gone at the next match, and no eviction freed a page.
    "DropsLeafOnUnlock": ("cached-until-evicted", "retention", "EVICT-7"),
    # The driver knows from its ledger that a lock holds a page: the reset's True is the fault.
    "ResetIgnoresHolders": ("reset-waits-then-clears", "faults", "EVICT-8"),
    "ResetKeepsHostCopies": ("reset-waits-for-copies", "reset", "EVICT-9"),
    "ResetSilent": ("reset-waits-then-clears", "reset", "EVENT-9"),
    # A match that finds the prefix on host alone, after its device copy was evicted.
    "HitsCountHost": ("writeback-demote-loadback", "hit-rate", "POOL-8"),
}

# Behaviours a defect is reported under although its docstring names another one, and why.
REPORTED_UNDER: dict[str, set[str]] = {
    # An unload that frees its namespace's pinned pages lets more pages go than an unload may
    # (only the unpinned ones): the kit's own account of cached pages sees it first (EVICT-7).
    "UnloadFreesPinned": {"NS-2", "PIN-2", "EVICT-7"},
    # A refused legal lock is a fault of the call, not a miscount of pins.
    "RootNotLockableOnHost": {"FAULT-2"},
    # The eviction oracle sees it first and cites both rules ("not pinned" is part of EVICT-1).
    "EvictsPinned": {"EVICT-1", "PIN-2"},
    # The same tokens in two namespaces give one hash: the second store is a duplicate
    # (EVENT-1), and the hash does not recompute with the engine's declared function (EVENT-4).
    "HashWithoutNamespace": {"EVENT-1", "EVENT-4"},
    # A loadback that lands after its adapter was unloaded: the extra store announces a block
    # no live tree holds on the device, so the stored set drifts from the device tier first.
    "StoresTwice": {"EVENT-1", "EVENT-6"},
    # Eviction-order defects surface as "evicted more than needed" when the wrong victim is
    # smaller than the right one.
    "NewestFirst": {"EVICT-3", "EVICT-4"},
    "TieByNewestSeq": {"EVICT-2", "EVICT-4"},
    # Every namespace shares one tree: after an insert in namespace 1 its own tree holds nothing.
    "SharedNamespaces": {"TREE-5", "TREE-2"},
    # Pages served before their copy landed hold another prefix's (or no) KV.
    "LoadbackVisibleEarly": {"TREE-2"},
    "WritebackParentUnpinned": {"HOST-1"},
}


def test_every_planted_defect_names_real_behaviours():
    assert len(PLANTED) >= 13
    for name, cls in PLANTED.items():
        assert doc_ids(cls), f"{name}: docstring names no behaviour"


@pytest.mark.behaviours(
    "PIN-2", "EVICT-1", "EVICT-2", "EVICT-3", "TREE-5", "POOL-4", "PIN-1", "TREE-4", "HOST-4",
    "HOST-6", "TREE-1", "TREE-2", "EVENT-5", "EVENT-1", "PIN-3", "NS-1", "HOST-3", "HOST-2",
    "NS-2", "EVENT-6", "HOST-10", "POOL-6", "EVICT-7",
)
@pytest.mark.parametrize("name", sorted(PLANTED))
def test_scenarios_catch_planted_defect(name):
    cls = PLANTED[name]
    found = scenario_violations(cls)
    assert found, f"{name}: no scenario catches it"
    reported = {b for v in found.values() for b in v.behaviours}
    expected = doc_ids(cls) | REPORTED_UNDER.get(name, set())
    assert reported & expected, f"{name}: reported {sorted(reported)}, expected {expected}"
    if name in SCENARIO_CATCHES:
        scenario, oracle, behaviour = SCENARIO_CATCHES[name]
        assert scenario in found, f"{name}: {scenario} passes; caught by {sorted(found)}"
        v = found[scenario]
        assert v.oracle == oracle and behaviour in v.behaviours, (v.oracle, v.behaviours)
        assert v.step is not None
    for v in found.values():
        assert v.step is not None and v.message


# Found by the fuzzer only in long campaigns, if at all: opt-in (``-m fuzz``), with the budget
# that a run of eight seeds at 300 examples each showed they need (see the suite's report).
# Defects the fuzzer needs a long campaign for (run with -m fuzz). Empty since the generator
# learnt the offload_deeper and writeback_race rules, which reach the last two in seconds.
SLOW_FUZZ: dict[str, int] = {}
ATTEMPTS = ((EngineConfig(), 0), (TIGHT, 1), (EngineConfig(), 2))  # (config, seed) per attempt


def _fuzz_params():
    out = []
    for name in sorted(PLANTED):
        if name in SLOW_FUZZ:
            out.append(pytest.param(name, SLOW_FUZZ[name], marks=pytest.mark.fuzz, id=name))
        else:
            out.append(pytest.param(name, FUZZ_EXAMPLES, id=name))
    return out


def fuzz_until_caught(cls: type[PrefixCache], examples: int) -> tuple[Violation, Trace]:
    """run_fuzz with a few (config, seed) attempts; the first violation and its trace.

    Hypothesis draws differ with the set of modules loaded (it mines their constants), so one
    fixed seed is not one fixed run across test selections; restarts keep the test stable.
    """
    for config, seed_value in ATTEMPTS:
        holder = TraceHolder()
        try:
            run_fuzz(factory_for(cls), config, holder, Budget(examples=examples), FUZZ_STEPS,
                     seed_value)
        except Violation as v:
            assert holder.last is not None and holder.last.steps
            return v, holder.last
    pytest.fail(f"{cls.__name__}: not caught in {len(ATTEMPTS)} x {examples} fuzz examples")


@pytest.mark.behaviours(
    "PIN-2", "EVICT-1", "EVICT-2", "EVICT-3", "EVICT-4", "POOL-4", "PIN-1", "TREE-4", "HOST-4",
    "TREE-2", "EVENT-4", "PIN-3", "EVENT-1", "TREE-5", "HOST-6", "HOST-1",
)
@pytest.mark.parametrize(("name", "examples"), _fuzz_params())
def test_fuzzer_catches_planted_defect(name, examples):
    cls = PLANTED[name]
    v, trace = fuzz_until_caught(cls, examples)
    expected = doc_ids(cls) | REPORTED_UNDER.get(name, set())
    assert set(v.behaviours) & expected, f"{name}: [{v.oracle}] {v.behaviours}: {v.message}"
    assert v.step is not None and v.step <= len(trace.steps)


# ------------------------------------------------------------------------------ faults of the kit
class _Flaky(PrefixCache):
    """Every second instance breaks eviction ties the other way: two runs of one trace differ."""

    made = 0

    def __init__(self, config=None) -> None:
        super().__init__(config)
        type(self).made += 1
        self.flip = type(self).made % 2 == 0

    def evict(self, tier, num_pages):
        if not self.flip:
            return super().evict(tier, num_pages)
        from kvconf.reference.eviction import is_candidate

        freed = 0
        while freed < num_pages:
            cands = [n for n in self._nodes.values() if is_candidate(n, tier)]
            if not cands:
                break
            freed += self._drop_tier(max(cands, key=lambda n: (n.access(tier), n.seq)), tier)
        return freed


@pytest.mark.behaviours("DET-1")
def test_a_trace_that_plays_differently_twice_is_a_det_1_violation():
    sc = next(s for s in SCENARIOS if s.name == "equal-times-oldest-node-first")
    trace = sc.trace(EngineConfig(page_size=1))
    trace = trace.model_copy(update={"steps": [s.model_copy(update={"expect": None})
                                               for s in trace.steps]})
    _Flaky.made = 0
    with pytest.raises(Violation) as e:
        play(factory_for(_Flaky), trace)  # the first run is the correct one, the replay is not
    assert (e.value.oracle, e.value.behaviours) == ("determinism", ("DET-1",))
    _Flaky.made = 0
    play(factory_for(_Flaky), trace, determinism=False)  # one run alone breaks no rule


# ------------------------------------------------------------------------------ shrinking
@pytest.mark.behaviours("PIN-2", "EVICT-1", "DET-1")
def test_a_fuzz_failure_shrinks_to_a_short_trace_that_replays(tmp_path: Path):
    """The fuzzer finds EvictsPinned on a generated trace; the kit's shrinker (what the runner
    applies to every fuzz failure) cuts it down; the short trace, saved and loaded again, fails
    on the planted engine with the same oracle at the same step and passes on the reference."""
    planted = factory_for(PLANTED["EvictsPinned"])
    v, found = fuzz_until_caught(PLANTED["EvictsPinned"], 200)
    assert (v.oracle, v.behaviours) == ("eviction", ("EVICT-1", "PIN-2"))

    shrunk, v2 = shrink(found, v, lambda t: play(planted, t), max_replays=400)
    assert signature(v2, shrunk) == signature(v, found)
    assert len(shrunk.steps) <= min(12, len(found.steps)), [s.op for s in shrunk.steps]

    path = tmp_path / "shrunk.json"
    path.write_text(dump_trace(shrunk), encoding="utf-8")
    again = load_trace(path)
    assert dump_trace(again) == dump_trace(shrunk)
    with pytest.raises(Violation) as e:
        play(planted, again)
    assert signature(e.value, again) == signature(v, found) and e.value.step == v2.step
    play(ReferenceCacheAdapter, again)
