"""KV events and block hashes (spec EVENT-1..EVENT-6).

A block is one page of a cached prefix. Its hash chains from the parent block's hash, so the hash
of a block identifies the whole prefix up to it, and it mixes in the namespace so the same tokens
under two adapters never share a hash (D268-7).
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from hashlib import blake2b

from kvconf.reference.radix_tree import TOKEN


class EventKind(str, Enum):
    """The kinds of KV event, spelled as the engines' event streams spell them."""

    STORED = "BlockStored"
    REMOVED = "BlockRemoved"
    CLEARED = "AllBlocksCleared"


@dataclass(slots=True, unsafe_hash=True)
class KVEvent:
    """One event as published: a run of consecutive blocks of one node.

    Not frozen: one is made per stored or removed node, and a frozen slotted dataclass pays one
    ``object.__setattr__`` per field when made. Nothing changes one once made; events compare
    and hash by value.

    ``parent_hash`` is the hash of the block before the first one (None directly under a root);
    ``tokens`` are the tokens of all blocks in order; ``block_size`` tokens per block.
    """

    kind: EventKind
    block_hashes: tuple[int, ...]
    namespace: int = 0
    parent_hash: int | None = None
    tokens: tuple[int, ...] = ()
    block_size: int = 0


def token_bytes(tokens: Sequence[int]) -> bytes:
    """Each token as 4 little-endian bytes; a token wider than 32 bits enters by its low 32."""
    if _WORDS_LITTLE and type(tokens) is array and tokens.typecode == TOKEN:
        # The tree's own form, 8-byte little-endian words: the low 4 bytes of each, read in
        # place, with no int object made per token.
        return memoryview(tokens).cast("B").cast("I")[::2].tobytes()
    try:
        return struct.pack(f"<{len(tokens)}I", *tokens)
    except struct.error:
        return struct.pack(f"<{len(tokens)}I", *(t & 0xFFFFFFFF for t in tokens))


_WORDS_LITTLE = sys.byteorder == "little"


def _link(parent: int | None) -> bytes:
    """The has-parent flag (1 byte) and the parent hash (8 bytes, little-endian)."""
    return (b"\x01" if parent is not None else b"\x00") + (parent or 0).to_bytes(8, "little")


def _scope(namespace: int, count: int) -> bytes:
    """The namespace (8 bytes, little-endian, signed) and the token count (4 bytes)."""
    return namespace.to_bytes(8, "little", signed=True) + count.to_bytes(4, "little")


# ``_link`` and ``_scope`` together, packed in one call: the kit asks for a block hash for every
# block an event names (EVENT-4).
_HEAD = struct.Struct("<BQqI")


def block_hash(parent: int | None, namespace: int, tokens: Sequence[int]) -> int:
    """The reference's 64-bit block hash (EVENT-5).

    BLAKE2b over: a has-parent flag, the parent hash, the namespace, the token count and the
    tokens, each as little-endian integers; the spec fixes the inputs, an engine picks the
    function.
    """
    try:
        head = _HEAD.pack(parent is not None, parent or 0, namespace, len(tokens))
    except struct.error:  # out of range or not an int: raised as ``_link``/``_scope`` raise it
        head = _link(parent) + _scope(namespace, len(tokens))
    data = head + token_bytes(tokens)
    return int.from_bytes(blake2b(data, digest_size=8).digest(), "little")


def chain_hashes(
    parent: int | None, namespace: int, tokens: Sequence[int], page_size: int
) -> list[int]:
    """Hashes of consecutive full pages of ``tokens``, chained from ``parent``: each page's
    :func:`block_hash`, with the tokens packed once for all pages."""
    body, width = token_bytes(tokens), 4 * page_size
    scope = _scope(namespace, page_size)
    head = _link(parent) + scope  # what comes before a page's tokens
    out: list[int] = []
    for start in range(0, len(tokens) // page_size * width, width):
        digest = blake2b(head + body[start : start + width], digest_size=8).digest()
        out.append(int.from_bytes(digest, "little"))
        head = b"\x01" + digest + scope  # the next page's parent is this page: its digest
    return out
