"""The run report: machine-readable JSON (pydantic), written atomically."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvconf.conformance.errors import KitError, read_input
from kvconf.conformance.trace import is_stream, parse_json, validation_error, write_atomic

FORMAT = "kvconf-report/5"
# /2 added CRASH, units, coverage, shards; /3 NOT_APPLICABLE; /4 findings (each distinct
# defect a fuzz case found, by signature); /5 judged (the rules a check of which ran). Earlier
# ones still read: a case of theirs passes no rule, since nothing says which checks ran.
FORMATS = ("kvconf-report/1", "kvconf-report/2", "kvconf-report/3", "kvconf-report/4", FORMAT)


class Status(str, Enum):
    """A case's outcome (spec chapter faults, "Statuses of a run")."""

    PASS = "PASS"
    FAIL = "FAIL"
    NOT_SUPPORTED = "NOT_SUPPORTED"
    NOT_APPLICABLE = "NOT_APPLICABLE"
    ERROR = "ERROR"
    TIMEOUT = "TIMEOUT"
    CRASH = "CRASH"


# Statuses that fail a run without an expectation file (exit code 1).
BAD = (Status.FAIL, Status.ERROR, Status.TIMEOUT, Status.CRASH)
# Statuses of a case that was not judged: the engine lacks a feature it needs (NOT_SUPPORTED),
# or the run's config is below what it is written for (NOT_APPLICABLE). Neither fails a run.
UNJUDGED = (Status.NOT_SUPPORTED, Status.NOT_APPLICABLE)


class Coverage(BaseModel):
    """The request table's (state, event) pairs a case took, and the illegal ones it tried."""

    model_config = ConfigDict(extra="forbid")

    exercised: list[tuple[str, str]] = []
    illegal: list[tuple[str, str]] = []
    pairs: list[tuple[str, str]] = []  # configuration switches played together (swarm)


class UnitResult(BaseModel):
    """One slice of a fuzz case's budget, run by one worker with its own derived seed."""

    model_config = ConfigDict(extra="forbid")

    index: int
    of: int
    status: Status
    examples: int | None = None
    steps: int | None = None
    duration_s: float = 0.0
    ops: dict[str, int] = {}  # cache-level operations played, by kind
    coverage: Coverage | None = None


class Finding(BaseModel):
    """One distinct defect a case found, named by its signature (spec chapter faults,
    "Findings and their signatures"), with its own shrunk trace."""

    model_config = ConfigDict(extra="forbid")

    signature: str
    oracle: str | None = None
    behaviours: list[str] = []
    message: str = ""
    step: int | None = None
    kind: str | None = None  # the kind of step it was raised at (an operation, rest, workload)
    error: str | None = None  # the engine's exception behind it: ErrorType@function
    trace: str | None = None  # its shrunk trace, relative to the report
    steps: int | None = None  # steps (requests) of the shrunk trace
    found_steps: int | None = None  # steps before shrinking
    example: int | None = None  # the unit's example it was found in (1: the first)
    unit: int | None = None  # the fuzz unit that found it


class CaseResult(BaseModel):
    """One case's outcome: its status, the rules it checks, and for a failure the message,
    oracle, step and saved trace."""

    model_config = ConfigDict(extra="forbid")

    case: str
    status: Status
    behaviours: list[str]
    message: str = ""
    duration_s: float
    trace: str | None = None  # saved trace of a failure, relative to the report
    oracle: str | None = None
    step: int | None = None
    examples: int | None = None  # generated examples (fuzz cases)
    steps: int | None = None  # steps played (of a failure: of the shrunk trace)
    found_steps: int | None = None  # a fuzz failure's steps before shrinking
    expectation: str | None = None  # with an expectation file: expected/regression/improvement
    known: str | None = None  # the expectation file's reason and reference for this case
    traceback: str | None = Field(None, description=(
        "where the engine raised (a Python traceback, innermost call last), died or hung (the "
        "Python stacks of every thread, innermost call first); source files are named relative "
        "to where they are imported from (kvconf/conformance/..., hypothesis/core.py), never "
        "by the folders of the machine that ran it"))
    output: str | None = Field(None, description=(
        "the engine's last output (its worker's stdout and stderr) in a CRASH or TIMEOUT"))
    exit_code: int | None = Field(None, description=(
        "CRASH: the code the engine's process exited with (sys.exit or a process exit)"))
    signal: str | None = Field(None, description=(
        "CRASH: the signal that killed the engine's process (SIGSEGV, SIGABRT, ...)"))
    units: list[UnitResult] | None = Field(None, description=(
        "a fuzz case's units in index order, up to the first that did not pass (the case's "
        "result is that unit's)"))
    coverage: Coverage | None = Field(None, description=(
        "scheduler level: the request table's (state, event) pairs this case took and the "
        "illegal ones it tried"))
    findings: list[Finding] = Field([], description=(
        "a fuzz case's distinct findings, one per signature, in the order found (units in "
        "index order); the first is the case's status, message and trace"))
    repeats: int | None = Field(None, description=(
        "failing examples skipped because their signature was already a finding"))
    unexpected: list[str] | None = Field(None, description=(
        "with an expectation file naming signatures: the findings it does not name"))
    judged: list[str] | None = Field(None, description=(
        "the rules a check of which ran in this case for the features the engine declares, "
        "whatever its outcome (sorted); a rule absent here was not judged by this case. None "
        "in a report older than kvconf-report/5, whose cases therefore pass no rule"))


