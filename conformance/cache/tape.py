"""The engine calls of one cache-level play, in order, and their replay on a fresh engine.

DET-1 asks that the same trace from the same initial state gives the same outcome. A second play
with the driver would pay the kit's memory, its ledger and the trace's bookkeeping again, though
none of it is the engine's input. Instead the driver records each call it makes of the engine
(``CacheDriver.tape``): its step, the call, the arguments and the answer, a rejection, the events
drained. The replay hands a fresh engine the same calls in the same order, looks at nothing else,
and compares each answer with the first play's. The driver decides only from the engine's answers
and the trace, so for an engine that answers alike both times a second driver would have made
exactly these calls; the first difference is reported at the step it shows in. The snapshots and
counters the oracles read are not replayed: they judge the engine, they are not its input.

What an engine hands out to be handed back (the node a match names, a lock's handle, a copy's op
id) is its own to name: a second engine may name them otherwise and still answer alike. Each one
the first play got is mapped to the one the replay got at the same place, and the replay hands
the engine its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kvconf.conformance.errors import EngineRejected
from kvconf.conformance.faults import call_legal
from kvconf.conformance.oracles.determinism import DeterminismOracle
from kvconf.conformance.running import flight
from kvconf.conformance.trace import Step

# One call: (step index, call, arguments, answer as ``answer`` reads it). The call
# "drain_events" has the event rows as its answer; REJECTED is the answer of a call the engine
# refused (a second unlock, PIN-3). Both are read when the call returns, and the arguments kept
# as copies: what an engine does later with what it got or gave changes nothing on the tape.
Tape = list[tuple[int, str, tuple, tuple[Any, tuple[tuple[str, Any], ...]]]]
REJECTED = "rejected"

# The argument (the first) that is a name the engine handed out, and what kind of name it is.
HANDED_BACK = {"lock": "node", "unlock": "handle", "start_writeback": "node",
               "start_loadback": "node", "finish_transfer": "op"}


# The calls whose answer ``answer`` reshapes or whose names it takes; of any other call it is
# ``(out, ())`` (``tests/test_cache_det_tape.py`` checks both agree on every call of many plays).
SHAPED = frozenset({"match", "lock", "start_writeback", "start_loadback", "insert", "alloc"})


def record(call: str, args: tuple, out: Any) -> tuple[tuple, tuple]:
    """A call's arguments (lists copied) and its answer, as the tape keeps them."""
    if list in map(type, args):
        args = tuple([list(a) if type(a) is list else a for a in args])
    return args, answer(call, out) if call in SHAPED else (out, ())


def answer(call: str, out: Any) -> tuple[Any, tuple[tuple[str, Any], ...]]:
    """What DET-1 compares of a call's answer (what the driver's log shows of it), and the
    names in it the engine handed out, by kind."""
    if out is None or isinstance(out, str):
        return out, ()
    if call == "match":
        return ((out.device_len, out.host_len, tuple(out.device_pages), tuple(out.host_pages)),
                (("node", out.device_node), ("node", out.host_node)))
    if call == "lock":
        return None, (("handle", out),)
    if call in ("start_writeback", "start_loadback"):
        return (out.kind, tuple(map(tuple, out.pairs))), (("op", out.op_id),)
    if call == "insert":
        return (out.cached_len, tuple(sorted(out.freed))), ()
    if call == "alloc":
        return tuple(out), ()
    return out, ()  # a count (evict, unload) or the event rows


class _Names:
    """The first play's names mapped to the replay's; a name that cannot be a dict key (an
    engine's own unhashable object) is looked up by identity."""

    def __init__(self) -> None:
        self.keyed: dict[tuple[str, Any], Any] = {}
        self.other: list[tuple[str, Any, Any]] = []

    def add(self, kind: str, first: Any, again: Any) -> None:
        try:
            self.keyed[(kind, first)] = again
        except TypeError:
            self.other.append((kind, first, again))

    def get(self, kind: str, first: Any) -> Any:
        try:
            return self.keyed.get((kind, first), first)
        except TypeError:
            for k, x, y in reversed(self.other):
                if k == kind and x is first:
                    return y
            return first


def replay(engine, tape: Tape, steps: Sequence[Step], lines: Sequence[str] = (),
           rows: Callable[[list], list] | None = None) -> None:
    """Hand ``engine`` (fresh, of the first play's configuration) the tape's calls in order;
    raise DET-1 at the first answer that differs from the first play's. ``steps``: the trace's
    steps, announced to the flight recorder as the replay reaches each (``lines``: as the first
    play announced them, where it did); ``rows``: how the driver logs drained events."""
    oracle = DeterminismOracle()
    names = _Names()
    announced = -1

    def announce(upto: int) -> None:
        nonlocal announced
        while announced < upto:
            announced += 1
            flight.step(lines[announced] if announced < len(lines)
                        else steps[announced].model_dump_json(exclude_none=True))

    recording = flight.on()
    get_name, keyed = names.get, names.keyed
    drain = getattr(engine, "drain_events", None)  # on the tape only with kv_events
    methods: dict[str, Callable] = {}  # the engine's method of each call, looked up once
    for index, call, args, want in tape:
        if recording:  # a crash here is the crash of this step
            announce(index)
        if call == "drain_events":
            got: Any = rows(drain()) if rows is not None else []
            if got == want[0]:
                continue  # the rows are the answer, and they name nothing (``answer``)
        else:
            kind = HANDED_BACK.get(call)
            if kind is not None or list in map(type, args):  # the engine gets its own copy
                args = [list(a) if type(a) is list else a for a in args]
                if kind is not None:
                    args[0] = get_name(kind, args[0])
            fn = methods.get(call)
            if fn is None:
                fn = methods[call] = getattr(engine, call)
            if want[0] == REJECTED:
                try:
                    fn(*args)
                    got = "accepted"
                except EngineRejected:
                    got = REJECTED
            else:
                got = call_legal(call, fn, *args)
        (a, first) = want
        if call not in SHAPED:  # ``answer`` is the value itself, naming nothing
            b, again = got, ()
        else:
            try:
                (b, again) = answer(call, got)
            except Exception:  # not what the first play's answer was: it differs
                b, again = f"a {type(got).__name__}", ()
        if a == b:
            if first or again:
                for (k, x), (_, y) in zip(first, again, strict=True):
                    try:
                        keyed[(k, x)] = y  # ``_Names.add``, in line for a name that is a key
                    except TypeError:
                        names.add(k, x, y)
        else:
            v = oracle.fail("DET-1", f"step {index} differs between two runs: {call} answered "
                            f"{a} in the first and {b} in the second")
            v.step = index
            raise v
    if flight.on():
        announce(len(steps) - 1)
