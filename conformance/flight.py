"""The flight recorder: each play announces its trace, and each step before the engine runs it.

A worker process (``conformance.worker``) points the recorder at a pipe to its parent, so when
the engine kills the process mid-step (an exit, a signal from native code) the parent still
holds the trace up to and including the step that killed it, and every line it reads is a sign
of life for the per-call deadline. In-process runs leave the recorder off: one ``None`` check
per step. Lines are short and typed by their first byte (``conformance.pool`` reads them):

- ``B<json>``: a cache-level play begins; the trace without its steps (``kvconf-trace/1``).
- ``W<json>``: a scheduler-level play begins; the whole workload (``kvconf-sched-trace/1``).
- ``S<json>``: the next cache-level step, sent before the engine runs it.
- ``H``: a heartbeat (a scheduler plan about to be played, a shrink candidate tried).
"""

from __future__ import annotations

import os

_fd: int | None = None


def attach(fd: int | None) -> None:
    """Send the recorder's lines to ``fd`` (None: off)."""
    global _fd
    _fd = fd


def on() -> bool:
    return _fd is not None


def send(line: bytes) -> None:
    """Write one line whole; a blocking pipe takes it all, the loop covers short writes."""
    if _fd is None:
        return
    data = memoryview(line + b"\n")
    while data:
        data = data[os.write(_fd, data):]


def begin(trace) -> None:
    """A play of ``trace`` begins (called before its engine is built, so a crash in the
    constructor is the crash of this trace). A cache-level trace is sent without its steps:
    the driver sends each as it plays it."""
    if _fd is None:
        return
    if trace.level == "cache":
        send(b"B" + trace.model_dump_json(exclude={"steps"}).encode())
    else:
        send(b"W" + trace.model_dump_json().encode())


def step(step_json: str) -> None:
    if _fd is not None:
        send(b"S" + step_json.encode())


def beat() -> None:
    if _fd is not None:
        send(b"H")
