"""The scheduler level of the public API: what a scheduler adapter implements and the types it
trades in, requests in, plans out, the runtime's events back (docs/api.md; the rules are spec
chapters requests, plans, finish, windows, mamba and l3_store)."""

from kvconf.conformance.engine.protocol import SchedulerEngine
from kvconf.conformance.scheduler.trace import SchedConfig
from kvconf.reference.kv_events import EventKind, KVEvent
from kvconf.reference.mamba import MambaView
from kvconf.reference.plan import (
    Abort,
    BackupDone,
    CopyOp,
    ExtendResult,
    Finish,
    ForwardRow,
    L3Op,
    LoadbackDone,
    Plan,
    PrefetchDone,
    RequestSpec,
    RuntimeEvent,
    WritebackDone,
)
from kvconf.reference.requests import State
from kvconf.reference.scheduler import RequestView, SchedulerSnapshot

__all__ = [
    "Abort",
    "BackupDone",
    "CopyOp",
    "EventKind",
    "ExtendResult",
    "Finish",
    "ForwardRow",
    "KVEvent",
    "L3Op",
    "LoadbackDone",
    "MambaView",
    "Plan",
    "PrefetchDone",
    "RequestSpec",
    "RequestView",
    "RuntimeEvent",
    "SchedConfig",
    "SchedulerEngine",
    "SchedulerSnapshot",
    "State",
    "WritebackDone",
]
