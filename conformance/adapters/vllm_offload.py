"""vLLM's v1 ``Scheduler`` with its CPU ``OffloadingConnector`` as the host tier.

The scheduler is built as ``vllm-scheduler`` builds it, with one more piece of its configuration:
``KVTransferConfig(kv_connector="OffloadingConnector", kv_role="kv_both",
kv_connector_extra_config={"cpu_bytes_to_use": ...})``, sized so that the connector's
``CPUOffloadingManager`` holds exactly ``host_pages`` chunks of one block each (its chunk ids are
the host page ids). Only the connector's scheduler side runs (``OffloadingConnectorScheduler``):
its worker side, which performs the copies, is the kit's runtime. What the adapter reads, every
plan, is vLLM's own ``OffloadingConnectorMetadata`` (``scheduler_output.kv_connector_metadata``):

- a store job (``store_jobs``: GPU blocks to CPU chunks) is a writeback. vLLM stores blocks as
  they fill, a running request's included (write-through), so a writeback names no request;
- a load job (``load_jobs``: CPU chunks to GPU blocks) is a loadback of its request. The request
  waits for it in ``WAITING_FOR_REMOTE_KVS`` and gets its first row in a later plan, once the
  load is reported (HOST-13);
- a job named in ``jobs_to_flush`` (a finished or preempted request's store whose source blocks
  the same plan hands out again) is a copy the runtime must complete before the forward: the
  plan's ``flush`` (HOST-14).

Acknowledgements go back the way vLLM's worker reports them, in the next ``update_from_output``:
``KVConnectorOutput(finished_recving={loaded request ids}, kv_connector_worker_meta=
OffloadingWorkerMetadata(completed_jobs={job: 1}))``. vLLM's worker has no failed transfer
(``OffloadingConnectorWorker.get_finished``: "we currently do not support job failures",
``assert transfer_result.success``), so a failed copy is fatal (``fatal_transfer_failure``,
HOST-9). Every step's output reaches ``update_from_output``, rows or not, as vLLM's engine core
does, so an acknowledgement never waits for a forward. The connector's own KV events (medium
``CPU``) are the host tier's and are left out: the kit's events are the device tier's.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from importlib import import_module
from typing import Any

from kvconf.conformance.adapters.peer_events import to_kit_events
from kvconf.conformance.adapters.vllm_scheduler import VLLMSchedulerAdapter
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.errors import EngineRejected
from kvconf.conformance.oracles.scheduler import table_for
from kvconf.conformance.scheduler.trace import SchedConfig
from kvconf.reference.kv_events import KVEvent
from kvconf.reference.plan import (
    Abort,
    CopyOp,
    ExtendResult,
    Finish,
    LoadbackDone,
    Plan,
    RuntimeEvent,
    WritebackDone,
)

CONNECTOR = "OffloadingConnector"


@cache
def offload_modules() -> Any:
    """The connector's modules the adapter reads (the CPU spec's chunk alignment, the worker's
    report of completed jobs); imported once vLLM's scheduler modules are."""
    from types import SimpleNamespace

    return SimpleNamespace(
        spec=import_module("vllm.v1.kv_offload.cpu.spec"),
        common=import_module("vllm.distributed.kv_transfer.kv_connector.v1.offloading.common"))


