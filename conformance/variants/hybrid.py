"""Legal variants of the reference hybrid cache: each takes another choice the spec permits."""

from __future__ import annotations

from kvconf.conformance.engine.features import Feature
from kvconf.reference.hybrid_cache import HybridCache
from kvconf.reference.hybrid_types import Settled


class KeepsWindowPages(HybridCache):
    """WIN-4: window pages behind the window are never given back while the request runs (the
    rule lets a cache free them; it need not): they go back with everything else at finish."""

    def _release_window(self, r):
        return []




class StatesPerPage(HybridCache):
    """MAMBA-11: Mamba states kept per page, as vLLM's align mode keeps them: a chunk's end
    state goes into the slot of the page its end lies in (the same slot while a chunk stays in
    a page, a new one when it enters the next), and that slot is published as the page's state
    once the page is whole; no separate checkpoint. Right only while no chunk from inside a page
    crosses its end (a chunk that did would publish the slot of its start as the page's state),
    so it declares mamba_aligned_chunks."""

    features = frozenset({Feature.MAMBA_ALIGNED_CHUNKS})

    def extend(self, rid, upto):
        r = self._req(rid)
        if not any(g.kind == "mamba" for g in self.groups):
            return super().extend(rid, upto)
        p, s = self.p, r.computed
        same_page = bool(s) and -(-s // p) == -(-upto // p)
        if not same_page and r.owns_state and s % p:
            # The slot of the page the chunk leaves: published as that page's state, whatever
            # depth it holds (the chunk shape MAMBA-11 excludes).
            key = self._key(r.ns, r.tokens, -(-s // p) * p)
            if key not in self.cached["mamba"] and self.states.key[r.state] is None:
                self.cached["mamba"][key] = r.state
                self.states.key[r.state] = ("mamba", key)
        owned = r.owns_state
        if same_page:
            r.owns_state = True  # the state stays in its slot
        elif r.owns_state:
            r.owns_state = False  # a new slot for the page the chunk ends in
        got = super().extend(rid, upto)
        if got is None:
            r.owns_state = owned
            return got
        # The base class saved a checkpoint copy at a page end; keep the running slot instead.
        for _, cp in got.checkpoints:
            key = self.states.key[cp]
            if key is not None:
                del self.cached["mamba"][key[1]]
                self.states.key[cp] = None
            if self.states.key[r.state] is None and key is not None:
                self.cached["mamba"][key[1]] = r.state
                self.states.key[r.state] = key
        return type(got)(got.pages, got.released, got.state_source, got.state_slot, ())


class ReleasesBeforePublish(HybridCache):
    """WIN-4, between plans: a chunk's pages are published once the runtime has computed it
    (``computed``, as a scheduler processes a step's results), and window pages of the request
    wholly before the next row's first read (e - W + 1) that are not yet the cache's are given
    back first, so they are never published, as SGLang's ``checkpoint_into_tree`` frees a
    request's window slots behind the window before it inserts the row. A request's last chunk
    then leaves fewer window pages cached than the reference does."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._holding: str | None = None
        self._pending: dict[str, tuple[tuple[int, int], ...]] = {}

    def extend(self, rid, upto):
        self._holding = rid
        try:
            return super().extend(rid, upto)
        finally:
            self._holding = None

    def _publish(self, r, checkpoints) -> None:
        if self._holding is not None:
            self._pending[self._holding] = checkpoints  # published once computed
            return
        super()._publish(r, checkpoints)

    def computed(self, rid) -> Settled | None:
        r = self._req(rid)
        checkpoints = self._pending.pop(rid, None)
        if checkpoints is None:
            return None
        gave: list[tuple[int, int | None]] = []
        if self.window:
            table = r.tables[self._index("window")]
            first = max(0, r.computed - self.window + 1) // self.p
            for j in range(min(first, len(table))):
                page = table[j]
                if page is None or self.kv.key[page] is not None:
                    continue  # a hole, or a page the cache already holds
                table[j] = None
                self.kv.drop(page)
                gave.append((j, None))
        super()._publish(r, checkpoints)
        if not gave:
            return None
        return Settled(tuple(tuple(gave) if g.kind == "window" else () for g in self.groups))


class DecodeStatesAtInterval(HybridCache):
    """WIN-7: decode rows are not prefill chunks, as in SGLang's decode path: a decode row keeps
    its state only where it ends on a multiple of ``TRACK`` pages (SGLang's
    ``mamba_track_interval``), held by the request, the one before it going back; what the
    request decoded is published only when it finishes, up to the last state kept, with that
    state; and the window pages that state's depth reads are kept until then. The prompt is
    published as it is computed, as the reference does."""

    TRACK = 2  # pages

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._decoding: str | None = None
        self._kept: dict[str, tuple[int, int]] = {}  # rid -> (depth, slot) of its last state

    def decode(self, rid, token):
        self._decoding = rid
        try:
            got = super().decode(rid, token)
        finally:
            self._decoding = None
        return got

    def _release_window(self, r):
        rid = next((k for k, v in self.requests.items() if v is r), None)
        kept = self._kept.get(rid) if rid is not None else None
        if kept is None or kept[0] >= r.computed:
            return super()._release_window(r)
        computed, r.computed = r.computed, kept[0]  # keep what the kept state's depth reads
        try:
            return super()._release_window(r)
        finally:
            r.computed = computed

    def _checkpoint_at(self, depth: int) -> bool:
        if self._decoding is None:
            return super()._checkpoint_at(depth)
        return depth % (self.TRACK * self.p) == 0

    def _publish(self, r, checkpoints) -> None:
        rid = self._decoding
        if rid is None:
            super()._publish(r, checkpoints)
            return
        for depth, slot in checkpoints:  # nothing published while decoding
            old = self._kept.get(rid)
            if old is not None:
                self.states.drop(old[1])
            self._kept[rid] = (depth, slot)  # held by the request until it finishes

    def finish(self, rid) -> None:
        r = self._req(rid)
        kept = self._kept.pop(rid, None)
        if kept is not None:
            depth, slot = kept
            computed, r.computed = r.computed, depth
            try:
                super()._publish(r, ((depth, slot),))  # the decoded pages up to it, and it
            finally:
                r.computed = computed
        super().finish(rid)


HYBRID_VARIANTS: tuple[type, ...] = (KeepsWindowPages, StatesPerPage, ReleasesBeforePublish,
                                     DecodeStatesAtInterval)
