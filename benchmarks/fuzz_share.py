"""The engine's share of a fuzz case: time inside the engine's own calls against the whole case.

Usage: python benchmarks/fuzz_share.py [--profile default] [--budget 100] [--seed 0]
       [--case NAME ...] [--against PYTHON] [--json]

Runs each fuzz case of the reference engine in this process (one core, no example database),
timed in CPU seconds of this process (``time.process_time``: a loaded machine slows the wall
clock, not this), with the engine wrapped so every call is timed: the calls a serving runtime
makes (``match``, ``insert``, ``evict``, ``next_plan``, ``advance``, ...) are the engine's own
work; ``snapshot``, ``counters``, ``block_hash`` and ``transitions`` are the kit looking inside
it for its oracles, shown apart. Steps are trace steps for cache cases and plans of the
workloads for scheduler cases (each counted once, though DET-1 replays it). ``--against`` names
a second Python (another checkout's venv, say the kit before a change): the same cases run
there, one case at a time in turn with this one, and the two are printed side by side with the
ratios.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable

INTROSPECTION = frozenset({"snapshot", "counters", "block_hash", "transitions"})


class Clock:
    """Seconds spent inside the engine, by kind of call."""

    def __init__(self) -> None:
        self.engine = 0.0
        self.introspection = 0.0
        self.plans = 0


class Timed:
    """An engine whose every method call is timed into ``clock``."""

    def __init__(self, engine: object, clock: Clock) -> None:
        object.__setattr__(self, "_engine", engine)
        object.__setattr__(self, "_clock", clock)

    def __getattr__(self, name: str):
        value = getattr(self._engine, name)
        if not callable(value):
            return value
        clock = self._clock
        looks = name in INTROSPECTION

        def timed(*args, **kwargs):
            t0 = time.process_time()
            try:
                return value(*args, **kwargs)
            finally:
                dt = time.process_time() - t0
                if looks:
                    clock.introspection += dt
                else:
                    clock.engine += dt

        object.__setattr__(self, name, timed)  # looked up once: the wrapper's cost stays small
        return timed

    def __setattr__(self, name: str, value) -> None:
        setattr(self._engine, name, value)


def timed_factory(factory: Callable | None, clock: Clock) -> Callable | None:
    if factory is None:
        return None

    def make(config):
        t0 = time.process_time()
        engine = factory(config)
        clock.engine += time.process_time() - t0
        return Timed(engine, clock)

    for attr in ("name",):
        if hasattr(factory, attr):
            setattr(make, attr, getattr(factory, attr))
    return make


def count_plans(clock: Clock) -> None:
    """Count the plans of each workload as the fuzz case plays it first (not its replays)."""
    from kvconf.conformance.scheduler import generator

    real = generator.play_sched

    def play(*args, **kwargs):
        driver = real(*args, **kwargs)
        clock.plans += sum(1 for entry in driver.log if entry[0] == "plan")
        return driver

    generator.play_sched = play


def measure(profile: str, budget: int | None, seed: int, names: list[str]) -> dict:
    """{case: {traces, steps, s, engine_s, introspection_s}} for the reference engine."""
    from kvconf.conformance.engine.config import EngineConfig
    from kvconf.conformance.running.profiles import get_profile, parse_budget
    from kvconf.conformance.running.runner import all_cases, open_engine, run_case
    from kvconf.conformance.running.seeding import import_independent_draws

    prof = get_profile(profile)
    bud = parse_budget(None if budget is None else str(budget), prof)
    out = {}
    for case in all_cases():
        if not case.fuzz or (names and case.name not in names):
            continue
        clock = Clock()
        count_plans(clock)
        opened = open_engine("reference", EngineConfig(), seed_value=seed, profile=prof,
                             budget=bud)
        ctx = opened.ctx
        if case.needs - ctx.features:
            continue
        ctx.factory = timed_factory(ctx.factory, clock)
        ctx.sched_factory = timed_factory(ctx.sched_factory, clock)
        t0 = time.process_time()
        with import_independent_draws():
            r = run_case(ctx, case)
        s = time.process_time() - t0
        steps = r.steps if case.name.startswith("fuzz-cache") else clock.plans
        out[case.name] = {"traces": r.examples or 0, "steps": steps or 0, "s": s,
                          "engine_s": clock.engine, "introspection_s": clock.introspection,
                          "status": r.status.value}
    return out


def _row(case: str, d: dict) -> str:
    s = d["s"]
    return (f"{case:30} {d['traces']:6} {d['steps']:7} {s:7.2f} {d['traces'] / s:8.1f} "
            f"{d['steps'] / s:8.0f} {100 * d['engine_s'] / s:7.1f}% "
            f"{100 * d['introspection_s'] / s:7.1f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="default")
    ap.add_argument("--budget", type=int, help="traces per fuzz case (default: the profile's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--case", action="extend", nargs="+", default=[],
                    help="only these cases (repeatable)")
    ap.add_argument("--against", help="a second Python to run the same cases in, in turn")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    a = ap.parse_args()
    if a.json:
        print(json.dumps(measure(a.profile, a.budget, a.seed, a.case)))
        return
    from kvconf.conformance.running.runner import all_cases

    names = a.case or [c.name for c in all_cases() if c.fuzz]
    now: dict = {}
    before: dict = {}
    for name in names:  # in turn, one case at a time, so a load on the machine hits both
        now.update(measure(a.profile, a.budget, a.seed, [name]))
        if a.against:
            cmd = [a.against, __file__, "--profile", a.profile, "--seed", str(a.seed),
                   "--case", name, "--json"]
            if a.budget is not None:
                cmd += ["--budget", str(a.budget)]
            done = subprocess.run(cmd, capture_output=True, text=True, cwd="/")
            if done.returncode:
                sys.exit(f"{a.against}: {done.stderr[-2000:]}")
            before.update(json.loads(done.stdout.splitlines()[-1]))
    head = (f"{'case':30} {'traces':>6} {'steps':>7} {'s':>7} {'traces/s':>8} {'steps/s':>8} "
            f"{'engine':>8} {'looks':>8}")
    print(f"reference engine, --profile {a.profile}, budget "
          f"{a.budget or 'of the profile'}, seed {a.seed}, one process; engine: its own calls, "
          "looks: snapshot/counters/block_hash for the oracles")
    for title, d in (("before (--against)", before), ("now", now)):
        if not d:
            continue
        print(f"\n{title}\n{head}")
        for case in names:
            if case in d:
                print(_row(case, d[case]))
        for group in ("fuzz-cache", "fuzz-scheduler"):
            sub = [v for k, v in d.items() if k.startswith(group)]
            if sub:
                tot = {k: sum(v[k] for v in sub) for k in ("traces", "steps", "s", "engine_s",
                                                            "introspection_s")}
                print(_row(f"all {group}", tot))
    if before:
        print(f"\n{'case':30} {'steps/s before':>14} {'now':>8} {'ratio':>6} "
              f"{'engine share before':>20} {'now':>6}")
        for case in names:
            if case in before and case in now:
                b, n = before[case], now[case]
                rb, rn = b["steps"] / b["s"], n["steps"] / n["s"]
                print(f"{case:30} {rb:14.0f} {rn:8.0f} {rn / rb if rb else 0:6.2f} "
                      f"{100 * b['engine_s'] / b['s']:19.1f}% "
                      f"{100 * n['engine_s'] / n['s']:5.1f}%")
        for group in ("fuzz-cache", "fuzz-scheduler"):
            cs = [c for c in names if c.startswith(group) and c in before and c in now]
            if not cs:
                continue
            bs = sum(before[c]["steps"] for c in cs) / sum(before[c]["s"] for c in cs)
            ns = sum(now[c]["steps"] for c in cs) / sum(now[c]["s"] for c in cs)
            be = sum(before[c]["engine_s"] for c in cs) / sum(before[c]["s"] for c in cs)
            ne = sum(now[c]["engine_s"] for c in cs) / sum(now[c]["s"] for c in cs)
            print(f"{'all ' + group:30} {bs:14.0f} {ns:8.0f} {ns / bs if bs else 0:6.2f} "
                  f"{100 * be:19.1f}% {100 * ne:5.1f}%")


if __name__ == "__main__":
    main()
