"""The reference scheduler's plans and states on many seeded workloads, held to fingerprints
recorded from an earlier revision: a change made for speed must leave every plan, every
transition, every rejection and every snapshot exactly as it was.

Each workload draws a configuration (page size, pools, host tier, L3, Mamba, window, adapter
cap, mixed or not, mid-flight publish or not) and a runtime that delivers sampled tokens late,
finishes and aborts requests, acknowledges copies late or as failures, and now and then sends
an illegal event list (rejected as a whole, then sent again without the bad event). Per step
the digest takes the plan, the scheduler's snapshot (requests, slots, copies in flight, Mamba
pools, and the cache's tree, pools, locks and transfers), its counters, the KV events and the
transitions taken. Block hash values are the cache's own choice (EVENT-4) and are left out:
where blocks are stored and removed is in.

Record again (only for a change that means to change plans, said in its commit):
``python tests/test_scheduler_fingerprints.py --record``.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from pathlib import Path

import pytest

from kvconf.reference.plan import (
    Abort,
    BackupDone,
    ExtendResult,
    Finish,
    PrefetchDone,
    RequestSpec,
    WritebackDone,
)
from kvconf.reference.requests import State
from kvconf.reference.scheduler import Scheduler, SchedulerConfig, SchedulerError

DATA = Path(__file__).resolve().parent / "data" / "scheduler_fingerprints.json"
SEEDS = range(48)
STEPS = 160


def config_for(rng: random.Random) -> SchedulerConfig:
    return SchedulerConfig(
        page_size=rng.choice((1, 2, 4)),
        device_pages=rng.choice((6, 12, 24, 48)),
        host_pages=rng.choice((0, 8, 32)),
        max_tokens=rng.choice((3, 8, 32)),
        max_batch=rng.choice((2, 4, 8)),
        max_slots=rng.choice((2, 4, 8)),
        mixed=rng.random() < 0.8,
        publish_mid_flight=rng.random() < 0.8,
        sliding_window=rng.choice((0, 0, 0, 6)),
        l3_store=rng.random() < 0.3,
        prefetch_threshold=rng.choice((1, 2)),
        max_adapters=rng.choice((0, 0, 1, 2)),
        mamba=rng.random() < 0.3,
        mamba_slots=rng.choice((2, 5, 16)),
        mamba_host_slots=rng.choice((0, 4, 16)),
    )


def cache_state(snap) -> tuple:
    """The cache's part of a snapshot as plain values, nodes by id (block hashes left out)."""
    c = snap.cache
    nodes = tuple(sorted(
        (n.id, n.namespace, n.parent, n.start, n.key, n.device, n.host, n.device_ref,
         n.host_ref, n.device_access, n.host_access, n.seq, n.pending, tuple(n.keys))
        for n in c.nodes))
    pools = tuple((str(t), p.size, tuple(p.free), tuple(p.owners)) for t, p in c.pools.items())
    locks = tuple((lk.handle, lk.node, str(lk.tier), lk.internal) for lk in c.locks)
    transfers = tuple((t.op_id, t.kind, t.node, tuple(t.pairs)) for t in c.transfers)
    l3 = tuple((t.op_id, t.kind, t.node, t.start, tuple(t.pages)) for t in c.l3)
    return nodes, pools, tuple(sorted(c.roots.items())), locks, transfers, l3


def sched_state(s: Scheduler) -> tuple:
    snap = s.snapshot()
    return (snap.step, snap.requests, snap.free_slots, snap.ops, snap.l3_ops, snap.mamba,
            cache_state(snap), tuple(sorted(s.counters().items())))


def events_seen(s: Scheduler) -> tuple:
    return tuple((str(e.kind), e.namespace, len(e.block_hashes), e.parent_hash is None,
                  e.tokens, e.block_size) for e in s.drain_events())


