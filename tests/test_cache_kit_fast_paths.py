"""The cache kit's short cuts give what the long way gives.

The walk remembers which rules can run under each set of its facts (``CacheWalk._now``): on
seeded walks against the reference, an engine without unload and every cache mutant, the
remembered answer is, at every step, the one ``_ready_now`` gives afresh. The tape takes a call's
answer as it is for calls ``answer`` does not reshape (``tape.SHAPED``); for every other call
``answer`` is that value. A scenario's steps widened to a page size (copies with the widened
fields replaced, ``_scale``) are remembered (``Scenario.trace``) and are what widening their
fields and validating them afresh gives.
"""

from __future__ import annotations

import contextlib
import random
from functools import partial

import pytest

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.cache import tape
from kvconf.conformance.cache import walk as walk_module
from kvconf.conformance.cache.generator import TraceHolder, play_walk
from kvconf.conformance.cache.scenarios import SCENARIOS, _scale
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.protocol import CacheEngine
from kvconf.conformance.mutants.cache import PLANTED
from kvconf.conformance.oracles import Violation
from kvconf.conformance.trace import Step

CONFIGS = (EngineConfig(), EngineConfig(device_pages=8, host_pages=6), EngineConfig(page_size=1))


class _NoUnload(ReferenceCacheAdapter):
    features = ReferenceCacheAdapter.features - {Feature.UNLOAD}


FACTORIES = [ReferenceCacheAdapter, _NoUnload,
             *(partial(ReferenceCacheAdapter, cache_cls=PLANTED[n]) for n in sorted(PLANTED))]


def test_the_remembered_ready_rules_are_those_read_afresh(monkeypatch) -> None:
    monkeypatch.setattr(walk_module, "_NOW", {})
    real = walk_module.CacheWalk._now
    seen = {"steps": 0, "unlock_again": 0}

    def checked(self) -> tuple[str, ...]:
        got = real(self)
        ready = self._ready_now()
        want = tuple(r for r in self.rules if ready[r]) or tuple(
            r for r in walk_module.ALWAYS if r in self.rules) or ("tick",)
        assert got == want, (self.trace.steps, got, want)
        seen["steps"] += 1
        seen["unlock_again"] += "unlock_again" in got
        return got

    monkeypatch.setattr(walk_module.CacheWalk, "_now", checked)
    for factory in FACTORIES:
        for config in CONFIGS:
            for seed in range(3):
                for swarm in (False, True):
                    with contextlib.suppress(Violation):  # a mutant's finding ends its walk
                        play_walk(factory, config, TraceHolder(), seed, 40, swarm=swarm,
                                  determinism=False)
    assert seen["steps"] > 1000 and seen["unlock_again"] > 0
    assert sum(len(v) for v in walk_module._NOW.values()) > 10  # answers were remembered


def test_an_answer_left_as_it_is_is_what_answer_gives() -> None:
    calls = [name for name in dir(CacheEngine) if not name.startswith("_")]
    assert set(calls) > tape.SHAPED
    values = [None, "declined", 0, 3, True, (1, 2), [1, 2], [["stored", ["00ff"]]], object()]
    for call in [*calls, "drain_events"]:
        if call in tape.SHAPED:
            continue
        for value in values:
            assert tape.answer(call, value) == (value, ()), (call, value)
            assert tape.record(call, (), value)[1] == tape.answer(call, value)


def test_recorded_arguments_are_copies_of_the_lists_only() -> None:
    tokens, tier = [1, 2, 3], object()
    args, _ = tape.record("match", (0, tokens), None)
    assert args == (0, [1, 2, 3]) and args[1] is not tokens
    args, _ = tape.record("lock", (7, tier), 3)
    assert args == (7, tier) and args[1] is tier


def _widened(step: Step, p: int) -> Step:
    """The long way: the step's fields widened and validated afresh."""
    data = step.model_dump()
    if "tokens" in data:
        data["tokens"] = [t for t in data["tokens"] for _ in range(p)]
    exp = data.get("expect")
    if exp:
        for k in ("device_len", "host_len", "cached_len"):
            if exp.get(k) is not None:
                exp[k] *= p
    return type(step).model_validate(data)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_remembered_scenario_steps_are_those_widened_afresh(p) -> None:
    config = EngineConfig(page_size=p)
    widened = 0
    for sc in SCENARIOS:
        fresh = [_widened(s, p) for s in sc.steps]
        assert [_scale(s, p) for s in sc.steps] == fresh
        first, again = sc.trace(config), sc.trace(config)
        for got in (first, again):
            assert got.steps == fresh
            assert [type(s) for s in got.steps] == [type(s) for s in fresh]
            assert [s.model_dump_json() for s in got.steps] == [
                s.model_dump_json() for s in fresh]
        widened += sum(s != w for s, w in zip(sc.steps, fresh, strict=True))
        first.steps.append(first.steps[0])  # a trace's own list: the next one is as it was
        assert len(sc.trace(config).steps) == len(sc.steps)
    assert widened > 0 if p > 1 else widened == 0


def test_walks_keep_drawing_the_same_rules() -> None:
    """The rules a seed draws are those it drew before the ready rules were remembered (their
    names in order, from a fixed seed list; a change in the draws shows as another sequence)."""
    rng = random.Random(11)
    seeds = [rng.randrange(1 << 30) for _ in range(5)]
    ops = []
    for seed in seeds:
        holder = TraceHolder()
        play_walk(ReferenceCacheAdapter, EngineConfig(), holder, seed, 30, determinism=False)
        ops.append(tuple(s.op for s in holder.last.steps))
    walk_module._NOW.clear()  # the same walks with nothing remembered
    for seed, want in zip(seeds, ops, strict=True):
        holder = TraceHolder()
        play_walk(ReferenceCacheAdapter, EngineConfig(), holder, seed, 30, determinism=False)
        assert tuple(s.op for s in holder.last.steps) == want
