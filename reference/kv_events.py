"""KV events and block hashes (spec EVENT-1..EVENT-6).

A block is one page of a cached prefix. Its hash chains from the parent block's hash, so the hash
of a block identifies the whole prefix up to it, and it mixes in the namespace so the same tokens
under two adapters never share a hash (D268-7).
"""

from __future__ import annotations

import functools
import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum


class EventKind(str, Enum):
    """The kinds of KV event, spelled as the engines' event streams spell them."""

    STORED = "BlockStored"
    REMOVED = "BlockRemoved"
    CLEARED = "AllBlocksCleared"


@dataclass(slots=True, frozen=True)
class KVEvent:
    """One event as published: a run of consecutive blocks of one node.

    ``parent_hash`` is the hash of the block before the first one (None directly under a root);
    ``tokens`` are the tokens of all blocks in order; ``block_size`` tokens per block.
    """

    kind: EventKind
    block_hashes: tuple[int, ...]
    namespace: int = 0
    parent_hash: int | None = None
    tokens: tuple[int, ...] = ()
    block_size: int = 0


@functools.cache
def _layout(n: int) -> struct.Struct:
    """The bytes a block of ``n`` tokens is hashed from, little-endian: has-parent flag (1),
    parent hash (8), namespace (8, signed), token count (4), each token (4)."""
    return struct.Struct(f"<?QqI{n}I")


def block_hash(parent: int | None, namespace: int, tokens: Sequence[int]) -> int:
    """The reference's 64-bit block hash (EVENT-5).

    BLAKE2b over: a has-parent flag, the parent hash, the namespace, the token count and the
    tokens, each as little-endian integers (1, 8, 8 signed, 4 and 4 bytes; a token wider than
    32 bits enters by its low 32); the spec fixes the inputs, an engine picks the function.
    The whole block is packed at once: the same bytes as packing each field in turn.
    """
    n, layout = len(tokens), _layout(len(tokens))
    try:
        data = layout.pack(parent is not None, parent or 0, namespace, n, *tokens)
    except struct.error:  # a token outside 0..2**32-1: its low 32 bits
        data = layout.pack(parent is not None, parent or 0, namespace, n,
                           *(t & 0xFFFFFFFF for t in tokens))
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def chain_hashes(
    parent: int | None, namespace: int, tokens: Sequence[int], page_size: int
) -> list[int]:
    """Hashes of consecutive full pages of ``tokens``, chained from ``parent``."""
    out: list[int] = []
    for start in range(0, len(tokens) - page_size + 1, page_size):
        parent = block_hash(parent, namespace, tokens[start : start + page_size])
        out.append(parent)
    return out
