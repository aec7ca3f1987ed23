"""Content tags as tensor words: the kit's 64-bit tags written into the bytes of a pool.

Tags are unsigned 64-bit; a tensor word is a signed int64. Zero is a slot nothing ever wrote
(pools start zeroed); the kit's reserved negative tags (poison, dropped, torn) keep their value.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvconf.conformance.runtime.memory import RESERVED

EMPTY = 0  # the word of a slot nothing ever wrote
_WRAP = 1 << 64
_SIGN = 1 << 63


def to_word(tag: int) -> int:
    if tag in RESERVED:
        return tag
    return tag - _WRAP if tag >= _SIGN else tag


def from_word(word: int) -> int | None:
    if word == EMPTY:
        return None
    if word in RESERVED:
        return word
    return word + _WRAP if word < 0 else word


def words(tags: Sequence[int], device: torch.device) -> torch.Tensor:
    return torch.tensor([to_word(t) for t in tags], dtype=torch.int64, device=device)


def word_view(t: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """``t`` (contiguous) as ``rows x cols x words`` int64: a row is a page or a state slot."""
    per = t[0].numel() // cols if rows else 0
    return t.view(rows, cols, per).view(torch.int64) if rows else t.new_zeros(
        (0, cols, 0), dtype=torch.int64)
