"""Copies of the reference scheduler with one Mamba defect planted each (spec chapter mamba).

Built by subclassing, never by editing the reference; each docstring starts with the behaviours
(and catalog defects) it breaks.
"""

from __future__ import annotations

from dataclasses import replace

from kvconf.reference.mamba import MambaCache
from kvconf.reference.scheduler import Scheduler
from kvconf.reference.tiers import Tier


class MambaUnitsDropped(Scheduler):
    """MAMBA-2 / D162-1: writebacks carry only their KV units; the cache believes the states
    reached host."""

    def next_plan(self):
        plan = super().next_plan()
        return replace(plan, writebacks=tuple(replace(op, mamba=()) for op in plan.writebacks))


class _DropsWholeEntry(MambaCache):
    def detach(self, e, tier):
        if tier is Tier.HOST:  # the whole entry goes, its device slot left to nobody
            self.free(tier, e.host)
            del self.entries[(e.namespace, e.tokens)]
            del self.by_id[e.id]
            return
        super().detach(e, tier)


class HostEvictionDropsEntry(Scheduler):
    """MAMBA-5 / D162-2: evicting a host state drops the whole entry, device state included."""

    mamba_cls = _DropsWholeEntry


class ReusesWithoutState(Scheduler):
    """MAMBA-3 / D162-3: a prefix is reused by its KV alone, without a state of that depth."""

    def _mamba_reuse(self, r, m):
        return m, (None, None)


class _AnyDepth(MambaCache):
    def deepest(self, namespace, tokens, limit, page_size):
        """The deepest state of any depth up to ``limit``: not the exact one (D162-4)."""
        best = None
        for e in self.entries.values():
            if e.namespace == namespace and e.depth <= limit and (
                    e.device is not None or e.host is not None) and \
                    tuple(tokens[: e.depth]) == e.tokens and (best is None or
                                                               e.depth > best.depth):
                best = e
        return best


class AnyDepthForReuse(Scheduler):
    """MAMBA-3 / D162-4: prefix reuse takes a state of another depth than the KV it reuses."""

    mamba_cls = _AnyDepth

    def _mamba_reuse(self, r, m):
        _m, src = super()._mamba_reuse(r, m)
        return m, src  # the KV match is not cut back to the state's depth


class _Unprotected(MambaCache):
    def evictable(self, e, tier):
        return e.slot(tier) is not None and not e.busy


class RetractStateUnprotected(Scheduler):
    """MAMBA-4 / D162-5: a retracted request's host state may be evicted before it recovers."""

    mamba_cls = _Unprotected


class SharedResumeSource(Scheduler):
    """MAMBA-6 / D162-6: every row resuming from a cached state in a plan names the last one's
    source slot (one variable overwritten in a loop)."""

    def next_plan(self):
        plan = super().next_plan()
        srcs = [row.mamba_src for row in plan.rows if row.mamba_src >= 0]
        if len(srcs) < 2:
            return plan
        rows = tuple(replace(row, mamba_src=srcs[-1]) if row.mamba_src >= 0 else row
                     for row in plan.rows)
        return replace(plan, rows=rows)


class NoWorkingFallback(Scheduler):
    """MAMBA-7 / D243-3: finish publishes only a checkpoint, never the working slot, and says
    nothing when there is none."""

    def _mamba_take(self, r, depth):
        if depth and r.ckpt is not None and r.ckpt_depth == depth:
            slot, r.ckpt = r.ckpt, None
            return slot
        return None

    def _mamba_publish(self, r, depth):
        failed = r.mfailed
        super()._mamba_publish(r, depth)
        r.mfailed = failed


class FinishKeepsCheckpoint(Scheduler):
    """MAMBA-8 / D243-4: finish releases the working slot but not the checkpoint slot."""

    def _mamba_publish(self, r, depth):
        keep, r.ckpt = r.ckpt, None
        super()._mamba_publish(r, depth)
        if keep is not None and r.ckpt_depth != depth:
            r.ckpt = keep


class DropsShorterStates(Scheduler):
    """MAMBA-12 / E-25: publishing a request's state drops the cached device states of the
    shorter prefixes of its prompt (one state per chain, to spare slots) though the state pool
    has free slots: a later request on a shorter prefix is owed nothing and prefills it again."""

    def _mamba_publish(self, r, depth):
        super()._mamba_publish(r, depth)
        if not depth or self.mamba is None:
            return
        key, ns = tuple(r.tokens[:depth]), r.spec.namespace
        for e in list(self.mamba.entries.values()):
            if e.namespace == ns and e.device is not None and e.depth < depth \
                    and key[: e.depth] == e.tokens and not e.busy and not e.protect:
                self.mamba.detach(e, Tier.DEVICE)


PLANTED_MAMBA = {
    cls.__name__: cls
    for cls in (MambaUnitsDropped, HostEvictionDropsEntry, ReusesWithoutState, AnyDepthForReuse,
                RetractStateUnprotected, SharedResumeSource, FinishKeepsCheckpoint,
                NoWorkingFallback, DropsShorterStates)
}


class NoReuseWithMamba(Scheduler):
    """MAMBA-10 / E-20: with state slots configured, no cached prefix is ever reused (only a
    retracted request's own protected state): every hybrid request prefills from scratch."""

    def _mamba_reuse(self, r, m):
        if r.mstate is not None:
            return super()._mamba_reuse(r, m)
        return self.cache.match(r.spec.namespace, r.tokens[:0]), (None, None)


PLANTED_MAMBA["NoReuseWithMamba"] = NoReuseWithMamba
