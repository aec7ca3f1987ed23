"""The reference's cheaper paths give what the plain ones give: a match of a node's own path,
a victim index that files a node once per access time, a transition log of move numbers, a
publish of nothing new that matches the pinned path instead of inserting it again."""

from __future__ import annotations

import random

import pytest

from kvconf.reference import CacheConfig, PrefixCache, Tier
from kvconf.reference.eviction import is_candidate
from kvconf.reference.plan import ExtendResult, Finish, RequestSpec, WritebackDone
from kvconf.reference.requests import MOVES, Event, State, TransitionLog
from kvconf.reference.scheduler import Scheduler, SchedulerConfig


def _grown(seed: int) -> tuple[PrefixCache, list[tuple[int, list[int]]]]:
    """A cache with prefixes inserted in two namespaces, some shared, some split, some written
    back to host; returns it and the (namespace, tokens) it holds."""
    rng = random.Random(seed)
    c = PrefixCache(CacheConfig(page_size=2, device_pages=64, host_pages=64))
    held = []
    for _ in range(12):
        ns = rng.choice((0, 1))
        base = [rng.randrange(3) for _ in range(2 * rng.randint(1, 3))]
        tokens = base + [rng.randrange(5) for _ in range(2 * rng.randint(0, 3))]
        m = c.match(ns, tokens)
        new = c.alloc(len(tokens) // 2 - len(m.device_pages))
        if new is None:
            break
        ins = c.insert(ns, tokens, list(m.device_pages) + new)
        held.append((ns, tokens))
        if rng.random() < 0.4:
            t = c.start_writeback(ins.node)
            if t is not None:
                c.finish_transfer(t.op_id, True)
        c.tick()
    return c, held


@pytest.mark.behaviours("TREE-1", "TREE-3", "EVICT-2")
@pytest.mark.parametrize("seed", range(8))
def test_match_node_is_the_match_of_the_node_path(seed: int) -> None:
    """``match_node(n)`` returns what ``match`` returns for the tokens of n's path, and stamps
    the same access times on the same nodes."""
    a, held = _grown(seed)
    b, _ = _grown(seed)
    for ns, tokens in held:
        a.tick()
        b.tick()
        node = a.match(ns, tokens).device_node
        b.match(ns, tokens)
        if node == a._roots[ns].id:
            continue
        a.tick()
        b.tick()
        path = a._node(node).path()
        key = [t for n in path for t in n.key]
        got, want = a.match_node(node), b.match(ns, key)
        assert got == want
        assert [(n.id, n.device_access, n.host_access) for n in path] == \
            [(n.id, n.device_access, n.host_access) for n in b._node(node).path()]


@pytest.mark.behaviours("EVICT-1", "EVICT-3")
@pytest.mark.parametrize("seed", range(8))
def test_victims_filed_once_are_the_scan_victims(seed: int) -> None:
    """A node offered again and again (pinned and unpinned, matched, written back) is filed
    once per access time, and every eviction still takes the leaf a full scan picks."""
    c, held = _grown(seed)
    rng = random.Random(seed)
    for _ in range(40):
        ns, tokens = rng.choice(held)
        m = c.match(ns, tokens)
        if m.device_node != c._roots[ns].id:
            c.unlock(c.lock(m.device_node))
        if rng.random() < 0.3:
            c.tick()
    for tier in (Tier.DEVICE, Tier.HOST):
        heap = c._victims._heaps[tier]
        keys = [(access, node.id) for access, _seq, node in heap]
        assert len(keys) == len(set(keys)), "a node filed twice with one access time"
    while True:
        tier = rng.choice((Tier.DEVICE, Tier.HOST))
        leaves = [n for n in c._nodes.values() if is_candidate(n, tier)]
        if not leaves:
            if not any(is_candidate(n, t) for n in c._nodes.values() for t in Tier):
                break
            continue
        want = min(leaves, key=lambda n: (n.access(tier), n.seq))
        pages = want.pages(tier)
        assert pages is not None
        assert c.evict(tier, 1) == len(pages)
        assert want.pages(tier) is None, f"{tier} victim is not the least recently used leaf"


@pytest.mark.behaviours("REQ-1", "REQ-2")
def test_transition_log_keeps_every_move() -> None:
    """The log reads back each move it was given, the table's and one a variant takes beyond
    it, in order; MOVES holds exactly the table's."""
    log = TransitionLog()
    log.append(("a", State.DECODING, Event.DECODE, State.DECODING))
    log.add("b", (State.PREFILLING, Event.RETRACT_NO_COPY, State.RETRACTED))
    assert list(log) == [("a", State.DECODING, Event.DECODE, State.DECODING),
                         ("b", State.PREFILLING, Event.RETRACT_NO_COPY, State.RETRACTED)]
    assert log[-1][0] == "b" and len(log) == 2
    assert (State.DECODING, Event.DECODE, State.DECODING) in MOVES
    assert (State.PREFILLING, Event.RETRACT_NO_COPY, State.RETRACTED) not in MOVES


class _AlwaysInserts(Scheduler):
    """Every publish inserts the request's pages, nothing new or not: the plain path."""

    def _publish(self, r, upto):
        full = upto // self.p
        if self.config.sliding_window:
            full = min(full, r.shared)
        if full == 0:
            return None
        ins = self.cache.insert(r.spec.namespace, r.tokens[: full * self.p], r.pages[:full])
        r.pages[:full] = ins.device_pages
        old = r.lock
        r.lock, r.node = self.cache.lock(ins.node, Tier.DEVICE), ins.node
        if old is not None:
            self.cache.unlock(old)
        r.shared = full
        return ins.node


@pytest.mark.behaviours("PLAN-7", "EVICT-2")
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("config", [
    {}, {"publish_mid_flight": False}, {"sliding_window": 6}, {"host_pages": 0},
])
def test_publishing_nothing_new_is_the_insert(seed: int, config: dict) -> None:
    """A finish that publishes no page beyond the ones its request pins is planned, stamped
    and announced exactly as when it inserts them again: same plans, events and snapshots."""
    rng = random.Random(seed)
    cfg = SchedulerConfig(**{"page_size": 2, "device_pages": 24, "host_pages": 16,
                             "max_tokens": 12, "max_batch": 4, "max_slots": 6, **config})
    fast, plain = Scheduler(cfg), _AlwaysInserts(cfg)
    systems = [[rng.randrange(4) for _ in range(rng.randint(0, 6))] for _ in range(3)]
    want: dict[str, int] = {}
    for step in range(150):
        batch = []
        if step < 100 and rng.random() < 0.5:
            rid = f"r{step}"
            tokens = rng.choice(systems) + [rng.randrange(4) for _ in range(rng.randint(1, 6))]
            batch.append(RequestSpec(rid, tuple(tokens), namespace=rng.choice((0, 0, 1))))
            want[rid] = rng.randint(1, 5)
        events = []
        for s in (fast, plain):
            if batch:
                s.submit(batch)
        plan = fast.next_plan()
        assert plain.next_plan() == plan
        for row in plan.rows:
            if row.samples:
                events.append(ExtendResult(row.rid, rng.randrange(4)))
                want[row.rid] -= 1
                if want[row.rid] <= 0:
                    events.append(Finish(row.rid))
        events.extend(WritebackDone(op.op_id, rng.random() < 0.9) for op in plan.writebacks)
        fast.advance(events)
        plain.advance(events)
        assert fast.drain_events() == plain.drain_events()
        assert fast.snapshot() == plain.snapshot(), f"step {step}"
    assert list(fast.transitions) == list(plain.transitions)
