"""TokenSpeed's scheduler, block-pool era (``tokenspeed-scheduler`` 0.1.8, today's main).

The extension was rewritten around a block pool organised in cache groups (``csrc/cache/``):
``prefix_granularity`` and ``cache_groups`` replace ``page_size``; a forward row carries one block
table per group (``Forward.Batch.block_tables``, keyed by group id); a plan names the fresh pages
the runtime zeroes (``pages_to_zero``); ``WriteBackOp`` / ``LoadBackOp`` carry the group of each
op, a loadback is acknowledged (``LoadBackDoneEvent``) and a writeback acknowledgement has no
success flag. Writebacks are write-through: the engine copies a block to host once it is
published (at prefill completion or a decode publish), not at finish or retraction, so a
writeback belongs to the cache and names no request. A retracted request is recomputed from its
prefix match; nothing is written back for it.

The kit's configuration becomes one full-attention group (``full``) with one page per kit page;
a sliding window adds nothing here yet (the group kinds beyond full attention are decided from
the binding: ``CacheRetention.SlidingWindow`` and ``CacheGroupFamily.State``). The engine offers
no snapshot, so only the black-box oracles and the content oracle judge it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conformance.adapters.tokenspeed import _event, _module, engine_version
from conformance.errors import EngineRejected
from conformance.features import Feature
from conformance.sched_trace import SchedConfig
from reference.kv_events import EventKind, KVEvent
from reference.plan import (
    Abort,
    CopyOp,
    ExtendResult,
    Finish,
    ForwardRow,
    LoadbackDone,
    Plan,
    RequestSpec,
    RuntimeEvent,
    WritebackDone,
)

FULL = "full"  # the kit's KV group: full attention, one engine page per kit page


def is_block_pool(ts: Any) -> bool:
    """The block-pool era's binding: cache groups instead of a page size."""
    c = ts.SchedulerConfig()
    return hasattr(c, "cache_groups") and not hasattr(c, "page_size")


def _config(ts: Any, config: SchedConfig) -> Any:
    c = ts.SchedulerConfig()
    p = config.page_size
    c.prefix_granularity = p
    c.max_scheduled_tokens = config.max_tokens
    c.max_batch_size = config.max_batch
    c.decode_input_tokens = 1
    c.role = ts.SchedulerConfig.Role.Fused
    # Page 0 of each pool is the null placeholder (SchedulerConfig::AllocatorConfig, types.h).
    c.num_device_pages = config.device_pages + 1
    c.num_host_pages = config.host_pages + 1 if config.host_pages else 0
    c.disable_l2_cache = config.host_pages == 0
    c.enable_mixed_prefill_decode = config.mixed
    c.cache_groups = [ts.CacheGroupConfig(FULL, p, 1, config.device_pages + 1)]
    c.enable_kv_cache_events = True
    return c


_FNV_OFFSET, _FNV_PRIME, _MASK = 14695981039346656037, 1099511628211, (1 << 64) - 1


def block_hash(parent: int | None, namespace: int, tokens: Sequence[int]) -> int:
    """TokenSpeed's KV event block hash (HashKvBlock, csrc/scheduler/kv_cache_events.cpp): 64-bit
    FNV-1a over a has-parent byte, the parent (8 bytes), the token count (8 bytes) and each token
    (4 bytes), little-endian. It has no namespace input: the binding has no namespaces."""
    data = bytearray(b"\x01" if parent is not None else b"\x00")
    if parent is not None:
        data += parent.to_bytes(8, "little")
    data += len(tokens).to_bytes(8, "little")
    for t in tokens:
        data += (t & 0xFFFFFFFF).to_bytes(4, "little")
    h = _FNV_OFFSET
    for b in data:
        h = ((h ^ b) * _FNV_PRIME) & _MASK
    return h


