"""The ownership oracle's fast path (``_holds``) says "holds" exactly where its judge
(``OwnershipOracle.judge``) finds nothing: on every state of many seeded walks, against the
reference and every cache mutant, and on each such state with one of its records broken. Its
PIN-1 part (``_pins_hold``, one pass up the node list) agrees with each lock followed up its
parents (``_pins_by_view``) on the same states, their node lists also reversed."""

from __future__ import annotations

import contextlib
import dataclasses
import random
from functools import partial

import pytest

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.cache.generator import TraceHolder, play_walk
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.mutants.cache import PLANTED
from kvconf.conformance.oracles import STEP_ORACLES, Ctx, Oracle, Violation
from kvconf.conformance.oracles.ownership import (
    OwnershipOracle,
    _holds,
    _pins_by_view,
    _pins_hold,
)
from kvconf.reference.snapshot import CacheSnapshot


def _broken(snap: CacheSnapshot, rng: random.Random) -> CacheSnapshot:
    """``snap`` with one record changed: a page's owner, a node's pages or pins, a free list,
    a lock or a transfer; most of these break a rule, some do not (a free page moved in the
    free list), and both paths must say the same either way."""
    pools = dict(snap.pools)
    tier = rng.choice(sorted(pools, key=str))
    pool = pools[tier]
    nodes = list(snap.nodes)
    kind = rng.randrange(7)
    if kind == 0 and pool.size:
        owners = list(pool.owners)
        pg = rng.randrange(pool.size)
        owners[pg] = rng.choice(["free", "caller", "node:1", f"node:{nodes[-1].id if nodes else 2}",
                                 "transfer:1", owners[rng.randrange(pool.size)]])
        pools[tier] = dataclasses.replace(pool, owners=tuple(owners))
    elif kind == 1 and pool.free:
        free = list(pool.free)
        free[rng.randrange(len(free))] = rng.randrange(pool.size)
        pools[tier] = dataclasses.replace(pool, free=tuple(free))
    elif kind == 2 and len(nodes) > 1:
        k = rng.randrange(1, len(nodes))
        n = nodes[k]
        field = rng.choice(["device", "host"])
        pages = getattr(n, field)
        new = (rng.randrange(8),) + (pages or ())[1:] if rng.random() < 0.7 else None
        nodes[k] = dataclasses.replace(n, **{field: new})
    elif kind == 3 and len(nodes) > 1:
        k = rng.randrange(len(nodes))
        field = rng.choice(["device_ref", "host_ref"])
        nodes[k] = dataclasses.replace(nodes[k], **{field: getattr(nodes[k], field) + 1})
    elif kind == 4 and snap.locks:
        return dataclasses.replace(snap, locks=snap.locks[1:])
    elif kind == 5 and snap.transfers:
        t = snap.transfers[0]
        pairs = tuple((s + 1, d) for s, d in t.pairs)
        return dataclasses.replace(snap, transfers=(dataclasses.replace(t, pairs=pairs),
                                                    *snap.transfers[1:]))
    elif kind == 6 and len(nodes) > 1:
        k = rng.randrange(1, len(nodes))
        nodes[k] = dataclasses.replace(nodes[k], key=nodes[k].key[:-1])
    return dataclasses.replace(snap, pools=pools, nodes=tuple(nodes))


class _Both(Oracle):
    """Asks both paths about every state the walk reaches, and about broken copies of it."""

    name = "both"
    states = 0
    failing = 0
    pins = 0
    pins_broken = 0

    def __init__(self) -> None:
        self.judge = OwnershipOracle()
        self.rng = random.Random(7)

    def after_step(self, ctx: Ctx) -> None:
        if ctx.after is None:
            return
        for k in range(4):
            snap = ctx.after if k == 0 else _broken(ctx.after, self.rng)
            try:
                self.judge.judge(ctx, snap)
                judged = True
            except Violation:
                judged = False
            except (KeyError, IndexError):  # a record the judge cannot even read
                judged = False
            try:
                fast = _holds(snap, ctx)
            except (KeyError, IndexError):
                fast = False
            assert fast == judged, (ctx.index, ctx.op, k, snap)
            # The pins in one pass up the node list, against each lock followed up its
            # parents: alike on the list as it is and on one out of order (``_pins_by_view``
            # decides there).
            for nodes in (snap.nodes, snap.nodes[::-1]):
                shown = dataclasses.replace(snap, nodes=nodes)
                try:
                    want = _pins_by_view(shown, ctx)
                except (KeyError, IndexError):
                    continue
                assert _pins_hold(shown, ctx) == want, (ctx.index, ctx.op, k, shown)
                _Both.pins += 1
                _Both.pins_broken += not want
            _Both.states += 1
            _Both.failing += not judged


@pytest.mark.parametrize("cls", [None, *sorted(PLANTED)])
def test_holds_agrees_with_the_judge(cls):
    factory = ReferenceCacheAdapter if cls is None else partial(
        ReferenceCacheAdapter, cache_cls=PLANTED[cls])
    others = tuple(o for o in STEP_ORACLES if o is not OwnershipOracle)
    _Both.states = _Both.failing = _Both.pins = _Both.pins_broken = 0
    for config in (EngineConfig(), EngineConfig(page_size=1, device_pages=8, host_pages=6)):
        for seed in range(4):
            # Without the ownership oracle a mutant's walk runs on past what it would catch.
            with contextlib.suppress(Violation):
                play_walk(factory, config, TraceHolder(), seed, 40, determinism=False,
                          oracles=(*others, _Both))
    assert _Both.states > 100
    assert 0 < _Both.failing < _Both.states
    assert 0 < _Both.pins_broken < _Both.pins
