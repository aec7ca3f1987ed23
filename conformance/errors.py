"""Errors the kit reports to a person: one line, naming the place, exit code 2."""

from __future__ import annotations

from pathlib import Path


class KitError(Exception):
    """Bad input to the kit (trace file, engine name, config value, report path)."""


class WriteFailed(KitError):
    """A file the kit writes (a report, a trace) could not be written: a full disk, a folder
    made read-only. A run it cuts short says so in its report (``RunInfo.cut``)."""

    def __init__(self, path: str | Path, why: str) -> None:
        super().__init__(f"{path}: cannot write ({why})")
        self.path, self.why = str(path), why


class EngineRejected(Exception):
    """The engine refused a call with its documented error (FAULT-1); ``code`` is stable."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code


class EngineUnavailable(Exception):
    """The engine's package is not installed or cannot start here; its cases are NOT_SUPPORTED
    with this reason, never passed."""


def read_input(path: str | Path, what: str) -> str:
    """A file the user gave (a trace, a report, an expectation file) as UTF-8 text; unreadable
    or not UTF-8 is a KitError naming the file and, for bad bytes, the line."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise KitError(f"{path}: cannot read {what} ({e.strerror})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise KitError(f"{path}:{line}: {what} is not UTF-8 (byte {data[e.start]:#04x} at "
                       f"offset {e.start})") from None
