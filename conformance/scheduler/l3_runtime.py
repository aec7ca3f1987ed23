"""The runtime's side of L3 transfers, for the scheduler driver (spec chapter l3_store).

It owns the kit's L3 store, performs the prefetches and backups a plan lists through the KV memory
(``kvconf.conformance.runtime.memory``), ends each one as the trace's ``l3_acks`` say (now, a plan
later, half landed, lost), and checks every key, every backup's source and every prefetched page
that ends up in the tree. Requests are known to it only through the driver's ``Live`` records."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvconf.conformance.oracles.l3 import L3Oracle
from kvconf.conformance.oracles.scheduler import Live
from kvconf.conformance.oracles.tree_view import TreeView
from kvconf.conformance.runtime.content import position_tags
from kvconf.conformance.runtime.memory import POISON, KVMemory
from kvconf.conformance.scheduler.l3_store import L3Store, PageContent, l3_keys
from kvconf.conformance.scheduler.trace import SchedTrace
from kvconf.reference.plan import BackupDone, L3Op, PrefetchDone
from kvconf.reference.tiers import Tier


@dataclass(slots=True)
class Flight:
    op: L3Op
    mode: str  # "now", "later", "partial" or "lose"
    seen: list[PageContent]  # a backup's source pages as it found them when it started


class L3Runtime:
    def __init__(self, trace: SchedTrace, memory: KVMemory, page_size: int,
                 live: dict[str, Live], tag: Callable[[str, int], int],
                 checks: bool = True) -> None:
        """``checks`` off keeps only what reads the KV memory (a backup's source), as the
        driver's memory-only mode asks; keys, reuse and the tree are then not judged."""
        self.checks = checks
        self.p = page_size
        self.memory = memory
        self.live = live
        self.tag = tag  # (request, position) -> the content tag of that position
        self.oracle = L3Oracle()
        self.store = L3Store()
        self.modes = list(trace.l3_acks) or ["now"]
        self.count = 0
        self.later: list[Flight] = []
        self.keys: dict[str, list[str]] = {}  # request -> keys of its full pages so far
        self.fetched: dict[int, tuple[str, int]] = {}  # host page -> (request, page) it holds
        self.landed: dict[str, int] = {}  # request -> tokens its first chunk must reuse (L3-3)
        self.tree_passed: tuple | None = None  # what the last ``check_tree`` that held read
        for pre in trace.l3_preload:
            tags = _tags(pre.ns, pre.tokens)
            for i, key in enumerate(l3_keys(pre.ns, pre.tokens, page_size)):
                self.store.put(key, tuple(tags[i * page_size : (i + 1) * page_size]))

    # ----------------------------------------------------------------- keys and content
    def want_keys(self, rid: str, pages: int) -> list[str]:
        """The kit's own keys of the first ``pages`` full pages of the request's sequence."""
        req, have = self.live[rid], self.keys.setdefault(rid, [])
        pages = min(pages, len(req.tokens) // self.p)
        if pages > len(have):
            prev = have[-1] if have else None
            have.extend(l3_keys(req.ns, req.tokens[len(have) * self.p : pages * self.p], self.p,
                                prev))
        return have[:pages]

    def hits(self, rid: str) -> int:
        """Leading full pages of the prompt the store holds, the last token excluded."""
        req = self.live[rid]
        return self.store.hits(self.want_keys(rid, (len(req.tokens) - 1) // self.p))

    def _page(self, rid: str, page: int) -> list[int]:
        return [self.tag(rid, page * self.p + j) for j in range(self.p)]

    def _read(self, page: int) -> PageContent:
        return tuple(self.memory.read(Tier.HOST, [page] * self.p, range(self.p)))

    # ----------------------------------------------------------------- transfers
    def busy(self) -> bool:
        return bool(self.later)

    def start(self, ops: Sequence[L3Op]) -> list[Flight]:
        """Start this plan's transfers; returns those that end in this advance (with the ones
        held back from the last plan)."""
        due, self.later = self.later, []
        for op in ops:
            req = self.live.get(op.rid)
            if req is None:
                raise self.oracle.fail("L3-1", f"{op.kind} {op.op_id} names request {op.rid!r}, "
                                       "which was never submitted")
            if self.checks:
                self.oracle.keys(op, self.want_keys(op.rid, op.start + len(op.keys))[op.start :])
            seen: list[PageContent] = []
            if op.kind == "prefetch":
                self.memory.write_pages(Tier.HOST, op.pages, [POISON] * len(op.pages))
                for pg in op.pages:
                    self.fetched.pop(pg, None)
                req.copying.add(op.op_id)
            else:
                for i, pg in enumerate(op.pages):
                    got, want = self._read(pg), tuple(self._page(op.rid, op.start + i))
                    if got != want:
                        raise self.oracle.backup_source(op, i, pg, got, want)
                    seen.append(got)
            mode = self.modes[self.count % len(self.modes)]
            self.count += 1
            (self.later if mode == "later" else due).append(Flight(op, mode, seen))
        return due

    def overwritten(self, pages: Sequence[int]) -> None:
        """Host pages a writeback now fills no longer hold what a prefetch put there."""
        for pg in pages:
            self.fetched.pop(pg, None)

    def land(self, due: list[Flight]) -> list:
        """Perform and acknowledge the transfers that end now."""
        out: list = []
        for f in due:
            op = f.op
            if op.kind == "prefetch":
                n = self.store.hits(op.keys)
                n = {"lose": 0, "partial": n // 2}.get(f.mode, n)
                for i in range(n):
                    pg = op.pages[i]
                    content = self.store.get(op.keys[i])
                    assert content is not None
                    self.memory.write(Tier.HOST, [pg] * self.p, range(self.p), content)
                    self.fetched[pg] = (op.rid, op.start + i)
                self.live[op.rid].copying.discard(op.op_id)
                self.landed[op.rid] = (op.start + n) * self.p
                out.append(PrefetchDone(op.op_id, n))
                continue
            raced = [pg for pg, seen in zip(op.pages, f.seen, strict=True)
                     if self._read(pg) != seen]
            if raced:
                raise self.oracle.backup_raced(op, raced)
            stored = {"lose": 0, "partial": len(op.pages) // 2}.get(f.mode, len(op.pages))
            for i in range(stored):
                self.store.put(op.keys[i], f.seen[i])
            out.append(BackupDone(op.op_id, stored == len(op.pages)))
        return out

    def first_chunk(self, row) -> None:
        """L3-3: a request's first chunk after its prefetch reuses what landed."""
        landed = self.landed.pop(row.rid, None)
        if landed is not None and self.checks:
            self.oracle.reuse(row, min(landed, len(self.live[row.rid].tokens) - 1))

    def check_tree(self, snap) -> None:
        """White-box: the tree's host side (L3-3, L3-4), and every prefetched page the tree
        caches sits at the place of the prefix it was fetched for, in its namespace."""
        if not self.checks:
            return
        self.oracle.tree(snap)
        if not self.fetched:
            return
        # What the loop reads: the tree (its nodes and roots: a snapshot keeps unchanged parts'
        # objects), the prefetched pages and the requests' tokens, which only grow at the end.
        seen = (snap.cache.nodes, snap.cache.roots, self.fetched)
        last = self.tree_passed
        if (self.oracle.incremental and last is not None and last[0] is seen[0]
                and last[1] == seen[1] and last[2] == seen[2]):
            return
        self._check_fetched(snap)
        self.tree_passed = (seen[0], dict(seen[1]), dict(seen[2]))

    def _check_fetched(self, snap) -> None:
        for (ns, prefix), host in _host_blocks(TreeView(snap.cache)).items():
            src = self.fetched.get(host) if host is not None else None
            if src is None:
                continue
            rid, page = src
            req = self.live[rid]
            if ns != req.ns or len(prefix) != (page + 1) * self.p \
                    or list(prefix) != req.tokens[: len(prefix)]:
                assert host is not None
                want = tuple(_tags(ns, prefix)[-self.p :])
                raise self.oracle.fetched_block(ns, len(prefix), host, self._read(host), want,
                                                req.ns)


def _host_blocks(view: TreeView) -> dict[tuple, int | None]:
    """``TreeView.blocks()`` keyed alike, each to the block's host page only: the one field
    ``_check_fetched`` reads, without a ``Block`` built for every page of the tree."""
    return {key: n.host[i] if n.host is not None else None for key, n, i in view.block_keys()}


def _tags(ns: int, tokens: Sequence[int]) -> list[int]:
    return position_tags(ns, tokens, 0, None)
