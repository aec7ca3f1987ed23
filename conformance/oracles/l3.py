"""L3 store oracles (spec chapter l3_store): keys, prefetch landing, pinning, backups.

The key, backup and reuse checks are black-box: they use only the plans' L3 transfers and what
the driver (the runtime, owner of the L3 store) saw. The tree checks read ``snapshot()`` where
the engine offers it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import is_

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.oracles.base import Oracle, Violation
from kvconf.conformance.oracles.tree_view import TreeView
from kvconf.reference.plan import L3Op
from kvconf.reference.tiers import Tier


class L3Oracle(Oracle):
    name = "l3"
    behaviours = ("L3-1", "L3-3", "L3-4", "L3-5")
    needs = frozenset({Feature.L3_STORE})

    # ----------------------------------------------------------------- black-box
    def keys(self, op: L3Op, want: Sequence[str]) -> None:
        """L3-1: each key names page ``start + i`` of the request's own sequence."""
        if len(op.keys) != len(op.pages):
            raise self.fail("L3-1", f"{op.kind} {op.op_id} of {op.rid} lists {len(op.pages)} "
                            f"pages but {len(op.keys)} keys")
        for i, (got, exp) in enumerate(zip(op.keys, want, strict=False)):
            if got != exp:
                raise self.fail("L3-1", f"{op.kind} {op.op_id} of {op.rid} (namespace "
                                f"{op.namespace}) names page {op.start + i} by key {got[:16]}..., "
                                f"the rolling key of that page of its sequence is {exp[:16]}...")
        if len(want) < len(op.keys):
            raise self.fail("L3-1", f"{op.kind} {op.op_id} of {op.rid} names pages up to "
                            f"{op.start + len(op.keys) - 1}, past the end of its sequence")

    def backup_source(self, op: L3Op, i: int, page: int, got, want) -> Violation:
        return self.fail("L3-5", f"backup {op.op_id} of {op.rid} reads host page {page} for page "
                         f"{op.start + i} of its sequence, but it holds {self._what(got, want)}")

    def backup_raced(self, op: L3Op, pages: Iterable[int]) -> Violation:
        return self.fail("L3-5", f"host pages {sorted(pages)} changed while backup {op.op_id} "
                         "was reading them: the backup's source was not kept pinned")

    def reuse(self, row, landed: int) -> None:
        """L3-3: the first chunk after a prefetch reuses at least what landed."""
        if row.reused < landed:
            raise self.fail("L3-3", f"{row.rid}'s first chunk reuses {row.reused} tokens, but "
                            f"its prefetch landed pages up to token {landed}")

    def fetched_block(self, ns: int, prefix_len: int, page: int, got, want,
                      src_ns: int) -> Violation:
        what = (f"KV fetched for namespace {src_ns}" if src_ns != ns
                else self._what(got, want))
        return self.fail("L3-3", f"host page {page}, cached for the prefix of {prefix_len} "
                         f"tokens in namespace {ns}, holds {what}: a prefetched page hung at "
                         "the wrong place")

    @staticmethod
    def _what(got, want) -> str:
        if got == want:
            return "the right KV"
        if any(t is None for t in got):
            return "nothing"
        if any(t is not None and t < 0 for t in got):
            return "the remains of an unfinished copy"
        return "the KV of another prefix"

    def __init__(self) -> None:
        self.passed: tuple | None = None  # the parts of the last snapshot that held (``tree``)

    # ----------------------------------------------------------------- white-box
    def tree(self, snap) -> None:
        """L3-3 / L3-4 on a snapshot: host pages owned by exactly what lists them, no node with
        an empty host copy, each prefetch's host match on host and pinned. All it reads is the
        host pool's owners, the nodes, the roots and the transfers: the very objects of a
        snapshot that held (a snapshot keeps an unchanged part's object), it holds again."""
        cache = snap.cache
        owners = cache.pools[Tier.HOST].owners
        parts = (owners, cache.nodes, cache.transfers, cache.l3)
        last = self.passed
        if (self.incremental and last is not None and last[1] == cache.roots
                and all(map(is_, parts, last[0]))):  # four parts each
            return
        self._tree(cache, owners)
        self.passed = (parts, dict(cache.roots))

    def _tree(self, cache, owners) -> None:
        nodes = cache.node_map()
        live = TreeView(cache).reachable()
        in_flight = {t.op_id for t in cache.transfers} | {t.op_id for t in cache.l3}
        for n in cache.nodes:
            if n.host is None or n.parent is None:
                continue
            if not n.host:
                raise self.fail("L3-3", f"node {n.id} has an empty host copy")
            wrong = [pg for pg in n.host if owners[pg] != f"node:{n.id}"]
            if wrong:
                raise self.fail("L3-3", f"host pages {wrong} of node {n.id} are owned by "
                                f"{[owners[pg] for pg in wrong]}")
        for pg, owner in enumerate(owners):
            if owner.startswith("transfer:") and int(owner.split(":")[1]) not in in_flight:
                raise self.fail("L3-3", f"host page {pg} is still owned by {owner}, which has "
                                "ended: a page of an incomplete prefetch was never freed")
        p = cache.page_size
        for t in cache.l3:
            if t.kind != "prefetch":
                continue
            n = nodes.get(t.node)
            depth = (n.start + len(n.key)) // p if n is not None else -1
            ok = (n is not None and n.id in live and n.host is not None
                  and (n.parent is None or n.host_ref > 0) and depth == t.start)
            if not ok:
                raise self.fail("L3-4", f"prefetch {t.op_id} fetches pages from {t.start} on, "
                                "but the host match of that depth is not cached and pinned on "
                                "host while it is in flight")
