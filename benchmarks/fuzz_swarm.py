"""Swarm selection measured: states reached and mutants killed per CPU-second, with and without.

Usage: python benchmarks/fuzz_swarm.py [--walks 300] [--steps 40] [--seed 0] [--cap 300]

Cache-level seeded walks (``kvconf.conformance.cache.generator.play_walk``) against the reference,
once with swarm selection (each walk enables a random half of the rules) and once with every rule
enabled, on the same seeds, interleaved walk by walk. A state is what the white-box snapshot
shows after a step, abstracted to its shape: nodes, device and host pages cached, nodes on both
tiers, nodes pinned on each tier, copies in flight by kind, locks held. Then every cache-level
catalog mutant is fuzzed both ways until the first finding (at most ``--cap`` walks): the CPU
seconds and walks it took, their median and maximum, and the mutants each way leaves alive.
"""

from __future__ import annotations

import argparse
import statistics
import time

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.cache.generator import TraceHolder, play_walk
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.mutants import all_mutants
from kvconf.conformance.oracles import STEP_ORACLES, Oracle
from kvconf.conformance.violation import Violation


class Shapes(Oracle):
    """Records the shape of every snapshot it is shown (a benchmark's probe, not a rule)."""

    name = "shapes"
    needs = frozenset({Feature.SNAPSHOT})
    seen: set[tuple] = set()

    def after_step(self, ctx) -> None:
        s = ctx.after
        if s is None:
            return
        nodes = [n for n in s.nodes if n.parent is not None]
        Shapes.seen.add((
            len(nodes),
            sum(len(n.device or ()) for n in nodes), sum(len(n.host or ()) for n in nodes),
            sum(1 for n in nodes if n.device is not None and n.host is not None),
            sum(1 for n in nodes if n.device_ref), sum(1 for n in nodes if n.host_ref),
            sum(1 for t in s.transfers if t.kind == "writeback"),
            sum(1 for t in s.transfers if t.kind == "loadback"),
            len(s.locks),
        ))


def states(walks: int, steps: int, seed: int) -> dict[bool, tuple[int, float, int]]:
    """swarm -> (distinct shapes, CPU seconds, steps), the two interleaved walk by walk."""
    seen = {True: set(), False: set()}
    spent = {True: 0.0, False: 0.0}
    played = {True: 0, False: 0}
    for k in range(walks):
        for swarm in (True, False):
            Shapes.seen = seen[swarm]
            holder = TraceHolder()
            t0 = time.process_time()
            play_walk(ReferenceCacheAdapter, EngineConfig(), holder, seed * 1_000_003 + k, steps,
                      swarm=swarm, oracles=(*STEP_ORACLES, Shapes))
            spent[swarm] += time.process_time() - t0
            played[swarm] += holder.steps
    return {s: (len(seen[s]), spent[s], played[s]) for s in (True, False)}


def kill(mutant, swarm: bool, steps: int, seed: int, cap: int) -> tuple[int | None, float]:
    """Walks until the mutant's first finding (None: alive after ``cap``) and CPU seconds."""
    factory = mutant.factory()
    t0 = time.process_time()
    for k in range(cap):
        try:
            play_walk(factory, EngineConfig(), TraceHolder(), seed * 1_000_003 + k, steps,
                      swarm=swarm)
        except Violation:
            return k + 1, time.process_time() - t0
    return None, time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--walks", type=int, default=300)
    ap.add_argument("--steps", type=int, default=40, help="rules per walk (the profile's steps)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cap", type=int, default=300, help="walks per mutant at most")
    a = ap.parse_args()
    got = states(a.walks, a.steps, a.seed)
    print(f"{a.walks} walks of {a.steps} rules, seed {a.seed}, reference engine, CPU seconds")
    for swarm in (True, False):
        n, s, st = got[swarm]
        print(f"  swarm {'on ' if swarm else 'off'}: {n} distinct states in {st} steps, {s:.2f} s:"
              f" {n / s:.0f} new states/s, {st / s:.0f} steps/s")
    print(f"  states reached, on/off: {got[True][0] / got[False][0]:.2f}x")
    rows = {True: [], False: []}
    alive = {True: [], False: []}
    for m in all_mutants():
        if m.level != "cache":
            continue
        line = []
        for swarm in (True, False):
            walks, s = kill(m, swarm, a.steps, a.seed, a.cap)
            if walks is None:
                alive[swarm].append(m.name)
            else:
                rows[swarm].append(s)
            line.append(f"{'-' if walks is None else walks:>4} walks {s:6.2f} s")
        print(f"  {m.name:28} swarm on: {line[0]}   off: {line[1]}")
    for swarm in (True, False):
        r = rows[swarm]
        print(f"  swarm {'on ' if swarm else 'off'}: killed {len(r)}, median "
              f"{statistics.median(r):.3f} s, max {max(r):.3f} s, total {sum(r):.2f} s; "
              f"alive: {alive[swarm] or 'none'}")


if __name__ == "__main__":
    main()