class Player:
    """One seeded workload: a runtime around the reference scheduler, digesting as it goes."""

    def __init__(self, seed: int) -> None:
        self.rng = rng = random.Random(seed)
        self.config = config_for(rng)
        self.s = Scheduler(self.config)
        self.digest = hashlib.sha256()
        self.prefixes = [tuple(rng.randrange(4) for _ in range(rng.randint(0, 12)))
                         for _ in range(4)]
        self.made = 0
        self.due: dict[str, None] = {}  # requests whose sampled token is not yet reported
        self.copies: list[int] = []  # writebacks in flight
        self.l3: dict[int, tuple[str, int]] = {}  # L3 op -> (kind, pages)
        self.seen = 0  # transitions digested so far

    def note(self, *what: object) -> None:
        self.digest.update(repr(what).encode())
        self.digest.update(b"\n")

    def submit(self) -> None:
        rng, p = self.rng, self.config.page_size
        specs = []
        for _ in range(rng.randint(1, 3)):
            tokens = rng.choice(self.prefixes) + tuple(
                rng.randrange(4) for _ in range(rng.randint(1, 10)))
            specs.append(RequestSpec(f"r{self.made}", tokens, rng.choice((0, 0, 0, 1, 2)),
                                     rng.randint(0, len(tokens) // p)))
            self.made += 1
        if rng.random() < 0.05:  # a repeated request: the whole submit is rejected
            self.reject(self.s.submit, [*specs, specs[0]])
        self.s.submit(specs)

    def reject(self, call, arg) -> None:
        try:
            call(arg)
        except SchedulerError as e:
            self.note("rejected", e.code, e.message, e.rid)
        else:
            raise AssertionError(f"accepted {arg!r}")

    def respond(self) -> list:
        rng, s = self.rng, self.s
        events: list = []
        touched: set[str] = set()
        for rid in list(self.due):
            if rng.random() < 0.8:
                del self.due[rid]
                touched.add(rid)
                events.append(ExtendResult(rid, rng.randrange(4)))
                if rng.random() < 0.3:
                    events.append(Finish(rid))
        for rid, r in s.requests.items():
            if rid in touched or rid in self.due:
                continue
            stop = {State.DECODING: 0.1, State.RETRACTED: 0.01}.get(r.state, 0.0)
            if not r.awaiting and rng.random() < stop:
                events.append(Finish(rid))
                touched.add(rid)
            elif r.state is not State.FINISHED and rng.random() < 0.02:
                events.append(Abort(rid))
                touched.add(rid)
        for op in list(self.copies):
            if rng.random() < 0.6:
                self.copies.remove(op)
                events.append(WritebackDone(op, rng.random() < 0.85))
        for op, (kind, pages) in list(self.l3.items()):
            if rng.random() < 0.5:
                del self.l3[op]
                events.append(PrefetchDone(op, rng.randint(0, pages)) if kind == "prefetch"
                              else BackupDone(op, rng.random() < 0.8))
        return events

    def step(self) -> None:
        rng, s = self.rng, self.s
        if rng.random() < 0.35:
            self.submit()
        plan = s.next_plan()
        self.note("plan", plan)
        for row in plan.rows:
            if row.samples:
                self.due[row.rid] = None
        self.copies.extend(op.op_id for op in plan.writebacks)
        self.l3.update((op.op_id, (op.kind, len(op.pages))) for op in plan.l3)
        events = self.respond()
        if rng.random() < 0.05:
            waiting = [rid for rid, r in s.requests.items() if r.state is State.SUBMITTED]
            bad = rng.choice((ExtendResult("nobody", 0), WritebackDone(10**6, True),
                              Finish(waiting[0]) if waiting else Abort("nobody")))
            self.reject(s.advance, [*events, bad])
        for ev in events:
            if isinstance(ev, Abort):
                self.due.pop(ev.rid, None)
        s.advance(events)
        self.note("events", events)
        self.note("state", sched_state(s), events_seen(s), list(s.transitions[self.seen :]))
        self.seen = len(s.transitions)

    def run(self, steps: int) -> tuple[int, str]:
        for _ in range(steps):
            self.step()
        return self.s.step, self.digest.hexdigest()


def bench_workload(requests: int = 600, seed: int = 0) -> tuple[int, str]:
    """The benchmark's workload (page 16, shared system prompts, a few tokens each): every plan
    digested, the full state every 25 plans."""
    rng = random.Random(seed)
    s = Scheduler(SchedulerConfig(page_size=16, device_pages=256, host_pages=512,
                                  max_tokens=2048, max_batch=64, max_slots=128))
    systems = [[rng.randrange(32000) for _ in range(rng.choice((64, 128, 256)))]
               for _ in range(8)]
    digest = hashlib.sha256()
    want: dict[str, int] = {}
    made = 0
    while made < requests or s.requests:
        batch = []
        for _ in range(min(4, requests - made)):
            tokens = rng.choice(systems) + [rng.randrange(32000) for _ in range(rng.randint(8, 64))]
            batch.append(RequestSpec(f"r{made}", tuple(tokens)))
            want[f"r{made}"] = rng.randint(1, 16)
            made += 1
        if batch:
            s.submit(batch)
        plan = s.next_plan()
        digest.update(repr(plan).encode())
        events: list = []
        for row in plan.rows:
            if row.samples:
                events.append(ExtendResult(row.rid, rng.randrange(32000)))
                want[row.rid] -= 1
                if want[row.rid] <= 0:
                    events.append(Finish(row.rid))
        events.extend(WritebackDone(op.op_id, True) for op in plan.writebacks)
        s.advance(events)
        if s.step % 25 == 0:
            digest.update(repr((sched_state(s), events_seen(s))).encode())
    digest.update(repr(list(s.transitions)).encode())
    return s.step, digest.hexdigest()


def fingerprints() -> dict[str, list]:
    out: dict[str, list] = {f"seed-{seed}": list(Player(seed).run(STEPS)) for seed in SEEDS}
    out["benchmark"] = list(bench_workload())
    return out


@pytest.fixture(scope="module")
def recorded() -> dict[str, list]:
    return json.loads(DATA.read_text())


@pytest.mark.parametrize("seed", SEEDS)
def test_seeded_workload_plays_as_recorded(seed: int, recorded) -> None:
    assert list(Player(seed).run(STEPS)) == recorded[f"seed-{seed}"]


def test_benchmark_workload_plays_as_recorded(recorded) -> None:
    assert list(bench_workload()) == recorded["benchmark"]


def test_the_workloads_reach_what_they_are_meant_to_cover() -> None:
    """The fingerprints are worth something only if the workloads take the paths a change
    could break: retraction, loadback, failed copies, L3, Mamba, aborts, rejections."""
    taken: set = set()
    for seed in SEEDS[:24]:
        p = Player(seed)
        p.run(STEPS)
        taken |= {(a, e) for _rid, a, e, _b in p.s.transitions}
    names = {(str(a), str(e)) for a, e in taken}
    for want in [("Decoding", "retract"), ("Retracting", "WriteBackDone"),
                 ("Retracted", "last_chunk"), ("Submitted", "prefetch"),
                 ("Prefetching", "PrefetchDone"), ("Draining", "writeback"),
                 ("WritingBack", "WriteBackDone"), ("Decoding", "Abort")]:
        assert want in names, f"no workload takes {want}"


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    DATA.parent.mkdir(exist_ok=True)
    DATA.write_text(json.dumps(fingerprints(), indent=1) + "\n")
    print(f"recorded {DATA}")
