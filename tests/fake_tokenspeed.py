"""A stand-in for the ``tokenspeed_scheduler`` extension, built on the reference scheduler.

It offers the Python surface the engine facts describe (config attributes, ``RequestSpec``,
``Scheduler.submit_requests / next_execution_plan / advance`` (no KV events: the reference
hashes its blocks its own way, and the adapter checks TokenSpeed's hash), one
``FlatForwardOp`` with flat per-row arrays, ``LoadBackOp`` / ``WriteBackOp`` with op ids and page
lists, ``ExecutionEvent`` with ``ForwardEvent`` and ``Cache`` events, ``RuntimeError`` for an
invalid transition, device page 0 reserved) so that the adapter's conversions run in tests. It
proves the adapter consistent with that surface, not with the real engine.
"""

from __future__ import annotations

from types import SimpleNamespace

from kvconf.reference import plan as rp
from kvconf.reference.scheduler import Scheduler as RefScheduler
from kvconf.reference.scheduler import SchedulerConfig as RefConfig
from kvconf.reference.scheduler import SchedulerError

__version__ = "fake-0"


class SchedulerConfig:
    Role = SimpleNamespace(P="P", D="D", Fused="Fused")

    def __init__(self) -> None:
        self.page_size = 1
        self.max_scheduled_tokens = 8192
        self.max_batch_size = 256
        self.decode_input_tokens = 1
        self.role = "Fused"
        self.num_device_pages = 1024
        self.num_host_pages = 0
        self.disable_l2_cache = True
        self.enable_kv_cache_events = False
        self.enable_mixed_prefill_decode = False


class RequestSpec:
    def __init__(self) -> None:
        self.request_id = ""
        self.tokens: list[int] = []


class FlatForwardOp:
    def __init__(self, rows: tuple[rp.ForwardRow, ...]) -> None:
        pre = [r for r in rows if r.kind == "prefill"]
        dec = [r for r in rows if r.kind == "decode"]
        ordered = pre + dec
        self._n = len(pre)
        self.request_ids = [r.rid for r in ordered]
        self.request_pool_indices = [r.slot for r in ordered]
        self.input_lengths = [len(r.input_tokens) for r in ordered]
        self.occupied_pages = [[p + 1 for p in r.page_table] for r in ordered]
        self.new_occupied_pages = [[p + 1 for p in r.new_pages] for r in ordered]
        self.extend_prefix_lens = [r.start for r in pre]
        self.prefill_lengths = [r.start + len(r.input_tokens) if r.samples
                                else 1 << 30 for r in pre]
        self.input_ids = [t for r in pre for t in r.input_tokens]
        # As the real binding: -1 on an ordinary decode row (filled only at retract recovery).
        self.decode_input_ids = [-1 for _ in dec]
        self.hist_token_lens = [-1 for _ in dec]

    def num_extends(self) -> int:
        return self._n


class LoadBackOp:
    def __init__(self, ops: list[rp.CopyOp]) -> None:
        self.op_ids = [o.op_id for o in ops]
        self.src_pages = [[s for s, _d in o.pairs] for o in ops]  # host pages
        self.dst_pages = [[d + 1 for _s, d in o.pairs] for o in ops]


class WriteBackOp:
    """As the real radix-era binding: no request ids."""

    def __init__(self, ops: list[rp.CopyOp]) -> None:
        self.op_ids = [o.op_id for o in ops]
        self.src_pages = [[s + 1 for s, _d in o.pairs] for o in ops]
        self.dst_pages = [[d for _s, d in o.pairs] for o in ops]
        self.is_retract = [o.retract for o in ops]


class ExecutionPlan:
    def __init__(self, plan: rp.Plan) -> None:
        self.forward = [FlatForwardOp(plan.rows)]  # a list, as the real binding's
        self.cache = []
        if plan.loadbacks:
            self.cache.append(LoadBackOp(list(plan.loadbacks)))
        if plan.writebacks:
            self.cache.append(WriteBackOp(list(plan.writebacks)))


class _Event:
    """The real binding's events have only no-argument constructors."""

    def __init__(self) -> None:
        self.request_id = ""


class _ExtendResult(_Event):
    tokens: list[int] = []


class _Finish(_Event):
    pass


class _Abort(_Event):
    pass


class _UpdateReserveNumTokens(_Event):
    reserve_num_tokens_in_next_schedule_event = 0


class ForwardEvent:
    ExtendResult = _ExtendResult
    Finish = _Finish
    Abort = _Abort
    UpdateReserveNumTokens = _UpdateReserveNumTokens


class _WriteBackDone:
    def __init__(self) -> None:
        self.op_id = 0
        self.success = True


class Cache:
    WriteBackDoneEvent = _WriteBackDone


def forward_runtime_event(e):
    """A request's own event (both eras' binding) as the reference's, or None."""
    if isinstance(e, _ExtendResult):
        return rp.ExtendResult(e.request_id, e.tokens[0])
    if isinstance(e, _Finish):
        return rp.Finish(e.request_id)
    if isinstance(e, _Abort):
        return rp.Abort(e.request_id)
    return None  # UpdateReserveNumTokens: the reference keeps no reserve


def _runtime_event(e):
    if isinstance(e, _WriteBackDone):
        return rp.WritebackDone(e.op_id, e.success)
    return forward_runtime_event(e)


class ExecutionEvent:
    def __init__(self) -> None:
        self.events: list = []

    def add_event(self, e) -> None:
        self.events.append(e)


class Scheduler:
    def __init__(self, c: SchedulerConfig) -> None:
        self._s = RefScheduler(RefConfig(
            page_size=c.page_size, device_pages=c.num_device_pages - 1,
            host_pages=0 if c.disable_l2_cache else c.num_host_pages,
            max_tokens=c.max_scheduled_tokens, max_batch=c.max_batch_size,
            mixed=c.enable_mixed_prefill_decode,
        ))

    def _guard(self, fn, *args):
        try:
            return fn(*args)
        except SchedulerError as e:
            raise RuntimeError(f"FSM transition invalid: {e}") from None

    def submit_requests(self, specs: list[RequestSpec]) -> None:
        self._guard(self._s.submit, [rp.RequestSpec(s.request_id, tuple(s.tokens))
                                     for s in specs])

    def next_execution_plan(self) -> ExecutionPlan:
        return ExecutionPlan(self._guard(self._s.next_plan))

    def advance(self, ev: ExecutionEvent) -> None:
        self._guard(self._s.advance, [x for x in map(_runtime_event, ev.events) if x])
