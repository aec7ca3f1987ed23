"""TokenSpeed's scheduler (the C++ extension ``tokenspeed_scheduler``) at the scheduler level.

Written to the extension's documented Python surface: ``SchedulerConfig``, ``RequestSpec``,
``Scheduler.submit_requests / next_execution_plan / advance / drain_kv_events``, ``ExecutionPlan``
with one ``FlatForwardOp`` and cache ops, ``ExecutionEvent`` with forward and cache events. The
extension is not on PyPI; when it cannot be imported every scheduler case is NOT_SUPPORTED with
that reason. It offers no snapshot, so only the black-box oracles (plans, content, reuse,
rejections, liveness) judge it; it has no namespaces outside its LoRA branch, so workloads in
another namespace are not sent to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import import_module
from typing import Any

from conformance.errors import EngineRejected, EngineUnavailable
from conformance.features import Feature
from conformance.sched_trace import SchedConfig
from reference.plan import (
    Abort,
    CopyOp,
    ExtendResult,
    Finish,
    ForwardRow,
    Plan,
    RequestSpec,
    RuntimeEvent,
    WritebackDone,
)


def _module() -> Any:
    try:
        return import_module("tokenspeed_scheduler")
    except ImportError as e:
        raise EngineUnavailable(
            f"tokenspeed_scheduler cannot be imported ({e}); build it from the tokenspeed "
            "sources and install it into this environment"
        ) from None


class TokenSpeedAdapter:
    name = "tokenspeed"
    features = frozenset({Feature.HOST_TIER, Feature.KV_EVENTS, Feature.MID_FLIGHT_PUBLISH})

    def __init__(self, config: SchedConfig) -> None:
        ts = _module()
        self.ts = ts
        self.version = str(getattr(ts, "__version__", "unknown"))
        self.page_size = config.page_size
        c = ts.SchedulerConfig()
        c.page_size = config.page_size
        c.max_scheduled_tokens = config.max_tokens
        c.max_batch_size = config.max_batch
        c.decode_input_tokens = 1
        c.role = ts.SchedulerConfig.Role.Fused
        c.num_device_pages = config.device_pages + 1  # page 0 is reserved on device
        self.page_ids = (config.device_pages + 1, config.host_pages)  # device ids start at 1
        c.num_host_pages = config.host_pages
        c.disable_l2_cache = config.host_pages == 0
        c.enable_kv_cache_events = True
        c.enable_mixed_prefill_decode = config.mixed
        if not config.publish_mid_flight:
            self.features = self.features - {Feature.MID_FLIGHT_PUBLISH}
        if hasattr(c, "has_sliding_window"):  # only the mid-flight publish branch has these
            c.has_sliding_window = config.sliding_window > 0
            c.sliding_window_size = config.sliding_window
            self.features = self.features | {Feature.SLIDING_WINDOW}
        if hasattr(c, "max_loras"):  # only the LoRA branch caps adapters per batch (PLAN-9)
            c.max_loras = config.max_adapters
            self.features = self.features | {Feature.ADAPTER_CAP}
        self.sched = ts.Scheduler(c)
        self._step = 0

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except RuntimeError as e:  # "FSM transition invalid: ..."
            raise EngineRejected("invalid_transition", str(e)) from None

    def submit(self, specs: Sequence[RequestSpec]) -> None:
        out = []
        for s in specs:
            if s.namespace != 0:
                raise EngineRejected("unsupported", "namespaces need the LoRA branch")
            spec = self.ts.RequestSpec()
            spec.request_id = s.rid
            spec.tokens = list(s.tokens)
            out.append(spec)
        self._call(self.sched.submit_requests, out)

    def next_plan(self) -> Plan:
        self._step += 1
        plan = self._call(self.sched.next_execution_plan)
        fwd = plan.forward
        rows: list[ForwardRow] = []
        n_ext = fwd.num_extends()
        offset = 0
        for i, rid in enumerate(fwd.request_ids):
            table = tuple(fwd.occupied_pages[i])
            new = tuple(fwd.new_occupied_pages[i])
            slot = int(fwd.request_pool_indices[i])
            n = int(fwd.input_lengths[i])
            if i < n_ext:
                start = int(fwd.extend_prefix_lens[i])
                toks = tuple(int(t) for t in fwd.input_ids[offset : offset + n])
                offset += n
                samples = start + n == int(fwd.prefill_lengths[i])
                rows.append(ForwardRow(rid, "prefill", 0, start, toks, start, table, new, slot,
                                       samples))
            else:
                j = i - n_ext
                start = int(fwd.hist_token_lens[j])
                rows.append(ForwardRow(rid, "decode", 0, start, (int(fwd.decode_input_ids[j]),),
                                       0, table, new, slot, True))
        loads: list[CopyOp] = []
        writes: list[CopyOp] = []
        for op in plan.cache:
            kind = type(op).__name__
            if kind not in ("LoadBackOp", "WriteBackOp"):
                continue
            retract = list(getattr(op, "is_retract", [False] * len(op.op_ids)))
            for k, op_id in enumerate(op.op_ids):
                pairs = tuple(zip(op.src_pages[k], op.dst_pages[k], strict=True))
                rid = str(op.request_ids[k]) if hasattr(op, "request_ids") else ""
                if kind == "LoadBackOp":
                    loads.append(CopyOp(int(op_id), "loadback", rid, pairs))
                else:
                    writes.append(CopyOp(int(op_id), "writeback", rid, pairs,
                                         bool(retract[k])))
        return Plan(self._step, tuple(rows), tuple(loads), tuple(writes))

    def advance(self, events: Sequence[RuntimeEvent]) -> None:
        ts = self.ts
        ev = ts.ExecutionEvent()
        for e in events:
            if isinstance(e, ExtendResult):
                ev.add_event(ts.ForwardEvent.ExtendResult(e.rid, [e.token]))
            elif isinstance(e, Finish):
                ev.add_event(ts.ForwardEvent.Finish(e.rid))
            elif isinstance(e, Abort):
                ev.add_event(ts.ForwardEvent.Abort(e.rid))
            elif isinstance(e, WritebackDone):
                ev.add_event(ts.Cache.WriteBackDoneEvent(e.op_id, e.success))
        self._call(self.sched.advance, ev)

    def drain_events(self):
        return list(self.sched.drain_kv_events())

    def snapshot(self) -> None:
        return None
