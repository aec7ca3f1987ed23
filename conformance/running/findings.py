"""Findings: the distinct defects one fuzz case found, each named by a signature.

A fuzz case does not stop at its first failure: one known defect that every workload reaches
first would otherwise hide every other defect the case could find. After a failing example the
case shrinks it (``kvconf.conformance.running.shrink``), keeps it as a finding, and goes on
searching for the rest of its budget; a later failure with a signature already found is a
repeat (counted, not shrunk again), a new signature is a new finding with its own shrunk trace.

The signature (spec chapter faults, "Findings and their signatures") is

    <oracle>/<RULE-1+RULE-2>/<kind of step>[/<ErrorType>@<function>]

the oracle and the sorted rule IDs of the violation, the kind of step it was raised at (a
cache-level operation such as ``ack``, ``rest`` at the end of a trace, ``workload`` at the
scheduler level, whose steps are all of one kind; ``-`` for a case that plays no trace), and,
where an exception of the engine caused it, the exception's type and the innermost function it
was raised in (no file or line, so a revision that only moves code keeps its signatures). It
depends on the violation and the trace alone, so the same seed gives the same findings.

A crash (the engine's process ended inside a call, FAULT-3) is a finding too, made by the worker
pool rather than inside the dying process (``crash_finding``): its signature is

    worker/FAULT-3/<kind of step>/<ending>

the process oracle, the kind of step the process died in (as above; ``-`` when it died before
any step) and how it ended: the signal's name (``SIGSEGV``), ``exit-N`` for an exit with code
N, ``sys.exit-N`` for the engine's ``sys.exit(N)``; e.g. ``worker/FAULT-3/workload/SIGSEGV``.
"""

from __future__ import annotations

import hashlib
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kvconf.conformance.oracles.process import ProcessOracle
from kvconf.conformance.reporting.report import CaseResult, Finding
from kvconf.conformance.scheduler.trace import SchedTrace
from kvconf.conformance.trace import Trace
from kvconf.conformance.violation import Violation


def step_kind(v: Violation, trace: Trace | SchedTrace | None) -> str:
    """The kind of step ``v`` was raised at: the cache-level operation at ``v.step``, ``rest``
    past the trace's last step (the drain, or a comparison of two runs' lengths), ``workload``
    at the scheduler level, ``-`` for a case that plays no trace."""
    if isinstance(trace, SchedTrace):
        return "workload"
    if trace is None:
        return "-"  # a case that plays no trace
    if v.step is None or not 0 <= v.step < len(trace.steps):
        return "rest"
    return str(trace.steps[v.step].op)


def engine_error(v: Violation) -> str | None:
    """``<ErrorType>@<function>`` of the engine's exception behind ``v`` (a FAULT-2), or None.
    The innermost frame's function, not its file or line: stable across unrelated edits."""
    cause = v.__cause__
    if cause is None or isinstance(cause, Violation):
        return None
    frames = traceback.extract_tb(cause.__traceback__)
    where = f"@{frames[-1].name}" if frames else ""
    return f"{type(cause).__name__}{where}"


def signature(v: Violation, trace: Trace | SchedTrace | None) -> str:
    """The finding signature of ``v`` raised while playing ``trace`` (module docstring)."""
    parts = [v.oracle or "-", "+".join(sorted(v.behaviours)) or "-", step_kind(v, trace)]
    error = engine_error(v)
    if error:
        parts.append(error)
    return "/".join(parts)


def trace_name(case: str, sig: str) -> str:
    """The file of a finding's shrunk trace, beside ``traces/<case>.json`` (the case's first
    finding): ``<case>~<8 hex digits of the signature's SHA-1>``. Named by the signature, not
    by the order of finding, so every unit and worker names a finding's trace the same."""
    return f"{case}~{hashlib.sha1(sig.encode()).hexdigest()[:8]}"


