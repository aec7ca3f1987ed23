"""Copies of the reference scheduler with one defect planted each, the kit's mutants.

Built by subclassing, never by editing the reference; each docstring starts with the behaviours
(and catalog defects) it breaks.
"""

from __future__ import annotations

from dataclasses import replace

from kvconf.reference.kv_events import block_hash, chain_hashes
from kvconf.reference.l3 import rolling_keys, seed_key
from kvconf.reference.plan import ExtendResult, Plan, WritebackDone
from kvconf.reference.prefix_cache import PrefixCache
from kvconf.reference.requests import State
from kvconf.reference.scheduler import Scheduler, SchedulerError
from kvconf.reference.tiers import Tier


class ReusesPinnedPage(Scheduler):
    """REQ-3 / PIN-2 / D243-4: a new page for a request is one another running request still
    uses."""

    def _alloc(self, n):
        pages = super()._alloc(n)
        if pages:
            for r in self.requests.values():
                if r.local and r.state in (State.DECODING, State.PREFILLING):
                    self.cache.free([pages[0]])
                    pages[0] = r.local[0]
                    break
        return pages


class LoadbackAfterForward(Scheduler):
    """PLAN-5 / E-13: a plan's loadbacks are handed out with the next plan, after the forward
    read."""

    held = ()

    def next_plan(self):
        plan = super().next_plan()
        late, self.held = self.held, plan.loadbacks
        return Plan(plan.step, plan.rows, late, plan.writebacks, plan.l3)


class FailedWritebackIsDone(Scheduler):
    """REQ-5 / E-1: a writeback acknowledged with success = false is treated as a success."""

    def _apply(self, ev):
        if isinstance(ev, WritebackDone):
            ev = WritebackDone(ev.op_id, True)
        super()._apply(ev)


class PublishOnlyAtFinish(Scheduler):
    """PLAN-7 / D381-1: the prompt is published at finish only, whatever the switch says."""

    def _publish(self, r, upto):
        if r.state is State.PREFILL_DONE:
            return None
        return super()._publish(r, upto)


class AbortRaisesWhileWritingBack(Scheduler):
    """REQ-4 / E-2: Abort of a request whose writeback is in flight raises."""

    def _check(self, events):
        for ev in events:
            r = self.requests.get(getattr(ev, "rid", None))
            if type(ev).__name__ == "Abort" and r is not None and r.state is State.WRITING_BACK:
                raise SchedulerError("invalid_transition", "cannot abort while writing back",
                                     r.rid, r.state, "Abort")
        super()._check(events)


class OverBudget(Scheduler):
    """PLAN-2 / E-14: the token budget is ignored for the second prefill row."""

    def _prefill_row(self, r, budget, loadbacks):
        return super()._prefill_row(r, max(budget, len(r.tokens)), loadbacks)


PLANTED_SCHED = {
    cls.__name__: cls
    for cls in (ReusesPinnedPage, LoadbackAfterForward, FailedWritebackIsDone,
                PublishOnlyAtFinish, AbortRaisesWhileWritingBack, OverBudget)
}


class PublishesUnderWindow(Scheduler):
    """PLAN-8 / D381-4 / D381-5: the window guard is skipped when publishing."""

    def _unguarded(self, fn, *args):
        saved = self.config
        self.config = replace(saved, sliding_window=0)
        try:
            return fn(*args)
        finally:
            self.config = saved

    def _publish(self, r, upto):
        return self._unguarded(super()._publish, r, upto)

    def _apply(self, ev):
        return self._unguarded(super()._apply, ev)


PLANTED_SCHED[PublishesUnderWindow.__name__] = PublishesUnderWindow


def _publish_in_base_model(publish, r, upto):
    """``publish(r, upto)`` with the request's adapter forgotten: its KV goes to namespace 0."""
    real = r.spec
    r.spec = replace(real, namespace=0)
    try:
        return publish(r, upto)
    finally:
        r.spec = real


class RetractsIntoBaseModel(Scheduler):
    """PLAN-6 / D268-2: a retracted request's own pages are inserted into namespace 0."""

    def _retract_longest(self, writebacks, busy):
        self._retracting = True
        try:
            super()._retract_longest(writebacks, busy)
        finally:
            self._retracting = False

    def _publish(self, r, upto):
        if getattr(self, "_retracting", False) and r.shared == 0:
            return _publish_in_base_model(super()._publish, r, upto)
        return super()._publish(r, upto)


PLANTED_SCHED[RetractsIntoBaseModel.__name__] = RetractsIntoBaseModel


class ContinuesInBaseModel(Scheduler):
    """NS-3 / D268-3: only the first chunk knows the request's adapter: the KV its later steps
    publish (mid-flight, at retraction, at finish) is inserted into namespace 0."""

    def _publish(self, r, upto):
        return _publish_in_base_model(super()._publish, r, upto)


