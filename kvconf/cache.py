"""The cache level of the public API: what a prefix-cache adapter implements and the types it
trades in (docs/api.md; the rules are spec chapters pools to kv_events)."""

from kvconf.conformance.engine.block_snapshot import BlockSnapshot, BlockView, ChainLink, TableView
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.protocol import CacheEngine, CopyOp, Inserted, Match
from kvconf.reference.kv_events import EventKind, KVEvent, block_hash, chain_hashes
from kvconf.reference.snapshot import (
    CacheSnapshot,
    L3View,
    LockView,
    NodeView,
    PoolView,
    TransferView,
)
from kvconf.reference.tiers import Tier

__all__ = [
    "BlockSnapshot",
    "BlockView",
    "CacheEngine",
    "CacheSnapshot",
    "ChainLink",
    "CopyOp",
    "EngineConfig",
    "EventKind",
    "Inserted",
    "KVEvent",
    "L3View",
    "LockView",
    "Match",
    "NodeView",
    "PoolView",
    "TableView",
    "Tier",
    "TransferView",
    "block_hash",
    "chain_hashes",
]
