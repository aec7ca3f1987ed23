"""The content model: what a page must hold, derived from (namespace, prefix) alone (TREE-2).

The kit writes a tag into every page it fills and checks the tag of every page an engine serves.
A tag identifies the namespace and the whole token prefix up to the end of the page, so a wrong
match, a wrong split, a copy to the wrong page or a namespace leak all show as a wrong tag.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def page_tags(namespace: int, tokens: Sequence[int], page_size: int) -> list[int]:
    """Tag of each whole page of ``tokens``: tag i stands for (namespace, tokens[: (i+1)*P])."""
    out: list[int] = []
    prev = namespace.to_bytes(8, "little", signed=True)
    for start in range(0, len(tokens) - page_size + 1, page_size):
        h = hashlib.blake2b(prev, digest_size=8, person=b"kvconf-tag")
        page = tokens[start : start + page_size]
        h.update(b"".join((t & 0xFFFFFFFF).to_bytes(4, "little") for t in page))
        prev = h.digest()
        out.append(int.from_bytes(prev, "little"))
    return out
