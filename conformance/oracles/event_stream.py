"""The device tier as a KV event stream tells it, checked event by event: EVENT-1..EVENT-5 and
the shape of what a removal leaves (EVENT-6, EVICT-1). One implementation, shared by the
cache-level event oracle (``events.py``) and the scheduler-level one (``scheduler.py``), so
every event rule whose inputs exist at a level runs at that level."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kvconf.conformance.oracles.tree_view import TreeView
from kvconf.reference.kv_events import EventKind

Prefix = tuple[int, tuple[int, ...]]  # (namespace, the tokens of the whole prefix)
BlockHash = Callable[[int | None, int, Sequence[int]], int]


class StoredBlocks:
    """What the events published so far say is stored, and what each stored hash names.

    ``oracle`` raises the findings (its ``fail`` names it); ``block_hash`` is the engine's hash
    function where it offers one (EVENT-4, and EVENT-5 by recomputing a prefix in every other
    namespace); ``resolve`` says which prefix an unstored parent names, for an engine that
    announces only reusable boundaries (EVENT-8), None holds every parent to EVENT-3."""

    def __init__(self, oracle: Any, block_hash: BlockHash | None = None,
                 resolve: Callable[[int], Prefix | None] | None = None) -> None:
        self.oracle = oracle
        self.block_hash = block_hash
        self.resolve = resolve
        self.stored: dict[int, Prefix] = {}  # hash -> (namespace, whole prefix)
        self.children: dict[int, list[int]] = {}  # hash -> hashes stored under it, in order
        self.announced: dict[Prefix, int] = {}  # (namespace, prefix) -> stored hashes naming it
        # EVENT-5: every hash ever stored, removed or not, and the prefix it named; and every
        # namespace the trace used (the driver adds them), each compared with every other.
        self.seen: dict[int, Prefix] = {}
        self.namespaces: set[int] = set()
        self._chains: dict[Prefix, int] = {}  # (namespace, prefix) -> block_hash chained

    def use(self, namespace: int) -> None:
        """The trace used ``namespace``: every stored prefix is compared with it (EVENT-5)."""
        self.namespaces.add(namespace)

    def chain(self, namespace: int, tokens: tuple[int, ...], block_size: int) -> int | None:
        """The engine's hash of the last block of ``tokens`` as a prefix of ``namespace``,
        chained from its root (memoized prefix by prefix)."""
        assert self.block_hash is not None
        if not tokens:
            return None
        key = (namespace, tokens)
        h = self._chains.get(key)
        if h is None:
            parent = self.chain(namespace, tokens[:-block_size], block_size)
            h = self._chains[key] = self.block_hash(parent, namespace, tokens[-block_size:])
        return h

    def take(self, events: Sequence[Any]) -> list[int]:
        """Check and apply ``events``; returns the hashes they removed, in order."""
        fail = self.oracle.fail
        removed: list[int] = []
        for ev in events:
            if ev.kind is EventKind.CLEARED:
                self.stored.clear()
                self.children.clear()
                self.announced.clear()
                continue
            if ev.kind is EventKind.REMOVED:
                for h in ev.block_hashes:
                    if h not in self.stored:
                        raise fail("EVENT-2", f"BlockRemoved for {h:#x}, which is not stored")
                    key = self.stored.pop(h)
                    self.announced[key] -= 1
                    if not self.announced[key]:
                        del self.announced[key]
                    removed.append(h)
                continue
            parent = ev.parent_hash
            named = None  # the prefix an unstored parent names (EVENT-8)
            if parent is not None and parent not in self.stored:
                named = self.resolve(parent) if self.resolve is not None else None
                if named is None:
                    raise fail("EVENT-3", f"BlockStored {ev.block_hashes[0]:#x} names parent "
                               f"{parent:#x}, which is not stored"
                               + ("" if self.resolve is None else " and is the hash of no "
                                  "prefix the runtime submitted or sampled (EVENT-8)"))
            bs = ev.block_size
            if bs <= 0 or len(ev.tokens) != bs * len(ev.block_hashes):
                raise fail("EVENT-4", f"BlockStored carries {len(ev.tokens)} tokens for "
                           f"{len(ev.block_hashes)} blocks of {bs}")
            whole = (() if parent is None else named[1] if named is not None
                     else self.stored[parent][1])
            ns = ev.namespace
            for i, h in enumerate(ev.block_hashes):
                toks = tuple(ev.tokens[i * bs : (i + 1) * bs])
                whole = whole + toks
                self._distinct(h, ns, whole, bs)
                if h in self.stored:
                    raise fail("EVENT-1", f"BlockStored for {h:#x}, which is already stored")
                if self.block_hash is not None:
                    want = self.block_hash(parent, ns, toks)
                    if h != want:
                        raise fail("EVENT-4", f"block {i} of a BlockStored has hash {h:#x}; "
                                   f"recomputed from its parent, namespace {ns} and tokens it "
                                   f"is {want:#x}")
                key = (ns, whole)
                self.stored[h] = self.seen[h] = key
                self.announced[key] = self.announced.get(key, 0) + 1
                if parent is not None:
                    self.children.setdefault(parent, []).append(h)
                parent = h
        return removed

    def _distinct(self, h: int, ns: int, whole: tuple[int, ...], bs: int) -> None:
        """EVENT-5 across every pair of namespaces the trace used: the hash of a prefix is
        neither one the stream gave the same prefix in another namespace nor (with the engine's
        hash) the hash of the same prefix in any other namespace used: only those, as an engine
        without namespaces may hash them out."""
        was = self.seen.get(h)
        if was is not None and was[0] != ns and was[1] == whole:
            raise self.oracle.fail("EVENT-5", f"hash {h:#x} of a {len(whole)}-token prefix is "
                                   f"the same in namespaces {was[0]} and {ns}")
        if self.block_hash is None:
            return
        self.namespaces.add(ns)
        for other in sorted(self.namespaces):
            if other != ns and self.chain(other, whole, bs) == h:
                raise self.oracle.fail("EVENT-5", f"hash {h:#x} of a {len(whole)}-token prefix "
                                       f"is the same in namespaces {ns} and {other}")

    def orphaned(self, removed: Sequence[int]) -> tuple[int, int] | None:
        """A removed hash that still has a block stored under it, and that block: what the
        events call stored is a tree (EVENT-6), and only the ends of cached prefixes are
        evicted (EVICT-1)."""
        for h in removed:
            if h in self.stored:  # stored again later in the step
                continue
            below = [c for c in self.children.pop(h, ()) if c in self.stored]
            if below:
                return h, below[0]
        return None

    def drift(self, cache) -> str | None:
        """EVENT-6 against a snapshot of the cache (``CacheSnapshot``): the stored hashes are
        the blocks the tree holds on the device tier; what differs, else None."""
        held = TreeView(cache).device_hashes()
        if self.stored.keys() == held:
            return None
        stored = set(self.stored)
        missing = sorted(held - stored)[:3]
        stale = sorted(stored - held)[:3]
        return (f"stored hashes differ from the device tier: held but never announced "
                f"{[hex(h) for h in missing]}, announced but gone {[hex(h) for h in stale]}")
