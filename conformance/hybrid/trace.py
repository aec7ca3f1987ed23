"""Hybrid-level traces: a ``HybridConfig`` and steps (hit, admit, extend, decode, finish), each
with optional expectations; a pydantic schema like the other levels' traces.

A request's ``tokens`` are its prompt; its ``output`` (none by default) are the tokens the
runtime samples for it once the prompt is computed, each computed by a ``decode`` step of its
own (one position, the token sampled last), never by an ``extend``."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from kvconf.conformance.engine.hybrid import HybridConfig

FORMAT = "kvconf-hybrid-trace/1"
Token = Annotated[int, Field(ge=0, lt=2**31)]


class HybridExpect(BaseModel):
    """What a hand-written step states about its outcome: hit lengths per group and combined
    (before the engine's TREE-7 cap), or that a chunk found room."""

    model_config = ConfigDict(extra="forbid")

    full: int | None = None
    window: int | None = None
    mamba: int | None = None
    length: int | None = None  # the combined hit (hit, admit)
    room: bool | None = None  # extend: the engine had room
    behaviours: list[str] | None = None


class _Step(BaseModel):
    model_config = ConfigDict(extra="forbid")
    expect: HybridExpect | None = None


class HitStep(_Step):
    op: Literal["hit"] = "hit"
    ns: int = 0
    tokens: list[Token]


class AdmitStep(_Step):
    op: Literal["admit"] = "admit"
    rid: str
    ns: int = 0
    tokens: list[Token] = Field(min_length=1)  # the prompt
    output: list[Token] = Field(default_factory=list)  # sampled after it, one per decode step


class ExtendStep(_Step):
    op: Literal["extend"] = "extend"
    rid: str
    upto: int = Field(ge=1)


class DecodeStep(_Step):
    """The request's next decode row: it computes the next token of its ``output`` (the one the
    runtime sampled last), one position, once its whole prompt is computed."""

    op: Literal["decode"] = "decode"
    rid: str


class FinishStep(_Step):
    op: Literal["finish"] = "finish"
    rid: str


HybridStep = Annotated[HitStep | AdmitStep | ExtendStep | DecodeStep | FinishStep,
                       Field(discriminator="op")]


class HybridTrace(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["kvconf-hybrid-trace/1"] = FORMAT
    level: Literal["hybrid"] = "hybrid"  # what ``kvconf replay`` reads to pick the level
    name: str = ""
    behaviours: list[str] = Field(default_factory=list)
    config: HybridConfig = Field(default_factory=HybridConfig)
    steps: list[HybridStep] = Field(default_factory=list)
