"""Time to the first finding: CPU seconds until each catalog mutant is killed, kit against kit.

Usage: python benchmarks/time_to_kill.py [--profile default] [--fuzz-only] [--seed 0]
       [--mutant NAME ...] [--level cache|scheduler] [--against PYTHON] [--parallel N]
       python benchmarks/time_to_kill.py --matrix REPORT [REPORT ...]

Each mutant is killed as ``kvconf mutants`` kills it (``kill_one``: the suite's cases in order,
only the fuzz cases with ``--fuzz-only``, until the first failure), in a child process of its
own, timed in that child's CPU seconds (a loaded machine slows the wall clock the kill matrix
records, not this); ``#n`` is the killing case's workload or trace that found it. With
``--against`` (another checkout's Python, say the kit before a change) each mutant is killed by
both kits in turn before the next, and the median and maximum of each, and their ratios, are
printed. ``--parallel N`` runs N children at once (CPU seconds are each child's own, so the
figures hold; on a machine with cores to spare).

``--matrix`` reads kill matrices that ``kvconf mutants`` wrote (``--jobs 1`` and ``--jobs 2``, say)
and prints each one's wall seconds to kill (the matrix's own ``seconds``: median and maximum per
level, and the ratios to the first report), after checking that all give the same verdict per
mutant (killer case and finding signature).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys


def child(name: str, profile: str, fuzz_only: bool, seed: int) -> None:
    import time

    from kvconf.conformance.mutants import all_mutants
    from kvconf.conformance.mutants.kill import kill_one
    from kvconf.conformance.running.profiles import get_profile, parse_budget
    from kvconf.spec.registry import load_registry

    prof = get_profile(profile)
    catalog = set(load_registry().catalog)
    mutant = next((m for m in all_mutants() if m.name == name), None)
    if mutant is None:  # a mutant the other kit (an older checkout, say) does not have
        print(json.dumps({"missing": True}))
        return
    t0 = time.process_time()
    r = kill_one(mutant, catalog, seed_value=seed, profile=prof, budget=parse_budget(None, prof),
                 out_dir=None, fuzz_only=fuzz_only)
    print(json.dumps({"cpu_s": time.process_time() - t0, "killed": r.killed, "case": r.case,
                      "examples": r.examples, "skipped": r.skipped}))


def run(python: str, name: str, a) -> dict:
    cmd = [python, __file__, "--child", name, "--profile", a.profile, "--seed", str(a.seed)]
    if a.fuzz_only:
        cmd.append("--fuzz-only")
    done = subprocess.run(cmd, capture_output=True, text=True, cwd="/")
    if done.returncode:
        sys.exit(f"{python} {name}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def matrices(paths: list[str]) -> None:
    """Median and maximum seconds to kill per level in each kill matrix, and the ratios."""
    docs = []
    for p in paths:
        with open(p) as f:
            docs.append(json.load(f))

    def same(a: dict | None, b: dict | None) -> bool:  # a report before signatures has none
        if a is None or b is None:
            return a is b
        return (a["killed"], a["case"]) == (b["killed"], b["case"]) and (
            None in (a.get("signature"), b.get("signature"))
            or a["signature"] == b["signature"])

    ref = {m["id"]: m for m in docs[0]["mutants"]}
    for p, d in zip(paths[1:], docs[1:], strict=True):
        got = {m["id"]: m for m in d["mutants"]}
        diff = sorted(k for k in ref.keys() | got.keys() if not same(ref.get(k), got.get(k)))
        if diff:
            sys.exit(f"{p}: another verdict than {paths[0]} for {', '.join(diff)}")
    first: dict[str, tuple[float, float]] = {}
    for p, d in zip(paths, docs, strict=True):
        info = d["run_info"]
        print(f"{p}: --profile {info['profile']}{' --fuzz-only' if info['fuzz_only'] else ''}"
              f", --jobs {info.get('jobs', 0)}, seed {info['seed']}")
        for level in ("cache", "scheduler", "hybrid"):
            secs = [m["seconds"] for m in d["mutants"] if m["killed"] and m["level"] == level]
            if not secs:
                continue
            med, top = statistics.median(secs), max(secs)
            ratio = ""
            if level in first:
                ratio = f"  sooner than the first: median {first[level][0] / med:.2f}x, max " \
                        f"{first[level][1] / top:.2f}x"
            else:
                first[level] = (med, top)
            print(f"  {level:9} killed {len(secs)}: median {med:.3f} s, max {top:.3f} s{ratio}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="default")
    ap.add_argument("--fuzz-only", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mutant", action="append", default=[])
    ap.add_argument("--level", choices=["cache", "scheduler", "hybrid"])
    ap.add_argument("--against")
    ap.add_argument("--parallel", type=int, default=1)
    ap.add_argument("--matrix", nargs="+", metavar="REPORT")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.profile, a.fuzz_only, a.seed)
        return
    if a.matrix:
        matrices(a.matrix)
        return
    from kvconf.conformance.mutants import all_mutants

    names = [m.name for m in all_mutants() if m.level != "memory"
             and (not a.mutant or m.name in a.mutant) and (not a.level or m.level == a.level)]
    kits = [("now", sys.executable)] + ([("before", a.against)] if a.against else [])
    got: dict[str, dict[str, dict]] = {k: {} for k, _ in kits}
    print(f"--profile {a.profile}{' --fuzz-only' if a.fuzz_only else ''}, seed {a.seed}; "
          "CPU seconds to the first finding, each mutant in a child process")
    print(f"{'mutant':30} " + " ".join(f"{k:44}" for k, _ in kits))
    from concurrent.futures import ThreadPoolExecutor

    def both(name: str) -> str:
        row = []
        for kit, python in kits:
            r = run(python, name, a)
            if r.get("missing"):
                row.append(f"{'':7}   (no such mutant in this kit)")
                continue
            got[kit][name] = r
            row.append(f"{r['cpu_s']:7.3f} s {r['case'] if r['killed'] else 'ALIVE'}"
                       + (f" #{r['examples']}" if r["killed"] and r["examples"] else ""))
        return f"{name:30} " + " ".join(f"{c:44}" for c in row)

    with ThreadPoolExecutor(max(1, a.parallel)) as ex:
        for line in ex.map(both, names):
            print(line, flush=True)
    for kit, _ in kits:
        secs = [r["cpu_s"] for r in got[kit].values() if r["killed"]]
        alive = [n for n, r in got[kit].items() if not r["killed"]]
        print(f"{kit}: killed {len(secs)} of {len(got[kit])}, median {statistics.median(secs):.3f}"
              f" s, max {max(secs):.3f} s; alive: {alive or 'none'}")
    if a.against:  # the mutants both kits have and kill
        both_killed = [k for k in got["now"] if k in got["before"]
                       and got["now"][k]["killed"] and got["before"][k]["killed"]]
        b = [got["before"][k]["cpu_s"] for k in both_killed]
        n = [got["now"][k]["cpu_s"] for k in both_killed]
        print(f"sooner, over the {len(both_killed)} mutants both kits kill: median "
              f"{statistics.median(b) / statistics.median(n):.2f}x, max {max(b) / max(n):.2f}x")


if __name__ == "__main__":
    main()
