"""A conformance case: its name, the rules it checks, the features it needs, how it runs, what
it runs with (``RunContext``); and the FAIL result every kind of case builds the same way."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kvconf.conformance.engine.config import EngineConfig, Requires
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.oracles import MEMORY_ORACLES, STEP_ORACLES, Oracle
from kvconf.conformance.reporting.report import CaseResult, Status
from kvconf.conformance.reporting.source_paths import relative_paths
from kvconf.conformance.running import progress
from kvconf.conformance.running.profiles import Budget, Profile
from kvconf.conformance.running.units import Unit
from kvconf.conformance.runtime.memory import MemoryFactory, shadow_memory
from kvconf.conformance.scheduler.trace import SchedConfig, SchedTrace
from kvconf.conformance.trace import Trace, dump_trace, write_atomic
from kvconf.conformance.violation import Violation


@dataclass
class Case:
    name: str
    behaviours: tuple[str, ...]
    needs: frozenset[Feature]
    run: Callable[[RunContext], CaseResult]  # runs ``ctx.unit`` of the case
    fuzz: bool = False  # generated traces, not a hand-written scenario
    doc: str = ""  # a fuzz case's PASS message
    requires: Requires = field(default_factory=Requires)  # the least EngineConfig it needs
    # Allowances that make the case moot: an engine declaring one is NOT_SUPPORTED there (a
    # scenario that fails a copy and checks the recovery, for an engine whose failed copies end
    # its runtime, HOST-9).
    excluded_by: frozenset[Feature] = frozenset()


def engine_traceback(err: BaseException | None, limit: int = 60) -> str | None:
    """The formatted traceback of an exception (its last ``limit`` lines), or None; its source
    paths relative to where they are imported from (no machine's folders in a report)."""
    if err is None:
        return None
    lines = relative_paths("".join(traceback.format_exception(err))).splitlines()
    return "\n".join(lines[-limit:])


def fail_result(name, behaviours, v: Violation, t0: float, trace_path, **kw) -> CaseResult:
    """A FAIL result for violation ``v``, with the engine's traceback where an exception of
    the engine caused it."""
    cause = v.__cause__  # an engine's exception turned into a FAULT-2 violation keeps its trace
    if "findings" not in kw:  # a case that plays no trace: one finding, of no kind of step
        from kvconf.conformance.running.findings import finding

        kw["findings"] = [finding(v, None, trace_path)]
    return CaseResult(
        case=name,
        status=Status.FAIL,
        behaviours=list(v.behaviours or behaviours),
        message=v.message,
        oracle=v.oracle,
        step=v.step,
        duration_s=round(time.perf_counter() - t0, 4),
        trace=trace_path,
        traceback=None if isinstance(cause, Violation) else engine_traceback(cause),
        **kw,
    )


@dataclass
class RunContext:
    engine_name: str
    factory: Callable[[EngineConfig], object]
    config: EngineConfig
    seed: int
    profile: Profile
    budget: Budget
    out_dir: Path | None
    saved: list[Path] = field(default_factory=list)
    sched_factory: Callable[[SchedConfig], object] | None = None
    features: frozenset[Feature] = frozenset()
    exercised: set[tuple[str, str]] = field(default_factory=set)
    illegal: set[tuple[str, str]] = field(default_factory=set)
    pairs: set[tuple[str, str]] = field(default_factory=set)  # switches played together
    memory: MemoryFactory = shadow_memory  # the runtime's KV: a dict, or gpu_harness's tensors
    memory_only: bool = False  # judge by the memory oracles alone
    unit: Unit | None = None  # the slice of a fuzz case being run (None: the whole budget)
    database: object | None = None  # Hypothesis example database (conformance.examples_db)
    deferred: dict[str, str] | None = None  # a worker's saved traces, for the parent to write
    meter: progress.Meter | None = None  # the running fuzz unit's progress notes (display only)
    # Stop a fuzz case at its first finding (the kill matrix needs one finding, not all).
    first_only: bool = False
    hybrid_factory: Callable[..., object] | None = None  # the hybrid cache level's factory

    def stream(self) -> tuple[Budget, int]:
        """The budget and seed stream of the running unit."""
        if self.unit is None:
            return self.budget, 0
        return self.unit.budget, self.unit.index

    def db(self, case: str):
        """The example database seen through this case's keys (None: no database)."""
        if self.database is None:
            return None
        from kvconf.conformance.running.examples_db import keyed

        return keyed(self.database, case)

    @property
    def oracles(self) -> Sequence[type[Oracle]]:
        """The cache-level oracles of this run."""
        return MEMORY_ORACLES if self.memory_only else STEP_ORACLES

    def save_trace(self, case: str, trace: Trace | SchedTrace) -> str | None:
        """Save ``trace`` as ``traces/<case>.json`` (``case`` is a case's name, or a finding's
        trace name, ``kvconf.conformance.running.findings.trace_name``). The first save of a
        path in a run wins: units run in index order, so the lowest unit's trace is kept, as
        the workers' parent keeps it."""
        text = trace_text(trace)
        if self.deferred is not None:  # a worker: the parent writes the one the report keeps
            self.deferred.setdefault(case, text)
            return f"traces/{case}.json"
        if self.out_dir is None:
            return None
        path = self.out_dir / "traces" / f"{case}.json"
        if path in self.saved:
            return str(path.relative_to(self.out_dir))
        write_atomic(path, text)
        self.saved.append(path)
        return str(path.relative_to(self.out_dir))


def trace_text(trace: Trace | SchedTrace) -> str:
    return (dump_trace(trace) if isinstance(trace, Trace)
            else trace.model_dump_json(indent=2) + "\n")
