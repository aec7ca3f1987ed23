"""Copies between pools, the way a serving runtime performs them.

Source rows go straight into destination rows, one ``copy_`` per run of consecutive pages (no
staging, no gather on the host). Between devices the copies run ``non_blocking`` on a side
stream, from or into the pinned host pool, and end with an event; whoever needs a copy waits for
that event (the forward for its loadbacks, an acknowledgement for its writeback), so the
transfers of one plan overlap each other and whatever the runtime does before it needs them.

What the kit sees never depends on timing: a row a copy lands in reads as poison until the copy
is finished, and a copy whose source or destination was written by anyone else while it was in
flight leaves poison (``kvconf.conformance.runtime.memory``'s rule). Same trace, same outcome.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from kvconf.conformance.runtime.memory import copy_outcome, out_of_pool
from kvconf.gpu_harness.pool import TagPool
from kvconf.reference.tiers import Tier


@dataclass(slots=True)
class TensorCopy:
    src: TagPool
    dst: TagPool
    pairs: tuple[tuple[int, int], ...]
    src_version: tuple[int, ...]  # of each source row when the copy started
    dst_version: tuple[int, ...]  # of each destination row once the copy claimed it
    event: torch.cuda.Event | None
    staged: list[torch.Tensor] | None = None  # a device -> host gather, scattered on landing
    done: bool = False


GATHER_ABOVE = 4  # runs of pages above which a copy of small pages gathers
SMALL_PAGE = 256 << 10  # bytes: a page at least this big is moved by one copy_ per run


def runs(pairs: Sequence[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(source start, destination start, length) of maximal runs consecutive on both sides."""
    out: list[tuple[int, int, int]] = []
    for s, d in pairs:
        if out and out[-1][0] + out[-1][2] == s and out[-1][1] + out[-1][2] == d:
            s0, d0, n = out[-1]
            out[-1] = (s0, d0, n + 1)
        else:
            out.append((s, d, 1))
    return out


class Copier:
    """Starts and lands copies; one side stream per CUDA device for the transfers."""

    def __init__(self) -> None:
        self.streams: dict[torch.device, torch.cuda.Stream] = {}

    def _stream(self, device: torch.device) -> torch.cuda.Stream:
        if device not in self.streams:
            self.streams[device] = torch.cuda.Stream(device)
        return self.streams[device]

    @staticmethod
    def _copy(src: TagPool, dst: TagPool, pairs: Sequence[tuple[int, int]],
              non_blocking: bool) -> list[torch.Tensor] | None:
        """Move the rows: one ``copy_`` per run when the runs are few or the pages big (the
        transfer engine streams them at full speed), else one gather, one transfer and one
        scatter (many small pages, where a launch per run costs more than its bytes). A
        device -> host gather is returned for ``finish`` to scatter once it has landed."""
        spans = runs(pairs)
        if len(spans) <= GATHER_ABOVE or src.row_bytes >= SMALL_PAGE:
            for s, d, n in spans:
                for a, b in zip(src.views, dst.views, strict=True):
                    b[d : d + n].copy_(a[s : s + n], non_blocking=non_blocking)
            return None
        s_rows = src.index([s for s, _d in pairs])
        if src.device == dst.device:
            dst.scatter(dst.index([d for _s, d in pairs]), src.gather(s_rows))
            return None
        if src.device.type == "cpu":  # host -> device: gather into pinned memory, one transfer
            stage = src.gather(s_rows, pinned=True)
            dst.scatter(dst.index([d for _s, d in pairs]),
                        [t.to(dst.device, non_blocking=True) for t in stage])
            return None
        out = []  # device -> host: gather on the device, one transfer into pinned memory
        for t in src.gather(s_rows):
            host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            host.copy_(t, non_blocking=True)
            out.append(host)
        return out

    def start(self, src: TagPool, dst: TagPool, pairs: Sequence[tuple[int, int]]) -> TensorCopy:
        pairs = tuple(pairs)
        src_version = tuple(src.version[s] for s, _d in pairs)
        for _s, d in pairs:  # claiming a row is a write: a copy already landing there is torn
            dst.version[d] += 1
            dst.landing[d] += 1
        dst_version = tuple(dst.version[d] for _s, d in pairs)
        cuda = next((p.device for p in (src, dst) if p.device.type == "cuda"), None)
        if cuda is None or not pairs:
            self._copy(src, dst, pairs, non_blocking=False)
            return TensorCopy(src, dst, pairs, src_version, dst_version, None)
        side = self._stream(cuda)
        side.wait_stream(torch.cuda.current_stream(cuda))  # the source as written so far
        with torch.cuda.stream(side):
            staged = self._copy(src, dst, pairs, non_blocking=True)
            event = torch.cuda.Event()
            event.record(side)
        return TensorCopy(src, dst, pairs, src_version, dst_version, event, staged)

    def finish(self, op: TensorCopy, success: bool) -> list[int]:
        """Land ``op`` (or fail it): returns the source rows written while it was in flight.
        Their destinations, those of a failed copy and destinations someone else wrote in the
        meantime hold poison."""
        if op.done:
            raise ValueError("this copy has landed already")
        op.done = True
        if op.event is not None:
            # The host side of a transfer is plain memory the CPU may write next (a freed page
            # reused), so landing waits for the transfer itself, not only the compute stream.
            op.event.synchronize()
        if op.staged is not None:
            op.dst.scatter(op.dst.index([d for _s, d in op.pairs]), op.staged)
        raced, poisoned = copy_outcome(op.pairs, op.src_version, op.dst_version,
                                       op.src.version.__getitem__, op.dst.version.__getitem__,
                                       success)
        for _s, d in op.pairs:
            op.dst.landing[d] -= 1
        op.dst.touched([d for _s, d in op.pairs])
        op.dst.poison([d for _s, d in op.pairs if d in poisoned])
        return raced


class TierPools:
    """A device pool and a host pool of one kind, with bounds-checked access and copies between
    them: what the KV memory and the Mamba state memory share."""

    pools: dict[Tier, TagPool]
    copier: Copier

    def _pool(self, tier: Tier, rows: Sequence[int]) -> TagPool:
        pool = self.pools[tier]
        bad = out_of_pool(tier, rows, pool.rows)
        if bad is not None:
            raise bad
        return pool

    def start_copy(self, src: Tier, dst: Tier, pairs: Sequence[tuple[int, int]]) -> TensorCopy:
        a = self._pool(src, [s for s, _d in pairs])
        b = self._pool(dst, [d for _s, d in pairs])
        return self.copier.start(a, b, pairs)

    def finish_copy(self, handle: TensorCopy, success: bool) -> list[int]:
        return self.copier.finish(handle, success)
