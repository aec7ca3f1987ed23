"""The hybrid cache level of the public API: what an adapter of a cache with several attention
groups (full attention, a sliding window, Mamba state) implements and the types it trades in
(docs/engine-guide.md, "Hybrid caches"; the rules are spec chapters windows and mamba)."""

from kvconf.conformance.engine.hybrid import (
    Admitted,
    Extended,
    Group,
    GroupHit,
    HybridConfig,
    HybridEngine,
    HybridHit,
    Settled,
    needed_slots,
)

__all__ = ["Admitted", "Extended", "Group", "GroupHit", "HybridConfig", "HybridEngine",
           "HybridHit", "Settled", "needed_slots"]
