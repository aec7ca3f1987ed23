"""``TensorMemory``: the kit's KV memory over real torch pools
(``kvconf.conformance.runtime.memory.KVMemory``).

The device pool lives on the chosen device; the host pool lives in CPU memory, pinned when the
device is CUDA (as engines pin it, D162-7), so loadbacks and writebacks are true asynchronous
transfers. Every oracle that reads the memory then reads these tensors.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvconf.conformance.oracles.pinned import PinnedHostOracle
from kvconf.conformance.runtime.memory import MemoryFactory
from kvconf.gpu_harness.copies import Copier, TierPools
from kvconf.gpu_harness.layout import KVLayout
from kvconf.gpu_harness.mamba import MambaMemory
from kvconf.gpu_harness.pool import kv_pool
from kvconf.reference.tiers import Tier


class TensorMemory(TierPools):
    """Device and host KV pools as tensors; tags in every word of every token slot."""

    def __init__(self, page_size: int, device_pages: int, host_pages: int,
                 layout: KVLayout | None = None, device: torch.device | str = "cpu") -> None:
        self.page_size = page_size
        self.layout = layout or KVLayout()
        self.device = torch.device(device)
        pinned = self.pin_host()
        self.pools = {
            Tier.DEVICE: kv_pool(device_pages, page_size, self.layout, self.device),
            Tier.HOST: kv_pool(host_pages, page_size, self.layout, torch.device("cpu"), pinned),
        }
        self.copier = Copier()

    def pin_host(self) -> bool:
        """Pin the host pool when copies with it cross to a GPU (HOST-7)."""
        return self.device.type == "cuda"

    def write(self, tier: Tier, pages: Sequence[int], slots: Sequence[int],
              tags: Sequence[int]) -> None:
        self._pool(tier, pages).write(pages, slots, tags)

    def read(self, tier: Tier, pages: Sequence[int], slots: Sequence[int]) -> list[int | None]:
        return self._pool(tier, pages).read(pages, slots)

    def write_pages(self, tier: Tier, pages: Sequence[int], tags: Sequence[int]) -> None:
        self._pool(tier, pages).write_rows(pages, tags)

    def read_pages(self, tier: Tier, pages: Sequence[int]) -> list[int | None]:
        return self._pool(tier, pages).read_rows(pages)

    def states(self, device_slots: int, host_slots: int) -> MambaMemory:
        """The Mamba state pools beside these KV pools, on the same device (chapter mamba)."""
        mem = MambaMemory(device_slots, host_slots, device=self.device)
        check_pinned(mem)
        return mem


def check_pinned(memory: TensorMemory | MambaMemory) -> None:
    """HOST-7: the host pool of ``memory`` is pinned when its device is CUDA (D162-7)."""
    PinnedHostOracle().check(type(memory).__name__, memory.pools[Tier.HOST].tensors,
                             memory.device.type)


def tensor_memory(layout: KVLayout | None = None, device: torch.device | str = "cpu"
                  ) -> MemoryFactory:
    """A ``MemoryFactory`` for the drivers: fresh tensor pools for every engine they start.
    Its ``hybrid`` is the hybrid level's (``conformance.hybrid.memory.store_of``): that level's
    KV pages in the same layout, its Mamba states beside them."""
    from kvconf.gpu_harness.hybrid import tensor_hybrid

    def make(page_size: int, device_pages: int, host_pages: int) -> TensorMemory:
        mem = TensorMemory(page_size, device_pages, host_pages, layout, device)
        check_pinned(mem)
        return mem

    make.hybrid = tensor_hybrid(layout, device=device)  # type: ignore[attr-defined]
    return make
