"""The shape of the pools: what one token's KV and one request's Mamba state look like in memory.

Small by default (the harness checks ownership and copies, not attention), but laid out as a
serving engine lays them out, so the copies move the bytes a real engine would move per page.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvconf.conformance.errors import KitError

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
          "float8_e4m3fn": torch.float8_e4m3fn}


def parse_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise KitError(f"--dtype {name}: unknown (known: {', '.join(DTYPES)})")
    return DTYPES[name]


@dataclass(frozen=True, slots=True)
class KVLayout:
    """A KV page: ``page_size x layers x 2 (K, V) x heads x head_dim`` elements of ``dtype``."""

    layers: int = 2
    heads: int = 2
    head_dim: int = 8
    dtype: torch.dtype = torch.float16

    def __post_init__(self) -> None:
        for field in ("layers", "heads", "head_dim"):
            if getattr(self, field) < 1:
                raise KitError(f"KV layout {field}: must be at least 1")
        if self.slot_bytes % 8:
            raise KitError(f"KV layout: one token's KV is {self.slot_bytes} bytes; the harness "
                           "writes 8-byte tags, so it must be a multiple of 8")

    @property
    def slot_bytes(self) -> int:
        """Bytes of one token's KV across all layers."""
        return self.layers * 2 * self.heads * self.head_dim * self.dtype.itemsize

    def page_bytes(self, page_size: int) -> int:
        return page_size * self.slot_bytes

    def shape(self, pages: int, page_size: int) -> tuple[int, ...]:
        return (pages, page_size, self.layers, 2, self.heads, self.head_dim)

    def describe(self) -> dict:
        return {"layers": self.layers, "heads": self.heads, "head_dim": self.head_dim,
                "dtype": str(self.dtype).removeprefix("torch.")}


@dataclass(frozen=True, slots=True)
class MambaLayout:
    """One Mamba state slot: a conv state ``layers x conv_dim x (conv_kernel - 1)`` and an SSM
    state ``layers x heads x head_dim x state_dim``, both of ``dtype``."""

    layers: int = 2
    conv_dim: int = 16
    conv_kernel: int = 4
    heads: int = 2
    head_dim: int = 8
    state_dim: int = 16
    dtype: torch.dtype = torch.float32

    def __post_init__(self) -> None:
        for field in ("layers", "conv_dim", "heads", "head_dim", "state_dim"):
            if getattr(self, field) < 1:
                raise KitError(f"Mamba layout {field}: must be at least 1")
        if self.conv_kernel < 2:
            raise KitError("Mamba layout conv_kernel: must be at least 2")
        for name, size in (("conv", self.conv_bytes), ("ssm", self.ssm_bytes)):
            if size % 8:
                raise KitError(f"Mamba layout: the {name} state is {size} bytes per slot; it "
                               "must be a multiple of 8")

    @property
    def conv_shape(self) -> tuple[int, ...]:
        return (self.layers, self.conv_dim, self.conv_kernel - 1)

    @property
    def ssm_shape(self) -> tuple[int, ...]:
        return (self.layers, self.heads, self.head_dim, self.state_dim)

    @property
    def conv_bytes(self) -> int:
        return self.layers * self.conv_dim * (self.conv_kernel - 1) * self.dtype.itemsize

    @property
    def ssm_bytes(self) -> int:
        return (self.layers * self.heads * self.head_dim * self.state_dim
                * self.dtype.itemsize)
