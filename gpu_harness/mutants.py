"""Mutants of the harness's memory: defects of the runtime side, planted like the engines'."""

from __future__ import annotations

from kvconf.gpu_harness.memory import TensorMemory


class PageableHostPool(TensorMemory):
    """HOST-7 / D162-7: the host KV pool is left pageable beside a GPU, so copies with it are
    not asynchronous (and a non-blocking copy from it may read it after it changed)."""

    def pin_host(self) -> bool:
        return False


MEMORY_MUTANTS = {PageableHostPool.__name__: PageableHostPool}
