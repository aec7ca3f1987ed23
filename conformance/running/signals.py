"""Holding SIGINT and SIGTERM while the kit writes what a run found.

A signal handler raises KeyboardInterrupt wherever Python code runs, and pydantic runs some while
it serializes (an enum's ``value``): an interrupt raised there comes out as a
``PydanticSerializationError`` that only names it, which no ``except KeyboardInterrupt`` sees. So
a report is serialized with the signals held, and a signal held is delivered just after; and
where an interrupt may still come out wrapped, ``interrupt_inside`` tells it from an error.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def hold_signals() -> Iterator[None]:
    """Let SIGINT and SIGTERM wait while the kit saves what a run found and stops its workers,
    so a second Ctrl-C cannot leave that half done (a report not marked interrupted, workers
    left running). A signal held is delivered after the block, unless an exception already
    leaves it. In a thread other than the main one (no signal handlers there) it holds
    nothing."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum, frame) -> None:
        held.append(signum)

    previous = {s: signal.signal(s, hold) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if held:
        signal.raise_signal(held[0])


def interrupt_inside(e: BaseException) -> bool:
    """An interrupt a library caught and wrapped is still an interrupt, never the engine's
    ERROR: pydantic turns a KeyboardInterrupt raised by a signal handler in one of its callbacks
    into a ``PydanticSerializationError`` that only names it."""
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__cause__ or seen.__context__
    return type(e).__name__ == "PydanticSerializationError" and "KeyboardInterrupt" in str(e)