class TokenSpeedBlockPoolAdapter:
    name = "tokenspeed"

    def __init__(self, config: SchedConfig) -> None:
        ts = _module()
        self.ts = ts
        self.version = engine_version(ts)
        self.page_size = config.page_size
        self.page_ids = (config.device_pages + 1, config.host_pages + 1)  # ids start at 1
        if config.sliding_window or config.mamba or config.l3_store or config.max_adapters:
            raise EngineRejected("unsupported", "this configuration needs a group kind the "
                                 "block-pool adapter does not map yet")
        self.sched = ts.Scheduler(_config(ts, config))
        # Events for unknown request ids and op ids are ignored by design
        # (csrc/scheduler/outside_event_handler.cpp; TierTransferManager::CompleteWriteBack
        # returns on an unknown op id); REQ-6. A loadback is acknowledged (HOST-8); a writeback's
        # acknowledgement means the copy landed, and a failed copy is never acknowledged: the
        # runtime ends (TierTransferManager::CompleteWriteBack, transfer_manager.cpp; HOST-9).
        features = {Feature.IGNORES_UNKNOWN_EVENTS, Feature.LOADBACK_ACK,
                    Feature.FATAL_TRANSFER_FAILURE}
        if hasattr(ts.Scheduler, "drain_kv_events"):  # EVENT-1..4, EVENT-7
            features.add(Feature.KV_EVENTS)
        if config.host_pages:
            features.add(Feature.HOST_TIER)
        # Mid-flight publish is nothing to declare (PLAN-7 binds every scheduler): completed
        # prompt blocks are published at prefill completion (Scheduler::publishCompletedPages /
        # CacheCompletedBlocks, forward.cpp).
        self.features = frozenset(features)
        self._step = 0
        self.tokens: dict[str, list[int]] = {}  # prompt and sampled tokens, per request
        self.decoding: set[str] = set()  # requests with a decode row in the last plan

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except RuntimeError as e:  # "FSM transition invalid: ..."
            raise EngineRejected("invalid_transition", str(e)) from None

    def submit(self, specs: Sequence[RequestSpec]) -> None:
        out = []
        for s in specs:
            if s.namespace != 0:
                raise EngineRejected("unsupported", "the block-pool binding has no namespaces")
            spec = self.ts.RequestSpec()
            spec.request_id = s.rid
            spec.tokens = list(s.tokens)
            out.append(spec)
        self._call(self.sched.submit_requests, out)
        for s in specs:
            self.tokens[s.rid] = list(s.tokens)

    def _rows(self, fwd) -> list[ForwardRow]:
        rows: list[ForwardRow] = []
        n_ext = fwd.num_extends()
        # Each property of the binding copies its whole vector into Python: read each once.
        rids, tables = fwd.request_ids, fwd.block_tables.get(FULL, [])
        slots, lengths = fwd.request_pool_indices, fwd.input_lengths
        prefix, prefill = fwd.extend_prefix_lens, fwd.prefill_lengths
        input_ids = fwd.input_ids
        offset = 0
        for i, rid in enumerate(rids):
            # A batch's tables are padded to one width with -1: those are no pages.
            table = tuple(int(p) for p in tables[i] if p >= 0)
            slot = int(slots[i])
            n = int(lengths[i])
            if i < n_ext:
                start = int(prefix[i])
                toks = tuple(input_ids[offset : offset + n])
                offset += n
                samples = start + n == int(prefill[i])
                rows.append(ForwardRow(rid, "prefill", 0, start, toks, start, table, (), slot,
                                       samples))
                continue
            known = self.tokens.get(rid, [])
            # The binding gives no position for a decode row: the input is the last token.
            start = len(known) - 1
            token = known[start] if start >= 0 else -1
            rows.append(ForwardRow(rid, "decode", 0, start, (token,), 0, table, (), slot, True))
            self.decoding.add(rid)
        return rows

    def next_plan(self) -> Plan:
        self._step += 1
        plan = self._call(self.sched.next_execution_plan)
        self.decoding = set()
        rows = [row for fwd in plan.forward for row in self._rows(fwd)]
        loads: list[CopyOp] = []
        writes: list[CopyOp] = []
        for op in plan.cache:
            kind = type(op).__name__
            if kind not in ("LoadBackOp", "WriteBackOp"):
                continue
            srcs, dsts = op.src_pages, op.dst_pages
            for k, op_id in enumerate(op.op_ids):
                pairs = tuple(zip((int(p) for p in srcs[k]), (int(p) for p in dsts[k]),
                                  strict=True))
                # Write-through: a writeback copies published blocks, so it names no request.
                writes_or_loads = loads if kind == "LoadBackOp" else writes
                writes_or_loads.append(CopyOp(int(op_id), "loadback" if kind == "LoadBackOp"
                                              else "writeback", "", pairs))
        zero = tuple(int(p) for p in plan.pages_to_zero.get(FULL, ()))
        return Plan(self._step, tuple(rows), tuple(loads), tuple(writes), zero=zero)

    def advance(self, events: Sequence[RuntimeEvent]) -> None:
        ts = self.ts
        ev = ts.ExecutionEvent()
        finished = {e.rid for e in events if isinstance(e, (Finish, Abort))}
        for e in events:
            if isinstance(e, ExtendResult):
                ev.add_event(_event(ts.ForwardEvent.ExtendResult, request_id=e.rid,
                                    tokens=[e.token]))
                if e.rid in self.decoding and e.rid not in finished:
                    # As TokenSpeed's runtime: after a decode step, room for the next one.
                    ev.add_event(_event(ts.ForwardEvent.UpdateReserveNumTokens,
                                        request_id=e.rid,
                                        reserve_num_tokens_in_next_schedule_event=1))
            elif isinstance(e, Finish):
                ev.add_event(_event(ts.ForwardEvent.Finish, request_id=e.rid))
            elif isinstance(e, Abort):
                ev.add_event(_event(ts.ForwardEvent.Abort, request_id=e.rid))
            elif isinstance(e, WritebackDone):
                if not e.success:  # HOST-9: a failed copy is never acknowledged
                    continue
                ev.add_event(_event(ts.Cache.WriteBackDoneEvent, op_id=e.op_id))
            elif isinstance(e, LoadbackDone):
                ev.add_event(_event(ts.Cache.LoadBackDoneEvent, op_id=e.op_id))
        self._call(self.sched.advance, ev)
        for e in events:  # taken: only now are the sampled tokens part of each sequence
            if isinstance(e, ExtendResult):
                self.tokens.setdefault(e.rid, []).append(e.token)
            elif isinstance(e, (Finish, Abort)):
                self.tokens.pop(e.rid, None)

    def drain_events(self) -> list[KVEvent]:
        """The engine's KV events (one prefix event per block boundary, folded over its cache
        groups: Scheduler::handleCacheMutation, scheduler.cpp)."""
        out: list[KVEvent] = []
        for e in self.sched.drain_kv_events():
            if e.kind == "BlockStored":
                parent = e.parent_block_hash
                out.append(KVEvent(EventKind.STORED, tuple(int(h) for h in e.block_hashes), 0,
                                   None if parent is None else int(parent),
                                   tuple(int(t) for t in e.token_ids), int(e.block_size)))
            elif e.kind == "BlockRemoved":
                out.append(KVEvent(EventKind.REMOVED, tuple(int(h) for h in e.block_hashes)))
            else:
                out.append(KVEvent(EventKind.CLEARED, ()))
        return out

    block_hash = staticmethod(block_hash)

    def snapshot(self) -> None:
        return None