def rule_verdicts(r: CaseResult) -> list[tuple[str, Status]]:
    """The per-rule verdicts one case backs (spec chapter faults, "Verdicts of a rule"): PASS
    only for a rule a passing case judged (``judged``); a FAIL for the rules its violation
    cites, and nothing for the other rules a failing case judged (a check of one may be the
    very call that failed on another rule: a repeated unlock that crashed judged PIN-3 and held
    nothing); every other status (ERROR, TIMEOUT, CRASH, NOT_SUPPORTED, NOT_APPLICABLE) for the
    rules the case covers. A rule it neither judged nor names gets no verdict from it: unknown
    is never pass. Every view of a rule's verdict (report, JUnit, compliance, site, diff) reads
    this."""
    if r.status is Status.PASS:
        return [(b, Status.PASS) for b in r.judged or ()]
    if r.status is Status.FAIL:
        return [(b, Status.FAIL) for b in dict.fromkeys(r.behaviours)]
    return [(b, r.status) for b in r.behaviours]


class RunInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    engine: str
    version: str
    kvconf: str
    features: list[str]
    config: dict
    seed: int
    profile: str
    budget: str
    started: str
    finished: str | None = None
    interrupted: bool = False
    coverage: dict | None = None  # request state machine pairs exercised (scheduler level)
    memory: dict | None = None  # the KV memory the runtime used, when not the kit's own dict
    expectations: dict | None = None  # the expectation file and the cases per verdict
    jobs: int = Field(1, description="worker processes (0: the cases ran in kvconf's own "
                      "process, without isolation)")
    shard: str | None = Field(None, description="i/N: this report holds the i-th of N "
                              "slices of the run's units (kvconf merge joins them)")
    merged: list[str] | None = Field(None, description="the shard reports this report was "
                                     "merged from")
    call_timeout_s: float | None = Field(None, description="seconds a worker may stay silent "
                                         "before its case is TIMEOUT")
    examples_db: str | None = Field(None, description="the Hypothesis example database the "
                                    "fuzz cases shared (a folder or module:attr)")
    not_run: list[str] = Field([], description="cases an interrupted run did not finish")
    cut: str | None = Field(None, description="why the run was cut short when no signal did "
                            "it: a file it could not write ('write failed: <path>: No space "
                            "left on device'); the run is then interrupted too")
    worker_memory: str | None = Field(None, description="the memory each worker process may "
                                      "hold (its data: heap and private mappings; --worker-"
                                      "memory), such as '4 GiB' or 'no limit'; None when the "
                                      "cases ran in kvconf's own process")


class Report(BaseModel):
    """A run's report: how it ran (``run_info``), each case's result, and the summary."""

    model_config = ConfigDict(extra="forbid")

    format: str = FORMAT
    run_info: RunInfo
    results: list[CaseResult] = []
    summary: dict[Status, int] = {}

    def summarize(self) -> Report:
        self.summary = {s: sum(r.status is s for r in self.results) for s in Status}
        return self

    @property
    def ok(self) -> bool:
        """Every case passed or was not judged (NOT_SUPPORTED, NOT_APPLICABLE); with an
        expectation file, every case ended
        as the file expects (a known failure that now passes is a difference too)."""
        if self.run_info.expectations is not None:
            return all(r.expectation == "expected" for r in self.results)
        return not any(r.status in BAD for r in self.results) and not self.run_info.interrupted


@contextmanager
def report_lock(path: str | Path) -> Iterator[None]:
    """Hold ``.<report>.lock`` beside the report for a run, so two runs given the same report
    path do not overwrite each other: the second stops with one line. An OS lock (flock), so
    a run that dies releases it."""
    import fcntl

    if is_stream(path):
        yield
        return
    path = Path(path)
    lock = path.parent / f".{path.name}.lock"
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        raise KitError(f"{path}: cannot lock the report ({e.strerror})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise KitError(f"{path}: another kvconf run (pid {holder}) is writing this report; "
                           "give this run another --report") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        finally:
            lock.unlink(missing_ok=True)
    finally:
        os.close(fd)


def write_report(report: Report, path: str | Path) -> Path:
    from kvconf.conformance.running.signals import hold_signals

    report.summarize()
    with hold_signals():  # an interrupt inside pydantic's serializer would come out wrapped
        text = report.model_dump_json(indent=2) + "\n"
    return write_atomic(path, text)


def load_report(path: str | Path) -> Report:
    """Read a run report; every failure is one line naming the file, the line and the field."""
    path = Path(path)
    text = read_input(path, "report")
    data = parse_json(text, str(path))
    try:
        return Report.model_validate(data)
    except ValidationError as e:
        raise validation_error(e, text, str(path)) from None


def report_schema() -> dict:
    return Report.model_json_schema()
