"""The cache level's answers checked where the driver receives them (FAULT-4): an answer of the
wrong shape is one finding naming the call and the value, never a TypeError from deep inside
the kit's memory or an oracle.

Each check is a few type tests on the answer's fields (the protocol's dataclasses,
``conformance/engine/protocol.py``), the usual int first: the driver runs one on every call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from numbers import Integral
from typing import Any

from kvconf.conformance.engine.protocol import CopyOp, Inserted, Match
from kvconf.conformance.faults import ANSWER, ORACLE
from kvconf.conformance.violation import Violation
from kvconf.reference.kv_events import KVEvent

PROTOCOL = "conformance/engine/protocol.py"


def _int(x: Any) -> bool:
    """An int of Python or of an array library (numpy's int64), never a bool."""
    return type(x) is int or (isinstance(x, Integral) and not isinstance(x, bool))


def _ints(xs: Any) -> bool:
    """A list or tuple of ints (a page list)."""
    if type(xs) is not tuple and type(xs) is not list:
        return False
    return all(type(x) is int or _int(x) for x in xs)


def malformed(call: str, what: str, value: Any, want: str) -> Violation:
    """``call``'s answer (or its field ``what``) is ``value``, where the protocol wants
    ``want``."""
    where = f"{call} returned {value!r:.80}" if not what else \
        f"{call} returned {what} = {value!r:.80}"
    return Violation(ORACLE, ANSWER, f"{where} ({type(value).__name__}); the protocol "
                                     f"({PROTOCOL}) expects {want}")


def alloc(out: Any, args: tuple) -> None:
    if out is None:
        return
    if not _ints(out):
        raise malformed(f"alloc({args[0]})", "", out, "a list of int page ids, or None")
    if len(out) != args[0]:
        raise Violation("pinning", ("POOL-2",), f"alloc({args[0]}) returned {len(out)} pages "
                        f"{list(out)!r:.80}: an allocation gives all it is asked for or nothing")


def match(m: Match, args: tuple) -> None:
    if type(m.device_len) is not int and not _int(m.device_len):
        raise malformed("match", "device_len", m.device_len, "int")
    if type(m.host_len) is not int and not _int(m.host_len):
        raise malformed("match", "host_len", m.host_len, "int")
    if not _ints(m.device_pages):
        raise malformed("match", "device_pages", m.device_pages, "a tuple of int page ids")
    if not _ints(m.host_pages):
        raise malformed("match", "host_pages", m.host_pages, "a tuple of int page ids")


def insert(r: Inserted, args: tuple) -> None:
    if type(r.cached_len) is not int and not _int(r.cached_len):
        raise malformed("insert", "cached_len", r.cached_len, "int")
    if not _ints(r.freed):
        raise malformed("insert", "freed", r.freed, "a tuple of int page ids")


def transfer(call: str) -> Callable[[Any, tuple], None]:
    def check(op: CopyOp | None, args: tuple) -> None:
        if op is None:
            return
        if op.kind not in ("writeback", "loadback"):
            raise malformed(call, "kind", op.kind, "'writeback' or 'loadback'")
        pairs = op.pairs
        if type(pairs) is not tuple and type(pairs) is not list:
            raise malformed(call, "pairs", pairs, "a tuple of (source, destination) page pairs")
        for pair in pairs:
            if not isinstance(pair, Sequence) or len(pair) != 2 or not _ints(tuple(pair)):
                raise malformed(call, "pairs", pairs, "a tuple of (source, destination) pairs "
                                "of int page ids")
    return check


def events(out: Any) -> None:
    """``drain_events``'s answer: a list of ``KVEvent``."""
    if type(out) is not list and type(out) is not tuple:
        raise malformed("drain_events", "", out, "a list of kvconf.KVEvent")
    for e in out:
        if not isinstance(e, KVEvent):
            raise malformed("drain_events", "an event", e, "a kvconf.KVEvent")


# The call -> its answer's check, on the answer of the type ``RETURNS`` (driver.py) allows.
CHECKS: dict[str, Callable[[Any, tuple], None]] = {
    "alloc": alloc, "match": match, "insert": insert,
    "start_writeback": transfer("start_writeback"),
    "start_loadback": transfer("start_loadback"),
}
