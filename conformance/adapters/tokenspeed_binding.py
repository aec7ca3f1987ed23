"""What both TokenSpeed adapters need of the extension, whichever era it is: importing it, its
version, its block hash, calling it with its errors turned into EngineRejected, and the runtime
events and KV events as it spells them."""

from __future__ import annotations

import os
from collections.abc import Sequence
from importlib import import_module, metadata
from typing import Any

from kvconf.conformance.errors import EngineRejected, EngineUnavailable
from kvconf.reference.kv_events import EventKind, KVEvent
from kvconf.reference.plan import (
    Abort,
    ExtendResult,
    Finish,
    RuntimeEvent,
)

REVISION_ENV = "KVCONF_TOKENSPEED_REVISION"


def extension() -> Any:
    try:
        return import_module("tokenspeed_scheduler")
    except ImportError as e:
        raise EngineUnavailable(
            f"tokenspeed_scheduler cannot be imported ({e}); build it from the tokenspeed "
            "sources and install it into this environment"
        ) from None


def engine_version(ts: Any) -> str:
    """The module's own version where it states one (the extension does not), else its
    distribution's; and the revision the user names."""
    version = getattr(ts, "__version__", None)
    if version is None:
        try:
            version = metadata.version("tokenspeed-scheduler")
        except metadata.PackageNotFoundError:
            version = "unknown"
    revision = os.environ.get(REVISION_ENV, "").strip()
    return f"{version} ({revision})" if revision else version


_FNV_OFFSET, _FNV_PRIME, _MASK = 14695981039346656037, 1099511628211, (1 << 64) - 1


def block_hash(parent: int | None, namespace: int, tokens: Sequence[int]) -> int:
    """TokenSpeed's KV event block hash (HashKvBlock, csrc/scheduler/kv_cache_events.cpp): 64-bit
    FNV-1a over a has-parent byte, the parent (8 bytes), the token count (8 bytes) and each token
    (4 bytes), little-endian. It has no namespace input: an adapter namespace (the radix era's
    lora_id) chains off its own root block."""
    data = bytearray(b"\x01" if parent is not None else b"\x00")
    if parent is not None:
        data += parent.to_bytes(8, "little")
    data += len(tokens).to_bytes(8, "little")
    for t in tokens:
        data += (t & 0xFFFFFFFF).to_bytes(4, "little")
    h = _FNV_OFFSET
    for b in data:
        h = ((h ^ b) * _FNV_PRIME) & _MASK
    return h


def engine_call(fn, *args):
    """A binding call; the engine's refusal ("FSM transition invalid: ...") is EngineRejected."""
    try:
        return fn(*args)
    except RuntimeError as e:
        raise EngineRejected("invalid_transition", str(e)) from None


def chunk_reused(chunk_end: dict[str, int], rid: str, start: int, n: int,
                 samples: bool) -> int:
    """What a prefill row reuses: the binding's prefix length counts a request's earlier chunks
    too, so only an admission reuses (a chunk starts where the request's last one ended; a
    re-admission from its prefix match after a retraction is an admission again). Keeps
    ``chunk_end``, where each request's unfinished prefill stopped."""
    reused = 0 if chunk_end.get(rid) == start else start
    if samples:
        chunk_end.pop(rid, None)
    else:
        chunk_end[rid] = start + n
    return reused


def read_kv_events(raw: Sequence[Any], roots: dict[int, int],
                   chain_ns: dict[int, int]) -> list[KVEvent]:
    """The binding's KV events as the kit's. A block whose parent is a namespace's root (in
    ``roots``: the radix era's adapter virtual roots, which no event announces) starts that
    namespace's chain; descendants inherit their parent's namespace (``chain_ns``)."""
    out: list[KVEvent] = []
    for e in raw:
        hashes = tuple(int(h) for h in e.block_hashes)
        if e.kind == "BlockStored":
            parent = None if e.parent_block_hash is None else int(e.parent_block_hash)
            if parent in roots:
                ns, parent = roots[parent], None
            else:
                ns = 0 if parent is None else chain_ns.get(parent, 0)
            if roots:
                chain_ns.update(dict.fromkeys(hashes, ns))
            out.append(KVEvent(EventKind.STORED, hashes, ns, parent,
                               tuple(int(t) for t in e.token_ids), int(e.block_size)))
        elif e.kind == "BlockRemoved":
            for h in hashes:
                chain_ns.pop(h, None)
            out.append(KVEvent(EventKind.REMOVED, hashes))
        else:
            chain_ns.clear()
            out.append(KVEvent(EventKind.CLEARED, ()))
    return out


def forward_event(ts: Any, ev: Any, e: RuntimeEvent, decoding: set[str],
                  finished: set[str]) -> bool:
    """Add a request's own event (ExtendResult, Finish, Abort) to the binding's batch, as both
    eras take it; False for the rest (the cache's acknowledgements, which differ by era)."""
    if isinstance(e, ExtendResult):
        ev.add_event(new_event(ts.ForwardEvent.ExtendResult, request_id=e.rid, tokens=[e.token]))
        if e.rid in decoding and e.rid not in finished:
            # As TokenSpeed's runtime: after a decode step, the tokens the next one needs room
            # for (decode_input_tokens, 1). With 0 the engine stops growing the request's page
            # table (forward_events.cpp, the reserve at schedule).
            ev.add_event(new_event(ts.ForwardEvent.UpdateReserveNumTokens, request_id=e.rid,
                                reserve_num_tokens_in_next_schedule_event=1))
    elif isinstance(e, Finish):
        ev.add_event(new_event(ts.ForwardEvent.Finish, request_id=e.rid))
    elif isinstance(e, Abort):
        ev.add_event(new_event(ts.ForwardEvent.Abort, request_id=e.rid))
    else:
        return False
    return True


def new_event(cls: type, **fields: Any) -> Any:
    """A binding event: constructed empty, its fields set afterwards."""
    ev = cls()
    for name, value in fields.items():
        setattr(ev, name, value)
    return ev