class VLLMOffloadAdapter(VLLMSchedulerAdapter):
    name = "vllm-offload"
    features = VLLMSchedulerAdapter.features | frozenset({
        Feature.HOST_TIER, Feature.LOADBACK_ACK, Feature.FATAL_TRANSFER_FAILURE,
        Feature.DEFERRED_LOADBACK, Feature.FLUSHED_WRITEBACK,
    })
    lacks = {
        **{k: why for k, why in VLLMSchedulerAdapter.lacks.items()
           if k is not Feature.HOST_TIER},
        Feature.CACHE: "the connector is a scheduler-level piece: its CPU tier is a store of "
                       "chunk keys the scheduler drives, with no cache-level writeback or "
                       "loadback of a node; vLLM's KVCacheManager is judged at the cache level "
                       "as the engines vllm and vllm-scheduler",
    }

    def __init__(self, config: SchedConfig) -> None:
        super().__init__(config)
        conn = self.sched.connector
        self.offload = conn.connector_scheduler if conn is not None else None
        if self.offload is not None:
            chunks = self.offload.manager._num_chunks
            if chunks != config.host_pages:
                raise EngineRejected("bad_config", f"the CPU tier holds {chunks} chunks, the "
                                     f"kit asked for {config.host_pages}")
        # Host page ids are the CPU tier's chunk ids; a Mamba group's chunks come from the
        # same pool, so host state ids are the same ids.
        self.page_ids = (self.page_ids[0], config.host_pages)
        self.state_ids = self.page_ids
        self.held: dict[int, tuple[str, str]] = {}  # job id -> (kind, request) in flight
        self.completed: dict[int, int] = {}  # acknowledged jobs, reported at the next update
        self.recving: set[str] = set()  # requests whose load landed, reported likewise

    def kv_transfer(self, config: SchedConfig) -> Any:
        """The offloading connector over a CPU tier of ``host_pages`` one-block chunks (none
        without host pages: ``cpu_bytes_to_use`` must be positive). The chunk's size is the
        CPU spec's: one block's KV bytes, rounded up to its alignment."""
        if not config.host_pages:
            return None
        v = self.v
        align = offload_modules().spec.CPUOffloadingSpec.BLOCK_SIZE_ALIGNMENT
        # one layer of K and V, one head of 8 float16 values per token (the adapter's spec)
        block = 2 * config.page_size * 8 * 2
        chunk = -(-block // align) * align
        return v.config.KVTransferConfig(
            kv_connector=CONNECTOR, kv_role="kv_both",
            kv_connector_extra_config={"cpu_bytes_to_use": chunk * config.host_pages})

    # ----------------------------------------------------------------- plans
    def _report_transfers(self, mro) -> None:
        """The connector's acknowledgements (``KVConnectorOutput``) with the step's output, as
        vLLM's worker reports them: finished loads and completed job ids."""
        if self.completed or self.recving:
            mro.kv_connector_output = self.v.outputs.KVConnectorOutput(
                finished_recving=set(self.recving) or None,
                kv_connector_worker_meta=offload_modules().common.OffloadingWorkerMetadata(
                    completed_jobs=dict(self.completed)))
            self.completed, self.recving = {}, set()

    def next_plan(self) -> Plan:
        plan = super().next_plan()
        out = self._last_output
        meta = getattr(out, "kv_connector_metadata", None)
        loads: list[CopyOp] = []
        stores: list[CopyOp] = []
        flush: tuple[int, ...] = ()
        if meta is not None:
            for job, t in sorted(meta.load_jobs.items()):
                kv, states = self._pairs(t.dst_spec, t.src_spec, to_gpu=True)
                loads.append(CopyOp(job, "loadback", t.req_id, kv, mamba=states))
                self.held[job] = ("loadback", t.req_id)
            for job, t in sorted(meta.store_jobs.items()):
                kv, states = self._pairs(t.src_spec, t.dst_spec, to_gpu=False)
                stores.append(CopyOp(job, "writeback", "", kv, mamba=states))
                self.held[job] = ("writeback", t.req_id)
            flush = tuple(sorted(int(j) for j in meta.jobs_to_flush or ()))
        # Every step's output reaches update_from_output, rows or none (vLLM's engine core
        # calls it after every schedule), so the connector hears of its acknowledgements.
        self.pending = out
        return Plan(plan.step, plan.rows, tuple(loads), tuple(stores), zero=plan.zero,
                    flush=flush)

    def _pairs(self, gpu: Any, cpu: Any, to_gpu: bool) -> tuple[tuple, tuple]:
        """A job's (source, destination) pairs, split into KV pages and Mamba states: the GPU
        spec lists its blocks group by group (``group_sizes``, in the connector's group order,
        which is the KV cache config's) and the CPU spec one chunk per block in the same
        order."""
        blocks = [int(b) for b in gpu.block_ids]
        chunks = [int(c) for c in cpu.block_ids]
        sizes = list(gpu.group_sizes) if gpu.group_sizes is not None else [len(blocks)]
        groups = [g.group_idx for g in self.offload.config.kv_group_configs]
        kv: list[tuple[int, int]] = []
        states: list[tuple[int, int]] = []
        at = 0
        for group, n in zip(groups, sizes, strict=True):
            for b, c in zip(blocks[at:at + n], chunks[at:at + n], strict=True):
                (states if group == self.state_group else kv).append((c, b) if to_gpu
                                                                      else (b, c))
            at += n
        return tuple(kv), tuple(states)

    def _schedule(self) -> Any:
        self._last_output = out = self.sched.schedule()
        return out

    def advance(self, events: Sequence[RuntimeEvent]) -> None:
        acks: list[RuntimeEvent] = []
        rest: list[RuntimeEvent] = []
        for e in events:  # checked whole before anything is applied (REQ-2)
            if isinstance(e, (WritebackDone, LoadbackDone)):
                kind = "writeback" if isinstance(e, WritebackDone) else "loadback"
                held = self.held.get(e.op_id)
                if held is None or held[0] != kind:
                    raise EngineRejected("unknown_op", f"{kind} {e.op_id} is not in flight")
                if isinstance(e, WritebackDone) and not e.success:
                    raise EngineRejected("no_failure", "vLLM's worker reports no failed "
                                         "transfer (fatal_transfer_failure, HOST-9)")
                acks.append(e)
            elif isinstance(e, (ExtendResult, Finish, Abort)):
                rest.append(e)
            else:
                raise EngineRejected("unknown_op", f"{type(e).__name__}: not a transfer of "
                                     "the offloading connector")
        if len({getattr(e, "op_id", None) for e in acks}) != len(acks):
            raise EngineRejected("duplicate", "one copy acknowledged twice")
        # The worker reports completions in the step's output beside its sampled tokens, so
        # they reach update_from_output before any Finish of this advance is applied.
        for e in acks:
            kind, rid = self.held.pop(e.op_id)
            self.completed[e.op_id] = 1
            if kind == "loadback":
                self.recving.add(rid)
        super().advance(rest)

    def drain_events(self) -> list[KVEvent]:
        """The device tier's KV events: the connector's own (medium ``CPU``) are left out."""
        raw, self.published = self.published, []
        raw += self.sched.kv_cache_manager.take_events()
        raw = [e for e in raw if getattr(e, "group_idx", 0) in (0, None)
               and getattr(e, "medium", None) in (None, "GPU")]
        return to_kit_events(raw, self.v.events, self._hashes._event_namespace)


VLLMOffloadAdapter.level = "scheduler"  # called with a SchedConfig (conformance.adapters)

TABLE = table_for(VLLMOffloadAdapter.features)
