"""The TokenSpeed adapter's L3 and Mamba conversions, on stand-ins for the binding's objects
(the real extension is exercised by ``test_tokenspeed_real``): which depth a checkpoint holds,
what a request tells the engine of the L3 store, how a backup is placed in its sequence, which
state units a copy carries, and what the adapter claims on a build without them."""

from __future__ import annotations

import hashlib
import sys
from types import SimpleNamespace

import pytest

from kvconf.conformance.adapters import tokenspeed as T
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.scheduler.l3_store import l3_keys
from kvconf.conformance.scheduler.trace import SchedConfig
from kvconf.reference.plan import RequestSpec


def _chain(tokens: list[int], page: int, prior: str = "") -> list[str]:
    """TokenSpeed's ComputePagedHashes (csrc/scheduler/page_hasher.h)."""
    out, h = [], prior
    for i in range(0, len(tokens) - page + 1, page):
        data = (bytes.fromhex(h) if h else b"") + b"".join(
            (t & 0xFFFFFFFF).to_bytes(4, "little") for t in tokens[i : i + page])
        h = hashlib.sha256(data).hexdigest()
        out.append(h)
    return out


class _Sched:
    """calc_rolling_hash as the engine's: past a host match of ``host`` pages when asked."""

    def __init__(self, page: int, host: int = 0) -> None:
        self.page, self.host = page, host

    def calc_rolling_hash(self, tokens, apply_match=False):
        full = _chain(list(tokens), self.page)
        return full[self.host :] if apply_match else full


def _adapter(page: int = 2, host: int = 0) -> T.TokenSpeedAdapter:
    a = object.__new__(T.TokenSpeedAdapter)
    a.page_size, a.sched, a.ns = page, _Sched(page, host), {}
    a.l3_start, a.prefetching, a.written, a.acked = {}, {}, {}, []
    return a


@pytest.mark.behaviours("MAMBA-1")
@pytest.mark.parametrize(("start", "end", "depth"), [
    (192, 320, 320),  # ends on a boundary: the final state
    (192, 319, 256),  # the last boundary inside the row
    (192, 350, 320),
    (256, 350, 320),
    (41, 66, 0),      # starts and ends off a boundary: nothing tracked
    (6, 7, 0),        # a decode that passes no boundary
    (7, 8, 8),        # a decode that ends on one
])
def test_a_checkpoint_holds_the_last_boundary_the_runtime_tracks(start, end, depth) -> None:
    assert T.checkpoint_depth(start, end, 64 if start > 10 else 2) == depth


@pytest.mark.behaviours("L3-1", "L3-2")
def test_a_request_tells_the_engine_the_keys_past_its_host_match_and_the_hits_among_them():
    a = _adapter(page=2, host=1)
    spec = SimpleNamespace()
    tokens = (1, 2, 1, 2, 0, 1, 2)  # three full pages before the last token
    a._l3_query(spec, RequestSpec("r", tokens, 0, 3))
    assert spec.rolling_hashes == l3_keys(0, tokens[:6], 2)[1:]  # the kit's keys, page 1 on
    assert spec.storage_hit_pages == 2 and a.l3_start["r"] == 1
    a._l3_query(spec, RequestSpec("s", tokens, 0, 1))  # the store holds less than the host
    assert spec.storage_hit_pages == 0


@pytest.mark.behaviours("L3-1", "L3-5")
def test_a_backup_is_placed_at_the_pages_its_keys_name() -> None:
    """The engine lists a backup's pages node by node from the leaf, each with its key: the
    adapter keeps each (page, key) pair and sorts them into sequence order; keys that name no
    page of the sequence stay where they are, so the kit reports them."""
    a = _adapter(page=2)
    tokens = (2, 1, 1, 1, 2, 2, 0, 0, 3)
    keys = _chain(list(tokens), 2)
    a.written[7] = ("r0", tokens, (7, 6, 5, 4))
    a.acked = [7]
    op = SimpleNamespace(op_id=9, src_pages=[5, 4, 7, 6], rolling_page_hashes=[
        keys[2], keys[3], keys[0], keys[1]])
    got = a._backup(op)
    assert (got.rid, got.start, got.pages, got.keys) == ("r0", 0, (7, 6, 5, 4), tuple(keys[:4]))
    bad = SimpleNamespace(op_id=10, src_pages=[7, 6], rolling_page_hashes=[keys[1], "00" * 32])
    got = a._backup(bad)
    assert got.pages == (7, 6) and got.keys == (keys[1], "00" * 32) and got.start == 1
    a.acked = []
    assert a._backup(op).rid == ""  # no acknowledged writeback reads those pages


