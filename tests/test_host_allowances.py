"""The host-tier allowances SGLang's HiCache takes: loadbacks served under stream order
(HOST-11) and an inclusive host tier (HOST-12). Each variant passes declared, the same
behaviour undeclared is caught, and what the allowance still forbids is caught declared."""

from __future__ import annotations

import pytest

from kvconf.conformance.cache.scenarios import SCENARIOS
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.oracles import Violation
from kvconf.conformance.running.runner import play
from kvconf.conformance.trace import Trace
from kvconf.conformance.variants import all_variants
from kvconf.conformance.variants.cache import StreamOrderedLoadback
from kvconf.reference.tiers import Tier

VARIANTS = {v.name: v for v in all_variants()}

# The shrunk trace of docs/peers.md#sglang-hicache-loadback: a match while the loadback is in
# flight serves its destination pages, then the copy lands.
SERVED_EARLY = [
    {"op": "extend", "ns": 0, "tokens": [1, 2]},
    {"op": "match", "ns": 0, "tokens": [1, 2], "lock": "device"},
    {"op": "writeback", "step": 1, "ack": "now"},
    {"op": "unlock", "step": 1},
    {"op": "evict", "tier": "device", "pages": 24},
    {"op": "match", "ns": 0, "tokens": [1, 2], "lock": "host"},
    {"op": "loadback", "step": 5, "ack": "later"},
    {"op": "match", "ns": 0, "tokens": [1, 2], "lock": "device"},
    {"op": "ack", "step": 6},
    {"op": "unlock", "step": 7},
]


def trace(steps, **config) -> Trace:
    return Trace.model_validate({"steps": steps, "config": EngineConfig(**config).model_dump()})


def scenario(name: str) -> Trace:
    return next(sc.trace(EngineConfig()) for sc in SCENARIOS if sc.name == name)


@pytest.mark.behaviours("HOST-11", "HOST-3", "TREE-2")
def test_a_stream_ordered_loadback_is_served_early_only_when_declared() -> None:
    v = VARIANTS["StreamOrderedLoadback"]
    t = trace(SERVED_EARLY, page_size=1, device_pages=24, host_pages=24)
    play(v.factory(), t)
    with pytest.raises(Violation) as e:
        play(v.factory(with_features=False), t)
    assert "TREE-2" in e.value.behaviours or "HOST-3" in e.value.behaviours, e.value


class _UnpinnedEarly(StreamOrderedLoadback):
    """Serves early, as declared, but does not pin the loaded pages until the copy lands."""

    def start_loadback(self, node_id):
        t = super().start_loadback(node_id)
        if t is not None:
            self._locks.release(t.locks.pop(), internal=True)
        return t


@pytest.mark.behaviours("HOST-11")
def test_a_stream_ordered_loadback_evicted_before_it_lands_is_caught() -> None:
    """Declared, the loaded pages must stay pinned until the copy lands: evicting them is
    caught."""
    from kvconf.conformance.variants import _adapter

    steps = [*SERVED_EARLY[:7], {"op": "evict", "tier": "device", "pages": 24},
             {"op": "ack", "step": 6}]
    factory = _adapter("cache", _UnpinnedEarly, StreamOrderedLoadback.features)
    with pytest.raises(Violation) as e:
        play(factory, trace(steps, page_size=1, device_pages=24, host_pages=24))
    assert {"HOST-11", "HOST-3", "EVICT-1", "PIN-2"} & set(e.value.behaviours), e.value


@pytest.mark.behaviours("HOST-12", "EVICT-2")
def test_an_inclusive_host_tier_is_legal_only_when_declared() -> None:
    v = VARIANTS["InclusiveHostTier"]
    t = scenario("host-eviction-beside-device-copies")
    log = play(v.factory(), t)
    assert [s.get("freed") for s in log if s.get("op") == "evict"] in ([0], [[]], [None])
    with pytest.raises(Violation) as e:
        play(v.factory(with_features=False), t)
    assert {"EVICT-2", "EVICT-4"} & set(e.value.behaviours), e.value


@pytest.mark.behaviours("HOST-12")
def test_an_inclusive_host_tier_that_gives_up_a_device_nodes_copy_is_caught() -> None:
    """Declaring inclusive_host_tier and evicting the host copy of a node still on device (the
    reference's policy) is caught."""
    v = VARIANTS["InclusiveHostTier"]
    with pytest.raises(Violation) as e:
        play(v.reference_factory(), scenario("host-eviction-beside-device-copies"))
    assert e.value.behaviours == ("HOST-12",), e.value


def test_the_allowances_are_declared_by_name() -> None:
    assert Feature("stream_ordered_loadback") is Feature.STREAM_ORDERED_LOADBACK
    assert Feature("inclusive_host_tier") is Feature.INCLUSIVE_HOST_TIER
    assert Tier.HOST is not Tier.DEVICE
