"""The reference hybrid cache: full attention, a sliding-window group and a Mamba group over
one KV block pool and one state pool, spoken request by request (spec chapters windows, mamba).

It is a map from chained page keys (namespace, the tokens up to a page's end) to the page each
group cached there, as a block-pool cache is: every page and every state slot is either held by
requests (a reference count) or in its pool's free queue, cached or not; the queue's head is
handed out next, and a cached page handed out loses its key (that is eviction). A request
releases what it holds tail first, so older pages leave the cache first.

- ``hit``: per group, the deepest whole-page length it serves: full attention a cached prefix
  (TREE-1); the window group a length whose W - 1 earlier positions lie in cached window pages
  (WIN-3); the Mamba group a depth with a cached state (MAMBA-3). The combined hit is the deepest
  length all of them serve.
- ``admit``: the request holds the pages and the state of its combined hit.
- ``extend``: window pages behind the chunk's window are given back first (WIN-4); then a page per
  new page of the sequence in each attention group, and a working state slot; whole pages are
  published in both groups; the chunk's end state, where it ends on a page boundary, is saved in
  a checkpoint slot of its own and published (MAMBA-1, MAMBA-7): the working slot is never
  shared with the cache.
- ``decode``: the request's next token, sampled by the runtime, joins its sequence and is
  computed as a one-token ``extend`` (a decode row; the prompt must be computed first).
- ``finish``: everything back, tail first.

Deterministic: the free queues are ordered by release, ties by id.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from kvconf.reference.errors import CacheError
from kvconf.reference.hybrid_types import (
    Admitted,
    Extended,
    Group,
    GroupHit,
    HybridHit,
    needed_slots,
)

Key = tuple[int, tuple[int, ...]]  # (namespace, tokens up to the end of a page or a depth)


class Pool:
    """Ids 0..size-1: each held (a count), or queued free; a queued id may still be cached."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.refs = [0] * size
        self.queue: OrderedDict[int, None] = OrderedDict((i, None) for i in range(size))
        self.key: list[tuple[str, Key] | None] = [None] * size  # what the id is cached as

    def take(self, i: int) -> None:
        """A request holds ``i`` (cached, possibly queued)."""
        if self.refs[i] == 0:
            self.queue.pop(i, None)
        self.refs[i] += 1

    def drop(self, i: int) -> None:
        self.refs[i] -= 1
        if self.refs[i] == 0:
            self.queue[i] = None  # the tail: the last to be handed out

    def can(self, n: int) -> bool:
        return len(self.queue) >= n


@dataclass(slots=True)
class Req:
    ns: int
    tokens: tuple[int, ...]
    computed: int
    tables: list[list[int | None]]  # per group; a Mamba group's is empty
    state: int | None  # the working slot (or the hit's cached slot before the first chunk)
    owns_state: bool  # the working slot is the request's own, not a cached one it resumes from
    published: int = 0  # whole pages published


