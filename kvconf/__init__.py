"""kvconf: a formally specified reference model of an LLM-serving scheduler's KV cache, and a
conformance kit that holds engines to it.

This package is the public API (docs/api.md): the engine protocols of each level and their
data types (also grouped in ``kvconf.cache``, ``kvconf.scheduler`` and ``kvconf.hybrid``),
the features and allowances an engine declares, the errors an adapter raises, and ``run``,
the suite from Python. Everything under ``kvconf.spec``, ``kvconf.reference``,
``kvconf.conformance`` and ``kvconf.gpu_harness`` is the kit's own and may change without
notice.
"""

from kvconf.cache import (
    CacheEngine,
    CacheSnapshot,
    EngineConfig,
    EventKind,
    Inserted,
    KVEvent,
    Match,
    Tier,
    block_hash,
)
from kvconf.conformance import __version__
from kvconf.conformance.engine.features import ALLOWANCES, Feature
from kvconf.conformance.errors import EngineRejected, EngineUnavailable, KitError
from kvconf.conformance.reporting.report import CaseResult, Report, Status, load_report
from kvconf.conformance.running.suite import run
from kvconf.hybrid import HybridConfig, HybridEngine
from kvconf.scheduler import Plan, RequestSpec, SchedConfig, SchedulerEngine

__all__ = [
    "ALLOWANCES",
    "CacheEngine",
    "CacheSnapshot",
    "CaseResult",
    "EngineConfig",
    "EngineRejected",
    "EngineUnavailable",
    "EventKind",
    "Feature",
    "HybridConfig",
    "HybridEngine",
    "Inserted",
    "KVEvent",
    "KitError",
    "Match",
    "Plan",
    "Report",
    "RequestSpec",
    "SchedConfig",
    "SchedulerEngine",
    "Status",
    "Tier",
    "__version__",
    "block_hash",
    "load_report",
    "run",
]
