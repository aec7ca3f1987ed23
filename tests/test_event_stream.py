"""The event checks both levels share (conformance/oracles/event_stream.py): EVENT-5 across
every pair of namespaces the trace used, black-box and with the engine's hash; EVENT-6 after a
removal, at the scheduler level too."""

from __future__ import annotations

import pytest

from kvconf.conformance.oracles.base import Violation
from kvconf.conformance.oracles.scheduler import SchedEventOracle
from kvconf.reference.kv_events import EventKind, KVEvent, block_hash

P = 2


def stored(ns: int, tokens: tuple[int, ...], parent=None, hashes=None) -> KVEvent:
    if hashes is None:
        hashes, h = [], parent
        for i in range(0, len(tokens), P):
            h = block_hash(h, ns, tokens[i : i + P])
            hashes.append(h)
    return KVEvent(EventKind.STORED, tuple(hashes), ns, parent, tokens, P)


def blind(parent, ns, tokens):  # a hash that leaves namespaces 0 and 2 apart from the rest
    return block_hash(parent, ns % 2, tokens)


@pytest.mark.behaviours("EVENT-5")
def test_collision_between_distant_namespaces_is_caught_with_the_engine_hash():
    """Namespaces 0 and 2 collide under ``blind``; the trace uses 0, 1 and 2: comparing only
    a neighbour (ns + 1) would miss it."""
    o = SchedEventOracle(blind)
    for ns in (0, 1, 2):
        o.use(ns)
    tokens = (5, 6)
    with pytest.raises(Violation) as e:
        o.take([stored(0, tokens, hashes=[blind(None, 0, tokens)])])
    assert e.value.behaviours == ("EVENT-5",) and "namespaces 0 and 2" in e.value.message


@pytest.mark.behaviours("EVENT-5")
def test_collision_is_caught_black_box_across_removals():
    """No hash offered: a hash the stream once gave a prefix in namespace 0, given the same
    prefix in namespace 3 after its removal, is a collision."""
    o = SchedEventOracle()
    ev = stored(0, (5, 6))
    o.take([ev, KVEvent(EventKind.REMOVED, ev.block_hashes)])
    with pytest.raises(Violation) as e:
        o.take([KVEvent(EventKind.STORED, ev.block_hashes, 3, None, (5, 6), P)])
    assert e.value.behaviours == ("EVENT-5",)


@pytest.mark.behaviours("EVENT-6")
def test_removal_under_a_stored_block_is_caught_at_the_scheduler_level():
    o = SchedEventOracle(block_hash)
    a = stored(0, (1, 2, 3, 4))
    o.take([a])
    with pytest.raises(Violation) as e:
        o.take([KVEvent(EventKind.REMOVED, a.block_hashes[:1])])
    assert e.value.behaviours == ("EVENT-6",)


def test_distinct_namespaces_pass():
    o = SchedEventOracle(block_hash)
    for ns in (0, 1, 2):
        o.use(ns)
    o.take([stored(ns, (5, 6, 7, 8)) for ns in (0, 1, 2)])
    assert len(o.blocks.stored) == 6
