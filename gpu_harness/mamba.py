"""Mamba state pools: a conv state and an SSM state per slot, on device and on host.

A state slot carries the tag of the depth it summarises ((namespace, tokens[0..d])), written
into every word of both its conv and its SSM state: a state restored from the wrong depth, or a
copy that moves one half only, reads back wrong or torn. The hybrid level keeps its states in
``mamba_pool``s (``kvconf.gpu_harness.hybrid``); ``MambaMemory`` adds a host pool and copies.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvconf.gpu_harness.copies import Copier, TierPools
from kvconf.gpu_harness.layout import MambaLayout
from kvconf.gpu_harness.pool import TagPool
from kvconf.reference.tiers import Tier


def mamba_pool(slots: int, layout: MambaLayout, device: torch.device,
               pinned: bool = False) -> TagPool:
    conv = torch.zeros((slots, *layout.conv_shape), dtype=layout.dtype, device=device,
                       pin_memory=pinned)
    ssm = torch.zeros((slots, *layout.ssm_shape), dtype=layout.dtype, device=device,
                      pin_memory=pinned)
    return TagPool([conv, ssm], slots, 1)


class MambaMemory(TierPools):
    """Device and host Mamba state slots; one tag per slot, in both of its states."""

    def __init__(self, device_slots: int, host_slots: int, layout: MambaLayout | None = None,
                 device: torch.device | str = "cpu") -> None:
        self.layout = layout or MambaLayout()
        self.device = torch.device(device)
        pinned = self.device.type == "cuda"
        self.pools = {
            Tier.DEVICE: mamba_pool(device_slots, self.layout, self.device),
            Tier.HOST: mamba_pool(host_slots, self.layout, torch.device("cpu"), pinned),
        }
        self.copier = Copier()

    def write_states(self, tier: Tier, slots: Sequence[int], tags: Sequence[int]) -> None:
        self._pool(tier, slots).write_rows(slots, tags)

    def read_states(self, tier: Tier, slots: Sequence[int]) -> list[int | None]:
        return self._pool(tier, slots).read_rows(slots)
