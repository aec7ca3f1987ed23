"""The runtime's memory at the hybrid level: a content tag per KV position of every page, and a
state tag per Mamba slot, keyed by (pool, id) so that groups sharing a block pool share ids.

A KV tag stands for (namespace, tokens[0..i]) (``runtime.content.position_tags``); a state tag
for (namespace, tokens[0..d]) at depth d. What is read is compared with what its prefix implies,
so a page or slot overwritten, reused or named for the wrong prefix shows at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvconf.conformance.runtime.content import position_tags

STATE = "state"


class HybridMemory:
    def __init__(self, page_size: int) -> None:
        self.p = page_size
        self.cells: dict[tuple[str, int], Any] = {}  # KV page: list of tags; slot: (STATE, ...)
        self._tags: dict[tuple[int, tuple[int, ...]], list[int]] = {}

    def tags(self, ns: int, tokens: Sequence[int]) -> list[int]:
        key = (ns, tuple(tokens))
        got = self._tags.get(key)
        if got is None:
            if len(self._tags) > 4096:
                self._tags.clear()
            got = self._tags[key] = position_tags(ns, list(tokens), 0, None)
        return got

    def tag(self, ns: int, tokens: Sequence[int], i: int) -> int:
        return self.tags(ns, tokens)[i]

    def state_tag(self, ns: int, tokens: Sequence[int], depth: int) -> tuple:
        return (STATE, depth, self.tag(ns, tokens, depth - 1) if depth else ns)

    # ----------------------------------------------------------------- reads
    def kv_tag(self, pool: str, page: int, offset: int) -> Any:
        cell = self.cells.get((pool, page))
        if not isinstance(cell, list):
            return cell
        return cell[offset]

    def state(self, pool: str, slot: int) -> Any:
        return self.cells.get((pool, slot))

    @staticmethod
    def describe(got: Any) -> str:
        if got is None:
            return "nothing written"
        if isinstance(got, tuple) and got and got[0] == STATE:
            return f"a state of depth {got[1]}"
        if isinstance(got, list):
            return "KV, not a state"
        return f"KV tag {got:016x}" if isinstance(got, int) else repr(got)

    # ----------------------------------------------------------------- writes
    def write_kv(self, pool: str, page: int, offset: int, tag: int) -> None:
        cell = self.cells.get((pool, page))
        if not isinstance(cell, list):
            cell = self.cells[(pool, page)] = [None] * self.p
        cell[offset] = tag

    def write_state(self, pool: str, slot: int, ns: int, tokens: Sequence[int],
                    depth: int) -> None:
        self.cells[(pool, slot)] = self.state_tag(ns, tokens, depth)
