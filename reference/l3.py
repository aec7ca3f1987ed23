"""L3 store keys and transfers at the cache level (spec chapter l3_store, L3-1..).

An L3 store outlives the device and host tiers and is shared by engines, so a page is found there
by a key computed from its content alone: the rolling key of page i is SHA-256 over the key of
page i - 1 and page i's tokens; the first page's predecessor is a seed that mixes in the
namespace (D268-7), so the same tokens under two adapters never share a key.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from kvconf.reference.radix_tree import Node


def seed_key(namespace: int) -> bytes:
    """The predecessor of a namespace's first page: empty for the base model (namespace 0), so
    base-model keys are the plain chained hashes; the namespace's bytes for an adapter."""
    return b"" if namespace == 0 else b"ns" + namespace.to_bytes(8, "little", signed=True)


def rolling_keys(prev: bytes, tokens: Sequence[int], page_size: int) -> list[bytes]:
    """Keys of the consecutive full pages of ``tokens``, chained from ``prev`` (L3-1)."""
    out: list[bytes] = []
    for start in range(0, len(tokens) - page_size + 1, page_size):
        h = hashlib.sha256(prev)
        h.update(b"".join((t & 0xFFFFFFFF).to_bytes(4, "little")
                          for t in tokens[start : start + page_size]))
        prev = h.digest()
        out.append(prev)
    return out


@dataclass(slots=True)
class L3Transfer:
    """A prefetch (L3 -> host) or backup (host -> L3) in flight.

    ``node`` is the anchor: for a prefetch the host match the fetched pages hang below, for a
    backup the deepest node backed up. ``start`` is the index of the first page in its sequence;
    ``tokens`` are the tokens of the fetched pages (prefetch only). The locks pin the anchor on
    host until the transfer ends (L3-4, L3-5).
    """

    op_id: int
    kind: str  # "prefetch" or "backup"
    node: Node = field(repr=False)
    namespace: int
    start: int
    pages: list[int]  # host pages: destinations of a prefetch, sources of a backup
    keys: list[bytes]
    tokens: tuple[int, ...]
    locks: list[int]
