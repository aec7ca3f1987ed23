"""The runtime's memory at the hybrid level: a content tag per KV position of every page, and a
state tag per Mamba slot, keyed by (pool, id) so that groups sharing a block pool share ids.

A KV tag stands for (namespace, tokens[0..i]) (``runtime.content.position_tags``); a state tag
for (namespace, tokens[0..d]) at depth d, a 64-bit hash of its own. What is read is compared with
what its prefix implies, so a page or slot overwritten, reused or named for the wrong prefix shows
at once.

What the tags are is fixed here; where they are kept is a ``HybridStore``: a dict (the kit's own,
``DictStore``) or torch pools (the GPU harness, ``kvconf.gpu_harness.hybrid``). A store keeps rows
(a page, or a state slot) of ``page_size`` cells; a state fills its whole row, so a state read
back from a row partly overwritten by KV, or KV from a state's row, shows as what it is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from kvconf.conformance.runtime.content import prompt_tags
from kvconf.conformance.runtime.memory import DROPPED, POISON, TORN, ZEROED
from kvconf.reference.hybrid_types import Group

Tag = int | None  # None: nothing written; the reserved negatives: poison, torn, ...


class HybridStore(Protocol):
    """Rows of ``page_size`` tag cells per pool name; ids are the engine's own."""

    def write(self, pool: str, rows: Sequence[int], cols: Sequence[int],
              tags: Sequence[int]) -> None: ...
    def read(self, pool: str, rows: Sequence[int], cols: Sequence[int]) -> list[Tag]: ...
    def write_rows(self, pool: str, rows: Sequence[int], tags: Sequence[int]) -> None: ...
    def read_rows(self, pool: str, rows: Sequence[int]) -> list[Tag]:
        """One tag per row: the tag all its cells hold, TORN where they differ."""


class DictStore:
    """The kit's own store: a list of tags per (pool, id)."""

    def __init__(self, page_size: int) -> None:
        self.p = page_size
        self.cells: dict[tuple[str, int], list[Tag]] = {}

    def _row(self, pool: str, row: int) -> list[Tag]:
        cell = self.cells.get((pool, row))
        if cell is None:
            cell = self.cells[(pool, row)] = [None] * self.p
        return cell

    def write(self, pool: str, rows: Sequence[int], cols: Sequence[int],
              tags: Sequence[int]) -> None:
        for r, c, t in zip(rows, cols, tags, strict=True):
            self._row(pool, r)[c] = t

    def read(self, pool: str, rows: Sequence[int], cols: Sequence[int]) -> list[Tag]:
        out: list[Tag] = []
        for r, c in zip(rows, cols, strict=True):
            cell = self.cells.get((pool, r))
            out.append(None if cell is None else cell[c])
        return out

    def write_rows(self, pool: str, rows: Sequence[int], tags: Sequence[int]) -> None:
        for r, t in zip(rows, tags, strict=True):
            self.cells[(pool, r)] = [t] * self.p

    def read_rows(self, pool: str, rows: Sequence[int]) -> list[Tag]:
        out: list[Tag] = []
        for r in rows:
            cell = self.cells.get((pool, r))
            if cell is None:
                out.append(None)
            else:
                out.append(cell[0] if all(x == cell[0] for x in cell) else TORN)
        return out


# (page size, the engine's groups, its pool sizes) -> the store a driver writes and reads.
StoreFactory = Callable[[int, Sequence[Group], Mapping[str, int]], HybridStore]


def dict_store(page_size: int, groups: Sequence[Group], pool_sizes: Mapping[str, int]
               ) -> HybridStore:
    return DictStore(page_size)


def store_of(memory: object) -> StoreFactory:
    """The hybrid level's store beside a run's KV memory factory: the factory's own ``hybrid``
    (the GPU harness's torch pools), else the kit's dict."""
    return getattr(memory, "hybrid", None) or dict_store


_WHAT = {POISON: "poison (a copy never landed)", TORN: "a torn value (its words disagree)",
         DROPPED: "KV dropped behind a window", ZEROED: "a zeroed page"}


class HybridMemory:
    """The tags the driver writes and the oracle expects, over ``store``."""

    def __init__(self, page_size: int, store: HybridStore | None = None) -> None:
        self.p = page_size
        self.store = store if store is not None else DictStore(page_size)
        self.depths: dict[int, int] = {}  # state tag written -> its depth (for messages)

    def tags(self, ns: int, tokens: Sequence[int]) -> list[int]:
        """The KV tag of every position of ``tokens`` (shared: read it, never change it)."""
        return prompt_tags(ns, tokens)

    def tag(self, ns: int, tokens: Sequence[int], i: int) -> int:
        return self.tags(ns, tokens)[i]

    def state_tag(self, ns: int, tokens: Sequence[int], depth: int) -> int:
        """The tag of the state after ``depth`` tokens: a hash of the KV tag of its last
        position (of the namespace at depth 0), apart from every KV tag."""
        seed = (self.tag(ns, tokens, depth - 1).to_bytes(8, "little") if depth
                else ns.to_bytes(8, "little", signed=True))
        h = hashlib.blake2b(b"mamba-state" + seed + depth.to_bytes(8, "little"), digest_size=8)
        return int.from_bytes(h.digest(), "little")

    # ----------------------------------------------------------------- reads
    def kv_tags(self, pool: str, pages: Sequence[int], offsets: Sequence[int]) -> list[Tag]:
        return self.store.read(pool, pages, offsets)

    def state(self, pool: str, slot: int) -> Tag:
        return self.store.read_rows(pool, [slot])[0]

    def describe(self, got: Tag) -> str:
        if got is None:
            return "nothing written"
        if got in _WHAT:
            return _WHAT[got]
        if got in self.depths:
            return f"a state of depth {self.depths[got]}"
        return f"KV tag {got:016x}"

    # ----------------------------------------------------------------- writes
    def write_kv(self, pool: str, pages: Sequence[int], offsets: Sequence[int],
                 tags: Sequence[int]) -> None:
        self.store.write(pool, pages, offsets, tags)

    def write_state(self, pool: str, slot: int, ns: int, tokens: Sequence[int],
                    depth: int) -> None:
        tag = self.state_tag(ns, tokens, depth)
        self.depths[tag] = depth
        self.store.write_rows(pool, [slot], [tag])
