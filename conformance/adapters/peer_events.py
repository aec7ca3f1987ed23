"""The KV events of the peer engines, in the kit's form.

SGLang and vLLM publish the same three event shapes (``AllBlocksCleared``, ``BlockRemoved``,
``BlockStored`` with parent hash, tokens and block size) from their own modules, with hashes that
may run past 64 bits; only how a stored event names its namespace differs between them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kvconf.reference.kv_events import EventKind, KVEvent

MASK64 = (1 << 64) - 1


def to_kit_events(events: Iterable[Any], kinds: Any,
                  namespace_of: Callable[[Any], int]) -> list[KVEvent]:
    """``kinds`` is the engine's module defining ``AllBlocksCleared`` and ``BlockRemoved`` (any
    other event is a ``BlockStored``); ``namespace_of`` names a stored event's namespace."""
    out: list[KVEvent] = []
    for ev in events:
        if isinstance(ev, kinds.AllBlocksCleared):
            out.append(KVEvent(EventKind.CLEARED, ()))
        elif isinstance(ev, kinds.BlockRemoved):
            out.append(KVEvent(EventKind.REMOVED, tuple(h & MASK64 for h in ev.block_hashes)))
        else:
            parent = ev.parent_block_hash
            out.append(KVEvent(
                EventKind.STORED, tuple(h & MASK64 for h in ev.block_hashes),
                namespace=namespace_of(ev),
                parent_hash=None if parent is None else parent & MASK64,
                tokens=tuple(int(t) for t in ev.token_ids), block_size=int(ev.block_size),
            ))
    return out
