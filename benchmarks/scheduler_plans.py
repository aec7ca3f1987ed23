"""Throughput of the reference scheduler: plans per second on a 10,000-request workload.

Usage: python benchmarks/scheduler_plans.py [--requests 10000] [--seed 0] [--engine tokenspeed]

Requests arrive a few per plan with prompts drawn from a pool of shared system prompts plus a
unique tail, each generates a few tokens and finishes; writebacks are acknowledged at once and
the step's KV events drained, as a runtime publishes them. The loop is the runtime's loop with
no checks, so the figure is the scheduler (and its cache) alone.
A second figure runs a shorter workload through the kit's scheduler driver with every oracle.

With ``--engine NAME`` (a scheduler-level engine such as ``tokenspeed``, installed) the same
workload also runs through that engine and the reference in one process, interleaved plan by
plan, both through their kit adapters (so the engine's figure includes its adapter's
conversions), and the two rates and their ratio are printed. That comparison is timed in the
process's CPU seconds, so a load on the machine does not move the ratio.
"""

from __future__ import annotations

import argparse
import random
import time
import zlib

from kvconf.reference.plan import ExtendResult, Finish, RequestSpec, WritebackDone
from kvconf.reference.scheduler import Scheduler, SchedulerConfig


def run(requests: int, seed: int) -> tuple[int, int, float]:
    rng = random.Random(seed)
    cfg = SchedulerConfig(page_size=16, device_pages=4096, host_pages=8192, max_tokens=2048,
                          max_batch=64, max_slots=128)
    s = Scheduler(cfg)
    systems = [[rng.randrange(32000) for _ in range(rng.choice((64, 128, 256)))]
               for _ in range(8)]
    want: dict[str, int] = {}
    made = plans = 0
    t0 = time.perf_counter()
    while made < requests or s.requests:
        batch = []
        for _ in range(min(4, requests - made)):
            rid = f"r{made}"
            tokens = rng.choice(systems) + [rng.randrange(32000) for _ in range(rng.randint(8, 64))]
            batch.append(RequestSpec(rid, tuple(tokens)))
            want[rid] = rng.randint(1, 16)
            made += 1
        if batch:
            s.submit(batch)
        plan = s.next_plan()
        plans += 1
        events: list = []
        for row in plan.rows:
            if row.samples:
                events.append(ExtendResult(row.rid, rng.randrange(32000)))
                want[row.rid] -= 1
                if want[row.rid] <= 0:
                    events.append(Finish(row.rid))
        events.extend(WritebackDone(op.op_id, True) for op in plan.writebacks)
        s.advance(events)
        s.drain_events()  # a runtime publishes the step's KV events: none pile up
    return requests, plans, time.perf_counter() - t0


def driver_rate(seed: int) -> tuple[int, float]:
    from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter
    from kvconf.conformance.scheduler.driver import SchedulerDriver
    from kvconf.conformance.scheduler.trace import Arrival, SchedConfig, SchedTrace

    rng = random.Random(seed)
    base = [rng.randrange(3) for _ in range(16)]
    arrivals = [Arrival(at=i // 2, rid=f"r{i}", tokens=base[: rng.randint(0, 16)]
                        + [rng.randrange(3) for _ in range(rng.randint(1, 8))],
                        new_tokens=rng.randint(1, 8)) for i in range(300)]
    trace = SchedTrace(config=SchedConfig(device_pages=64, host_pages=64), arrivals=arrivals,
                       seed=seed, max_plans=5000)
    t0 = time.perf_counter()
    log = SchedulerDriver(ReferenceSchedulerAdapter(trace.config), trace).run()
    return len(log), time.perf_counter() - t0


class _Timed:
    """Stands in for an adapter's scheduler object and adds up the seconds spent in its calls:
    the scheduler's own time, without the adapter's conversions."""

    def __init__(self, inner) -> None:
        self._inner, self.seconds = inner, 0.0

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def timed(*args, **kwargs):
            t0 = time.process_time()
            try:
                return attr(*args, **kwargs)
            finally:
                self.seconds += time.process_time() - t0

        return timed


