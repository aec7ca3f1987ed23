"""The trace format: the kit's common currency (config + steps), a pydantic schema.

Traces are written by the generators, saved for failing runs, replayed with ``kvconf replay``;
``kvconf schema`` prints the JSON Schema. Steps refer to earlier steps by their index.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kvconf.conformance.engine.config import MAX_PAGES, EngineConfig
from kvconf.conformance.errors import KitError, WriteFailed, read_input
from kvconf.reference.tiers import Tier

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
    cleared: bool | None = None  # a reset cleared the cache (EVICT-8, EVICT-9)
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
    pages: int = Field(ge=0, le=MAX_PAGES, description="at most the largest pool a config "
                       "may state; more than the pool holds evicts what can be")


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


class ResetStep(_Step):
    """Reset the whole cache (EVICT-8, EVICT-9): cleared when nothing is in use, refused
    otherwise; the driver knows which from its own ledger."""

    op: Literal["reset"] = "reset"


class AckStep(_Step):
    op: Literal["ack"] = "ack"
    step: int = Field(ge=0, description="index of the writeback or loadback step")
    success: bool = True


Step = Annotated[
    MatchStep | InsertStep | ExtendStep | UnlockStep | EvictStep | WritebackStep | LoadbackStep
    | AckStep | TickStep | UnloadStep | ResetStep,
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
    """Line where the value at ``loc`` (a pydantic error location) starts in a JSON text, or of
    its nearest enclosing value that exists (a missing field points at its object)."""
    try:
        starts = _value_lines(text)
    except (ValueError, RecursionError):
        return None
    path: tuple = ()
    line = starts.get(path)
    for part in loc:
        if isinstance(part, str) and part in _OPS and path and isinstance(path[-1], int):
            continue  # the union's branch name is no key of the file
        path = (*path, part)
        if path not in starts:
            break
        line = starts[path]
    return line


def _value_lines(text: str) -> dict[tuple, int]:
    """Every value's path (keys and indexes) to the line it starts on."""
    dec = json.JSONDecoder()
    ws = re.compile(r"[ \t\n\r]*")
    out: dict[tuple, int] = {}

    def skip(i: int) -> int:
        return ws.match(text, i).end()

    def value(i: int, path: tuple) -> int:
        i = skip(i)
        out[path] = text.count("\n", 0, i) + 1
        ch = text[i:i + 1]
        if ch == "{":
            i = skip(i + 1)
            if text[i:i + 1] == "}":
                return i + 1
            while True:
                key, i = dec.raw_decode(text, skip(i))
                i = skip(i) + 1  # the colon
                i = skip(value(i, (*path, key)))
                if text[i] == "}":
                    return i + 1
                i += 1  # the comma
        if ch == "[":
            i = skip(i + 1)
            if text[i:i + 1] == "]":
                return i + 1
            n = 0
            while True:
                i = skip(value(i, (*path, n)))
                n += 1
                if text[i] == "]":
                    return i + 1
                i += 1
        return dec.raw_decode(text, i)[1]

    value(0, ())
    return out


def parse_json(text: str, where: str):
    """``json.loads`` whose every failure is a one-line KitError: bad syntax (with its line), a
    number past Python's digit limit, nesting too deep to read."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise KitError(f"{where}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    except RecursionError:
        raise KitError(f"{where}: invalid JSON: nested too deeply to read") from None
    except ValueError as e:  # an integer of thousands of digits (sys.set_int_max_str_digits)
        raise KitError(f"{where}: invalid JSON: {str(e).split(';')[0]}") from None


def validation_error(e: ValidationError, text: str, where: str) -> KitError:
    """The first error of a pydantic validation as one line: file, line, field, message."""
    first = e.errors()[0]
    loc = tuple(first["loc"])
    field = _format_loc(loc)
    msg = first["msg"].removeprefix("Value error, ")
    cross = re.match(r"steps\[(\d+)\]", msg)  # a check across steps names its step
    if not loc and cross:
        loc = ("steps", int(cross.group(1)))
    line = _line_of(text, loc)
    place = f"{where}:{line}" if line else where
    return KitError(f"{place}: {field}: {msg}" if field else f"{place}: {msg}")


def load_trace(path: str | Path) -> Trace:
    """Read and validate a cache-level trace file; every failure is a one-line KitError naming
    the place."""
    trace = load_any_trace(path)
    if not isinstance(trace, Trace):
        raise KitError(f"{path}: level: a scheduler-level trace where a cache-level one is needed")
    return trace


LEVELS = ("cache", "scheduler", "hybrid")


def load_any_trace(path: str | Path):
    """A cache-level ``Trace`` or a scheduler-level ``SchedTrace``, by the file's ``level``."""
    return parse_any_trace(read_input(path, "trace"), str(path))


