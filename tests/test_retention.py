"""EVICT-7 and MAMBA-12: what the cache holds leaves only by eviction (or with its namespace).

Each planted drop is caught by the retention oracles under the new rule's ID, white-box and
black-box alike; a legal loss (an eviction under pressure, announced; an unload) is not."""

from __future__ import annotations

from functools import partial

import pytest

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter
from kvconf.conformance.cache.scenarios import SCENARIOS
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.mutants.cache import DropsLeafOnUnlock
from kvconf.conformance.mutants.mamba import DropsShorterStates
from kvconf.conformance.oracles import Violation
from kvconf.conformance.running.runner import play
from kvconf.conformance.scheduler.generator import play_sched
from kvconf.conformance.scheduler.scenarios import SCHED_SCENARIOS
from kvconf.conformance.trace import Trace
from kvconf.reference import PrefixCache
from kvconf.reference.host_tier import missing_path
from kvconf.reference.mamba import MambaCache
from kvconf.reference.scheduler import Scheduler
from kvconf.reference.tiers import Tier

A = [1, 2, 3, 4, 5, 6]


def trace(steps, **config) -> Trace:
    return Trace.model_validate({"steps": steps, "config": EngineConfig(**config).model_dump()})


class _BlackBox(ReferenceCacheAdapter):
    """The reference (or a mutant of it) with nothing to read but its calls: no snapshot, no
    events, no counters."""

    features = ReferenceCacheAdapter.features - {Feature.SNAPSHOT, Feature.KV_EVENTS,
                                                 Feature.COUNTERS}


def cache(cls=None, black_box: bool = False):
    base = _BlackBox if black_box else ReferenceCacheAdapter
    return base if cls is None else partial(base, cache_cls=cls)


# A lock held across steps, released: the mutant drops the leaf it held.
HELD_THEN_RELEASED = [
    {"op": "insert", "tokens": A},
    {"op": "match", "tokens": A + [42], "lock": "device"},
    {"op": "tick"},
    {"op": "unlock", "step": 1},
]


@pytest.mark.behaviours("EVICT-7")
@pytest.mark.parametrize("black_box", [False, True], ids=["white-box", "black-box"])
def test_a_page_dropped_outside_eviction_is_caught_at_the_next_match(black_box: bool) -> None:
    t = trace([*HELD_THEN_RELEASED, {"op": "match", "tokens": A + [42]}], page_size=1)
    play(cache(black_box=black_box), t)
    with pytest.raises(Violation) as e:
        play(cache(DropsLeafOnUnlock, black_box), t)
    assert (e.value.oracle, e.value.behaviours, e.value.step) == ("retention", ("EVICT-7",), 4)
    assert "no eviction freed it" in e.value.message


@pytest.mark.behaviours("EVICT-7")
@pytest.mark.parametrize("black_box", [False, True], ids=["white-box", "black-box"])
def test_a_page_dropped_and_never_matched_again_is_caught_at_rest(black_box: bool) -> None:
    """No later match asks for it: the account settles at rest, where everything is evicted
    and the evictions freed fewer pages than the cache took."""
    t = trace(HELD_THEN_RELEASED, page_size=1)
    play(cache(black_box=black_box), t)
    with pytest.raises(Violation) as e:
        play(cache(DropsLeafOnUnlock, black_box), t)
    assert (e.value.oracle, e.value.behaviours) == ("retention", ("EVICT-7",))
    assert "at rest with everything evicted" in e.value.message
    assert "6 left without an eviction" in e.value.message


@pytest.mark.behaviours("EVICT-7")
@pytest.mark.parametrize("black_box", [False, True], ids=["white-box", "black-box"])
def test_an_eviction_under_pressure_or_an_unload_is_a_legal_loss(black_box: bool) -> None:
    """The pool is full: the caller's allocation comes back empty, the kit evicts (announced
    where events are declared) and A is gone, legally; an unload drops a namespace by name."""
    t = trace([
        {"op": "insert", "tokens": A},
        {"op": "insert", "tokens": [7, 8, 9]},  # 3 pages more than the pool has free
        {"op": "match", "tokens": A + [42], "expect": {"device_len": 0}},
        {"op": "match", "tokens": [7, 8, 9], "expect": {"device_len": 3}},
        {"op": "insert", "ns": 1, "tokens": [1, 2]},
        {"op": "unload", "ns": 1},
        {"op": "match", "ns": 1, "tokens": [1, 2], "expect": {"device_len": 0}},
    ], page_size=1, device_pages=6, host_pages=6)
    log = play(cache(black_box=black_box), t)
    assert log[1]["pages"] and log[2]["device_len"] == 0  # evicted by the kit's alloc