def merge(groups: Iterable[Iterable[Finding]]) -> tuple[list[Finding], int]:
    """Findings of several units (in unit order), one per signature, the first kept; and how
    many were dropped as repeats."""
    out: list[Finding] = []
    seen: set[str] = set()
    dropped = 0
    for group in groups:
        for f in group:
            if f.signature in seen:
                dropped += 1
                continue
            seen.add(f.signature)
            out.append(f)
    return out, dropped


@dataclass
class Collector:
    """What one fuzz unit found: each new signature shrunk and saved, repeats counted.

    ``shrink`` reduces a failing trace to (trace, violation) keeping the signature; ``save``
    writes a trace under a name (without ``.json``) and returns its path for the report."""

    case: str
    shrink: Callable[[object, Violation], tuple[object, Violation]]
    save: Callable[[str, object], str | None]
    steps_of: Callable[[object], int]
    example: Callable[[], int | None] = lambda: None  # how many examples the unit has played
    unit: int | None = None
    findings: list[Finding] = field(default_factory=list)
    repeats: int = 0
    first: tuple[object, Violation, int] | None = None  # shrunk trace, violation, found steps
    first_path: str | None = None  # traces/<case>.json: the first finding's trace

    def add(self, trace, v: Violation) -> None:
        sig = signature(v, trace)
        example = self.example()
        if any(f.signature == sig for f in self.findings):
            self.repeats += 1
            return
        found = self.steps_of(trace)
        trace, v = self.shrink(trace, v)
        if self.first is None:
            self.first = (trace, v, found)
            self.first_path = self.save(self.case, trace)
        path = self.save(trace_name(self.case, sig), trace)
        self.findings.append(Finding(
            signature=sig, oracle=v.oracle, behaviours=list(v.behaviours), message=v.message,
            step=v.step, kind=step_kind(v, trace), error=engine_error(v), trace=path,
            steps=self.steps_of(trace), found_steps=found, example=example,
            unit=self.unit))


def finding(v: Violation, trace, path: str | None, steps: int | None = None) -> Finding:
    """The one finding of a hand-written case's failure (its trace as written)."""
    return Finding(signature=signature(v, trace), oracle=v.oracle, behaviours=list(v.behaviours),
                   message=v.message, step=v.step, kind=step_kind(v, trace),
                   error=engine_error(v), trace=path, steps=steps)


def crash_kind(trace: Trace | SchedTrace | None, step: int | None) -> str:
    """The kind of step a process died in: ``workload`` at the scheduler level, the cache-level
    operation of ``step`` (the step in progress), ``-`` before any step."""
    if isinstance(trace, SchedTrace):
        return "workload"
    if trace is None or step is None or not 0 <= step < len(trace.steps):
        return "-"
    return str(trace.steps[step].op)


def crash_signature(ending: str, trace: Trace | SchedTrace | None, step: int | None,
                    oracle: type = ProcessOracle) -> str:
    """The finding signature of a crash (module docstring) that ended the process as ``ending``
    says (``kvconf.conformance.running.crash.Ending.token``): decided from the trace as played
    up to the crash, before any shrinking, so every worker and shard names it the same.
    ``oracle`` judged it: the process oracle, or the worker memory oracle for a worker that ran
    out of memory under its limit."""
    return "/".join([oracle.name, "+".join(sorted(oracle.behaviours)),
                     crash_kind(trace, step), ending])


def crash_finding(result: CaseResult, ending: str, trace: Trace | SchedTrace | None,
                  unit: int | None, oracle: type = ProcessOracle) -> Finding:
    """The finding of a CRASH ``result`` whose process ended as ``ending`` says (``Ending.token``;
    its trace, if any, saved under the finding's trace name beside the case's, as a FAIL
    finding's is)."""
    sig = crash_signature(ending, trace, result.step, oracle)
    return Finding(
        signature=sig, oracle=oracle.name, behaviours=list(oracle.behaviours),
        message=result.message, step=result.step, kind=crash_kind(trace, result.step),
        error=ending,
        trace=None if trace is None else f"traces/{trace_name(result.case, sig)}.json",
        steps=result.steps, found_steps=result.found_steps, unit=unit)
