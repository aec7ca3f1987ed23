"""Scheduler-level traces: a workload the driver plays through an engine's plan/event loop.

A workload fixes everything the runtime decides: which requests arrive at which plan, how many
tokens each generates, which requests are aborted when, how every writeback is acknowledged, and
the seed of the sampled tokens. The engine decides the rest. ``level = "scheduler"`` tells it
apart from a cache-level trace in the same file format family.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Token = Annotated[int, Field(ge=0, lt=2**31)]


class SchedConfig(BaseModel):
    """The scheduler's configuration as the kit hands it to an engine."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    page_size: int = Field(2, ge=1, le=64)
    device_pages: int = Field(32, ge=1, le=1_000_000)
    host_pages: int = Field(32, ge=0, le=1_000_000)
    max_tokens: int = Field(16, ge=1)
    max_batch: int = Field(4, ge=1)
    max_slots: int = Field(8, ge=1)
    mixed: bool = True
    publish_mid_flight: bool = True
    sliding_window: int = Field(0, ge=0, description="0 = full attention")
    l3_store: bool = Field(False, description="an L3 store below the host tier (L3-1..L3-5)")
    prefetch_threshold: int = Field(1, ge=1, description="least L3 pages worth a prefetch")
    max_adapters: int = Field(0, ge=0, description="distinct non-base namespaces one forward "
                              "may serve (PLAN-9); 0 = no cap")
    mamba: bool = Field(False, description="Mamba state slots beside KV (MAMBA-1..MAMBA-8)")
    mamba_slots: int = Field(16, ge=1, le=1_000_000, description="device Mamba state slots")
    mamba_host_slots: int = Field(16, ge=0, le=1_000_000, description="host Mamba state slots")


class Arrival(BaseModel):
    model_config = ConfigDict(extra="forbid")

    at: int = Field(ge=0, description="plan index before which the request is submitted")
    rid: str = Field(min_length=1)
    ns: int = Field(0, ge=0, lt=2**31)
    tokens: list[Token] = Field(min_length=1)
    new_tokens: int = Field(1, ge=1, description="tokens to generate before Finish")


class Preload(BaseModel):
    """A prefix the L3 store holds before the run: every full page of it, under its key."""

    model_config = ConfigDict(extra="forbid")

    ns: int = Field(0, ge=0, lt=2**31)
    tokens: list[Token] = Field(min_length=1)


class AbortAt(BaseModel):
    model_config = ConfigDict(extra="forbid")

    at: int = Field(ge=0, description="plan index after which Abort is sent")
    rid: str
    in_flight: bool = Field(
        False, description="from plan `at` on, wait for the first plan after which a writeback "
        "of the request is in flight and abort then (E-2), whenever the engine emits it")


class SchedTrace(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["kvconf-trace/1"] = "kvconf-trace/1"
    level: Literal["scheduler"] = "scheduler"
    name: str = ""
    behaviours: list[str] = []
    config: SchedConfig = SchedConfig()
    seed: int = Field(0, description="seed of the tokens the runtime samples")
    arrivals: list[Arrival] = []
    aborts: list[AbortAt] = []
    acks: list[Literal["now", "later", "fail"]] = Field(
        default_factory=list,
        description="how the i-th writeback is acknowledged (cycled); empty means all now",
    )
    l3_preload: list[Preload] = Field(
        default_factory=list, description="prefixes the L3 store holds before the run")
    l3_acks: list[Literal["now", "later", "partial", "lose"]] = Field(
        default_factory=list,
        description="how the i-th L3 transfer ends (cycled): now, a plan later, half of its "
        "pages landed, or none; empty means all now",
    )
    max_plans: int = Field(400, ge=1, description="liveness bound (LIVE-1)")

    @model_validator(mode="after")
    def _unique(self) -> SchedTrace:
        seen: set[str] = set()
        for i, a in enumerate(self.arrivals):
            if a.rid in seen:
                raise ValueError(f"arrivals[{i}].rid: {a.rid!r} arrives twice")
            seen.add(a.rid)
        for i, a in enumerate(self.aborts):
            if a.rid not in seen:
                raise ValueError(f"aborts[{i}].rid: {a.rid!r} never arrives")
        if self.config.mamba and self.config.l3_store:
            raise ValueError("config.mamba: the L3 store keeps KV pages only, so a prefix "
                             "fetched from it is never reusable with Mamba (MAMBA-3); turn "
                             "one of mamba / l3_store off")
        if (self.l3_preload or self.l3_acks) and not self.config.l3_store:
            raise ValueError("l3_preload / l3_acks: the config has no L3 store (l3_store)")
        return self
