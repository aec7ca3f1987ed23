"""Progress notes of a running fuzz unit, so a long or stuck run shows where it is.

Display only: a note says how many examples and steps a unit has played and for how long, and
nothing in a trace, a result or the report depends on it (the wall clock here decides only when the
next note is due). A fuzz unit holds a ``Meter`` (``run_unit`` in
``kvconf.conformance.running.runner`` makes it) and ticks it from the loop that plays the engine,
never from a timer thread: an engine that hangs stops the notes, as it stops the heartbeats the
pool's time-out watches. Where the notes go is the process's ``sink``: a worker sends them to its
parent as ``G`` lines (``kvconf.conformance.running.worker``), the kit's own process hands them to
the caller's ``on_progress`` (``kvconf run --jobs 0``, ``kvconf mutants``); with no sink a tick
costs one ``None`` check.

``KVCONF_PROGRESS_EVERY`` sets the seconds between two notes of one unit (default 10).

The same ticks are where a worker stops a unit its parent no longer wants (``cancel``; the kill
matrix's units past a mutant's killer): the next tick raises ``Cancelled``, between two steps or
two examples, so the worker drops the unit and takes the next without a new process.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from kvconf.conformance.running.profiles import Budget

EVERY_ENV = "KVCONF_PROGRESS_EVERY"
EVERY_S = 10.0

Note = dict  # {"case", "unit", "phase", "examples", "steps", "replays", "elapsed_s", "of_...}
_sink: Callable[[Note], None] | None = None
_cancelled = False


class Cancelled(BaseException):
    """The running unit is no longer wanted (``cancel``). A BaseException, so that no handler of
    engine errors (FAULT-2) and no generator takes it for a failure of the engine."""


def cancel(wanted: bool = False) -> None:
    """Stop the running unit at its next tick (a worker's SIGUSR2); ``cancel(True)`` as a unit
    starts forgets a request that came after the last one ended."""
    global _cancelled
    _cancelled = not wanted


def every_s() -> float:
    """Seconds between two notes of one unit: ``$KVCONF_PROGRESS_EVERY`` or 10 (bad values
    fall back to 10; a display setting is never worth stopping a run for)."""
    try:
        value = float(os.environ.get(EVERY_ENV, EVERY_S))
    except ValueError:
        return EVERY_S
    return value if value > 0 else EVERY_S


def set_sink(fn: Callable[[Note], None] | None) -> Callable[[Note], None] | None:
    """Send this process's notes to ``fn`` (None: drop them); returns the sink it replaces."""
    global _sink
    previous, _sink = _sink, fn
    return previous


@contextmanager
def sink(fn: Callable[[Note], None] | None) -> Iterator[None]:
    """``set_sink`` for the span of a block (nothing changes when ``fn`` is None)."""
    if fn is None:
        yield
        return
    previous = set_sink(fn)
    try:
        yield
    finally:
        set_sink(previous)


class Meter:
    """One fuzz unit's progress: ticked as it plays, it sends a note every ``every_s()``."""

    def __init__(self, case: str, unit: str, budget: Budget) -> None:
        self.case, self.unit, self.budget = case, unit, budget
        self.t0 = time.monotonic()
        self.every = every_s()
        self.due = self.t0 + self.every

    def tick(self, examples: int, steps: int | None) -> None:
        """The unit has played ``examples`` examples of ``steps`` steps in all so far."""
        if _cancelled:
            raise Cancelled
        if _sink is None:
            return
        now = time.monotonic()
        if now >= self.due:
            self._send(now, {"phase": "fuzz", "examples": examples, "steps": steps})

    def shrinking(self, replays: int) -> None:
        """The unit found a failure and its shrinker has replayed ``replays`` candidates."""
        if _cancelled:
            raise Cancelled
        if _sink is None:
            return
        now = time.monotonic()
        if now >= self.due:
            self._send(now, {"phase": "shrink", "replays": replays})

    def counting(self, replay: Callable) -> Callable:
        """``replay`` (a shrinker's), ticking the meter at every call."""
        calls = 0

        def counted(*args, **kw):
            nonlocal calls
            calls += 1
            self.shrinking(calls)
            return replay(*args, **kw)

        return counted

    def _send(self, now: float, doc: Note) -> None:
        self.due = now + self.every
        doc.update(case=self.case, unit=self.unit, elapsed_s=round(now - self.t0, 1),
                   of_examples=self.budget.examples, of_seconds=self.budget.seconds)
        if _sink is not None:
            _sink(doc)


def _n(value: int) -> str:
    """A count with its thousands apart: 2 310."""
    return f"{value:,}".replace(",", " ")


def _s(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds >= 10 else f"{seconds:.1f}s"


def describe(doc: Note) -> str:
    """One line for a note: ``fuzz-scheduler: 120 examples, 2 310 steps, 30s of 120s``."""
    elapsed = _s(doc.get("elapsed_s") or 0.0)
    if doc.get("phase") == "shrink":
        replays = _n(doc.get("replays") or 0)
        return f"{doc['unit']}: shrinking a failure, {replays} replays, {elapsed}"
    examples = _n(doc.get("examples") or 0)
    if doc.get("of_examples"):
        examples += f" of {_n(doc['of_examples'])}"
    parts = [f"{examples} examples"]
    if doc.get("steps") is not None:
        parts.append(f"{_n(doc['steps'])} steps")
    parts.append(f"{elapsed} of {_s(doc['of_seconds'])}" if doc.get("of_seconds") else elapsed)
    return f"{doc['unit']}: " + ", ".join(parts)


def unsupported_key(message: str) -> str:
    """What a NOT_SUPPORTED case lacks, from its message: ``needs host_tier`` for ``engine lacks
    host_tier; ...`` (the engine's reasons after the first ``;`` left out), else the message's
    head (a level that could not start, a declaration that makes the case moot)."""
    head = message.split("; ", 1)[0]
    return "needs " + head[len("engine lacks "):] if head.startswith("engine lacks ") else head


def unsupported_line(key: str, names: list[str], shown: int = 6) -> str:
    """One line for the NOT_SUPPORTED cases of one missing feature, without their rules:
    ``NOT_SUPPORTED, needs host_tier: 7 cases (a, b, c, d, e, f, ...)``."""
    listed = ", ".join(names[:shown]) + (", ..." if len(names) > shown else "")
    return f"NOT_SUPPORTED, {key}: {len(names)} case{'s' * (len(names) != 1)} ({listed})"
