"""The trace format: the kit's common currency (config + steps), a pydantic schema.

Traces are written by the generators, saved for failing runs, replayed with ``kvconf replay``;
``kvconf schema`` prints the JSON Schema. Steps refer to earlier steps by their index.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from conformance.engine_config import EngineConfig
from conformance.errors import KitError
from reference.tiers import Tier

FORMAT = "kvconf-trace/1"
Token = Annotated[int, Field(ge=0, lt=2**31)]
Namespace = Annotated[int, Field(ge=0, lt=2**31)]


class Expect(BaseModel):
    """Optional expectations a hand-written step states about its own outcome."""

    model_config = ConfigDict(extra="forbid")

    device_len: int | None = None
    host_len: int | None = None
    cached_len: int | None = None
    evicted: int | None = None
    started: bool | None = None  # a transfer was started (not declined)
    rejected: bool | None = None  # the engine must reject the call (FAULT-1)
    behaviours: list[str] | None = Field(
        None, description="the behaviours a mismatch breaks; the trace's own list when absent",
    )


class _Step(BaseModel):
    model_config = ConfigDict(extra="forbid")
    expect: Expect | None = None


class MatchStep(_Step):
    op: Literal["match"] = "match"
    ns: Namespace = 0
    tokens: list[Token]
    lock: Tier | None = None  # lock the deepest matched node on this tier


class InsertStep(_Step):
    """Allocate fresh pages for every page of ``tokens``, fill them, insert them all."""

    op: Literal["insert"] = "insert"
    ns: Namespace = 0
    tokens: list[Token]


class ExtendStep(_Step):
    """A request's life at cache level: match and lock, fill the rest, insert, unlock."""

    op: Literal["extend"] = "extend"
    ns: Namespace = 0
    tokens: list[Token]


class UnlockStep(_Step):
    op: Literal["unlock"] = "unlock"
    step: int = Field(ge=0, description="index of the locking match step")


class EvictStep(_Step):
    op: Literal["evict"] = "evict"
    tier: Tier = Tier.DEVICE
    pages: int = Field(ge=0)


class TransferStep(_Step):
    step: int = Field(ge=0, description="index of the locking match step whose node is copied")
    ack: Literal["now", "later"] = "now"
    success: bool = True


class WritebackStep(TransferStep):
    op: Literal["writeback"] = "writeback"


class LoadbackStep(TransferStep):
    op: Literal["loadback"] = "loadback"


class TickStep(_Step):
    """A new scheduling step begins: the engine's logical clock advances (explicit clock only)."""

    op: Literal["tick"] = "tick"


class UnloadStep(_Step):
    """Unload the adapter of namespace ``ns`` (NS-2); the kit's own locks in it stay held."""

    op: Literal["unload"] = "unload"
    ns: Namespace


class AckStep(_Step):
    op: Literal["ack"] = "ack"
    step: int = Field(ge=0, description="index of the writeback or loadback step")
    success: bool = True


Step = Annotated[
    MatchStep | InsertStep | ExtendStep | UnlockStep | EvictStep | WritebackStep | LoadbackStep
    | AckStep | TickStep | UnloadStep,
    Field(discriminator="op"),
]