class ComputesInBaseModel(Scheduler):
    """NS-3 / D268-3: the forward events after the first chunk (later chunks, decodes) do not
    carry the request's adapter: their rows name namespace 0, so the runtime computes them with
    the base model."""

    def _prefill_row(self, r, budget, loadbacks):
        later = r.state is State.PREFILLING
        row = super()._prefill_row(r, budget, loadbacks)
        return replace(row, namespace=0) if row is not None and later else row

    def _decode_row(self, r, writebacks, rows):
        row = super()._decode_row(r, writebacks, rows)
        return None if row is None else replace(row, namespace=0)


class AdapterCapCountsQueued(Scheduler):
    """PLAN-9 / D268-5: the adapter cap counts every live request's adapter, queued and waiting
    ones included: once more adapters wait than the cap allows, no adapter request is planned."""

    def _capped(self, r, adapters):
        waiting = {q.spec.namespace for q in self.requests.values()
                   if q.spec.namespace != 0 and q.state is not State.FINISHED}
        cap = self.config.max_adapters
        return bool(cap) and r.spec.namespace != 0 and len(waiting) > cap


class IgnoresAdapterCap(Scheduler):
    """PLAN-9 / D268-5: the adapter cap is not enforced when decode rows join the forward."""

    def _capped(self, r, adapters):
        return r.state is not State.DECODING and super()._capped(r, adapters)


for _cls in (ContinuesInBaseModel, ComputesInBaseModel, AdapterCapCountsQueued,
             IgnoresAdapterCap):
    PLANTED_SCHED[_cls.__name__] = _cls
ADAPTER_PLANTED = frozenset({AdapterCapCountsQueued.__name__, IgnoresAdapterCap.__name__})


# ----------------------------------------------------------------- L3 store (chapter l3_store)
class PrefetchDoneNeverPrefills(Scheduler):
    """L3-2 / D293-1: PrefetchDone is not an origin of the first chunk: such requests wait
    forever."""

    def _ordered(self, *states):
        return super()._ordered(*(s for s in states if s is not State.PREFETCH_DONE))


class _LeakyCache(PrefixCache):
    def finish_prefetch(self, op_id, completed):
        t = self._l3.get(op_id)
        if t is not None and isinstance(completed, int) and 0 <= completed <= len(t.pages):
            t.pages = t.pages[:completed]  # the pages that did not land are forgotten
        return super().finish_prefetch(op_id, completed)


class IncompletePrefetchLeaks(Scheduler):
    """L3-3 / D293-2: the pages of an incomplete prefetch are never freed."""

    cache_cls = _LeakyCache


class _RootCache(PrefixCache):
    def _prefetch_anchor(self, t):
        return self._root(t.namespace)


class PrefetchInsertedFromRoot(Scheduler):
    """L3-3 / D293-3: fetched suffix pages are inserted from the root, not below the host
    match."""

    cache_cls = _RootCache


class _BaseModelCache(PrefixCache):
    def _prefetch_anchor(self, t):
        return self._root(0) if t.start == 0 else t.node


class PrefetchIntoBaseModel(Scheduler):
    """L3-3 / D268-9: pages fetched for an adapter's prompt are inserted into namespace 0."""

    cache_cls = _BaseModelCache


class KeysFromAdmission(Scheduler):
    """L3-1 / D293-5: prefetch keys are computed for the host match at admission, and used for
    the host match at prefetch time."""

    def submit(self, specs):
        super().submit(specs)
        stale = self.__dict__.setdefault("_stale", {})
        for s in specs:
            m = self.cache.match(s.namespace, s.tokens[:-1])
            h = m.host_len // self.p
            seed = self.cache._last_key(self.cache._node(m.host_node))
            stale[s.rid] = [k.hex() for k in rolling_keys(seed, s.tokens[h * self.p :], self.p)]

    def _prefetch(self, r):
        op = super()._prefetch(r)
        if op is not None:
            op = replace(op, keys=tuple(self._stale[r.rid][: len(op.keys)]))
        return op


