"""Copies of the reference hybrid cache (``reference/hybrid_cache.py``) with one defect planted
each: window pages given back too early, a window hit on too few pages, a hit that ignores the
Mamba group, a state slot shared between a request and the cache, a combined hit that stops
short, a page given back and never returned."""

from __future__ import annotations

from kvconf.reference.hybrid_cache import HybridCache


class ReleasesInsideWindow(HybridCache):
    """WIN-4 / E-19: the window page holding the oldest position a row still reads is given
    back too: another request may be handed it while this one reads it."""

    def _release_window(self, r):
        out = super()._release_window(r)
        if not self.window:
            return out
        table = r.tables[self._index("window")]
        first = max(0, r.computed - self.window + 1) // self.p
        if first < len(table) and table[first] is not None and (first + 1) * self.p <= r.computed:
            page = table[first]
            table[first] = None
            self.kv.drop(page)
            out.insert(0, (first, page))
        return out


class WindowHitOnLastPage(HybridCache):
    """WIN-3 / D381-4: the window group serves a length when only the last page before it is
    cached, not every page holding the W - 1 positions its window reads."""

    def _window_ok(self, ns, tokens, k):
        return k == 0 or self._key(ns, tokens, k * self.p) in self.cached["window"]

    def _group_hit(self, g, ns, tokens, k):
        got = super()._group_hit(g, ns, tokens, k) if g.kind != "window" else None
        if got is not None:
            return got
        from kvconf.reference.hybrid_types import GroupHit

        m = self.cached["window"]
        pages = tuple(m.get(self._key(ns, tokens, (j + 1) * self.p)) if j == k - 1 else None
                      for j in range(k))
        return GroupHit(k * self.p, pages, None)


class HitIgnoresMamba(HybridCache):
    """MAMBA-3 / D162-3: the combined hit is the deepest the attention groups serve, whether or
    not a state of that depth is cached; the request resumes from the nearest state below."""

    def _combined(self, ns, tokens, cap, full):
        return next(k for k in range(cap, -1, -1)
                    if all(self._serves(g.kind, ns, tokens, k, full)
                           for g in self.groups if g.kind != "mamba"))

    def _group_hit(self, g, ns, tokens, k):
        if g.kind == "mamba":
            k = next(j for j in range(k, -1, -1) if self._state_ok(ns, tokens, j))
        return super()._group_hit(g, ns, tokens, k)


class CachesWorkingSlot(HybridCache):
    """MAMBA-8 / MAMBA-1 / D243-4: a chunk ending on a page boundary publishes the request's
    working slot as the cached state instead of a checkpoint of its own; the request's next
    chunk overwrites the cached state in place."""

    def extend(self, rid, upto):
        r = self.requests.get(rid)
        got = super().extend(rid, upto)
        if got is None or not got.checkpoints or r is None:
            return got
        ((_, cp),) = got.checkpoints
        key = self.states.key[cp]
        if key is None:
            return got
        # The cache keeps the working slot instead; the checkpoint slot goes back uncached.
        self.cached["mamba"][key[1]] = r.state
        self.states.key[cp] = None
        self.states.key[r.state] = key
        return type(got)(got.pages, got.released, got.state_source, got.state_slot, ())


class CombinedStopsShort(HybridCache):
    """WIN-6 / E-23: the combined hit is searched two pages at a time, so a length every
    group serves that is an odd number of pages is missed and computed again."""

    def _combined(self, ns, tokens, cap, full):
        return next(k for k in range(cap, -1, -1) if k % 2 == 0
                    and all(self._serves(g.kind, ns, tokens, k, full) for g in self.groups))


class ReleaseLeaks(HybridCache):
    """POOL-5 / D243-4: a window page given back is taken out of the request's table but never
    returned to the free queue: it is lost to the pool."""

    def _release_window(self, r):
        out = super()._release_window(r)
        for _, page in out:
            if self.kv.refs[page] == 0:
                self.kv.queue.pop(page, None)
                self.kv.refs[page] = 1  # a holder that never lets go
        return out


PLANTED_HYBRID: dict[str, type] = {c.__name__: c for c in (
    ReleasesInsideWindow, WindowHitOnLastPage, HitIgnoresMamba, CachesWorkingSlot,
    CombinedStopsShort, ReleaseLeaks)}
