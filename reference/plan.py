"""What the scheduler hands the runtime and what the runtime reports back (spec chapter plans).

Plain frozen dataclasses: the same objects are compared by the determinism oracle, written into
traces and read by any runtime, so nothing in them is an engine-internal handle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(slots=True, frozen=True)
class RequestSpec:
    rid: str
    tokens: tuple[int, ...]  # the prompt
    namespace: int = 0  # adapter / salt namespace (NS-1)


@dataclass(slots=True, frozen=True)
class ForwardRow:
    """One request's part of the forward: compute KV for ``input_tokens`` at ``start``.

    ``page_table`` is the request's whole device page table after this plan's allocations; the
    KV of token position i lives in ``page_table[i // page_size]``. ``reused`` is how many leading
    tokens of a prefill come from the cache (loaded back in this plan or already on device).
    ``samples`` is true when the row's last position yields a token the runtime must report.
    """

    rid: str
    kind: Literal["prefill", "decode"]
    namespace: int
    start: int
    input_tokens: tuple[int, ...]
    reused: int
    page_table: tuple[int, ...]
    new_pages: tuple[int, ...]
    slot: int
    samples: bool


@dataclass(slots=True, frozen=True)
class CopyOp:
    """A copy the runtime performs: loadbacks before the plan's forward, writebacks after it."""

    op_id: int
    kind: Literal["writeback", "loadback"]
    rid: str
    pairs: tuple[tuple[int, int], ...]  # (source page, destination page)
    retract: bool = False


@dataclass(slots=True, frozen=True)
class Plan:
    step: int
    rows: tuple[ForwardRow, ...]
    loadbacks: tuple[CopyOp, ...]
    writebacks: tuple[CopyOp, ...]

    @property
    def empty(self) -> bool:
        return not (self.rows or self.loadbacks or self.writebacks)


@dataclass(slots=True, frozen=True)
class ExtendResult:
    rid: str
    token: int


@dataclass(slots=True, frozen=True)
class Finish:
    rid: str


@dataclass(slots=True, frozen=True)
class Abort:
    rid: str


@dataclass(slots=True, frozen=True)
class WritebackDone:
    op_id: int
    success: bool = True


RuntimeEvent = ExtendResult | Finish | Abort | WritebackDone
