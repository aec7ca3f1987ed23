"""Finite scopes: how many namespaces, tokens, pages, lock and transfer slots, requests.

A *position* is one page of one prefix: ``(namespace, tokens)`` with ``1 <= len(tokens) <=
depth`` over the alphabet ``1..tokens`` (page size 1). The reference compresses runs of pages
into one node; the model keeps one position per page, so a reference node of k pages is k
positions and a split changes nothing the model sees (TREE-4).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Scope:
    namespaces: int = 2
    tokens: int = 1  # alphabet size
    depth: int = 2  # deepest prefix, in pages
    device_pages: int = 2
    host_pages: int = 2
    locks: int = 1  # lock slots the caller (the kit) can hold at once
    transfers: int = 1  # transfers in flight at once
    requests: int = 1
    positions: tuple[tuple[int, tuple[int, ...]], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("namespaces", "tokens", "depth", "device_pages"):
            if getattr(self, name) < 1:
                raise ValueError(f"scope {name} must be >= 1, got {getattr(self, name)}")
        for name in ("host_pages", "locks", "transfers", "requests"):
            if getattr(self, name) < 0:
                raise ValueError(f"scope {name} must be >= 0, got {getattr(self, name)}")
        pos = [(ns, toks) for ns in range(self.namespaces) for d in range(1, self.depth + 1)
               for toks in itertools.product(range(1, self.tokens + 1), repeat=d)]
        object.__setattr__(self, "positions", tuple(pos))

    # ------------------------------------------------------------------ position helpers
    @property
    def n(self) -> int:
        return len(self.positions)

    def index(self, ns: int, tokens: tuple[int, ...]) -> int:
        return self.positions.index((ns, tuple(tokens)))

    def ns(self, x: int) -> int:
        return self.positions[x][0]

    def tokens_of(self, x: int) -> tuple[int, ...]:
        return self.positions[x][1]

    def depth_of(self, x: int) -> int:
        return len(self.positions[x][1])

    def parent(self, x: int) -> int:
        """Parent position, or -1 for a page right below the namespace's root."""
        ns, toks = self.positions[x]
        return self.index(ns, toks[:-1]) if len(toks) > 1 else -1

    def path(self, x: int) -> list[int]:
        """Positions from the top of the namespace down to ``x``, both included."""
        ns, toks = self.positions[x]
        return [self.index(ns, toks[:k]) for k in range(1, len(toks) + 1)]

    def below(self, x: int) -> list[int]:
        """``x`` and every position under it (the positions whose path runs through ``x``)."""
        ns, toks = self.positions[x]
        return [y for y, (n, t) in enumerate(self.positions) if n == ns and t[: len(toks)] == toks]

    def children(self, x: int) -> list[int]:
        return [y for y in range(self.n) if self.parent(y) == x]

    def in_ns(self, ns: int) -> list[int]:
        return [y for y in range(self.n) if self.positions[y][0] == ns]

    def label(self, x: int) -> str:
        if x < 0:
            return "root"
        ns, toks = self.positions[x]
        return f"{ns}:{'.'.join(map(str, toks))}"

    def describe(self) -> str:
        return (f"{self.namespaces} ns x {self.tokens} tokens x depth {self.depth} "
                f"({self.n} positions), {self.device_pages} device / {self.host_pages} host "
                f"pages, {self.locks} locks, {self.transfers} transfers, "
                f"{self.requests} requests")


DEFAULT_SCOPE = Scope()
_KEYS = ("namespaces", "tokens", "depth", "device_pages", "host_pages", "locks", "transfers",
         "requests")


def parse_scope(text: str) -> Scope:
    """``key=value,...`` over :data:`DEFAULT_SCOPE` (the CLI's ``--scope``); ValueError names
    the bad key."""
    data = {k: getattr(DEFAULT_SCOPE, k) for k in _KEYS}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"-?\d+", value.strip()):
            raise ValueError(f"{item!r}: expected key=integer")
        if key.strip() not in data:
            raise ValueError(f"{key.strip()}: unknown key (keys: {', '.join(_KEYS)})")
        data[key.strip()] = int(value)
    return Scope(**data)
