"""A stand-in for the block-pool era of ``tokenspeed_scheduler`` (0.1.8), built on the reference.

It offers that binding's Python surface: ``prefix_granularity`` and ``cache_groups``
(``CacheGroupConfig``) instead of ``page_size``, ``Forward.Batch`` rows with one block table per
group, ``pages_to_zero``, ``WriteBackOp`` / ``LoadBackOp`` with ``group_ids``, a
``WriteBackDoneEvent`` with only ``op_id`` and a ``LoadBackDoneEvent``; page 0 of each pool is
the null page. A full-attention group is served, and beside it a sliding-window group: the
window's table names the full table's pages, with the null page for every page wholly behind
the row's window (the holes the engine leaves). It proves the block-pool adapter consistent with
that surface, not with the real engine. It offers no KV events
(``drain_kv_events``): those are judged on the real extension only.
"""

from __future__ import annotations

from types import SimpleNamespace

from fake_tokenspeed import (
    ExecutionEvent,
    ForwardEvent,
    RequestSpec,
    forward_runtime_event,
)

from kvconf.reference import plan as rp
from kvconf.reference.scheduler import Scheduler as RefScheduler
from kvconf.reference.scheduler import SchedulerConfig as RefConfig
from kvconf.reference.scheduler import SchedulerError

__all__ = ["ExecutionEvent", "ForwardEvent", "RequestSpec"]
__version__ = "fake-blockpool-0"

CacheRetention = SimpleNamespace(FullHistory="FullHistory", SlidingWindow="SlidingWindow")
# No State family: the reference's Mamba rows (a checkpoint slot inside a row) have no block-table
# form, so the stand-in offers no state groups and the adapter reports Mamba as not supported.
CacheGroupFamily = SimpleNamespace(History="History")


class CacheGroupConfig:
    def __init__(self, group_id: str = "", rows_per_page: int = 0, entry_stride_tokens: int = 0,
                 total_pages: int = 0, retention: str = "FullHistory",
                 sliding_window_tokens: int | None = None, family: str = "History",
                 cache_blocks_per_lcm_block: int = 1) -> None:
        self.group_id, self.rows_per_page = group_id, rows_per_page
        self.entry_stride_tokens, self.total_pages = entry_stride_tokens, total_pages
        self.retention, self.sliding_window_tokens = retention, sliding_window_tokens
        self.family, self.cache_blocks_per_lcm_block = family, cache_blocks_per_lcm_block


class SchedulerConfig:
    Role = SimpleNamespace(P="P", D="D", Fused="Fused")

    def __init__(self) -> None:
        self.prefix_granularity = 0
        self.cache_groups: list[CacheGroupConfig] = []
        self.max_scheduled_tokens = 0
        self.max_batch_size = 0
        self.decode_input_tokens = 1
        self.role = "Fused"
        self.num_device_pages = 0
        self.num_host_pages = 0
        self.disable_l2_cache = False
        self.enable_kv_cache_events = False
        self.enable_mixed_prefill_decode = False


def _window_table(r: rp.ForwardRow, page_size: int, window: int) -> list[int]:
    """The row's full table with a hole for every page wholly behind its window."""
    first = max(0, r.start - window + 1)
    return [0 if (k + 1) * page_size <= first else p + 1 for k, p in enumerate(r.page_table)]


class Batch:
    def __init__(self, rows: tuple[rp.ForwardRow, ...], group: str, window: str = "",
                 page_size: int = 0, size: int = 0) -> None:
        pre = [r for r in rows if r.kind == "prefill"]
        dec = [r for r in rows if r.kind == "decode"]
        ordered = pre + dec
        self._n = len(pre)
        self.request_ids = [r.rid for r in ordered]
        self.request_pool_indices = [r.slot for r in ordered]
        self.input_lengths = [len(r.input_tokens) for r in ordered]
        self.block_tables = {group: [[p + 1 for p in r.page_table] for r in ordered]} if ordered \
            else {}
        if window and ordered:
            self.block_tables[window] = [_window_table(r, page_size, size) for r in ordered]
        self.extend_prefix_lens = [r.start for r in pre]
        self.prefill_lengths = [r.start + len(r.input_tokens) if r.samples
                                else 1 << 30 for r in pre]
        self.input_ids = [t for r in pre for t in r.input_tokens]
        self.decode_input_ids = [-1 for _ in dec]

    def num_extends(self) -> int:
        return self._n


class _CopyOp:
    """Page ids of both pools start at 1 (page 0 is the null page of each)."""

    def __init__(self, ops: list[rp.CopyOp]) -> None:
        self.op_ids = [o.op_id for o in ops]
        self.group_ids = [[0] * len(o.pairs) for o in ops]
        self.src_pages = [[s + 1 for s, _d in o.pairs] for o in ops]
        self.dst_pages = [[d + 1 for _s, d in o.pairs] for o in ops]


class LoadBackOp(_CopyOp):
    pass


class WriteBackOp(_CopyOp):
    pass


class _WriteBackDone:
    def __init__(self) -> None:
        self.op_id = 0


class _LoadBackDone:
    def __init__(self) -> None:
        self.op_id = 0


class Cache:
    WriteBackDoneEvent = _WriteBackDone
    LoadBackDoneEvent = _LoadBackDone
    LoadBackOp = LoadBackOp
    WriteBackOp = WriteBackOp


class Forward:
    Batch = Batch


class ExecutionPlan:
    def __init__(self, plan: rp.Plan, group: str, window: str = "", page_size: int = 0,
                 size: int = 0) -> None:
        self.forward = [Batch(plan.rows, group, window, page_size, size)]
        self.cache = []
        if plan.loadbacks:
            self.cache.append(LoadBackOp(list(plan.loadbacks)))
        if plan.writebacks:
            self.cache.append(WriteBackOp(list(plan.writebacks)))
        landed = {d for o in plan.loadbacks for _s, d in o.pairs}
        fresh = [p + 1 for r in plan.rows for p in r.new_pages if p not in landed]
        self.pages_to_zero = {group: fresh}


def _runtime_event(e):
    if isinstance(e, _WriteBackDone):
        return rp.WritebackDone(e.op_id, True)
    return forward_runtime_event(e)  # LoadBackDone: the reference needs none


class Scheduler:
    def __init__(self, c: SchedulerConfig) -> None:
        group, *others = c.cache_groups  # full attention, then the window's group if any
        self.group = group.group_id
        windows = [g for g in others if g.retention == CacheRetention.SlidingWindow]
        if len(windows) != len(others) or len(windows) > 1:
            raise ValueError("the stand-in serves a full group and one sliding-window group")
        self.window = windows[0].group_id if windows else ""
        self.size = windows[0].sliding_window_tokens if windows else 0
        self.page_size = c.prefix_granularity
        host = 0 if c.disable_l2_cache else max(c.num_host_pages - 1, 0)
        self._s = RefScheduler(RefConfig(
            page_size=c.prefix_granularity, device_pages=c.num_device_pages - 1,
            host_pages=host, max_tokens=c.max_scheduled_tokens, max_batch=c.max_batch_size,
            mixed=c.enable_mixed_prefill_decode, sliding_window=self.size or 0,
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
        return ExecutionPlan(self._guard(self._s.next_plan), self.group, self.window,
                             self.page_size, self.size)

    def advance(self, ev: ExecutionEvent) -> None:
        self._guard(self._s.advance, [x for x in map(_runtime_event, ev.events) if x])
