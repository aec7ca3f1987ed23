"""The values a hybrid cache trades in (per-group hits, admissions, chunks) and the window
arithmetic both the reference and the kit use (spec chapter windows, WIN-3 / WIN-4)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

KINDS: tuple[str, ...] = ("full", "window", "mamba")


@dataclass(frozen=True, slots=True)
class Group:
    """One group of a hybrid cache: its kind, its window in tokens (a window group), and the
    pool its page or slot ids come from."""

    kind: str  # "full" | "window" | "mamba"
    window: int = 0
    pool: str = "kv"


@dataclass(frozen=True, slots=True)
class GroupHit:
    """How far one group alone could serve a query, and what serves it. ``length`` is the
    deepest whole-page length the group serves. An attention group gives a page per page of the
    query below ``length`` (None for a page it does not need: a window group needs only the
    pages holding the W - 1 positions before ``length``); a Mamba group gives the slot holding
    the state of depth ``length`` (None at 0)."""

    length: int
    pages: tuple[int | None, ...] = ()
    state: int | None = None


@dataclass(frozen=True, slots=True)
class HybridHit:
    """A hit per group (in ``engine.groups`` order) and the combined hit the engine will use:
    the deepest length every group serves."""

    groups: tuple[GroupHit, ...]
    length: int


@dataclass(frozen=True, slots=True)
class Admitted:
    """A request started on its combined hit: ``length`` tokens it need not compute, each
    attention group's table for them (a page per page of the hit, None a hole the request will
    never read) in ``engine.groups`` order (a Mamba group's entry is empty), and the slot the
    request resumes its Mamba state from (None at 0 or without a Mamba group)."""

    length: int
    tables: tuple[tuple[int | None, ...], ...]
    state: int | None = None


@dataclass(frozen=True, slots=True)
class Extended:
    """A chunk the engine has room for. Per group (``engine.groups`` order): ``pages``, the
    pages appended to the request's table (an attention group: one per new page of the
    sequence); ``released``, pages of the table the engine gave back because the request no
    longer reads them (WIN-4; they become holes). For a Mamba group: the slot the chunk resumes
    from (``state_source``, None when it starts at 0), the slot the runtime leaves its end state
    in (``state_slot``), and any further states the runtime saves on the way
    (``checkpoints``: depth, slot; MAMBA-1).

    ``room`` False: the engine had no room for the chunk, yet gave back the window pages in
    ``released`` on the way (a cache that frees behind the window before it allocates); nothing
    else changed and nothing is computed. (An engine that changes nothing returns None.)"""

    pages: tuple[tuple[int, ...], ...]
    released: tuple[tuple[int, ...], ...]
    state_source: int | None = None
    state_slot: int | None = None
    checkpoints: tuple[tuple[int, int], ...] = ()
    room: bool = True


@dataclass(frozen=True, slots=True)
class Settled:
    """What an engine changed in a request's tables once the runtime computed its chunk (the
    optional ``computed`` call of the hybrid protocol: an engine that publishes after the
    forward, as a scheduler processes a step's results). Per group (``engine.groups`` order),
    (page index, page) pairs: page None, a window page given back (WIN-4, judged from the
    chunk's end); another page, one the request now reads that index from instead (a copy of
    the same KV the cache already held, TREE-2)."""

    changes: tuple[tuple[tuple[int, int | None], ...], ...]


def needed_slots(length: int, window: int, page_size: int) -> range:
    """The page indices a window group must hold for a hit or a row starting at ``length``."""
    k = length // page_size
    first = max(0, (length - window + 1) // page_size) if window else 0
    return range(min(first, k), k)


def validate_groups(groups: Sequence[Group]) -> None:
    """A hybrid engine has one full-attention group first, then at most one of each other."""
    kinds = [g.kind for g in groups]
    if not kinds or kinds[0] != "full" or len(set(kinds)) != len(kinds) or any(
            k not in KINDS for k in kinds):
        raise ValueError(f"hybrid groups {kinds}: expected full first, then window and/or "
                         "mamba at most once each")