@pytest.mark.behaviours("MAMBA-2")
def test_a_copy_carries_its_state_units_by_kind() -> None:
    op = SimpleNamespace(op_ids=[1, 2], src_pages_by_kind={"kv": [[3], [4]], "mamba": [[2, 1], []]},
                         dst_pages_by_kind={"kv": [[9], [8]], "mamba": [[0, 1], []]})
    assert T.TokenSpeedAdapter._states(op) == [((2, 0), (1, 1)), ()]
    kv_only = SimpleNamespace(op_ids=[1], src_pages_by_kind={"kv": [[3]]},
                              dst_pages_by_kind={"kv": [[9]]})
    assert T.TokenSpeedAdapter._states(kv_only) == [()]


def test_a_build_without_l3_acknowledgements_or_mamba_claims_neither(monkeypatch) -> None:
    import fake_tokenspeed

    monkeypatch.setitem(sys.modules, "tokenspeed_scheduler", fake_tokenspeed)
    a = T.TokenSpeedAdapter(SchedConfig(l3_store=True))
    assert Feature.L3_STORE not in a.features and Feature.MAMBA not in a.features
    assert not a.l3 and not a.mamba


class _Idle:
    """An engine that admits nobody, as one that reserves a checkpoint slot with each request
    does with a one-slot state pool."""

    page_size = 2

    def __init__(self, features: frozenset[Feature]) -> None:
        self.features = features
        self.n = 0

    def submit(self, specs) -> None:
        pass

    def next_plan(self):
        from kvconf.reference.plan import Plan

        self.n += 1
        return Plan(self.n, (), (), ())

    def advance(self, events) -> None:
        pass

    def snapshot(self) -> None:
        return None


@pytest.mark.behaviours("MAMBA-9", "LIVE-1")
def test_liveness_is_judged_by_the_state_slots_an_engine_declares_it_needs() -> None:
    from kvconf.conformance.oracles import Violation
    from kvconf.conformance.scheduler.driver import SchedulerDriver
    from kvconf.conformance.scheduler.trace import Arrival, SchedTrace

    trace = SchedTrace(config=SchedConfig(mamba=True, mamba_slots=1), max_plans=5,
                       arrivals=[Arrival(at=0, rid="r", tokens=[0, 1, 2])])
    base = frozenset({Feature.MAMBA, Feature.IGNORES_UNKNOWN_EVENTS})
    with pytest.raises(Violation) as e:
        SchedulerDriver(_Idle(base), trace, probes="none").run()
    assert "LIVE-1" in e.value.behaviours
    log = SchedulerDriver(_Idle(base | {Feature.MAMBA_CHECKPOINT_SLOT}), trace,
                          probes="none").run()
    assert log[-1][0] == "unjudged"
    roomy = trace.model_copy(update={"config": SchedConfig(mamba=True, mamba_slots=2)})
    with pytest.raises(Violation):
        SchedulerDriver(_Idle(base | {Feature.MAMBA_CHECKPOINT_SLOT}), roomy,
                        probes="none").run()


def test_radix_kv_events_read_an_adapter_chain_as_its_namespace() -> None:
    """EVENT-1..4 at the scheduler level on the radix era: a namespace's first block names its
    virtual root (the sentinel page hashed with no parent) as parent, which no event announces;
    the adapter reads it as that namespace's root, and its descendants inherit the namespace,
    so the kit's hash check recomputes every block."""
    from types import SimpleNamespace

    from kvconf.conformance.adapters.tokenspeed import TokenSpeedAdapter, block_hash
    from kvconf.reference.kv_events import EventKind

    root = block_hash(None, 0, [-1, 0])
    first = block_hash(root, 0, [5, 6])
    second = block_hash(first, 0, [7, 8])
    base = block_hash(None, 0, [5, 6])
    raw = [SimpleNamespace(kind="BlockStored", block_hashes=[first], parent_block_hash=root,
                           token_ids=[5, 6], block_size=2),
           SimpleNamespace(kind="BlockStored", block_hashes=[second], parent_block_hash=first,
                           token_ids=[7, 8], block_size=2),
           SimpleNamespace(kind="BlockStored", block_hashes=[base], parent_block_hash=None,
                           token_ids=[5, 6], block_size=2),
           SimpleNamespace(kind="BlockRemoved", block_hashes=[second])]
    a = object.__new__(TokenSpeedAdapter)
    a.page_size, a.ns, a.event_ns = 2, {"x": 1, "y": 0}, {}
    a.sched = SimpleNamespace(drain_kv_events=lambda: raw)
    out = a.drain_events()
    assert [(e.kind, e.namespace, e.parent_hash) for e in out] == [
        (EventKind.STORED, 1, None), (EventKind.STORED, 1, first), (EventKind.STORED, 0, None),
        (EventKind.REMOVED, 0, None)]
    assert a.block_hash(None, 1, [5, 6]) == first and a.block_hash(first, 1, [7, 8]) == second
    assert a.block_hash(None, 0, [5, 6]) == base != first