@pytest.mark.behaviours("EVICT-7", "TREE-5")
def test_the_scenario_holds_every_engine_to_it() -> None:
    sc = next(s for s in SCENARIOS if s.name == "cached-until-evicted")
    play(ReferenceCacheAdapter, sc.trace(EngineConfig(page_size=2)))
    with pytest.raises(Violation) as e:
        play(cache(DropsLeafOnUnlock), sc.trace(EngineConfig(page_size=2)))
    assert e.value.oracle == "retention" and e.value.behaviours == ("EVICT-7",)


def _sched(cls=None):
    return (ReferenceSchedulerAdapter if cls is None
            else partial(ReferenceSchedulerAdapter, scheduler_cls=cls))


def _workload(name: str):
    return next(s for s in SCHED_SCENARIOS if s.name == name).trace


@pytest.mark.behaviours("MAMBA-12")
def test_a_mamba_state_dropped_with_free_slots_is_caught() -> None:
    play_sched(_sched(), _workload("sched-mamba-reuse"))
    with pytest.raises(Violation) as e:
        play_sched(_sched(DropsShorterStates), _workload("sched-mamba-reuse"))
    assert (e.value.oracle, e.value.behaviours) == ("mamba-retention", ("MAMBA-12",))
    assert "state slots were free and none was handed out" in e.value.message


@pytest.mark.behaviours("MAMBA-12")
def test_a_mamba_state_evicted_under_pressure_is_legal() -> None:
    """The tight workload runs its state pool dry: the reference evicts states to hand their
    slots out, and passes."""
    evicted: list[int] = []

    class Counting(MambaCache):
        def evict(self, tier):
            done = super().evict(tier)
            evicted.append(int(done))
            return done

    class Spy(Scheduler):
        mamba_cls = Counting

    play_sched(_sched(Spy), _workload("sched-mamba-tight-slots"))
    assert sum(evicted), "the workload should evict a state under pressure"


@pytest.mark.behaviours("MAMBA-12")
def test_mamba_retention_is_said_unjudged_without_a_snapshot() -> None:
    from kvconf.conformance.scheduler.driver import SchedulerDriver

    class BlackBox(ReferenceSchedulerAdapter):
        @property
        def features(self):
            return super().features - {Feature.SNAPSHOT}

    t = _workload("sched-mamba-reuse")
    assert SchedulerDriver(ReferenceSchedulerAdapter(t.config), t).mamba_kept is not None
    d = SchedulerDriver(BlackBox(t.config), t)
    assert d.mamba_kept is None
    assert any(u.startswith("MAMBA-12 (states kept until evicted) not judged") for u in d.unjudged)


class _EvictsForLoadback(PrefixCache):
    """A legal engine that, as SGLang's ``load_back`` does (``evict_for_alloc``), evicts device
    pages under pressure inside a loadback's start when too few are free, announcing them."""

    def start_loadback(self, node_id: int):
        node = self._node(node_id)
        need = sum(len(n.pages(Tier.HOST) or ()) for n in missing_path(node, Tier.DEVICE))
        short = need - self.pools[Tier.DEVICE].free_count
        if short > 0:
            self.evict(Tier.DEVICE, short)
        return super().start_loadback(node_id)


# Device of 4 pages: B written back and evicted to host, C fills the device, B loaded back (its
# two pages evict C's under pressure, inside the loadback), then B and C matched.
B, C = [7, 7, 8, 8], [9, 9, 5, 5, 6, 6]
UNDER_PRESSURE = [
    {"op": "insert", "tokens": B},
    {"op": "match", "tokens": B + [1], "lock": "device"},
    {"op": "writeback", "step": 1},
    {"op": "unlock", "step": 1},
    {"op": "evict", "pages": 2},
    {"op": "insert", "tokens": C},
    {"op": "match", "tokens": B + [1], "lock": "host"},
    {"op": "loadback", "step": 6},
    {"op": "unlock", "step": 6},
    {"op": "match", "tokens": B + [1]},
    {"op": "match", "tokens": C + [1]},
]


@pytest.mark.behaviours("EVICT-7")
def test_an_eviction_under_pressure_inside_a_loadback_is_legal_where_announced() -> None:
    """A loadback that evicts for its destination pages, its removals announced, is an eviction
    (EVICT-7); the same engine without KV events is not judged past the loadback's start."""
    t = trace(UNDER_PRESSURE, page_size=2, device_pages=4, host_pages=4)
    play(cache(_EvictsForLoadback), t)
    play(cache(_EvictsForLoadback, black_box=True), t)
