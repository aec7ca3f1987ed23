"""The runtime's KV memory as the drivers see it: a content tag in every token slot of every page.

The drivers never keep KV themselves; they write and read tags through a ``KVMemory``. The
kit's default is ``ShadowMemory`` (a dict); ``gpu_harness`` gives the same interface over real
torch pools, so the same traces run against tensors and copies the hardware performs.

Copies have the shape a serving runtime gives them: ``start_copy`` begins one, ``finish_copy``
makes it land. A real copy may read its source and write its destination at any moment in
between, so the kit fixes what that means, the same for every memory: a destination reads
``POISON`` until its copy lands; a copy whose source was written while it was in flight, whose
destination someone else wrote (or began another copy into) meanwhile, or that failed, leaves
``POISON``: garbage, never the old KV. The outcome never depends on timing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from kvconf.conformance.violation import Violation
from kvconf.reference.tiers import Tier

POISON = -1  # what a failed, raced or unfinished copy leaves in its destination
DROPPED = -2  # KV the runtime dropped behind a sliding window
TORN = -3  # a page whose slots disagree, where one tag per page was expected
ZEROED = -4  # a fresh page the plan told the runtime to zero (PLAN-11)
RESERVED = frozenset({POISON, DROPPED, TORN, ZEROED})


@runtime_checkable
class KVMemory(Protocol):
    """Token slots of the device and host KV pools, each holding one content tag or None."""

    page_size: int

    def write(self, tier: Tier, pages: Sequence[int], slots: Sequence[int],
              tags: Sequence[int]) -> None:
        """Slot ``slots[k]`` of page ``pages[k]`` now holds ``tags[k]`` (one forward's writes)."""

    def read(self, tier: Tier, pages: Sequence[int], slots: Sequence[int]) -> list[int | None]:
        """The tag of each (page, slot); None where nothing was ever written."""

    def write_pages(self, tier: Tier, pages: Sequence[int], tags: Sequence[int]) -> None:
        """Every slot of page ``pages[k]`` holds ``tags[k]`` (a page-granular fill)."""

    def read_pages(self, tier: Tier, pages: Sequence[int]) -> list[int | None]:
        """One tag per page: its slots' common tag, ``TORN`` if they differ, None if unwritten."""

    def start_copy(self, src: Tier, dst: Tier, pairs: Sequence[tuple[int, int]]) -> Any:
        """Begin copying whole pages (source, destination); the destinations read ``POISON``
        until the copy lands. Returns a handle for ``finish_copy``."""

    def finish_copy(self, handle: Any, success: bool) -> list[int]:
        """Land the copy (or fail it). Returns the source pages that changed while it was in
        flight; their destinations hold ``POISON``."""


MemoryFactory = Callable[[int, int, int], KVMemory]  # (page_size, device pages, host pages)


def page_id_space(engine: object, device_pages: int, host_pages: int) -> tuple[int, int]:
    """How many page ids each tier has: the pool sizes, unless the engine numbers its pages
    otherwise and says so with ``page_ids = (device, host)`` (TokenSpeed reserves device page 0).
    """
    ids = getattr(engine, "page_ids", None)
    return (int(ids[0]), int(ids[1])) if ids is not None else (device_pages, host_pages)


def state_id_space(engine: object, slots: int, host_slots: int) -> tuple[int, int]:
    """How many Mamba state slot ids each tier has: the pool sizes, unless the engine numbers
    its slots otherwise and says so with ``state_ids = (device, host)`` (an engine whose states
    live in blocks of a pool shared with KV numbers them as pages of that pool)."""
    ids = getattr(engine, "state_ids", None)
    return (int(ids[0]), int(ids[1])) if ids is not None else (slots, host_slots)


def out_of_pool(tier: Tier, pages: Sequence[int], size: int) -> Exception | None:
    """A POOL-2 violation for the first page id outside a pool of ``size`` pages, if any."""
    bad = next((p for p in pages if not 0 <= p < size), None)
    if bad is None:
        return None
    return Violation("memory", ("POOL-2",),
                     f"{tier} page {bad} is outside the pool of {size} pages")


def copy_outcome(pairs: Sequence[tuple[int, int]], src_version: Sequence[int],
                 dst_version: Sequence[int], src_now: Callable[[int], int],
                 dst_now: Callable[[int], int], success: bool) -> tuple[list[int], set[int]]:
    """The copy rule, whatever holds the pages: the sources written while a copy was in flight,
    and the destinations left holding poison (those of a failed copy, of a raced source, and
    ones someone else wrote after the copy claimed them). ``*_now`` read a page's write count."""
    raced: list[int] = []
    poisoned: set[int] = set()
    for (s, d), sv, dv in zip(pairs, src_version, dst_version, strict=True):
        moved = src_now(s) != sv
        if moved:
            raced.append(s)
        if not success or moved or dst_now(d) != dv:
            poisoned.add(d)
    return raced, poisoned


@dataclass(slots=True)
class _Copy:
    src: Tier
    dst: Tier
    pairs: tuple[tuple[int, int], ...]
    src_version: tuple[int, ...]  # of each source page when the copy started
    dst_version: tuple[int, ...]  # of each destination page once the copy claimed it
    done: bool = False


@dataclass(slots=True)
class ShadowMemory:
    """The kit's own memory: a dict from (tier, page) to the page's slot tags."""

    page_size: int
    sizes: dict[Tier, int] | None = None  # pool sizes, to reject page ids outside them
    cells: dict[tuple[Tier, int], list[int | None]] = field(default_factory=dict)
    version: dict[tuple[Tier, int], int] = field(default_factory=dict)  # writes per page
    landing: dict[tuple[Tier, int], int] = field(default_factory=dict)  # copies into a page
    # Every change any read could see, counted: an oracle that read the memory when the count
    # was n need not read it again while it is n (a memory without the count is read each time).
    writes: int = 0
    # The page of each of those changes, in order (``written_since``): an oracle that read
    # some pages when the count was n reads again only those written since.
    log: list[tuple[Tier, int]] = field(default_factory=list)

    def _check(self, tier: Tier, pages: Sequence[int]) -> None:
        if self.sizes is not None and pages:
            try:  # the usual case in two passes in C; the rest names the first page outside
                if min(pages) >= 0 and max(pages) < self.sizes[tier]:
                    return
            except TypeError:
                pass
            bad = out_of_pool(tier, pages, self.sizes[tier])
            if bad is not None:
                raise bad

    def _touch(self, tier: Tier, page: int) -> None:
        key = (tier, page)
        self.version[key] = self.version.get(key, 0) + 1
        self.writes += 1
        self.log.append(key)

    def written_since(self, mark: int) -> list[tuple[Tier, int]]:
        """The (tier, page) of every change since ``writes`` was ``mark``, repeats included."""
        return self.log[mark:]

    def _cell(self, tier: Tier, page: int) -> list[int | None]:
        cell = self.cells.get((tier, page))
        if cell is None:
            cell = self.cells[(tier, page)] = [None] * self.page_size
        return cell

    def write(self, tier: Tier, pages: Sequence[int], slots: Sequence[int],
              tags: Sequence[int]) -> None:
        self._check(tier, pages)
        for page, slot, tag in zip(pages, slots, tags, strict=True):
            self._cell(tier, page)[slot] = tag
            self._touch(tier, page)

    def read(self, tier: Tier, pages: Sequence[int], slots: Sequence[int]) -> list[int | None]:
        self._check(tier, pages)
        out: list[int | None] = []
        for page, slot in zip(pages, slots, strict=True):
            cell = self.cells.get((tier, page))
            out.append(POISON if self.landing.get((tier, page)) else
                       None if cell is None else cell[slot])
        return out

    def write_pages(self, tier: Tier, pages: Sequence[int], tags: Sequence[int]) -> None:
        self._check(tier, pages)
        for page, tag in zip(pages, tags, strict=True):
            self.cells[(tier, page)] = [tag] * self.page_size
            self._touch(tier, page)

    def read_pages(self, tier: Tier, pages: Sequence[int]) -> list[int | None]:
        self._check(tier, pages)
        out: list[int | None] = []
        for page in pages:
            cell = self.cells.get((tier, page))
            if self.landing.get((tier, page)):
                out.append(POISON)
            elif cell is None:
                out.append(None)
            else:
                first = cell[0]
                out.append(first if cell.count(first) == len(cell) else TORN)
        return out

    def start_copy(self, src: Tier, dst: Tier, pairs: Sequence[tuple[int, int]]) -> _Copy:
        self._check(src, [s for s, _d in pairs])
        self._check(dst, [d for _s, d in pairs])
        src_version = tuple(self.version.get((src, s), 0) for s, _d in pairs)
        for _s, d in pairs:  # claiming a page is a write: a copy already landing there is torn
            self._touch(dst, d)
            self.landing[(dst, d)] = self.landing.get((dst, d), 0) + 1
        dst_version = tuple(self.version[(dst, d)] for _s, d in pairs)
        return _Copy(src, dst, tuple(pairs), src_version, dst_version)

    def finish_copy(self, handle: _Copy, success: bool) -> list[int]:
        if handle.done:
            raise ValueError("this copy has landed already")
        handle.done = True
        src, dst = handle.src, handle.dst
        raced, poisoned = copy_outcome(
            handle.pairs, handle.src_version, handle.dst_version,
            lambda pg: self.version.get((src, pg), 0), lambda pg: self.version[(dst, pg)],
            success)
        for s, d in handle.pairs:
            self.landing[(dst, d)] -= 1
            if d in poisoned:
                self.cells[(dst, d)] = [POISON] * self.page_size
            else:
                seen = self.cells.get((src, s))  # unchanged since the copy started
                self.cells[(dst, d)] = list(seen) if seen else [None] * self.page_size
        for _s, d in handle.pairs:
            self._touch(handle.dst, d)
        return raced


def shadow_memory(page_size: int, device_pages: int, host_pages: int) -> ShadowMemory:
    """The default ``MemoryFactory``."""
    return ShadowMemory(page_size, {Tier.DEVICE: device_pages, Tier.HOST: host_pages})


@runtime_checkable
class StateMemory(Protocol):
    """Mamba state slots of the device and host pools, one content tag per slot (chapter mamba).

    Copies follow the same rule as KV pages: a destination reads ``POISON`` until its copy
    lands, and a raced or failed copy leaves ``POISON``."""

    def write_states(self, tier: Tier, slots: Sequence[int], tags: Sequence[int]) -> None: ...

    def read_states(self, tier: Tier, slots: Sequence[int]) -> list[int | None]: ...

    def start_copy(self, src: Tier, dst: Tier, pairs: Sequence[tuple[int, int]]) -> Any: ...

    def finish_copy(self, handle: Any, success: bool) -> list[int]: ...


class ShadowStates:
    """The kit's own state memory: a shadow memory whose pages are one-slot states."""

    def __init__(self, device_slots: int, host_slots: int) -> None:
        self.mem = ShadowMemory(1, {Tier.DEVICE: device_slots, Tier.HOST: host_slots})

    def write_states(self, tier: Tier, slots: Sequence[int], tags: Sequence[int]) -> None:
        self.mem.write_pages(tier, slots, tags)

    def read_states(self, tier: Tier, slots: Sequence[int]) -> list[int | None]:
        return self.mem.read_pages(tier, slots)

    def start_copy(self, src: Tier, dst: Tier, pairs: Sequence[tuple[int, int]]) -> _Copy:
        return self.mem.start_copy(src, dst, pairs)

    def finish_copy(self, handle: _Copy, success: bool) -> list[int]:
        return self.mem.finish_copy(handle, success)


def state_memory(kv: KVMemory, device_slots: int, host_slots: int) -> StateMemory:
    """The Mamba state memory beside ``kv``: the KV memory's own (``kv.states(...)``, e.g. the
    GPU harness's torch pools) where it offers one, the shadow otherwise."""
    make = getattr(kv, "states", None)
    return make(device_slots, host_slots) if make is not None else ShadowStates(device_slots,
                                                                                host_slots)
