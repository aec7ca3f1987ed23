"""The flight recorder: each play announces its trace, and each step before the engine runs it.

A worker process (``kvconf.conformance.running.worker``) writes the current play to a recorder file
its parent named, so when the engine kills the process mid-step (an exit, a signal from native code)
the parent still finds the trace up to and including the step that killed it. The file holds one
play: a new play truncates it. Writing is one unbuffered ``write`` per step; the parent reads the
file only after a crash or a time-out, so steps cost it nothing. Signs of life go to the parent on a
pipe, at most a few per second (``H``), so a silent worker stands out against the per-call deadline.
In-process runs leave the recorder off: one ``None`` check per step. Lines are typed by their first
byte (``kvconf.conformance.running.pool`` reads them):

- ``B<json>``: a cache-level or hybrid-level play begins; the trace without its steps
  (``kvconf-trace/1``, ``kvconf-hybrid-trace/1``).
- ``W<json>``: a scheduler-level play begins; the whole workload.
- ``S<json>``: the next step of that play, written before the engine runs it.
"""

from __future__ import annotations

import os
import time

BEAT_S = 0.25  # the most often a worker tells its parent it is alive

_pipe: int | None = None  # to the parent: answers and heartbeats
_file: int | None = None  # the recorder file: the current play
_last_beat = 0.0


def attach(pipe: int | None, recorder: str | None = None) -> None:
    """Answer on ``pipe`` and record plays in the file ``recorder`` (None: off)."""
    global _pipe, _file
    if _file is not None:
        os.close(_file)
    _pipe = pipe
    _file = (None if recorder is None
             else os.open(recorder, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o600))


def on() -> bool:
    return _file is not None


def _write(fd: int, line: bytes) -> None:
    """Write one line whole; the loop covers short writes."""
    data = memoryview(line + b"\n")
    while data:
        data = data[os.write(fd, data):]


def send(line: bytes) -> None:
    """One line to the parent (an answer); counts as a sign of life."""
    global _last_beat
    if _pipe is None:
        return
    _write(_pipe, line)
    _last_beat = time.monotonic()


def beat() -> None:
    """A sign of life for the parent, sent when the last one is more than BEAT_S old."""
    if _pipe is not None and time.monotonic() - _last_beat >= BEAT_S:
        send(b"H")


def begin(trace) -> None:
    """A play of ``trace`` begins (called before its engine is built, so a crash in the
    constructor is the crash of this trace). A cache-level or hybrid-level trace is written
    without its steps: the driver writes each as it plays it (a fuzz walk draws them as it
    goes)."""
    if _file is None:
        return
    os.ftruncate(_file, 0)
    if trace.level in ("cache", "hybrid"):
        _write(_file, b"B" + trace.model_dump_json(exclude={"steps"}).encode())
    else:
        _write(_file, b"W" + trace.model_dump_json().encode())
    beat()


def step(step_json: str) -> None:
    if _file is not None:
        _write(_file, b"S" + step_json.encode())
        beat()


def read_play(path: str) -> list[bytes]:
    """The recorder file's whole lines (a line cut by the crash is left out)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return []
    lines = data.split(b"\n")
    return [line for line in lines[:-1] if line]
