"""The request state machine (spec chapter requests, REQ-1..): states, events, the table.

The table is data, not code spread over handlers, so the spec, the scheduler, the oracles and the
coverage report all read the same thing: ``TRANSITIONS[(state, event)]`` is the state after a legal
event; a pair that is not in the table is an error that changes nothing (REQ-2).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from enum import Enum
from typing import overload


class State(str, Enum):
    """A request's state in the state machine (spec chapter requests; the table is
    ``TRANSITIONS``)."""

    SUBMITTED = "Submitted"  # waiting for its first prefill chunk
    PREFETCHING = "Prefetching"  # part of its prompt is being fetched from L3 (L3-2)
    PREFETCH_DONE = "PrefetchDone"  # the fetch ended; waiting for its first prefill chunk
    PREFILLING = "Prefilling"  # some chunks computed, more of the prompt to go
    PREFILL_DONE = "PrefillDone"  # last chunk scheduled; its sampled token not yet reported
    DECODING = "Decoding"  # generating one token per plan
    RETRACTING = "Retracting"  # pushed off the device; its writeback in flight
    RETRACTED = "Retracted"  # off the device, waiting to be recomputed / loaded back
    DRAINING = "Draining"  # finished; its writeback to host not yet planned
    WRITING_BACK = "WritingBack"  # finished; its writeback in flight
    FINISHED = "Finished"  # holds nothing; erased at the next plan

    def __str__(self) -> str:
        return self.value


class Event(str, Enum):
    # Scheduler decisions, taken while building a plan.
    CHUNK = "chunk"  # a prefill chunk that does not complete the sequence is scheduled
    LAST_CHUNK = "last_chunk"  # the chunk that completes the sequence is scheduled
    DECODE = "decode"  # a decode row is scheduled
    RETRACT = "retract"  # pushed off the device, its writeback started
    RETRACT_NO_COPY = "retract_no_copy"  # pushed off with nothing to write back
    WRITEBACK = "writeback"  # a draining request's writeback is planned
    PREFETCH = "prefetch"  # pages of its prompt past the host match are fetched from L3
    # What the runtime reports through advance().
    EXTEND_RESULT = "ExtendResult"  # the token sampled from a completed row
    FINISH = "Finish"
    ABORT = "Abort"
    WRITEBACK_DONE = "WriteBackDone"  # the request's writeback acknowledged (either outcome)
    PREFETCH_DONE = "PrefetchDone"  # the request's prefetch acknowledged (any number of pages)

    def __str__(self) -> str:
        return self.value


S, E = State, Event

# (state, event) -> next state. Finish resolves to DRAINING or FINISHED by whether the request's
# KV needs a host copy; both targets are listed so the table stays a function of its inputs.
TRANSITIONS: dict[tuple[State, Event], tuple[State, ...]] = {
    (S.SUBMITTED, E.CHUNK): (S.PREFILLING,),
    (S.SUBMITTED, E.LAST_CHUNK): (S.PREFILL_DONE,),
    (S.SUBMITTED, E.ABORT): (S.FINISHED,),
    (S.SUBMITTED, E.PREFETCH): (S.PREFETCHING,),
    (S.PREFETCHING, E.PREFETCH_DONE): (S.PREFETCH_DONE,),
    (S.PREFETCHING, E.ABORT): (S.FINISHED,),  # the fetch carries on under the cache's pin
    (S.PREFETCH_DONE, E.CHUNK): (S.PREFILLING,),  # D293-1: a legal origin of the first chunk
    (S.PREFETCH_DONE, E.LAST_CHUNK): (S.PREFILL_DONE,),
    (S.PREFETCH_DONE, E.ABORT): (S.FINISHED,),
    (S.PREFILLING, E.CHUNK): (S.PREFILLING,),
    (S.PREFILLING, E.LAST_CHUNK): (S.PREFILL_DONE,),
    (S.PREFILLING, E.ABORT): (S.FINISHED,),
    (S.PREFILL_DONE, E.EXTEND_RESULT): (S.DECODING,),
    (S.PREFILL_DONE, E.ABORT): (S.FINISHED,),
    (S.DECODING, E.DECODE): (S.DECODING,),
    (S.DECODING, E.EXTEND_RESULT): (S.DECODING,),
    (S.DECODING, E.FINISH): (S.DRAINING, S.FINISHED),
    (S.DECODING, E.RETRACT): (S.RETRACTING,),
    (S.DECODING, E.RETRACT_NO_COPY): (S.RETRACTED,),
    (S.DECODING, E.ABORT): (S.FINISHED,),
    (S.RETRACTING, E.WRITEBACK_DONE): (S.RETRACTED,),
    (S.RETRACTING, E.ABORT): (S.FINISHED,),
    (S.RETRACTED, E.CHUNK): (S.PREFILLING,),
    (S.RETRACTED, E.LAST_CHUNK): (S.PREFILL_DONE,),
    (S.RETRACTED, E.FINISH): (S.FINISHED,),
    (S.RETRACTED, E.ABORT): (S.FINISHED,),
    (S.DRAINING, E.WRITEBACK): (S.WRITING_BACK, S.FINISHED),  # finished when nothing to copy
    (S.DRAINING, E.ABORT): (S.FINISHED,),
    (S.WRITING_BACK, E.WRITEBACK_DONE): (S.FINISHED,),
    (S.WRITING_BACK, E.ABORT): (S.FINISHED,),  # E-2: abort during a writeback finishes it
}

# What each state holds (REQ-3): a pin on its cached prefix and a pool slot exactly when listed
# (a host pin on the pages its prefetch fetched, in PrefetchDone);
# request-local device pages only where "pages" is listed (possibly none: a request whose
# sequence ends on a page boundary right after a mid-flight publish has all its pages shared).
HOLDS: dict[State, frozenset[str]] = {
    S.SUBMITTED: frozenset(),
    S.PREFETCHING: frozenset(),
    S.PREFETCH_DONE: frozenset({"host_pin"}),  # the fetched pages, until its first chunk
    S.PREFILLING: frozenset({"pin", "pages", "slot"}),
    S.PREFILL_DONE: frozenset({"pin", "pages", "slot"}),
    S.DECODING: frozenset({"pin", "pages", "slot"}),
    S.RETRACTING: frozenset(),
    S.RETRACTED: frozenset(),
    S.DRAINING: frozenset({"pin"}),
    S.WRITING_BACK: frozenset(),
    S.FINISHED: frozenset(),
}

EXTERNAL = frozenset({E.EXTEND_RESULT, E.FINISH, E.ABORT, E.WRITEBACK_DONE, E.PREFETCH_DONE})
# Events the runtime addresses to a copy (by op id), not to a request.
BY_OP = frozenset({E.WRITEBACK_DONE, E.PREFETCH_DONE})


def next_states(state: State, event: Event) -> tuple[State, ...]:
    """The states ``event`` may lead to from ``state``; empty when the event is illegal there."""
    return TRANSITIONS.get((state, event), ())


def legal(state: State, event: Event) -> bool:
    return (state, event) in TRANSITIONS


Transition = tuple[str, State, Event, State]  # (request id, state, event, next state)
Move = tuple[State, Event, State]  # (state, event, next state)
# Every (state, event, next state) the table allows: a move a scheduler may make (REQ-2).
MOVES: frozenset[Move] = frozenset(
    (state, event, to) for (state, event), targets in TRANSITIONS.items() for to in targets)
# Every triple, legal or not, numbered: how a log keeps a move in one small int (a variant of
# the reference may take a move the table lacks, and its log records it as taken). The table's
# moves come first, in its order, so a move's number also says whether it is legal: below
# ``LEGAL_MOVES``. One look-up then both checks a move and gives the log its number.
_ALL_MOVES: tuple[Move, ...] = tuple(
    (state, event, to) for (state, event), targets in TRANSITIONS.items() for to in targets
) + tuple(m for m in ((s, e, t) for s in State for e in Event for t in State) if m not in MOVES)
MOVE_CODE: dict[Move, int] = {m: i for i, m in enumerate(_ALL_MOVES)}
LEGAL_MOVES = len(MOVES)
_MOVE_CODE = MOVE_CODE


class TransitionLog(Sequence[Transition]):
    """Every transition a scheduler took, in order, read as a list of ``Transition`` tuples
    (REQ-1; the transition coverage of a report).

    Kept in columns, each move as its number in ``_ALL_MOVES``, because a scheduler takes one
    or two transitions per row: as a list of four-tuples of enum members, a long run's log was
    most of the objects the garbage collector walks, over and over."""

    __slots__ = ("_moves", "_rids")

    def __init__(self) -> None:
        self._rids: list[str] = []
        self._moves = array("H")

    def append(self, t: Transition) -> None:
        self.add(t[0], (t[1], t[2], t[3]))

    def add(self, rid: str, move: Move) -> None:
        """Record that request ``rid`` made ``move``."""
        self.add_code(rid, _MOVE_CODE[move])

    def add_code(self, rid: str, code: int) -> None:
        """Record that request ``rid`` made the move numbered ``code`` (``MOVE_CODE``)."""
        self._rids.append(rid)
        self._moves.append(code)

    def _at(self, i: int) -> Transition:
        return (self._rids[i], *_ALL_MOVES[self._moves[i]])

    def __len__(self) -> int:
        return len(self._rids)

    @overload
    def __getitem__(self, i: int) -> Transition: ...
    @overload
    def __getitem__(self, i: slice) -> list[Transition]: ...
    def __getitem__(self, i: int | slice) -> Transition | list[Transition]:
        if isinstance(i, slice):
            return [self._at(j) for j in range(*i.indices(len(self)))]
        return self._at(range(len(self))[i])  # negative indexes and IndexError as a list's

    def __iter__(self) -> Iterator[Transition]:
        for j in range(len(self)):
            yield self._at(j)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TransitionLog):
            return self._rids == other._rids and self._moves == other._moves
        if isinstance(other, list):
            return list(self) == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # it grows, as a list does

    def __repr__(self) -> str:
        return repr(list(self))
