"""Fuzz throughput: generated traces and engine steps per second of every fuzz case.

Usage: python benchmarks/fuzz_throughput.py [--budget 200] [--seed 0] [--engine reference]
       [--kvconf PATH] [--against PATH] [--case NAME ...]

Runs ``kvconf run`` once, in one worker (``--jobs 1``, so the figures are one core's), with no
example database (a stored failure would change what a case plays), and reads each fuzz case's
examples, steps and seconds from the report. ``--kvconf`` names the ``kvconf`` executable to
measure (default: the one on PATH); ``--against`` a second one (another checkout's venv, say the
kit before a change), run the same way right after, and the two are printed side by side for the
cases both have. The figures are the kit and the engine together: every oracle runs, as in CI.

A step is one engine operation at the cache and hybrid levels and one plan at the scheduler
level, so steps add up within a level only: each level gets a total row of its own, and the
run's total row counts traces alone.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def measure(kvconf: str, engine: str, budget: int, seed: int, cases: list[str]) -> dict:
    """One run; {case: (examples, steps, seconds)} for its fuzz cases that ran."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [kvconf, "run", "--engine", engine, "--jobs", "1", "--budget", str(budget),
               "--seed", str(seed), "--examples-db", "none", "--quiet", "--report", str(report)]
        for c in cases:
            cmd += ["--case", c]
        # run from an empty folder: a checkout's own kvconf/ on the import path would shadow
        # the installation being measured
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
        if not report.exists():
            sys.exit(f"{kvconf} wrote no report (exit {done.returncode}):\n{done.stderr[-2000:]}")
        doc = json.loads(report.read_text())
    out = {}
    for r in doc["results"]:
        if r.get("examples") and r["case"].startswith("fuzz"):
            out[r["case"]] = (r["examples"], r.get("steps") or 0, r["duration_s"])
    return out


def rate(n: int, s: float) -> str:
    return f"{n / s:,.0f}" if s > 0 else "-"


# What a step is, by level (the case name's second word): a level's steps add up, not across.
# The model-config case reads configs, no plans: a level of its own.
STEP_OF = {"cache": "operations", "scheduler": "plans", "hybrid": "operations",
           "model-config": "config reads"}


def level(case: str) -> str:
    if case == "fuzz-scheduler-model-config":
        return "model-config"
    return case.split("-")[1] if case.count("-") else case


def totals(d: dict, cases: list[str]) -> tuple[int, int, float]:
    return tuple(sum(d[c][i] for c in cases) for i in range(3))  # type: ignore[return-value]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=200, help="generated traces per fuzz case")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--engine", default="reference")
    ap.add_argument("--kvconf", default=shutil.which("kvconf") or "kvconf")
    ap.add_argument("--against", help="a second kvconf executable to compare with")
    ap.add_argument("--case", action="extend", nargs="+", default=[],
                    help="only these cases (repeatable, or several after one --case)")
    a = ap.parse_args()

    now = measure(a.kvconf, a.engine, a.budget, a.seed, a.case)
    print(f"engine {a.engine}, budget {a.budget} traces per case, seed {a.seed}, one worker")
    if not a.against:
        print(f"{'case':34} {'traces':>7} {'steps':>8} {'s':>7} {'traces/s':>9} {'steps/s':>9}")
        for case, (ex, st, s) in sorted(now.items()):
            print(f"{case:34} {ex:7} {st:8} {s:7.2f} {rate(ex, s):>9} {rate(st, s):>9}")
        for lv in sorted({level(c) for c in now}):
            ex, st, s = totals(now, [c for c in now if level(c) == lv])
            name = f"all {lv} ({STEP_OF.get(lv, 'steps')})"
            print(f"{name:34} {ex:7} {st:8} {s:7.2f} {rate(ex, s):>9} {rate(st, s):>9}")
        ex, _, s = totals(now, list(now))
        print(f"{'all (traces only)':34} {ex:7} {'':8} {s:7.2f} {rate(ex, s):>9} {'':>9}")
        return
    before = measure(a.against, a.engine, a.budget, a.seed, a.case)
    common = sorted(set(now) & set(before))
    print(f"{'case':34} {'traces/s before':>16} {'after':>9} {'steps/s before':>15} {'after':>9}")
    for case in common:
        (be, bs, bt), (ne, ns, nt) = before[case], now[case]
        print(f"{case:34} {rate(be, bt):>16} {rate(ne, nt):>9} {rate(bs, bt):>15} "
              f"{rate(ns, nt):>9}")
    for name, d in (("before", before), ("after", now)):
        for lv in sorted({level(c) for c in common}):
            ex, st, s = totals(d, [c for c in common if level(c) == lv])
            print(f"common {lv} cases, {name}: {ex} traces, {st} {STEP_OF.get(lv, 'steps')} "
                  f"in {s:.1f} s = {rate(ex, s)} traces/s, {rate(st, s)} steps/s")
    for name, d in (("before", before), ("after", now)):
        only = sorted(set(d) - set(common))
        if only:
            print(f"only {name}: {', '.join(only)}")


if __name__ == "__main__":
    main()
