"""Throughput of the reference prefix cache: operations per second on a long mixed trace.

Usage: python benchmarks/cache_ops.py [--ops 100000] [--seed 0] [--page-size 4]

The trace is generated up front from a seeded RNG (shared prefixes, tight pools, host tier on) and
then replayed against a fresh cache while the clock runs, so the figure is the cache alone, not the
generator. A second figure replays a shorter trace through the kit's driver with every oracle on,
which is what a conformance run pays per step.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

from kvconf.reference import CacheConfig, PrefixCache, Tier


def make_ops(n: int, seed: int, page_size: int) -> list[tuple]:
    """A deterministic mix: insert, match(+lock), unlock, evict, writeback, loadback, ack."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(50) for _ in range(page_size * rng.randint(1, 8))] for _ in range(64)]
    ops: list[tuple] = []
    kinds = ["insert", "match", "match_lock", "unlock", "evict", "writeback", "loadback", "tick"]
    weights = [20, 25, 15, 15, 8, 6, 6, 5]
    for _ in range(n):
        k = rng.choices(kinds, weights)[0]
        base = rng.choice(prompts)
        cut = page_size * rng.randint(0, len(base) // page_size)
        tail = [rng.randrange(50) for _ in range(page_size * rng.randint(0, 3))]
        ops.append((k, rng.randrange(2), base[:cut] + tail, rng.random()))
    return ops


def replay(ops: list[tuple], page_size: int) -> tuple[int, float]:
    cache = PrefixCache(CacheConfig(page_size=page_size, device_pages=512, host_pages=512))
    locks: list[int] = []
    inflight: list[int] = []
    done = 0
    t0 = time.perf_counter()
    for kind, ns, tokens, r in ops:
        if kind == "tick":
            cache.tick()
        elif kind == "insert":
            n = len(tokens) // page_size
            pages = cache.alloc(n)
            if pages is None:
                cache.evict(Tier.DEVICE, n)
                pages = cache.alloc(n)
            if pages is not None:
                cache.insert(ns, tokens, pages)
        elif kind in ("match", "match_lock"):
            m = cache.match(ns, tokens)
            if kind == "match_lock":
                tier = Tier.DEVICE if r < 0.7 else Tier.HOST
                node = m.device_node if tier is Tier.DEVICE else m.host_node
                locks.append(cache.lock(node, tier))
        elif kind == "unlock" and locks:
            cache.unlock(locks.pop(int(r * len(locks))))
        elif kind == "evict":
            cache.evict(Tier.DEVICE if r < 0.6 else Tier.HOST, 1 + int(r * 8))
        elif kind in ("writeback", "loadback"):
            if inflight and r < 0.5:
                cache.finish_transfer(inflight.pop(0), r > 0.05)
            m = cache.match(ns, tokens)
            node = m.device_node if kind == "writeback" else m.host_node
            try:
                t = (cache.start_writeback if kind == "writeback" else cache.start_loadback)(node)
            except Exception:
                t = None
            if t is not None:
                inflight.append(t.op_id)
        done += 1
        if len(locks) > 64:
            cache.unlock(locks.pop(0))
        cache.drain_events()
    return done, time.perf_counter() - t0


def driver_rate(n: int, seed: int, page_size: int) -> tuple[int, float]:
    """Steps per second through the kit's driver with every oracle (white-box) on."""
    from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
    from kvconf.conformance.cache.driver import CacheDriver
    from kvconf.conformance.engine.config import EngineConfig
    from kvconf.conformance.trace import EvictStep, ExtendStep, MatchStep, TickStep

    rng = random.Random(seed)
    cfg = EngineConfig(page_size=page_size, device_pages=64, host_pages=64)
    driver = CacheDriver(ReferenceCacheAdapter(cfg), cfg, clock="explicit")
    prompts = [[rng.randrange(20) for _ in range(page_size * rng.randint(1, 6))] for _ in range(32)]
    make: list[Callable] = [
        lambda t: ExtendStep(ns=0, tokens=t),
        lambda t: MatchStep(ns=0, tokens=t),
        lambda t: EvictStep(pages=rng.randint(1, 6)),
        lambda t: TickStep(),
    ]
    t0 = time.perf_counter()
    for i in range(n):
        driver.step(i, rng.choices(make, [40, 40, 10, 10])[0](rng.choice(prompts)))
    return n, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=100_000)
    ap.add_argument("--driver-steps", type=int, default=5_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--page-size", type=int, default=4)
    a = ap.parse_args()
    ops = make_ops(a.ops, a.seed, a.page_size)
    n, s = replay(ops, a.page_size)
    print(f"reference cache: {n} operations in {s:.2f} s = {n / s:,.0f} ops/s "
          f"(page size {a.page_size}, seed {a.seed})")
    n, s = driver_rate(a.driver_steps, a.seed, a.page_size)
    print(f"kit driver, all oracles: {n} steps in {s:.2f} s = {n / s:,.0f} steps/s")


if __name__ == "__main__":
    main()
