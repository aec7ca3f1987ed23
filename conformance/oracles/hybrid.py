"""The hybrid cache level's oracle: what every hit, admission and chunk must satisfy, judged
against the runtime's memory of pages and state slots (``conformance/hybrid/memory.py``: a dict,
or torch pools under ``kvconf gpu``).

Black-box: it needs nothing but the calls. A hit's pages and states must hold the content their
prefix implies (TREE-2, WIN-3, MAMBA-3); the combined hit must be the deepest every group
serves and the one an admission adopts (WIN-6); a chunk must have a page in every attention
table for every position it computes (WIN-3), give back only window pages it no longer reads
(WIN-4), never hand out a page or state slot a live request holds (POOL-2, MAMBA-8), and resume
from a state of exactly its start depth (MAMBA-1). A decode row is held to the same, and hands
out a page per attention table only where its one position begins a page (WIN-7).
"""

from __future__ import annotations

from collections.abc import Sequence

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.hybrid import (
    Admitted,
    Extended,
    GroupHit,
    HybridEngine,
    HybridHit,
)
from kvconf.conformance.hybrid.memory import HybridMemory
from kvconf.conformance.oracles.base import Oracle
from kvconf.conformance.violation import Violation

NAME = "hybrid"
BEHAVIOURS = ("TREE-1", "TREE-2", "WIN-3", "WIN-4", "WIN-6", "WIN-7", "MAMBA-1", "MAMBA-3",
              "MAMBA-8", "MAMBA-11", "POOL-2", "POOL-5")


def fail(behaviours: str | Sequence[str], message: str) -> Violation:
    ids = (behaviours,) if isinstance(behaviours, str) else tuple(behaviours)
    assert all(b in BEHAVIOURS for b in ids), ids
    return Violation(NAME, ids, message)


def cap_of(engine: HybridEngine, tokens: Sequence[int]) -> int:
    """The deepest whole-page length a hit of ``tokens`` may reach (TREE-1; TREE-7 for an
    engine that leaves the last token to compute)."""
    n = len(tokens) - 1 if Feature.MATCH_LEAVES_LAST in engine.features else len(tokens)
    return max(0, n) // engine.page_size * engine.page_size