def _token(seed: int, rid: str, start: int) -> int:
    """The token sampled for ``rid``'s row at ``start``: the same in every process (a string's
    ``hash`` is salted per process), so two runs of the benchmark play the same schedule."""
    return zlib.crc32(f"{seed}/{rid}/{start}".encode()) % 32000


def lockstep(engine: str, requests: int, seed: int) -> dict[str, tuple[int, float, float]]:
    """The same arrivals and sampled tokens through ``engine`` and the reference, one plan of
    each in turn; returns plans, seconds through the adapter, seconds in the scheduler itself."""
    from kvconf.conformance.adapters import sched_engine_factory
    from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter
    from kvconf.conformance.scheduler.trace import SchedConfig

    other = sched_engine_factory(engine)
    if other is None:
        raise SystemExit(f"engine {engine!r} has no scheduler-level adapter")
    config = SchedConfig(page_size=16, device_pages=4096, host_pages=8192, max_tokens=2048,
                         max_batch=64, max_slots=128)
    rng = random.Random(seed)
    systems = [[rng.randrange(32000) for _ in range(rng.choice((64, 128, 256)))]
               for _ in range(8)]
    batches, want = [], {}
    for i in range(0, requests, 4):
        batch = []
        for j in range(i, min(i + 4, requests)):
            tokens = rng.choice(systems) + [rng.randrange(32000) for _ in range(rng.randint(8, 64))]
            batch.append(RequestSpec(f"r{j}", tuple(tokens)))
            want[f"r{j}"] = rng.randint(1, 16)
        batches.append(batch)
    engines = {"reference": ReferenceSchedulerAdapter(config), engine: other(config)}
    for e in engines.values():
        e.sched = _Timed(e.sched)
    left = {name: dict(want) for name in engines}
    out = {name: [0, 0.0] for name in engines}
    step = 0
    while any(left.values()):
        for name, e in engines.items():
            if not left[name]:
                continue
            t0 = time.process_time()
            if step < len(batches):
                e.submit(batches[step])
            plan = e.next_plan()
            events: list = []
            for row in plan.rows:
                if row.samples:
                    events.append(ExtendResult(row.rid, _token(seed, row.rid, row.start)))
                    left[name][row.rid] -= 1
                    if left[name][row.rid] <= 0:
                        events.append(Finish(row.rid))
                        del left[name][row.rid]
            events.extend(WritebackDone(op.op_id, True) for op in plan.writebacks)
            e.advance(events)
            e.drain_events()  # a runtime publishes the step's KV events: none pile up
            out[name][0] += 1
            out[name][1] += time.process_time() - t0
        step += 1
    return {name: (plans, secs, engines[name].sched.seconds)
            for name, (plans, secs) in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--engine", help="also run this scheduler-level engine, interleaved")
    a = ap.parse_args()
    if a.engine:
        rates = lockstep(a.engine, a.requests, a.seed)
        for name, (plans, secs, own) in rates.items():
            print(f"{name}: {a.requests} requests, {plans} plans: {plans / secs:,.0f} plans/s "
                  f"through its kit adapter, {plans / own:,.0f} plans/s in the scheduler itself")
        (rp, rs, ro), (ep, es, eo) = rates["reference"], rates[a.engine]
        print(f"{a.engine} / reference: {(ep / es) / (rp / rs):.1f}x through the adapters, "
              f"{(ep / eo) / (rp / ro):.1f}x in the schedulers themselves")
        print(f"reference / {a.engine}: {(rp / rs) / (ep / es):.2f}x through the adapters, "
              f"{(rp / ro) / (ep / eo):.2f}x in the schedulers themselves")
        return
    n, plans, secs = run(a.requests, a.seed)
    print(f"reference scheduler: {n} requests, {plans} plans in {secs:.2f} s = "
          f"{plans / secs:,.0f} plans/s ({n / secs:,.0f} requests/s)")
    plans, secs = driver_rate(a.seed)
    print(f"kit scheduler driver, all oracles: {plans} plans in {secs:.2f} s = "
          f"{plans / secs:,.0f} plans/s")


if __name__ == "__main__":
    main()
