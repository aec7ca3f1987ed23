"""The hybrid level's memory in torch pools: per block pool of the engine a KV page pool (the
pool its full-attention and window groups take pages from) or a Mamba state pool (conv and SSM
state per slot), on the harness's device.

The driver writes the tag of every position a row computes into every word of its token slot,
and the tag of a state into every word of its conv and SSM state; the oracle reads them back from
the tensors. So a page served for the wrong prefix, a window page handed on while still read, or
a state slot overwritten before it is resumed from reads back wrong, and a slot written in part
(one layer, the conv state without the SSM state) reads back torn. A state written into a KV pool
(a Mamba group sharing its block pool with attention, as some engines lay them out) fills every
token slot of the page.

Ids are the engine's own: each pool gives an id a row the first time it is named, in the order
they are named (DET-1), growing beyond the engine's declared size if it must, so the harness
never judges how an engine numbers its pages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial

import torch

from kvconf.conformance.hybrid.memory import Tag
from kvconf.gpu_harness.layout import KVLayout, MambaLayout
from kvconf.gpu_harness.mamba import mamba_pool
from kvconf.gpu_harness.pool import TagPool, kv_pool
from kvconf.reference.hybrid_types import Group


class _Rows:
    """One block pool: its tensors and the row each engine id was given."""

    def __init__(self, make: Callable[[int], TagPool], size: int) -> None:
        self.make = make  # rows -> a pool of that many rows
        self.pool: TagPool = make(max(1, size))
        self.row: dict[int, int] = {}

    def rows(self, ids: Sequence[int]) -> list[int]:
        out = []
        for i in ids:
            r = self.row.get(i)
            if r is None:
                r = self.row[i] = len(self.row)
            out.append(r)
        if len(self.row) > self.pool.rows:
            self._grow(2 * len(self.row))
        return out

    def _grow(self, rows: int) -> None:
        bigger = self.make(rows)
        n = self.pool.rows
        for old, new in zip(self.pool.views, bigger.views, strict=True):
            new[:n].copy_(old)
        self.pool = bigger


class TensorHybridStore:
    """The engine's block pools as torch tensors on ``device``."""

    def __init__(self, page_size: int, groups: Sequence[Group], pool_sizes: Mapping[str, int],
                 kv: KVLayout, mamba: MambaLayout, device: torch.device) -> None:
        states = {g.pool for g in groups if g.kind == "mamba"}
        attention = {g.pool for g in groups if g.kind != "mamba"}
        self.pools: dict[str, _Rows] = {}
        for name in sorted(states | attention | set(pool_sizes)):
            make = (partial(mamba_pool, layout=mamba, device=device)
                    if name in states and name not in attention
                    else partial(kv_pool, page_size=page_size, layout=kv, device=device))
            self.pools[name] = _Rows(make, int(pool_sizes.get(name, 0)))

    def _at(self, pool: str, ids: Sequence[int]) -> tuple[TagPool, list[int]]:
        rows = self.pools[pool]
        r = rows.rows(ids)
        return rows.pool, r

    def write(self, pool: str, rows: Sequence[int], cols: Sequence[int],
              tags: Sequence[int]) -> None:
        if rows:
            p, r = self._at(pool, rows)
            p.write(r, cols, tags)

    def read(self, pool: str, rows: Sequence[int], cols: Sequence[int]) -> list[Tag]:
        if not rows:
            return []
        p, r = self._at(pool, rows)
        return p.read(r, cols)

    def write_rows(self, pool: str, rows: Sequence[int], tags: Sequence[int]) -> None:
        if rows:
            p, r = self._at(pool, rows)
            p.write_rows(r, tags)

    def read_rows(self, pool: str, rows: Sequence[int]) -> list[Tag]:
        if not rows:
            return []
        p, r = self._at(pool, rows)
        return p.read_rows(r)


def tensor_hybrid(kv: KVLayout | None = None, mamba: MambaLayout | None = None,
                  device: torch.device | str = "cpu"):
    """A ``StoreFactory`` (``conformance/hybrid/memory.py``): fresh pools for every engine."""
    kv = kv or KVLayout()
    mamba = mamba or MambaLayout()
    dev = torch.device(device)

    def make(page_size: int, groups: Sequence[Group], pool_sizes: Mapping[str, int]
             ) -> TensorHybridStore:
        return TensorHybridStore(page_size, groups, pool_sizes, kv, mamba, dev)

    return make
