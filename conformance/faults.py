"""An engine's fault in a legal call, as the drivers report it: one FAULT-2 violation naming the
call (spec chapter faults), never a traceback out of the kit; a MemoryError is FAULT-5's
instead (the engine's memory past the worker's limit).

A legal call the engine refuses (``EngineRejected``) and any exception it raises are each one
FAULT-2 violation of the ``faults`` oracle, a value of a type the protocol does not allow one
FAULT-4 violation; the engine's
exception stays its ``__cause__``, so the report carries its traceback. A Violation raised
inside the call (an oracle's, through a hook) passes through unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvconf.conformance.errors import EngineRejected
from kvconf.conformance.violation import Violation

ORACLE = "faults"
IDS = ("FAULT-2",)
ANSWER = ("FAULT-4",)  # an answer of a type or shape the protocol does not allow


def raised(call: str, err: BaseException, more: str = "") -> Violation:
    """The violation of a legal call that raised ``err``: FAULT-2, or FAULT-5 for a
    MemoryError raised at the worker's memory limit, which says the engine's memory grew past
    the run's bound rather than that the call failed (``kvconf.conformance.running.bounds``)."""
    if isinstance(err, MemoryError):
        from kvconf.conformance.running import bounds

        if bounds.at_limit():
            from kvconf.conformance.oracles.process import WorkerMemoryOracle

            bounds.hit = True
            return Violation(WorkerMemoryOracle.name, WorkerMemoryOracle.behaviours,
                             f"{call} raised MemoryError{bounds.under_limit()}")
    return Violation(ORACLE, IDS, f"{call} raised {type(err).__name__}: {err}{more}")


DOCUMENTED = " instead of the engine's documented error"  # ``more`` for a refused probe


def rejected(call: str, err: BaseException) -> Violation:
    return Violation(ORACLE, IDS, f"{call} rejected a legal call: {err}")


def expected(types: tuple[type | None, ...]) -> str:
    return " or ".join("None" if t is None else t.__name__ for t in types)


def fits(value: Any, types: tuple[type | None, ...]) -> bool:
    """Whether ``value`` is of one of ``types`` (None in them: or None); a bool is no int."""
    if value is None:
        return None in types
    return any(t is not None and isinstance(value, t) and not isinstance(value, bool)
               for t in types)


def wrong_return(what: str, got: str, protocol: str, types: tuple[type | None, ...]
                 ) -> Violation:
    """``what`` (a call, perhaps with its step) returned ``got`` where ``protocol`` (the file
    that defines the level's protocol) allows ``types``."""
    return Violation(ORACLE, ANSWER, f"{what} returned {got}; the protocol ({protocol}) expects "
                                  f"{expected(types)}")


def call_legal(call: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, a legal call: a refusal or any exception of the engine is FAULT-2."""
    try:
        return fn(*args)
    except EngineRejected as e:
        raise rejected(call, e) from e
    except Violation:
        raise
    except Exception as e:
        raise raised(call, e) from e
