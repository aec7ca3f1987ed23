"""The ``kvconf replay`` command of a saved trace, as its reader can paste it where they stand.

A report names its traces relative to its own folder (it can move); a command printed for a
person names the trace relative to the current directory, or absolutely when the trace is not
below it, so that it works pasted as it is.
"""

from __future__ import annotations

import shlex
from pathlib import Path


def from_here(path: Path) -> str:
    """``path`` relative to the current directory when it lies below it, else absolute."""
    full = path.absolute()
    try:
        return str(full.relative_to(Path.cwd()))
    except ValueError:
        return str(full)


def replay_command(report_dir: Path, trace: str, engine: str) -> str:
    """``kvconf replay out/traces/fuzz-cache.json --engine my-engine`` for ``trace`` (relative
    to ``report_dir``, as a report names it), quoted for a POSIX shell."""
    where = from_here(report_dir / trace)
    return f"kvconf replay {shlex.quote(where)} --engine {shlex.quote(engine)}"
