"""The kit's L3 store: what the runtime keeps below the host tier (spec chapter l3_store).

Content-addressed like a real one: a rolling key (L3-1) maps to the content tags of one page.
The kit computes keys itself, independently of any engine, so a key an engine names can be
checked against the prefix it must stand for. Transfers are performed by the scheduler driver,
which fills the store from the trace's preloads and from backups and serves prefetches from it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

PageContent = tuple[int | None, ...]  # the tag of each token slot of one page


def l3_keys(namespace: int, tokens: Sequence[int], page_size: int,
            prev: str | None = None) -> list[str]:
    """Hex rolling keys of the full pages of ``tokens``, chained from ``prev`` (the key of the
    page before them) or, without it, from the namespace's seed (L3-1)."""
    if prev is not None:
        h = bytes.fromhex(prev)
    else:
        h = b"" if namespace == 0 else b"ns" + namespace.to_bytes(8, "little", signed=True)
    out: list[str] = []
    for start in range(0, len(tokens) - page_size + 1, page_size):
        page = tokens[start : start + page_size]
        h = hashlib.sha256(h + b"".join((t & 0xFFFFFFFF).to_bytes(4, "little")
                                        for t in page)).digest()
        out.append(h.hex())
    return out


@dataclass(slots=True)
class L3Store:
    """Key -> page content. Only the kit writes it: from preloads and from landed backups."""

    pages: dict[str, PageContent] = field(default_factory=dict)

    def put(self, key: str, content: PageContent) -> None:
        self.pages[key] = content

    def get(self, key: str) -> PageContent | None:
        return self.pages.get(key)

    def hits(self, keys: Sequence[str]) -> int:
        """How many leading keys the store holds: the pages a prefetch of them could land."""
        n = 0
        for k in keys:
            if k not in self.pages:
                break
            n += 1
        return n
