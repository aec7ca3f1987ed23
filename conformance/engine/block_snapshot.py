"""The white-box view of a hash-keyed prefix cache (POOL-7): blocks, not a tree of nodes.

A cache such as vLLM's ``BlockPool`` keeps no tree. Each block of its pool has a reference count
(the block tables holding it, and the caller while it fills the block) and may be cached under
a chained block hash; one free queue holds every block no table holds, cached or not, in the
order they are reused; a map from hash to blocks serves matches, and may list several blocks
under one hash (TREE-5 lets a cache keep a duplicate). A tree snapshot cannot say that, so such
an engine declares ``block_snapshot`` and its ``snapshot()`` returns a ``BlockSnapshot``; the
block-pool oracle (``conformance/oracles/block_pool.py``) reads it. Everything in it is the
engine's own state, read and never derived by the kit, except what a hash stands for
(``ChainLink``): the engine keeps only the hash, so the adapter records the parent, namespace
and tokens of every hash the engine computed for a request it was given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True, frozen=True)
class BlockView:
    """One block of the pool: its reference count and the hashes it is cached under."""

    id: int
    ref: int
    hashes: tuple[int, ...]  # () for a block that is not cached


@dataclass(slots=True, frozen=True)
class ChainLink:
    """What a cached hash stands for: the page of ``tokens`` after the prefix hashed ``parent``
    (None: the first page of a namespace's prefix)."""

    parent: int | None
    namespace: int
    tokens: tuple[int, ...]


@dataclass(slots=True, frozen=True)
class TableView:
    """A block table the engine keeps: the blocks a holder (one of the caller's locks, by its
    handle; None for a holder the caller does not know) holds, in prefix order."""

    handle: Any
    pages: tuple[int, ...]


@dataclass(slots=True, eq=True)
class BlockSnapshot:
    """A hash-keyed cache as the engine holds it (POOL-7)."""

    page_size: int
    blocks: tuple[BlockView, ...]  # every block of the pool, by id
    reserved: tuple[int, ...]  # blocks never handed out nor cached (vLLM's null block)
    free: tuple[int, ...]  # the free queue, the next block to be reused first
    cached: dict[int, tuple[int, ...]]  # hash -> the blocks cached under it, served first first
    links: dict[int, ChainLink]  # what each cached hash stands for
    tables: tuple[TableView, ...]  # the engine's block tables

    def children(self) -> dict[tuple[int | None, int, tuple[int, ...]], int]:
        """(parent hash, namespace, tokens) -> the cached hash of that page: the chain a
        query follows."""
        return {(ln.parent, ln.namespace, ln.tokens): h for h, ln in self.links.items()
                if h in self.cached}

    def chain(self, namespace: int, tokens: tuple[int, ...] | list[int],
              index: dict | None = None) -> list[int]:
        """The hashes of the longest whole-page prefix of ``tokens`` cached in ``namespace``."""
        kids = self.children() if index is None else index
        p, out = self.page_size, []
        parent: int | None = None
        for i in range(0, len(tokens) - p + 1, p):
            h = kids.get((parent, namespace, tuple(tokens[i : i + p])))
            if h is None:
                break
            out.append(h)
            parent = h
        return out
