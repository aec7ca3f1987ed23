"""The executable reference of kvconf: a deterministic, pure-Python prefix cache.

Every decision here is a function of the operation history alone (a logical clock and sequence
numbers, never wall time or memory addresses), so the same trace always gives the same outcome.
The normative rules it implements live in ``spec/``; code cites their IDs.
"""

from kvconf.reference.errors import CacheError
from kvconf.reference.kv_events import KVEvent, block_hash
from kvconf.reference.prefix_cache import (
    CacheConfig,
    InsertResult,
    MatchResult,
    PrefixCache,
    Transfer,
)
from kvconf.reference.tiers import Tier

__all__ = [
    "CacheConfig",
    "CacheError",
    "InsertResult",
    "KVEvent",
    "MatchResult",
    "PrefixCache",
    "Tier",
    "Transfer",
    "block_hash",
]
