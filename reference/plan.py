"""What the scheduler hands the runtime and what the runtime reports back (spec chapter plans).

Plain dataclasses, compared by value: the same objects are compared by the determinism oracle,
written into traces and read by any runtime, so nothing in them is an engine-internal handle. All
are frozen but ``ForwardRow``, made once per request per plan, and ``CopyOp`` and ``Plan``, made
once per copy and per plan: a frozen slotted dataclass pays one ``object.__setattr__`` per field
when made, several times the cost of a plain one. Nothing changes one of these once made
(``dataclasses.replace`` makes a new one); they hash by value like the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(slots=True, frozen=True)
class RequestSpec:
    """A request the runtime submits: its id, prompt, namespace and the L3 store's hits."""

    rid: str
    tokens: tuple[int, ...]  # the prompt
    namespace: int = 0  # adapter / salt namespace (NS-1)
    l3_hits: int = 0  # leading full pages of the prompt the L3 store holds (L3-2)


@dataclass(slots=True, unsafe_hash=True)  # not frozen: see the module's docstring
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
    # Mamba (spec chapter mamba): the request's working state slot, which the forward reads at
    # depth ``start`` and leaves at depth ``start + len(input_tokens)``; ``mamba_src``, when set,
    # is a cached prefix's device slot the forward resumes from instead (copy on write), and
    # ``checkpoint`` a slot that also receives the state at depth ``checkpoint_depth``.
    mamba: int = -1
    mamba_src: int = -1
    checkpoint: int = -1
    checkpoint_depth: int = 0
    # A hybrid model's sliding-window layers in a table of their own (WIN-3): the KV of position
    # i lives in ``window_table[i // page_size]``; pages behind the window may be holes. Empty
    # when the window's layers share ``page_table``.
    window_table: tuple[int, ...] = ()


@dataclass(slots=True, unsafe_hash=True)  # not frozen: see the module's docstring
class CopyOp:
    """A copy the runtime performs: loadbacks before the plan's forward, writebacks after it."""

    op_id: int
    kind: Literal["writeback", "loadback"]
    rid: str
    pairs: tuple[tuple[int, int], ...]  # (source page, destination page)
    retract: bool = False
    mamba: tuple[tuple[int, int], ...] = ()  # (source slot, destination slot) of Mamba states

    def units(self) -> tuple[tuple[str, int, int], ...]:
        """Every unit the copy moves, tagged with its kind (D162-1): KV pages, Mamba states."""
        return (tuple(("kv", s, d) for s, d in self.pairs)
                + tuple(("mamba", s, d) for s, d in self.mamba))


@dataclass(slots=True, frozen=True)
class L3Op:
    """A transfer between the host tier and the L3 store (spec chapter l3_store).

    A prefetch fills host ``pages`` with the pages stored under ``keys`` and is acknowledged by
    ``PrefetchDone``; a backup stores host ``pages`` under ``keys`` and is acknowledged by
    ``BackupDone``. The pages are pages ``start ..`` of request ``rid``'s sequence, in its
    namespace, so the runtime can tell which content each key names.
    """

    op_id: int
    kind: Literal["prefetch", "backup"]
    rid: str
    namespace: int
    start: int
    pages: tuple[int, ...]
    keys: tuple[str, ...]  # hex SHA-256 rolling keys (L3-1)


@dataclass(slots=True, unsafe_hash=True)  # not frozen: see the module's docstring
class Plan:
    """What the scheduler hands the runtime for one step: the forward's rows, the copies before
    and after it, the L3 transfers it starts and the pages to zero (spec chapter plans)."""

    step: int
    rows: tuple[ForwardRow, ...]
    loadbacks: tuple[CopyOp, ...]
    writebacks: tuple[CopyOp, ...]
    l3: tuple[L3Op, ...] = ()  # prefetches and backups, started with the plan
    # Fresh device pages the runtime zeroes before the forward (PLAN-11): never a page whose
    # content a row of this plan reads or a loadback of this plan fills.
    zero: tuple[int, ...] = ()
    zero_states: tuple[int, ...] = ()  # the same, for Mamba state slots
    # Writebacks (of this plan or earlier ones, not yet acknowledged) the runtime completes
    # before this plan's forward: their source pages are handed out again by it (HOST-14).
    # Out of the repr, so that a plan's repr (which recorded fingerprints of the reference's
    # plans digest) is what it was before the field; it is compared and recorded (DET-1).
    flush: tuple[int, ...] = field(default=(), repr=False)

    @property
    def empty(self) -> bool:
        return not (self.rows or self.loadbacks or self.writebacks or self.l3)


@dataclass(slots=True, frozen=True)
class ExtendResult:
    """The token the forward sampled for a request (REQ-1)."""

    rid: str
    token: int


@dataclass(slots=True, frozen=True)
class Finish:
    """A request ended normally: the runtime stops it (spec chapter finish)."""

    rid: str


@dataclass(slots=True, frozen=True)
class Abort:
    """A request is cancelled from outside, in whatever state it is (E-2)."""

    rid: str


@dataclass(slots=True, frozen=True)
class WritebackDone:
    """A writeback landed, or failed (``success`` false, HOST-4)."""

    op_id: int
    success: bool = True


@dataclass(slots=True, frozen=True)
class LoadbackDone:
    """A loadback landed (HOST-8): sent by a runtime whose engine declares loadback_ack."""

    op_id: int


@dataclass(slots=True, frozen=True)
class PrefetchDone:
    """A prefetch ended: its first ``completed`` pages landed, the rest did not (L3-3)."""

    op_id: int
    completed: int


@dataclass(slots=True, frozen=True)
class BackupDone:
    """An L3 backup landed, or failed (spec chapter l3_store)."""

    op_id: int
    success: bool = True


RuntimeEvent = (ExtendResult | Finish | Abort | WritebackDone | LoadbackDone | PrefetchDone
                | BackupDone)
