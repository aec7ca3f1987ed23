"""Batched copies between pools, the way a serving runtime performs them.

One copy op is one ``index_select`` of its source rows and one ``index_copy_`` into its
destination rows. Between devices the bytes travel on a side stream, ``non_blocking`` through
pinned memory, with an event; whoever needs the copy waits for that event (the forward for its
loadbacks, an acknowledgement for its writeback). The gather and the scatter run in the compute
stream's order, so what a copy reads and where it lands never depends on timing: same trace,
same outcome.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from gpu_harness.pool import TagPool


@dataclass(slots=True)
class TensorCopy:
    src: TagPool
    dst: TagPool
    src_rows: torch.Tensor  # on the source's device
    dst_rows: torch.Tensor  # on the destination's device
    pairs: tuple[tuple[int, int], ...]
    snapshot: list[torch.Tensor]  # the source words as the copy found them (source device)
    staged: list[torch.Tensor]  # the same words on the destination's device, maybe in flight
    event: torch.cuda.Event | None
    done: bool = False


class Copier:
    """Starts and lands copies; one side stream per CUDA device for the transfers."""

    def __init__(self) -> None:
        self.streams: dict[torch.device, torch.cuda.Stream] = {}

    def _stream(self, device: torch.device) -> torch.cuda.Stream:
        if device not in self.streams:
            self.streams[device] = torch.cuda.Stream(device)
        return self.streams[device]

    def start(self, src: TagPool, dst: TagPool, pairs: Sequence[tuple[int, int]]) -> TensorCopy:
        pairs = tuple(pairs)
        s_rows = src.index([s for s, _d in pairs])
        d_rows = dst.index([d for _s, d in pairs])
        cross = src.device != dst.device
        if cross and src.device.type == "cpu":  # host -> device: gather into pinned memory
            snap = src.gather(s_rows, [torch.empty((len(pairs), *v.shape[1:]), dtype=v.dtype,
                                                   pin_memory=True) for v in src.views])
        else:
            snap = src.gather(s_rows)
        dst.poison([d for _s, d in pairs])  # garbage until the copy lands
        if not cross or not pairs:
            return TensorCopy(src, dst, s_rows, d_rows, pairs, snap, snap, None)
        cuda = src.device if src.device.type == "cuda" else dst.device
        side = self._stream(cuda)
        side.wait_stream(torch.cuda.current_stream(cuda))
        with torch.cuda.stream(side):
            if dst.device.type == "cpu":  # device -> host: into pinned memory
                staged = [torch.empty(s.shape, dtype=s.dtype, pin_memory=True) for s in snap]
                for out, s in zip(staged, snap, strict=True):
                    out.copy_(s, non_blocking=True)
                    s.record_stream(side)
            else:
                staged = [s.to(dst.device, non_blocking=True) for s in snap]
            event = torch.cuda.Event()
            event.record(side)
        return TensorCopy(src, dst, s_rows, d_rows, pairs, snap, staged, event)

    def finish(self, op: TensorCopy, success: bool) -> list[int]:
        """Land ``op`` (or fail it): returns the source rows that changed while it was in
        flight, whose destinations are poisoned like those of a failed copy."""
        if op.done:
            raise ValueError("this copy has landed already")
        op.done = True
        if not op.pairs:
            return []
        if op.event is not None:
            if op.dst.device.type == "cuda":
                current = torch.cuda.current_stream(op.dst.device)
                current.wait_event(op.event)
                for s in op.staged:
                    s.record_stream(current)
            else:
                op.event.synchronize()
        now = op.src.gather(op.src_rows)
        changed = torch.zeros(len(op.pairs), dtype=torch.bool, device=op.src.device)
        for a, b in zip(now, op.snapshot, strict=True):
            changed |= (a != b).reshape(len(op.pairs), -1).any(dim=1)
        flags = changed.tolist()
        raced = [s for (s, _d), bad in zip(op.pairs, flags, strict=True) if bad]
        if success:
            op.dst.scatter(op.dst_rows, op.staged)
            op.dst.poison([d for (_s, d), bad in zip(op.pairs, flags, strict=True) if bad])
        else:
            op.dst.poison([d for _s, d in op.pairs])
        return raced
