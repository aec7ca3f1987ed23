"""What the worker boundary costs and what ``--jobs`` buys: the same run in kvconf's own process
(``--jobs 0``), in one worker and in N workers, and a sharded run merged.

Usage: python benchmarks/workers.py [--profile default] [--jobs 2] [--rounds 2] [--seed 0]

Each configuration runs ``kvconf run --engine reference`` as a user would (a fresh process,
start-up included), in rounds that interleave the configurations so a noisy machine slows them
alike; the figure is the best round. Same seed, same work: every configuration plays the same
traces, so examples per second and cache steps per second compare directly. It also checks
that the reports are identical apart from times and worker counts, and that the shards merged
make the same report.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def kvconf(*args: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "kvconf.conformance.cli", *args], check=False,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


SPIN = "x = 0\nfor i in range(20_000_000):\n    x += i * i % 7\n"


def spin(n: int) -> float:
    """Wall seconds for ``n`` copies of a pure-CPU Python loop started at once: what the
    machine itself gives ``n`` independent processes (the ceiling for ``--jobs n``)."""
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(n)]
    for p in procs:
        p.wait()
    return time.perf_counter() - t0


def normal(path: Path) -> dict:
    doc = json.loads(path.read_text())
    for key in ("started", "finished", "jobs", "call_timeout_s", "shard", "merged"):
        doc["run_info"].pop(key, None)
    for r in doc["results"]:
        r.pop("duration_s")
        for u in r.get("units") or []:
            u.pop("duration_s")
    return doc


def work(path: Path) -> tuple[int, int]:
    """Examples generated and cache-level steps played (the fuzz cases' counts)."""
    doc = json.loads(path.read_text())
    examples = sum(r.get("examples") or 0 for r in doc["results"])
    steps = sum(r.get("steps") or 0 for r in doc["results"] if r["case"].startswith("fuzz-cache"))
    return examples, steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="default")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="kvconf-bench-"))
    common = ["run", "--engine", "reference", "--profile", a.profile, "--seed", str(a.seed),
              "--quiet", "--examples-db", "none"]
    configs = {"in-process (--jobs 0)": ["--jobs", "0"], "1 worker": ["--jobs", "1"],
               f"{a.jobs} workers": ["--jobs", str(a.jobs)]}
    best: dict[str, float] = {}
    ceiling: list[float] = []
    for _ in range(a.rounds):
        for name, extra in configs.items():
            report = out / f"{name.split()[0]}-{extra[1]}.json"
            s = kvconf(*common, *extra, "--report", str(report))
            best[name] = min(best.get(name, s), s)
        ceiling.append(a.jobs * spin(1) / spin(a.jobs))
    reports = {name: out / f"{name.split()[0]}-{extra[1]}.json"
               for name, extra in configs.items()}
    examples, steps = work(next(iter(reports.values())))
    base = best["in-process (--jobs 0)"]
    print(f"kvconf run --engine reference --profile {a.profile} --seed {a.seed}: "
          f"{examples} examples, {steps} cache-level steps (best of {a.rounds})")
    print(f"{'configuration':<24}{'wall s':>9}{'examples/s':>12}{'steps/s':>10}"
          f"{'vs in-process':>15}")
    for name, s in best.items():
        print(f"{name:<24}{s:>9.2f}{examples / s:>12.1f}{steps / s:>10.0f}{base / s:>14.2f}x")
    one = best["1 worker"]
    print(f"boundary cost (1 worker vs in-process): {100 * (one / base - 1):+.1f}% wall")
    print(f"--jobs {a.jobs} vs --jobs 1: {one / best[f'{a.jobs} workers']:.2f}x; this machine "
          f"runs {a.jobs} independent CPU-bound processes at "
          f"{', '.join(f'{c:.2f}x' for c in ceiling)} the speed of one (per round)")
    same = len({json.dumps(normal(p), sort_keys=True) for p in reports.values()}) == 1
    print(f"reports identical apart from times and worker counts: {same}")
    shards = []
    for i in (1, 2):
        path = out / f"shard{i}" / "report.json"
        kvconf(*common, "--jobs", "1", "--shard", f"{i}/2", "--report", str(path))
        shards.append(str(path))
    merged = out / "merged.json"
    kvconf("merge", *shards, "--report", str(merged))
    print("2 shards merged == unsharded report: "
          f"{normal(merged) == normal(reports['1 worker'])}")
    print(f"reports in {out}")


if __name__ == "__main__":
    main()
