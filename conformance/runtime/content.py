"""The content model: what a page must hold, derived from (namespace, prefix) alone (TREE-2).

The kit writes a tag into every page it fills and checks the tag of every page an engine serves.
A tag identifies the namespace and the whole token prefix up to the end of the page, so a wrong
match, a wrong split, a copy to the wrong page or a namespace leak all show as a wrong tag.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

_TAG = hashlib.blake2b(digest_size=8, person=b"kvconf-tag")  # copied for each page: its hash


# The tags of the prefixes asked for lately: a walk fills, matches and locks the same prompts
# again and again, and each tag is a hash per page. A pure function of its key; emptied when
# full, so it stays small.
_MEMO: dict[tuple, tuple[int, ...]] = {}
_MEMO_SIZE = 1 << 14


def page_tags(namespace: int, tokens: Sequence[int], page_size: int) -> list[int]:
    """Tag of each whole page of ``tokens``: tag i stands for (namespace, tokens[: (i+1)*P])."""
    whole = len(tokens) // page_size * page_size
    key = (namespace, page_size, tuple(tokens[:whole]))
    tags = _MEMO.get(key)
    if tags is None:
        if len(_MEMO) >= _MEMO_SIZE:
            _MEMO.clear()
        tags = _MEMO[key] = tuple(_page_tags(namespace, tokens, page_size))
    return list(tags)


def _page_tags(namespace: int, tokens: Sequence[int], page_size: int) -> list[int]:
    out: list[int] = []
    prev = namespace.to_bytes(8, "little", signed=True)
    whole = len(tokens) // page_size * page_size
    try:  # each token as 4 little-endian bytes, packed at once
        packed = struct.pack(f"<{whole}I", *tokens[:whole])
    except struct.error:  # a token outside 32 bits: its low 32 bits, one by one
        packed = b"".join((t & 0xFFFFFFFF).to_bytes(4, "little") for t in tokens[:whole])
    step = 4 * page_size
    for start in range(0, len(packed), step):
        h = _TAG.copy()
        h.update(prev)
        h.update(packed[start : start + step])
        prev = h.digest()
        out.append(int.from_bytes(prev, "little"))
    return out


def position_tags(ns: int, tokens: Sequence[int], start: int, prev: bytes | None) -> list[int]:
    """Tags of positions ``start..``; tag i stands for (namespace, tokens[: i + 1])."""
    out = []
    h = prev if prev is not None else ns.to_bytes(8, "little", signed=True)
    for t in tokens[start:]:
        h = hashlib.blake2b(h + t.to_bytes(4, "little"), digest_size=8).digest()
        out.append(int.from_bytes(h, "little"))
    return out


# The position tags of the prompts asked for lately: the at-rest request after every workload
# of a configuration, a hybrid request at each of its writes and reads. A pure function of its
# key; emptied when full, so it stays small.
_PROMPTS: dict[tuple[int, tuple[int, ...]], list[int]] = {}
_PROMPTS_SIZE = 4096


def prompt_tags(ns: int, tokens: Sequence[int]) -> list[int]:
    """``position_tags`` of every position of ``tokens`` from the start. Shared between
    callers: read it, never change it."""
    key = (ns, tuple(tokens))
    got = _PROMPTS.get(key)
    if got is None:
        if len(_PROMPTS) >= _PROMPTS_SIZE:
            _PROMPTS.clear()
        got = _PROMPTS[key] = position_tags(ns, tokens, 0, None)
    return got