class _EvictFirstCache(PrefixCache):
    def start_prefetch(self, node_id, tokens, want, least):
        node = self._node(node_id)
        pool = self.pools[Tier.HOST]
        if pool.free_count < want:
            self.evict(Tier.HOST, want - pool.free_count)  # before the host match is pinned
        if node.host is not None and self._nodes.get(node_id) is node:
            return super().start_prefetch(node_id, tokens, want, least)
        n = min(want, pool.free_count, len(tokens) // self.page_size)
        if n < max(least, 1):
            return None
        return self._new_l3("prefetch", node, [], n, tuple(tokens[: n * self.page_size]))


class EvictsBeforePinningHostMatch(Scheduler):
    """L3-4 / D293-6: host memory is evicted for a prefetch before its host match is pinned."""

    cache_cls = _EvictFirstCache


class _UnpinnedBackupCache(PrefixCache):
    def start_backup(self, node_id, n):
        node = self._node(node_id)
        pages = [pg for x in node.path() for pg in (x.host or [])]
        if node.host is None or n < 1 or n > len(pages):
            return None
        return self._new_l3("backup", node, [], n, (), pages[-n:])


class BackupSourceUnpinned(Scheduler):
    """L3-5 / D293-4: a backup's source host pages are not pinned until it completes."""

    cache_cls = _UnpinnedBackupCache


class _BareCache(PrefixCache):
    bare = False

    def _keys_below(self, parent, key):
        return [] if self.bare else super()._keys_below(parent, key)

    def _backfill_keys(self, node):
        return None  # no later insert fills them in

    def _last_key(self, node):
        if node.is_root:
            return seed_key(node.namespace)
        return node.keys[-1] if node.keys else b""  # seeded from an empty list


class MidFlightWithoutKeys(Scheduler):
    """L3-1 / D381-3: nodes published mid-flight carry no L3 keys, nothing backfills them, and
    keys below them are seeded from an empty list."""

    cache_cls = _BareCache

    def _apply(self, ev):
        mid = isinstance(ev, ExtendResult) and self.requests[ev.rid].state is State.PREFILL_DONE
        self.cache.bare = mid
        try:
            super()._apply(ev)
        finally:
            self.cache.bare = False


class _NoNamespaceCache(PrefixCache):
    def _last_key(self, node):
        return b"" if node.is_root else super()._last_key(node)


class KeysWithoutNamespace(Scheduler):
    """L3-1 / D268-7: L3 keys do not mix in the namespace."""

    cache_cls = _NoNamespaceCache


L3_PLANTED = frozenset(
    cls.__name__ for cls in (
        PrefetchDoneNeverPrefills, IncompletePrefetchLeaks, PrefetchInsertedFromRoot,
        PrefetchIntoBaseModel, KeysFromAdmission, EvictsBeforePinningHostMatch,
        BackupSourceUnpinned, MidFlightWithoutKeys, KeysWithoutNamespace))
for _name in sorted(L3_PLANTED):
    PLANTED_SCHED[_name] = globals()[_name]


class PublishDropsPin(Scheduler):
    """PIN-2 / REQ-3 / D381-2: a prompt published mid-flight is not kept pinned by the request
    that published it: the request goes on reading pages that eviction may take and hand out."""

    def _publish(self, r, upto):
        node = super()._publish(r, upto)
        if node is not None and r.state is State.PREFILL_DONE:
            self.cache.unlock(r.lock)
            r.lock = None
        return node


PLANTED_SCHED[PublishDropsPin.__name__] = PublishDropsPin


class AckAfterAbortDropped(Scheduler):
    """HOST-10 / E-16: the acknowledgement of a writeback whose request was aborted is accepted,
    but the scheduler, finding no request to move on, never passes it to the cache: the copy
    stays in flight there for ever, holding its host pages."""

    def _apply(self, ev):
        if isinstance(ev, WritebackDone) and self._ops.get(ev.op_id) not in self.requests:
            del self._ops[ev.op_id]
            return
        super()._apply(ev)


class AbortKeepsPin(Scheduler):
    """POOL-5 / E-17: Abort forgets the request's pin instead of releasing it: the pages of its
    cached prefix stay pinned, never evictable again."""

    def _abort(self, r):
        r.lock = r.node = None  # forgotten, not released in the cache
        super()._abort(r)


PLANTED_SCHED[AckAfterAbortDropped.__name__] = AckAfterAbortDropped
PLANTED_SCHED[AbortKeepsPin.__name__] = AbortKeepsPin


class _NamespaceBlindHashCache(PrefixCache):
    """A cache whose block hash leaves the namespace out, and says so: the hash it declares is
    the one its events carry, so EVENT-4 holds and only EVENT-5 tells."""

    @staticmethod
    def block_hash(parent, namespace, tokens):
        return block_hash(parent, 0, tokens)

    def _new_node(self, namespace, parent, key, hashes):
        if parent is not None and hashes:
            hashes = chain_hashes(parent.last_hash(), 0, key, self.page_size)
        return super()._new_node(namespace, parent, key, hashes)


class HashIgnoresNamespace(Scheduler):
    """EVENT-5 / D268-7: the scheduler's cache hashes blocks without their namespace, with the
    hash function it declares: an adapter's prefix announces the base model's hashes, and a
    KV-aware router sends base-model requests to a worker that holds the adapter's KV."""

    cache_cls = _NamespaceBlindHashCache


PLANTED_SCHED[HashIgnoresNamespace.__name__] = HashIgnoresNamespace


class PublishesBeforeForward(Scheduler):
    """PLAN-12 / PLAN-7 / E-22: a prompt is published when the plan that computes its last chunk is
    built, not when that chunk's result is reported: a request admitted later in the same plan
    reuses pages the forward is still computing, and on a device reads garbage."""

    def _prefill_row(self, r, budget, loadbacks):
        row = super()._prefill_row(r, budget, loadbacks)
        mid_flight = self.config.publish_mid_flight and not self.config.sliding_window
        if row is None or not row.samples or not mid_flight or self.mamba is not None:
            return row
        full = r.computed // self.p
        m = self.cache.match(r.spec.namespace, r.tokens[: full * self.p])
        if m.device_len <= r.shared * self.p:  # the row's own pages go into the tree as they are
            self._publish(r, r.computed)
        return row


PLANTED_SCHED[PublishesBeforeForward.__name__] = PublishesBeforeForward
