"""A pool of tensors addressed by row (a page, or a Mamba state slot) and column (a token slot).

The harness writes a tag into every 8-byte word of a slot, so a copy that moves only part of a
slot (one layer, K without V, the conv state without the SSM state) reads back as torn.

Beside the tensors a pool keeps, per row, a write counter and how many copies are landing in it. A
row a copy is landing in reads as poison whatever its bytes are at that moment, so what the kit sees
never depends on how far a transfer has got (``kvconf.conformance.runtime.memory`` says why)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvconf.conformance.runtime.memory import POISON, TORN
from kvconf.gpu_harness.layout import KVLayout
from kvconf.gpu_harness.tags import from_word, word_view, words


class TagPool:
    """Rows of one or more tensors on one device; ``views`` are their int64 words."""

    def __init__(self, tensors: Sequence[torch.Tensor], rows: int, cols: int) -> None:
        self.tensors = list(tensors)
        self.rows = rows
        self.cols = cols
        self.device = self.tensors[0].device
        self.views = [word_view(t, rows, cols) for t in self.tensors]
        self.row_bytes = sum(t[0].numel() * t.element_size() for t in self.tensors) if rows else 0
        self.version = [0] * rows  # writes to each row so far
        self.landing = [0] * rows  # copies in flight into each row

    def index(self, rows: Sequence[int]) -> torch.Tensor:
        return torch.tensor(list(rows), dtype=torch.int64, device=self.device)

    def _words(self, tags: Sequence[int]) -> torch.Tensor:
        return words(tags, self.device)

    def touched(self, rows: Sequence[int]) -> None:
        for r in set(rows):
            self.version[r] += 1

    def _tags(self, g: torch.Tensor, rows: Sequence[int]) -> list[int | None]:
        """One tag per row of ``g`` (n x words): the common word, TORN where they differ,
        POISON where a copy is landing in the row."""
        if g.shape[0] == 0:
            return []
        first = g[:, 0]
        same = (g == first[:, None]).all(dim=1)
        out = torch.where(same, first, torch.full_like(first, TORN))
        return [POISON if self.landing[r] else from_word(w)
                for r, w in zip(rows, out.tolist(), strict=True)]

    def write(self, rows: Sequence[int], cols: Sequence[int], tags: Sequence[int]) -> None:
        if not rows:
            return
        rows, cols, tags = _last_wins(zip(rows, cols, strict=True), tags)
        r, c, w = self.index(rows), self.index(cols), self._words(tags)
        for v in self.views:
            v[r, c] = w[:, None]
        self.touched(rows)

    def read(self, rows: Sequence[int], cols: Sequence[int]) -> list[int | None]:
        if not rows:
            return []
        r, c = self.index(rows), self.index(cols)
        return self._tags(torch.cat([v[r, c] for v in self.views], dim=1), rows)

    def write_rows(self, rows: Sequence[int], tags: Sequence[int]) -> None:
        if not rows:
            return
        cells, _cols, tags = _last_wins(((r, 0) for r in rows), tags)
        r, w = self.index(cells), self._words(tags)
        for v in self.views:
            v[r] = w[:, None, None]
        self.touched(rows)

    def read_rows(self, rows: Sequence[int]) -> list[int | None]:
        if not rows:
            return []
        r = self.index(rows)
        g = torch.cat([v[r].reshape(len(rows), -1) for v in self.views], dim=1)
        return self._tags(g, rows)

    def poison(self, rows: Sequence[int]) -> None:
        if not rows:
            return
        r = self.index(rows)
        for v in self.views:
            v.index_fill_(0, r, POISON)
        self.touched(rows)


    def gather(self, rows: torch.Tensor, pinned: bool = False) -> list[torch.Tensor]:
        """The words of ``rows``, one tensor per view (in pinned memory when asked)."""
        if not pinned:
            return [v.index_select(0, rows) for v in self.views]
        out = []
        for v in self.views:
            o = torch.empty((rows.numel(), *v.shape[1:]), dtype=v.dtype, pin_memory=True)
            torch.index_select(v, 0, rows, out=o)
            out.append(o)
        return out

    def scatter(self, rows: torch.Tensor, parts: Sequence[torch.Tensor]) -> None:
        for v, part in zip(self.views, parts, strict=True):
            v.index_copy_(0, rows, part)


def _last_wins(cells, tags: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
    """One write per cell, the last one: a scatter with repeated indices keeps an arbitrary
    one on CUDA, and the outcome must not depend on the device (DET-1)."""
    last = dict(zip(cells, tags, strict=True))
    return [r for r, _c in last], [c for _r, c in last], list(last.values())


def kv_pool(pages: int, page_size: int, layout: KVLayout, device: torch.device,
            pinned: bool = False) -> TagPool:
    """A KV page pool: ``pages`` rows of ``page_size`` token slots laid out as ``layout``."""
    t = torch.zeros(layout.shape(pages, page_size), dtype=layout.dtype, device=device,
                    pin_memory=pinned)
    return TagPool([t], pages, page_size)