class HybridOracle(Oracle):
    """Judges one engine's calls; ``mem`` is the runtime's memory the driver writes."""

    name = NAME
    behaviours = BEHAVIOURS
    # POOL-5 at rest, where the driver brought the engine there; WIN-7 where a decode row ran.
    conditional = ("POOL-5", "WIN-7")

    def __init__(self, engine: HybridEngine, mem: HybridMemory) -> None:
        self.engine = engine
        self.mem = mem
        self.p = engine.page_size

    # ----------------------------------------------------------------- content
    def pages_hold(self, what: str, pool: str, table: Sequence[int | None], ns: int,
                   tokens: Sequence[int], positions: range, rule: str | tuple[str, ...]) -> None:
        """Every position in ``positions`` is read through ``table`` and must hold its tag."""
        if not positions:
            return
        pages: list[int] = []
        for i in positions:
            j = i // self.p
            page = table[j] if j < len(table) else None
            if page is None:
                raise fail(rule, f"{what}: position {i} is read but its page (index {j}) is "
                                 "a hole or missing")
            pages.append(page)
        got = self.mem.kv_tags(pool, pages, [i % self.p for i in positions])
        want = self.mem.tags(ns, tokens)[positions.start:positions.stop]
        if got == want:
            return
        k = next(k for k, (a, b) in enumerate(zip(got, want, strict=True)) if a != b)
        i = positions[k]
        raise fail(rule, f"{what}: page {pages[k]} (index {i // self.p}) holds "
                         f"{self.mem.describe(got[k])} at position {i}, not the KV of its own "
                         "prefix")

    def state_holds(self, what: str, pool: str, slot: int | None, ns: int,
                    tokens: Sequence[int], depth: int, rule: str | tuple[str, ...]) -> None:
        if slot is None:
            raise fail(rule, f"{what}: no state slot for depth {depth}")
        got = self.mem.state(pool, slot)
        if got != self.mem.state_tag(ns, tokens, depth):
            raise fail(rule, f"{what}: state slot {slot} holds {self.mem.describe(got)}, not the "
                             f"state of depth {depth} of this prefix")

    # ----------------------------------------------------------------- hits
    def group_serves(self, g_index: int, got: GroupHit, ns: int, tokens: Sequence[int],
                     what: str) -> None:
        g = self.engine.groups[g_index]
        n = got.length
        if g.kind == "mamba":
            if n:
                self.state_holds(f"{what} (Mamba group, {n} tokens)", g.pool, got.state, ns,
                                 tokens, n, "MAMBA-3")
            return
        if len(got.pages) != n // self.p:
            raise fail("TREE-1", f"{what} ({g.kind} group): {len(got.pages)} pages for a hit of "
                                 f"{n} tokens")
        if g.kind == "full":
            self.pages_hold(f"{what} (full group)", g.pool, got.pages, ns, tokens, range(n),
                            "TREE-2")
        else:
            self.pages_hold(f"{what} (window group)", g.pool, got.pages, ns, tokens,
                            range(max(0, n - g.window + 1), n), "WIN-3")

    def check_hit(self, hit: HybridHit, ns: int, tokens: Sequence[int]) -> None:
        groups = self.engine.groups
        cap = cap_of(self.engine, tokens)
        if len(hit.groups) != len(groups):
            raise fail("WIN-6", f"the hit reports {len(hit.groups)} groups, the engine has "
                                f"{len(groups)}")
        for i, got in enumerate(hit.groups):
            if got.length % self.p or not 0 <= got.length <= cap:
                raise fail("TREE-1", f"the {groups[i].kind} group's hit is {got.length} tokens; "
                                     f"whole pages up to {cap} are allowed")
            self.group_serves(i, got, ns, tokens, "hit")
        lengths = [g.length for g in hit.groups]
        if hit.length % self.p or not 0 <= hit.length <= min(lengths):
            alone = dict(zip((g.kind for g in groups), lengths, strict=True))
            raise fail("WIN-6", f"the combined hit is {hit.length} tokens, but the groups alone "
                                f"serve {alone}")
        for c in sorted(set(lengths), reverse=True):
            if c > hit.length and all(self._known(groups[i].kind, got, c, lengths[0])
                                      for i, got in enumerate(hit.groups)):
                raise fail("WIN-6", f"every group serves {c} tokens (by the engine's own "
                                    f"per-group hits) but the combined hit is {hit.length}")

    @staticmethod
    def _known(kind: str, got: GroupHit, c: int, full: int) -> bool:
        """Whether group ``kind`` is known to serve ``c`` tokens from its own hit."""
        return c <= full if kind == "full" else c == got.length

    def check_admit(self, adm: Admitted, hit: HybridHit, ns: int, tokens: Sequence[int]) -> None:
        if adm.length != hit.length:
            raise fail("WIN-6", f"admitted on {adm.length} tokens, but the hit of the same query "
                                f"just before was {hit.length}")
        groups = self.engine.groups
        if len(adm.tables) != len(groups):
            raise fail("WIN-6", f"{len(adm.tables)} tables for {len(groups)} groups")
        for i, g in enumerate(groups):
            if g.kind == "mamba":
                self.group_serves(i, GroupHit(adm.length, (), adm.state), ns, tokens, "admit")
            else:
                self.group_serves(i, GroupHit(adm.length, adm.tables[i], None), ns, tokens,
                                  "admit")

    # ----------------------------------------------------------------- chunks
    def chunk_end_limit(self, start: int) -> int | None:
        """The furthest a chunk from ``start`` may be played to this engine: the end of the
        page ``start`` lies in for an engine declaring mamba_aligned_chunks when ``start`` is
        inside a page (MAMBA-11); None: anywhere."""
        if Feature.MAMBA_ALIGNED_CHUNKS not in self.engine.features or not start % self.p:
            return None
        return -(-start // self.p) * self.p

    def check_released(self, rid: str, table: list[int | None], released: Sequence[int],
                       start: int, window: int) -> None:
        """Window pages given back must lie wholly before the row's first read (WIN-4)."""
        first_read = max(0, start - window + 1)
        for page in released:
            if page not in table:
                raise fail("WIN-4", f"{rid}: gave back window page {page}, which its window "
                                    "table does not hold")
            j = table.index(page)
            if (j + 1) * self.p > first_read:
                raise fail("WIN-4", f"{rid}: gave back window page {page} (positions "
                                    f"{j * self.p}..{(j + 1) * self.p - 1}) while a row computing "
                                    f"from {start} still reads from position {first_read}")

    def check_new(self, rid: str, kind: str, new: Sequence[int], held: set[int],
                  rule: str) -> None:
        for page in new:
            if page in held:
                raise fail(rule, f"{rid}: the engine handed out {kind} {page}, which a live "
                                 "request still holds")
            held.add(page)

    def check_decode(self, rid: str, ext: Extended, tables: Sequence[Sequence[int | None]],
                     start: int) -> None:
        """A decode row computes one position, ``start``: a page per attention table exactly
        where that position begins a page the table lacks, none otherwise (WIN-7)."""
        self.mark("WIN-7")
        for i, g in enumerate(self.engine.groups):
            if g.kind == "mamba":
                continue
            need = max(0, start // self.p + 1 - len(tables[i]))
            if len(ext.pages[i]) > need:
                raise fail("WIN-7", f"{rid}: a decode row computing position {start} handed out "
                                    f"{len(ext.pages[i])} pages of its {g.kind} group, which "
                                    f"needs {need}")

    def check_extend(self, rid: str, ext: Extended, upto: int) -> None:
        if len(ext.pages) != len(self.engine.groups) or len(ext.released) != len(
                self.engine.groups):
            raise fail("WIN-3", f"{rid}: extend reports {len(ext.pages)} page lists and "
                                f"{len(ext.released)} release lists for "
                                f"{len(self.engine.groups)} groups")
