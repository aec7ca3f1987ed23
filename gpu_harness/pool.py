"""A pool of tensors addressed by row (a page, or a Mamba state slot) and column (a token slot).

The harness writes a tag into every 8-byte word of a slot, so a copy that moves only part of a
slot (one layer, K without V, the conv state without the SSM state) reads back as torn.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from conformance.memory import POISON, TORN
from gpu_harness.tags import from_word, to_word, word_view


class TagPool:
    """Rows of one or more tensors on one device; ``views`` are their int64 words."""

    def __init__(self, tensors: Sequence[torch.Tensor], rows: int, cols: int) -> None:
        self.tensors = list(tensors)
        self.rows = rows
        self.cols = cols
        self.device = self.tensors[0].device
        self.views = [word_view(t, rows, cols) for t in self.tensors]

    def index(self, rows: Sequence[int]) -> torch.Tensor:
        return torch.tensor(list(rows), dtype=torch.int64, device=self.device)

    def _words(self, tags: Sequence[int]) -> torch.Tensor:
        return torch.tensor([to_word(t) for t in tags], dtype=torch.int64, device=self.device)

    @staticmethod
    def _tags(g: torch.Tensor) -> list[int | None]:
        """One tag per row of ``g`` (n x words): the common word, or TORN where they differ."""
        if g.shape[0] == 0:
            return []
        first = g[:, 0]
        same = (g == first[:, None]).all(dim=1)
        out = torch.where(same, first, torch.full_like(first, TORN))
        return [from_word(w) for w in out.tolist()]

    def write(self, rows: Sequence[int], cols: Sequence[int], tags: Sequence[int]) -> None:
        if not rows:
            return
        r, c, w = self.index(rows), self.index(cols), self._words(tags)
        for v in self.views:
            v[r, c] = w[:, None]

    def read(self, rows: Sequence[int], cols: Sequence[int]) -> list[int | None]:
        if not rows:
            return []
        r, c = self.index(rows), self.index(cols)
        return self._tags(torch.cat([v[r, c] for v in self.views], dim=1))

    def write_rows(self, rows: Sequence[int], tags: Sequence[int]) -> None:
        if not rows:
            return
        r, w = self.index(rows), self._words(tags)
        for v in self.views:
            v[r] = w[:, None, None]

    def read_rows(self, rows: Sequence[int]) -> list[int | None]:
        if not rows:
            return []
        r = self.index(rows)
        return self._tags(torch.cat([v[r].reshape(len(rows), -1) for v in self.views], dim=1))

    def poison(self, rows: Sequence[int]) -> None:
        self.write_rows(rows, [POISON] * len(rows))

    def gather(self, rows: torch.Tensor, out: Sequence[torch.Tensor] | None = None
               ) -> list[torch.Tensor]:
        """The words of ``rows``, one tensor per view (into ``out`` when given)."""
        if out is None:
            return [v.index_select(0, rows) for v in self.views]
        for v, o in zip(self.views, out, strict=True):
            torch.index_select(v, 0, rows, out=o)
        return list(out)

    def scatter(self, rows: torch.Tensor, parts: Sequence[torch.Tensor]) -> None:
        for v, part in zip(self.views, parts, strict=True):
            v.index_copy_(0, rows, part)
