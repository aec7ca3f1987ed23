"""What vLLM's white-box block view (POOL-7) costs a run: each cache-level case with the view
and without it, in one process.

Usage: python benchmarks/block_view.py [--engine vllm|vllm-salt] [--reps 3] [--past-findings]

For every cache-level case the engine runs, the case is played ``--reps`` times with the adapter
as the suite runs it (``block_snapshot`` declared: a view read after every call and judged by the
block-pool oracle) and as many times without the declaration (no view, no block-pool oracle),
the two interleaved so that a load on the machine falls on both alike. The clock is the
process's CPU time. ``--past-findings`` sets vLLM's first two findings aside (events off, a
second unlock refused), so each case runs to its end rather than stopping at the first EVENT-1,
as the view's tests do. Prints, per case, the median seconds with and without the view, the
extra seconds and the ratio, then the totals.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.errors import EngineRejected
from kvconf.conformance.running.cases import RunContext
from kvconf.conformance.running.profiles import PROFILES, parse_budget
from kvconf.conformance.running.runner import run_case, select_cases


def adapters(engine: str, past_findings: bool):
    from kvconf.conformance.adapters.vllm_cache import VLLMAdapter, VLLMSaltAdapter

    base = VLLMSaltAdapter if engine == "vllm-salt" else VLLMAdapter

    class Judged(base):
        features = base.features - ({Feature.KV_EVENTS} if past_findings else set())

        def __init__(self, config):
            super().__init__(config)
            self._released: set[int] = set()

        def unlock(self, handle):
            if past_findings and handle in self._released:
                raise EngineRejected("not_held", "released already")
            self._released.add(handle)
            super().unlock(handle)

    class Unviewed(Judged):
        features = Judged.features - {Feature.BLOCK_SNAPSHOT}

    return Judged, Unviewed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="vllm", choices=["vllm", "vllm-salt"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--past-findings", action="store_true")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    judged, unviewed = adapters(args.engine, args.past_findings)
    profile = PROFILES["ci"]
    budget = parse_budget(None, profile)

    def ctx(factory):
        return RunContext("bench", factory, EngineConfig(), 0, profile, budget, None,
                          features=factory.features | {Feature.CACHE})

    feats = judged.features | {Feature.CACHE}
    cases = [c for c in select_cases(None) if c.needs <= feats and not c.excluded_by & feats]
    print(f"{args.engine}, --profile ci, seed 0, {args.reps} reps each, CPU seconds "
          f"({'findings set aside' if args.past_findings else 'as the suite runs it'})")
    print(f"{'case':36} {'view':>8} {'no view':>8} {'extra':>8} {'ratio':>6}  status")
    tot_v = tot_n = 0.0
    for case in cases:
        with_v: list[float] = []
        without: list[float] = []
        status = ""
        for _ in range(args.reps):
            for factory, out in ((judged, with_v), (unviewed, without)):
                t = time.process_time()
                r = run_case(ctx(factory), case)
                out.append(time.process_time() - t)
                if factory is judged:
                    status = r.status.value
        v, n = statistics.median(with_v), statistics.median(without)
        tot_v += v
        tot_n += n
        print(f"{case.name:36} {v:8.3f} {n:8.3f} {v - n:+8.3f} {v / n if n else 0:6.2f}  {status}")
    print(f"{'total':36} {tot_v:8.3f} {tot_n:8.3f} {tot_v - tot_n:+8.3f} "
          f"{tot_v / tot_n if tot_n else 0:6.2f}  ({len(cases)} cases, "
          f"{(tot_v - tot_n) / len(cases):+.3f} s a case)")


if __name__ == "__main__":
    main()
