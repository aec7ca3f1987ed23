"""The closed vocabulary of features an adapter declares.

A case that needs a feature the engine lacks is reported NOT_SUPPORTED, never PASS.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Feature(str, Enum):
    """What an engine declares it offers (a capability) or chooses (an allowance,
    ``ALLOWANCES``)."""

    SNAPSHOT = "snapshot"  # white-box introspection (owners, counts, tree)
    # White-box introspection of a hash-keyed cache: blocks, free queue, hash map, block tables
    # (POOL-7, conformance/engine/block_snapshot.py)
    BLOCK_SNAPSHOT = "block_snapshot"
    HOST_TIER = "host_tier"  # a host tier with writeback / loadback transfers
    L3_STORE = "l3_store"
    MAMBA = "mamba"
    SLIDING_WINDOW = "sliding_window"
    NAMESPACES = "namespaces"  # adapter / salt namespaces as a key part
    KV_EVENTS = "kv_events"
    LOCK_HANDLES = "lock_handles"  # unlock names the lock it releases, so imbalance is detectable
    # counters() reads the engine's own counts (free, cached, evictable pages per tier; free
    # request slots), checked against its state after every call (POOL-6).
    COUNTERS = "counters"
    # Retired: PLAN-7 holds every scheduler engine to mid-flight publish (D381-1), declared or
    # not; kept so that reports which list it still load.
    MID_FLIGHT_PUBLISH = "mid_flight_publish"
    SCHEDULER = "scheduler"  # speaks the scheduler level: submit / next_plan / advance
    CACHE = "cache"  # speaks the prefix-cache level: match / insert / lock / evict ...
    # Speaks the hybrid cache level: per-group hits, window release, Mamba state slots
    # (hit / admit / extend / finish; conformance/engine/hybrid.py).
    HYBRID = "hybrid"
    UNLOAD = "unload"  # a namespace (adapter) can be unloaded
    # reset() drops the whole cache at once when nothing is in use, and refuses otherwise
    # (EVICT-8, EVICT-9): vLLM's reset_prefix_cache, SGLang's flush_cache.
    RESET = "reset"
    ADAPTER_CAP = "adapter_cap"  # a cap on distinct adapters per forward (max_adapters, PLAN-9)
    MATCH_LEAVES_LAST = "match_leaves_last"  # matches never cover the query's last token (TREE-7)
    PAGE_EVICTION = "page_eviction"  # evicts page by page, freeing exactly what is asked (EVICT-6)
    MODEL_CONFIG = "model_config"  # reads a model's window from its config: model_window (WIN-1)
    IGNORES_UNKNOWN_EVENTS = "ignores_unknown_events"  # unknown request / op ids ignored (REQ-6)
    KEEPS_WINDOW_PREFIX = "keeps_window_prefix"  # the first W positions' KV is kept (WIN-2)
    # The window's layers have a page table of their own beside the full-attention table; the
    # runtime drops nothing itself (WIN-3).
    WINDOW_TABLE = "window_table"
    # KV events announce only the reusable block boundaries of a cache whose reusable prefixes
    # are not closed under shortening: a parent may be unstored (EVENT-8).
    SPARSE_PREFIX_EVENTS = "sparse_prefix_events"
    LOADBACK_ACK = "loadback_ack"  # the runtime acknowledges each loadback (HOST-8)
    # A writeback's acknowledgement carries no success flag: a failed copy ends the runtime and
    # is never acknowledged (HOST-9).
    FATAL_TRANSFER_FAILURE = "fatal_transfer_failure"
    MAMBA_CHECKPOINT_SLOT = "mamba_checkpoint_slot"  # two state slots per request (MAMBA-9)
    # The runtime writes every row's KV of a layer before any row of that layer attends, so a
    # row may reuse what another row of the same forward computes (PLAN-13).
    SAME_FORWARD_REUSE = "same_forward_reuse"
    # A request still prefilling may be pushed off the device, to be recomputed (REQ-7).
    PREEMPTS_PREFILLING = "preempts_prefilling"
    # Every batch may mix prefill and decode rows: no unmixed mode to switch to (PLAN-3).
    MIXED_ONLY = "mixed_only"
    # A model config is read through its architecture's config class: a nested text config
    # configures the language model, what a level leaves unsaid takes the class's default (WIN-5).
    CONFIG_CLASS_WINDOW = "config_class_window"
    # Mamba states are kept per page, and a chunk that starts inside a page never crosses that
    # page's end: the kit plays only such chunks to the engine (MAMBA-11).
    MAMBA_ALIGNED_CHUNKS = "mamba_aligned_chunks"
    # A loadback's device pages join the tree (and are served) when the copy is submitted, its
    # readers ordered after the copy on the device's stream; they stay pinned until it lands
    # (HOST-11).
    STREAM_ORDERED_LOADBACK = "stream_ordered_loadback"
    # Host eviction takes only host copies of nodes no longer on device (HOST-12).
    INCLUSIVE_HOST_TIER = "inclusive_host_tier"
    # A loadback may land plans before its request's first row: the request waits for the
    # acknowledgement with its pages held, and is planned only after it (HOST-13).
    DEFERRED_LOADBACK = "deferred_loadback"
    # A write-through writeback's source pages may be handed out again before its
    # acknowledgement, by a plan that names the copy in its flush (HOST-14).
    FLUSHED_WRITEBACK = "flushed_writeback"

    def __str__(self) -> str:
        return self.value


# The choices the spec leaves to an engine: each is a rule that holds an engine declaring the
# feature to another, equally legal behaviour (the rule's statement says so). An engine that
# makes the choice declares it; one that does not is held to the stricter default.
ALLOWANCES: dict[Feature, str] = {
    Feature.MATCH_LEAVES_LAST: "TREE-7",
    Feature.PAGE_EVICTION: "EVICT-6",
    Feature.IGNORES_UNKNOWN_EVENTS: "REQ-6",
    Feature.KEEPS_WINDOW_PREFIX: "WIN-2",
    Feature.WINDOW_TABLE: "WIN-3",
    Feature.SPARSE_PREFIX_EVENTS: "EVENT-8",
    Feature.LOADBACK_ACK: "HOST-8",
    Feature.FATAL_TRANSFER_FAILURE: "HOST-9",
    Feature.MAMBA_CHECKPOINT_SLOT: "MAMBA-9",
    Feature.SAME_FORWARD_REUSE: "PLAN-13",
    Feature.PREEMPTS_PREFILLING: "REQ-7",
    Feature.MIXED_ONLY: "PLAN-3",
    Feature.CONFIG_CLASS_WINDOW: "WIN-5",
    Feature.MAMBA_ALIGNED_CHUNKS: "MAMBA-11",
    Feature.STREAM_ORDERED_LOADBACK: "HOST-11",
    Feature.INCLUSIVE_HOST_TIER: "HOST-12",
    Feature.DEFERRED_LOADBACK: "HOST-13",
    Feature.FLUSHED_WRITEBACK: "HOST-14",
}


def parse_features(names: list[str]) -> frozenset[Feature]:
    return frozenset(Feature(n) for n in names)


@dataclass(frozen=True, slots=True)
class Missing:
    """Why a feature an engine offers nowhere cannot be judged here: a level that did not start
    (``lacked`` false: said alone, it is about this machine), or a feature the engine says it
    lacks by design (``lacked`` true, its ``lacks`` reason: added to the case's list)."""

    why: str
    lacked: bool = False

    def wire(self) -> dict:
        return {"why": self.why, "lacked": self.lacked}

    @classmethod
    def from_wire(cls, doc: dict) -> Missing:
        return cls(str(doc["why"]), bool(doc["lacked"]))
