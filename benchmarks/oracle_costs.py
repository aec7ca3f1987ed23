"""Where a cache fuzz case's time goes, oracle by oracle: seconds in each oracle's hooks.

Usage: python benchmarks/oracle_costs.py [--walks 200] [--steps 40] [--seed 0] [--tight] [--ceiling]

Plays seeded walks (``kvconf.conformance.cache.generator.play_walk``) against the reference
engine in this process, with every oracle hook and every engine call timed, and prints each
oracle's seconds and share of the whole, beside the engine's own calls, its snapshots and the
kit's part of DET-1's replay (``kvconf.conformance.cache.tape``). Timed in CPU seconds of this
process (``time.process_time``: a loaded machine slows the wall clock, not this); a timed call
inside another (a block hash an oracle asks for) counts once, for the inner one. Without a
profiler's overhead, so the shares are those of a real run (each timed call adds a little to
"the kit").

``--ceiling`` first plays the same walks untimed three times: with every oracle, with every
oracle's hooks called but doing nothing (the snapshots and counts still read, every hook still
dispatched), and with none (no oracle, so no snapshot or counts read for one either). It prints
the three rates, what all the judging costs (the most any work on the oracles and the looks
they take can give) and a step's microseconds split three ways: the checks themselves, the
dispatch and the looks, and the rest (the walk, the driver, DET-1's replay and the engine).
Then the engine's share of the walks with every oracle and with none (its calls timed): the
most the engine's share can be however cheap the judging gets.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.cache import tape
from kvconf.conformance.cache.driver import HOOKS
from kvconf.conformance.cache.generator import TraceHolder, play_walk
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.oracles import STEP_ORACLES
from kvconf.conformance.oracles.base import Oracle

SPENT: dict[str, float] = defaultdict(float)
LOOKS = ("snapshot", "counters", "block_hash")
_INNER: list[float] = []  # per timed call in progress: the seconds of the timed calls inside it


def _timed(fn, key: str):
    def wrapped(*args, **kwargs):
        t0 = time.process_time()
        _INNER.append(0.0)
        try:
            return fn(*args, **kwargs)
        finally:
            dt = time.process_time() - t0
            SPENT[key] += dt - _INNER.pop()
            if _INNER:
                _INNER[-1] += dt

    return wrapped


def _time_oracles() -> None:
    for cls in STEP_ORACLES:
        for hook in HOOKS:
            if hook in vars(cls):
                setattr(cls, hook, _timed(vars(cls)[hook], f"oracle {cls.name}"))


class TimedEngine(ReferenceCacheAdapter):
    """The reference with each call timed: its own work, or a look inside for the oracles."""

    def __getattribute__(self, name: str):
        value = super().__getattribute__(name)
        if name.startswith("_") or not callable(value) or name == "cache":
            return value
        return _timed(value, "engine: snapshot etc." if name in LOOKS else "engine: own calls")


def _rate(config: EngineConfig, a, oracles) -> float:
    """Steps per CPU second of the walks, untimed, judged by ``oracles``."""
    holder = TraceHolder()
    t0 = time.process_time()
    for k in range(a.walks):
        play_walk(ReferenceCacheAdapter, config, holder, a.seed * 1_000_003 + k, a.steps,
                  oracles=oracles)
    return holder.steps / (time.process_time() - t0)


def _nothing(self, *args, **kwargs) -> None:
    """A hook that checks nothing."""


def _hollow(cls: type[Oracle]) -> type[Oracle]:
    """``cls`` with every hook it has doing nothing: what remains is the dispatch, and the
    snapshot and counts the driver reads for it."""
    hooks = {h: _nothing for h in HOOKS if getattr(cls, h) is not getattr(Oracle, h)}
    return type(f"Hollow{cls.__name__}", (cls,), hooks)


def _engine_share(config: EngineConfig, a, oracles) -> float:
    """The engine's own calls' share of the walks' CPU seconds, judged by ``oracles`` (its
    calls timed, as the table below times them; its looks for the oracles not counted)."""
    SPENT.clear()
    holder = TraceHolder()
    t0 = time.process_time()
    for k in range(a.walks):
        play_walk(TimedEngine, config, holder, a.seed * 1_000_003 + k, a.steps, oracles=oracles)
    share = SPENT["engine: own calls"] / (time.process_time() - t0)
    SPENT.clear()
    return share


def ceiling(config: EngineConfig, a) -> None:
    judged, bare = _rate(config, a, STEP_ORACLES), _rate(config, a, ())
    hollow = _rate(config, a, tuple(_hollow(cls) for cls in STEP_ORACLES))
    print(f"every oracle: {judged:,.0f} steps/s; every hook doing nothing: {hollow:,.0f} "
          f"steps/s; no oracle (nor the snapshots and counts they read): {bare:,.0f} steps/s; "
          f"{bare / judged:.2f}x: the judging is {100 * (1 - judged / bare):.0f}% of a case")
    step, checks, looks = 1e6 / judged, 1e6 / judged - 1e6 / hollow, 1e6 / hollow - 1e6 / bare
    print(f"a step: {step:.0f} us = the checks {checks:.0f} us ({100 * checks / step:.0f}%) + "
          f"the dispatch and the looks {looks:.0f} us ({100 * looks / step:.0f}%) + the walk, "
          f"the driver, DET-1's replay and the engine {1e6 / bare:.0f} us "
          f"({100e6 / bare / step:.0f}%)")
    with_all, with_none = (_engine_share(config, a, STEP_ORACLES),
                           _engine_share(config, a, ()))
    print(f"the engine's own calls: {100 * with_all:.1f}% of a case with every oracle, "
          f"{100 * with_none:.1f}% with none (the most its share can be while the walk, the "
          "driver and DET-1's replay cost what they do)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--walks", type=int, default=200)
    ap.add_argument("--steps", type=int, default=40, help="rules per walk (the profile's steps)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tight", action="store_true", help="8 device and 6 host pages")
    ap.add_argument("--ceiling", action="store_true",
                    help="first the same walks with every oracle and with none, untimed")
    a = ap.parse_args()
    config = EngineConfig(device_pages=8, host_pages=6) if a.tight else EngineConfig()
    if a.ceiling:
        ceiling(config, a)
    _time_oracles()
    tape.replay = _timed(tape.replay, "DET-1 replay: the kit")  # the walk calls tape.replay
    holder = TraceHolder()
    found = 0
    t0 = time.process_time()
    for k in range(a.walks):
        try:
            play_walk(TimedEngine, config, holder, a.seed * 1_000_003 + k, a.steps)
        except Exception:  # a finding on the reference would be a bug: counted, not hidden
            found += 1
    total = time.process_time() - t0
    print(f"{a.walks} walks, {holder.steps} steps in {total:.2f} CPU s "
          f"({holder.steps / total:,.0f} steps/s), config {config.model_dump()}; failures: {found}")
    rest = total - sum(SPENT.values())
    for key, s in sorted(SPENT.items(), key=lambda kv: -kv[1]):
        print(f"  {key:40} {s:7.2f} s {100 * s / total:5.1f}%")
    kit = "the kit: walk, driver, ledger, memory"
    print(f"  {kit:40} {rest:7.2f} s {100 * rest / total:5.1f}%")


if __name__ == "__main__":
    main()