class Trace(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["kvconf-trace/1"] = FORMAT
    level: Literal["cache"] = "cache"
    name: str = ""
    behaviours: list[str] = []
    clock: Literal["per_step", "explicit"] = Field(
        "per_step",
        description="per_step: the driver advances the engine's clock before every step; "
        "explicit: only tick steps do, so several steps share one time",
    )
    config: EngineConfig = EngineConfig()
    steps: list[Step] = []

    @model_validator(mode="after")
    def _references(self) -> Trace:
        p = self.config.page_size
        for i, s in enumerate(self.steps):
            if isinstance(s, (InsertStep, ExtendStep)) and len(s.tokens) % p:
                raise ValueError(
                    f"steps[{i}].tokens: {len(s.tokens)} tokens is not a whole number of "
                    f"pages of {p}"
                )
            ref = getattr(s, "step", None)
            if ref is None:
                continue
            if ref >= i:
                raise ValueError(f"steps[{i}].step: {ref} is not an earlier step")
            target = self.steps[ref]
            if isinstance(s, (UnlockStep, WritebackStep, LoadbackStep)):
                if not (isinstance(target, MatchStep) and target.lock is not None):
                    raise ValueError(f"steps[{i}].step: step {ref} is not a locking match")
                want = {WritebackStep: Tier.DEVICE, LoadbackStep: Tier.HOST}.get(type(s))
                if want is not None and target.lock != want:
                    raise ValueError(f"steps[{i}].step: step {ref} does not lock the {want} tier")
            if isinstance(s, AckStep) and not (
                isinstance(target, TransferStep) and target.ack == "later"
            ):
                raise ValueError(
                    f"steps[{i}].step: step {ref} is not a transfer acknowledged later"
                )
        return self


def trace_schema() -> dict:
    return Trace.model_json_schema()


def _line_of(text: str, loc: tuple) -> int | None:
    """Line of ``steps[i]`` in a file written one step per line (as :func:`dump_trace` does)."""
    if len(loc) < 2 or loc[0] != "steps" or not isinstance(loc[1], int):
        return None
    lines = text.splitlines()
    for n, line in enumerate(lines):
        if line.strip().startswith('"steps"') and line.rstrip().endswith("["):
            k = n + 1 + loc[1]
            one = lines[k].strip().rstrip(",") if k < len(lines) else ""
            if one.startswith("{") and one.endswith("}"):
                return k + 1
    return None


def load_trace(path: str | Path) -> Trace:
    """Read and validate a cache-level trace file; every failure is a one-line KitError naming
    the place."""
    trace = load_any_trace(path)
    if not isinstance(trace, Trace):
        raise KitError(f"{path}: level: a scheduler-level trace where a cache-level one is needed")
    return trace


def load_any_trace(path: str | Path):
    """A cache-level ``Trace`` or a scheduler-level ``SchedTrace``, by the file's ``level``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise KitError(f"{path}: cannot read trace ({e.strerror})") from None
    return parse_any_trace(text, str(path))


def parse_any_trace(text: str, where: str = "trace"):
    """``load_any_trace`` for a text already read; errors name ``where`` and the line."""
    from conformance.sched_trace import SchedTrace

    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise KitError(f"{where}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    model = SchedTrace if isinstance(data, dict) and data.get("level") == "scheduler" else Trace
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        loc = tuple(first["loc"])
        field = _format_loc(loc)
        msg = first["msg"].removeprefix("Value error, ")
        cross = re.match(r"steps\[(\d+)\]", msg)  # a check across steps names its step
        if not loc and cross:
            loc = ("steps", int(cross.group(1)))
        line = _line_of(text, loc)
        place = f"{where}:{line}" if line else where
        raise KitError(f"{place}: {field}: {msg}" if field else f"{place}: {msg}") from None


_OPS = frozenset(("match", "insert", "extend", "unlock", "evict", "writeback", "loadback", "ack",
                  "tick", "unload"))


def _format_loc(loc: tuple) -> str:
    out = ""
    after_index = False
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            after_index = True
            continue
        if not (after_index and part in _OPS):  # the union's branch name adds nothing
            out += f".{part}" if out else str(part)
        after_index = False
    return out


def dump_trace(trace: Trace) -> str:
    """JSON with one step per line, so errors and diffs point at a line."""
    head = trace.model_dump(mode="json", exclude={"steps"}, exclude_defaults=False)
    steps = [s.model_dump(mode="json", exclude_none=True) for s in trace.steps]
    lines = ["{"]
    for k, v in head.items():
        lines.append(f"  {json.dumps(k)}: {json.dumps(v)},")
    lines.append('  "steps": [')
    for i, s in enumerate(steps):
        comma = "," if i < len(steps) - 1 else ""
        lines.append("    " + json.dumps(s, separators=(",", ":")) + comma)
    lines.append("  ]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_atomic(path: str | Path, text: str) -> Path:
    """Write via a temporary file and rename, so a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
