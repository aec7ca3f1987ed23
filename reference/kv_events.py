"""KV events and block hashes (spec EVENT-1..EVENT-6).

A block is one page of a cached prefix. Its hash chains from the parent block's hash, so the hash
of a block identifies the whole prefix up to it, and it mixes in the namespace so the same tokens
under two adapters never share a hash (D268-7).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from hashlib import blake2b


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


_HEAD = struct.Struct("<?QqI")  # has-parent flag, parent hash, namespace (signed), token count


def token_bytes(tokens: Sequence[int]) -> bytes:
    """Each token as 4 little-endian bytes; a token wider than 32 bits enters by its low 32."""
    try:
        return struct.pack(f"<{len(tokens)}I", *tokens)
    except struct.error:
        return struct.pack(f"<{len(tokens)}I", *(t & 0xFFFFFFFF for t in tokens))


def block_hash(parent: int | None, namespace: int, tokens: Sequence[int]) -> int:
    """The reference's 64-bit block hash (EVENT-5).

    BLAKE2b over: a has-parent flag, the parent hash, the namespace, the token count and the
    tokens, each as little-endian integers (1, 8, 8 signed, 4 and 4 bytes each); the spec fixes
    the inputs, an engine picks the function.
    """
    head = _HEAD.pack(parent is not None, parent or 0, namespace, len(tokens))
    return int.from_bytes(blake2b(head + token_bytes(tokens), digest_size=8).digest(), "little")


def chain_hashes(
    parent: int | None, namespace: int, tokens: Sequence[int], page_size: int
) -> list[int]:
    """Hashes of consecutive full pages of ``tokens``, chained from ``parent``: each page's
    :func:`block_hash`, with the tokens packed once for all pages."""
    body, width = token_bytes(tokens), 4 * page_size
    out: list[int] = []
    for start in range(0, len(tokens) // page_size * width, width):
        head = _HEAD.pack(parent is not None, parent or 0, namespace, page_size)
        data = head + body[start : start + width]
        parent = int.from_bytes(blake2b(data, digest_size=8).digest(), "little")
        out.append(parent)
    return out