def parse_any_trace(text: str, where: str = "trace"):
    """``load_any_trace`` for a text already read; errors name ``where`` and the line."""
    from kvconf.conformance.scheduler.trace import SchedTrace

    data = parse_json(text, where)
    if not isinstance(data, dict):
        raise KitError(f"{where}:1: a trace is a JSON object, got {type(data).__name__}")
    level = data.get("level", "cache")
    if level not in LEVELS:
        line = _line_of(text, ("level",))
        raise KitError(f"{where}:{line}: level: {level!r} is not a level "
                       "(cache, scheduler or hybrid)")
    if level == "hybrid":
        from kvconf.conformance.hybrid.trace import HybridTrace

        try:
            return HybridTrace.model_validate_json(text, strict=True)
        except ValidationError as e:
            raise validation_error(e, text, where) from None
    model = SchedTrace if level == "scheduler" else Trace
    if model is Trace and "steps" not in data:
        raise KitError(f"{where}:1: steps: missing (a cache-level trace is its steps)")
    try:  # strict: a boolean or a float is no integer, a string no number
        return model.model_validate_json(text, strict=True)
    except ValidationError as e:
        raise validation_error(e, text, where) from None


_OPS = frozenset(("match", "insert", "extend", "unlock", "evict", "writeback", "loadback", "ack",
                  "tick", "unload", "reset"))


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


STREAMS = ("-", "/dev/stdout")  # report paths that mean standard output, written through


def is_stream(path: str | Path) -> bool:
    """``-`` or ``/dev/stdout``: the text goes to standard output, no file is made."""
    return str(path) in STREAMS


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def write_target(path: str | Path) -> Path:
    """The file a write to ``path`` replaces: ``path`` itself, or the file a symlink points to
    (the link is kept, its target rewritten). Anything but a regular file or a free name is
    refused, so a report never replaces a device, a FIFO, a socket or a folder with a file."""
    path = Path(path)
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return target
    except OSError as e:
        raise KitError(f"{path}: cannot write ({e.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        via = f" (a symlink to {target})" if target != path else ""
        raise KitError(f"{path}{via}: is {_kind(st.st_mode)}, not a regular file; refusing to "
                       "replace it")
    return target


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: str | Path, text: str) -> Path:
    """Write via a temporary file and rename, so a reader never sees half a file. The file gets
    the mode of the file it replaces, or the user's umask for a new one (not mkstemp's 0600);
    ``-`` and ``/dev/stdout`` are written through to standard output. Any OS failure is a
    one-line KitError naming the path (``WriteFailed``: a run it cuts short says so). SIGINT
    and SIGTERM are held from the temporary file's creation to the rename and delivered just
    after (``hold_signals``): an interrupt landing between them, inside ``mkstemp`` before it
    hands the name back, would leave the temporary file behind."""
    from kvconf.conformance.running.signals import hold_signals

    if is_stream(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return Path(path)
    path = Path(path)
    target = write_target(path)
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    tmp = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with hold_signals():
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                       suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(tmp, mode)
            os.replace(tmp, target)
    except OSError as e:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        where = e.filename if e.filename and str(e.filename) != str(tmp) else path
        raise WriteFailed(where, e.strerror or str(e)) from None
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise
    return path
