"""The hybrid cache level: a prefix cache whose model mixes attention groups (full attention,
a sliding window of W tokens, Mamba state), spoken request by request (docs/engine-guide.md,
"Hybrid caches").

A hybrid cache cannot be judged page by page as a single-group prefix cache is: what a prefix is
worth depends on every group at once (a window group serves a hit only where it holds the W - 1
positions before it, WIN-3; a Mamba group only where a state of exactly that depth is kept,
MAMBA-3). So the level is the caller's view of a request's life: ``hit`` asks how far each group
could serve a query, ``admit`` starts a request on the combined hit, ``extend`` has it compute a
chunk (the engine hands out pages, gives back window pages the request no longer reads, and says
where the runtime leaves Mamba states), ``decode`` (optional) computes the next token it sampled,
``finish`` ends it. The kit plays the runtime: it writes
a content tag into every page and state slot the engine names, and checks every one a row reads.

Page and slot ids are the engine's own; a group's ``pool`` names the id space its pages come
from (groups that share a block pool share a name, so a page moving between them is followed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.protocol import Doc, optional
from kvconf.reference.hybrid_types import (
    KINDS,
    Admitted,
    Extended,
    Group,
    GroupHit,
    HybridHit,
    Settled,
    needed_slots,
    validate_groups,
)

__all__ = ["KINDS", "Admitted", "Extended", "Group", "GroupHit", "GroupKind", "HybridConfig",
           "HybridEngine", "HybridHit", "Settled", "needed_slots", "validate_groups"]

GroupKind = Literal["full", "window", "mamba"]


class HybridConfig(BaseModel):
    """What a run asks a hybrid engine to build: the page size, the pools, and its groups: full
    attention always, a sliding-window group of ``window`` tokens where ``window`` > 0, a Mamba
    group where ``mamba``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    page_size: int = Field(default=2, ge=1, le=16)
    pages: int = Field(default=32, ge=2, le=100_000)  # the KV pool (every attention group)
    state_slots: int = Field(default=16, ge=1, le=100_000)  # the Mamba state pool
    window: int = Field(default=5, ge=0, le=1 << 20)  # tokens; 0: no window group
    mamba: bool = True

    @property
    def kinds(self) -> tuple[str, ...]:
        return ("full",) + (("window",) if self.window else ()) + (("mamba",) if self.mamba
                                                                     else ())


@runtime_checkable
class HybridEngine(Protocol):
    """The hybrid cache level (feature ``hybrid``). A factory of one has ``level = "hybrid"``
    and takes a ``HybridConfig``; a cache-level factory may offer one as its ``hybrid``
    attribute, as it offers a scheduler level."""

    name: Annotated[str, Doc("as the cache level's")]
    version: Annotated[str, Doc("as the cache level's")]
    features: Annotated[frozenset[Feature], Doc("as the cache level's")]
    page_size: Annotated[int, Doc("an int, the tokens per page: the ``HybridConfig``'s "
                                  "``page_size``")]
    groups: Annotated[tuple[Group, ...], Doc(
        "a tuple of the engine's groups, a ``Group(kind, window, pool)`` each: ``full`` "
        "first, then ``window`` and / or ``mamba``")]
    pool_sizes: Annotated[Mapping[str, int], Doc(
        "a mapping, per pool name, of the ids it has (what ``available`` counts); groups "
        "that share a block pool name the same pool")]

    def hit(self, namespace: int, tokens: Sequence[int]) -> HybridHit:
        """How far each group serves ``tokens``, and the combined hit; changes nothing."""
    def admit(self, rid: str, namespace: int, tokens: Sequence[int]) -> Admitted:
        """Start request ``rid`` of ``tokens`` on its combined hit, holding what it reuses."""
    def extend(self, rid: str, upto: int) -> Extended | None:
        """Room for ``rid`` to compute up to position ``upto`` (None: no room now, nothing
        changed); what is whole afterwards may be published."""
    def finish(self, rid: str) -> None:
        """``rid`` ends; everything it holds goes back (cached pages stay cached)."""
    def available(self) -> Mapping[str, int]:
        """Per pool, the ids the engine could hand out now (free, or cached and evictable)."""

    @optional
    def computed(self, rid: str) -> Settled | None:
        """The runtime has computed the chunk the last ``extend`` of ``rid`` made room for; an
        engine that publishes only then (as a scheduler processes a step's results) does so
        here and says which of the request's table entries it changed. An engine without it
        publishes in ``extend``."""

    @optional
    def decode(self, rid: str, token: int) -> Extended | None:
        """A decode row (WIN-7): ``token``, the one the runtime sampled last, joins ``rid``'s
        sequence once its prompt is computed, and the row computes it (one position); the
        answer is ``extend``'s for that row, and ``computed`` follows it as it follows a chunk.
        An engine with it is admitted on the prompt alone; one without it is admitted on the
        whole sequence and computes each decoded token with a one-token ``extend``."""
