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

``--ceiling`` first plays the same walks untimed four ways, taking turns walk by walk (a load
that comes and goes slows each alike): with every oracle; with every oracle's hooks called but
doing nothing; with one oracle's hooks doing nothing (the driver still reads every snapshot and
count for it); and with none (no snapshot or count read either). It prints the four rates, what
all the judging costs (the most any work on the oracles and the looks they take can give), and a
step's microseconds split four ways: the checks themselves, calling every oracle's hooks, the
looks, and the rest (the walk, the driver, DET-1's replay and the engine). Calling the hooks is
what folding every rule into one pass over the snapshot would save beyond the checks' own work.
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
from kvconf.conformance.oracles.accounting import CounterOracle
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


def _rates(config: EngineConfig, a, kinds: dict[str, tuple]) -> dict[str, float]:
    """Steps per CPU second of the walks, untimed, judged by each of ``kinds`` (a name: its
    oracles). The kinds take turns walk by walk, so a load that comes and goes slows each of
    them alike."""
    holders = {name: TraceHolder() for name in kinds}
    spent = dict.fromkeys(kinds, 0.0)
    for k in range(a.walks):
        for name, oracles in kinds.items():
            t0 = time.process_time()
            play_walk(ReferenceCacheAdapter, config, holders[name], a.seed * 1_000_003 + k,
                      a.steps, oracles=oracles)
            spent[name] += time.process_time() - t0
    return {name: holders[name].steps / spent[name] for name in kinds}


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
    r = _rates(config, a, {
        "judged": STEP_ORACLES,
        "hollow": tuple(_hollow(cls) for cls in STEP_ORACLES),
        # One oracle, doing nothing, that makes the driver read every snapshot and every count.
        "looks": (_hollow(CounterOracle),),
        "bare": (),
    })
    judged, hollow, looks, bare = r["judged"], r["hollow"], r["looks"], r["bare"]
    print(f"every oracle: {judged:,.0f} steps/s; every hook doing nothing: {hollow:,.0f} "
          f"steps/s; one hook doing nothing (every snapshot and count still read): "
          f"{looks:,.0f} steps/s; no oracle (nor the snapshots and counts they read): "
          f"{bare:,.0f} steps/s; {bare / judged:.2f}x: the judging is "
          f"{100 * (1 - judged / bare):.0f}% of a case")
    us = {k: 1e6 / v for k, v in r.items()}
    step = us["judged"]
    parts = (("the checks", us["judged"] - us["hollow"]),
             ("calling every oracle's hooks", us["hollow"] - us["looks"]),
             ("the looks (snapshots, counts)", us["looks"] - us["bare"]),
             ("the walk, the driver, DET-1's replay and the engine", us["bare"]))
    print(f"a step: {step:.0f} us = " + " + ".join(
        f"{what} {t:.0f} us ({100 * t / step:.0f}%)" for what, t in parts))
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