class HybridCache:
    """A block-pool hybrid cache; ``groups`` is full attention first, then a window group and a
    Mamba group where configured."""

    def __init__(self, page_size: int, pages: int, state_slots: int, window: int,
                 mamba: bool) -> None:
        if page_size < 1 or pages < 1 or state_slots < 1 or window < 0:
            raise CacheError("bad_config", "page_size, pages and state_slots must be >= 1")
        self.p = page_size
        self.window = window
        groups = [Group("full", 0, "kv")]
        if window:
            groups.append(Group("window", window, "kv"))
        if mamba:
            groups.append(Group("mamba", 0, "state"))
        self.groups = tuple(groups)
        self.kv = Pool(pages)
        self.states = Pool(state_slots)
        self.pool_sizes = {"kv": pages, "state": state_slots} if mamba else {"kv": pages}
        # group kind -> key -> id
        self.cached: dict[str, dict[Key, int]] = {g.kind: {} for g in self.groups}
        self.requests: dict[str, Req] = {}

    # ----------------------------------------------------------------- lookup
    def _key(self, ns: int, tokens: Sequence[int], n: int) -> Key:
        return ns, tuple(tokens[:n])

    def _cap(self, tokens: Sequence[int]) -> int:
        """Whole pages a hit may cover."""
        return len(tokens) // self.p

    def _full(self, ns: int, tokens: Sequence[int], k: int) -> int:
        m = self.cached["full"]
        n = 0
        while n < k and self._key(ns, tokens, (n + 1) * self.p) in m:
            n += 1
        return n

    def _window_ok(self, ns: int, tokens: Sequence[int], k: int) -> bool:
        m = self.cached["window"]
        return all(self._key(ns, tokens, (j + 1) * self.p) in m
                   for j in needed_slots(k * self.p, self.window, self.p))

    def _state_ok(self, ns: int, tokens: Sequence[int], k: int) -> bool:
        return k == 0 or self._key(ns, tokens, k * self.p) in self.cached["mamba"]

    def _serves(self, kind: str, ns: int, tokens: Sequence[int], k: int, full: int) -> bool:
        if kind == "full":
            return k <= full
        if kind == "window":
            return self._window_ok(ns, tokens, k)
        return self._state_ok(ns, tokens, k)

    def _deepest(self, kind: str, ns: int, tokens: Sequence[int], cap: int, full: int) -> int:
        return next(k for k in range(cap, -1, -1) if self._serves(kind, ns, tokens, k, full))

    def _group_hit(self, g: Group, ns: int, tokens: Sequence[int], k: int) -> GroupHit:
        p = self.p
        if g.kind == "mamba":
            state = self.cached["mamba"][self._key(ns, tokens, k * p)] if k else None
            return GroupHit(k * p, (), state)
        m = self.cached[g.kind]
        need = range(k) if g.kind == "full" else needed_slots(k * p, self.window, p)
        pages = tuple(m[self._key(ns, tokens, (j + 1) * p)] if j in need else None
                      for j in range(k))
        return GroupHit(k * p, pages, None)

    def _combined(self, ns: int, tokens: Sequence[int], cap: int, full: int) -> int:
        return next(k for k in range(cap, -1, -1)
                    if all(self._serves(g.kind, ns, tokens, k, full) for g in self.groups))

    def hit(self, ns: int, tokens: Sequence[int]) -> HybridHit:
        cap = self._cap(tokens)
        full = self._full(ns, tokens, cap)
        per = tuple(self._group_hit(g, ns, tokens, self._deepest(g.kind, ns, tokens, cap, full))
                    for g in self.groups)
        return HybridHit(per, self._combined(ns, tokens, cap, full) * self.p)

    # ----------------------------------------------------------------- requests
    def _req(self, rid: str) -> Req:
        r = self.requests.get(rid)
        if r is None:
            raise CacheError("unknown_request", f"no request {rid!r}")
        return r

    def admit(self, rid: str, ns: int, tokens: Sequence[int]) -> Admitted:
        if rid in self.requests:
            raise CacheError("duplicate_request", f"request {rid!r} is already admitted")
        if not tokens:
            raise CacheError("empty", "a request has at least one token")
        cap = self._cap(tokens)
        k = self._combined(ns, tokens, cap, self._full(ns, tokens, cap))
        tables: list[list[int | None]] = []
        state = None
        for g in self.groups:
            got = self._group_hit(g, ns, tokens, k)
            if g.kind == "mamba":
                state = got.state
                if state is not None:
                    self.states.take(state)
                tables.append([])
                continue
            for page in got.pages:
                if page is not None:
                    self.kv.take(page)
            tables.append(list(got.pages))
        self.requests[rid] = Req(ns, tuple(tokens), k * self.p, tables, state, False,
                                 published=k)
        return Admitted(k * self.p, tuple(tuple(t) for t in tables), state)

    def _index(self, kind: str) -> int:
        return next(i for i, g in enumerate(self.groups) if g.kind == kind)

    def _release_window(self, r: Req) -> list[tuple[int, int]]:
        """Give back the window pages a row computing from ``r.computed`` no longer reads: every
        page wholly before its first read position (WIN-4); tail first. (index, page) pairs."""
        if not self.window:
            return []
        table = r.tables[self._index("window")]
        first = max(0, r.computed - self.window + 1) // self.p
        out = []
        for j in range(min(first, len(table)) - 1, -1, -1):
            page = table[j]
            if page is None:
                continue
            table[j] = None
            self.kv.drop(page)
            out.append((j, page))
        return out

    def _undo_release(self, r: Req, released: list[tuple[int, int]]) -> None:
        table = r.tables[self._index("window")]
        for j, page in released:
            self.kv.take(page)
            table[j] = page

    def _alloc(self, pool: Pool, n: int) -> list[int]:
        """``n`` ids from the queue's head; a cached one loses its key (evicted)."""
        out = []
        for _ in range(n):
            i, _ = pool.queue.popitem(last=False)
            if pool.key[i] is not None:
                kind, key = pool.key[i]
                del self.cached[kind][key]
                pool.key[i] = None
            pool.refs[i] = 1
            out.append(i)
        return out

    def extend(self, rid: str, upto: int) -> Extended | None:
        r = self._req(rid)
        if not r.computed < upto <= len(r.tokens):
            raise CacheError("bad_extend",
                             f"{rid}: extend to {upto} from {r.computed} of {len(r.tokens)}")
        p = self.p
        attn = [i for i, g in enumerate(self.groups) if g.kind != "mamba"]
        need_pages = -(-upto // p)
        grow = {i: max(0, need_pages - len(r.tables[i])) for i in attn}
        mamba = any(g.kind == "mamba" for g in self.groups)
        checkpoint = mamba and self._checkpoint_at(upto)
        need_states = int(mamba and not r.owns_state) + int(checkpoint)
        released = self._release_window(r)
        if not self.kv.can(sum(grow.values())) or not self.states.can(need_states):
            self._undo_release(r, released)  # no room: nothing changes
            return None
        pages: list[tuple[int, ...]] = []
        for i, g in enumerate(self.groups):
            if g.kind == "mamba":
                pages.append(())
                continue
            new = self._alloc(self.kv, grow[i])
            r.tables[i].extend(new)
            pages.append(tuple(new))
        source = r.state if r.computed else None
        if mamba and not r.owns_state:
            (slot,) = self._alloc(self.states, 1)
            if r.state is not None:
                self.states.drop(r.state)  # the cached state it resumed from stays cached
            r.state, r.owns_state = slot, True
        checkpoints: tuple[tuple[int, int], ...] = ()
        if checkpoint:
            (cp,) = self._alloc(self.states, 1)
            checkpoints = ((upto, cp),)
        r.computed = upto
        self._publish(r, checkpoints)
        gave = tuple(page for _, page in released)
        rel = tuple(gave if g.kind == "window" else () for g in self.groups)
        return Extended(tuple(pages), rel, source, r.state if mamba else None, checkpoints)

    def decode(self, rid: str, token: int) -> Extended | None:
        """The decode row of ``rid``: ``token`` (the one the runtime sampled last) joins its
        sequence, and the row computes it; no room leaves the sequence as it was."""
        r = self._req(rid)
        if r.computed != len(r.tokens):
            raise CacheError("bad_decode", f"{rid}: a decode row after {r.computed} of "
                                           f"{len(r.tokens)} tokens computed")
        r.tokens = (*r.tokens, token)
        got = self.extend(rid, r.computed + 1)
        if got is None:
            r.tokens = r.tokens[:-1]
        return got

    def _checkpoint_at(self, depth: int) -> bool:
        """Whether a row ending at ``depth`` saves its state in a checkpoint: on every page
        boundary."""
        return depth % self.p == 0

    def _publish(self, r: Req, checkpoints: tuple[tuple[int, int], ...]) -> None:
        """Whole pages of both attention groups go into the map (a key already there keeps its
        page); a checkpoint's state is cached at its depth, its slot owned by the cache."""
        p = self.p
        whole = r.computed // p
        for i, g in enumerate(self.groups):
            if g.kind == "mamba":
                continue
            m = self.cached[g.kind]
            for j in range(r.published, whole):
                page = r.tables[i][j]
                key = self._key(r.ns, r.tokens, (j + 1) * p)
                if page is None or key in m or self.kv.key[page] is not None:
                    continue
                m[key] = page
                self.kv.key[page] = (g.kind, key)
        r.published = whole
        for depth, slot in checkpoints:
            key = self._key(r.ns, r.tokens, depth)
            if key in self.cached["mamba"]:
                self.states.drop(slot)  # already cached: the copy goes back uncached
                continue
            self.cached["mamba"][key] = slot
            self.states.key[slot] = ("mamba", key)
            self.states.drop(slot)

    def finish(self, rid: str) -> None:
        r = self._req(rid)
        for i, g in enumerate(self.groups):
            if g.kind == "mamba":
                continue
            for page in reversed(r.tables[i]):
                if page is not None:
                    self.kv.drop(page)
        if r.state is not None:
            self.states.drop(r.state)
        del self.requests[rid]

    def available(self) -> dict[str, int]:
        out = {"kv": len(self.kv.queue)}
        if "state" in self.pool_sizes:
            out["state"] = len(self.states.queue)
        return out
