"""HOST-7 (D162-7): host pools used for asynchronous copies with a GPU are pinned memory.

Duck-typed over torch tensors (``is_pinned()``), so the kit does not import torch; the GPU
harness runs it on its own pools, and on any host tensor an engine hands over.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kvconf.conformance.oracles.base import Oracle
from kvconf.conformance.running import judged


class PinnedHostOracle(Oracle):
    name = "pinned-host"
    behaviours = ("HOST-7",)

    def check(self, what: str, tensors: Iterable[Any], device_type: str) -> None:
        """``tensors``: the host side of copies with a device of type ``device_type``."""
        if device_type != "cuda":
            return  # a CPU device copies within host memory: nothing to pin
        for i, t in enumerate(tensors):
            if t.numel() == 0:
                continue  # a pool of no pages takes part in no copy (and cannot be pinned)
            judged.record(self.behaviours)  # per host tensor of a pool built, never per step
            if not t.is_pinned():
                raise self.fail("HOST-7", f"{what}: host tensor {i} (shape {tuple(t.shape)}) "
                                "is pageable memory, so its copies with the device cannot run "
                                "asynchronously")
