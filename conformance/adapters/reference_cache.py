"""The bundled reference engine at the cache level."""

from __future__ import annotations

from collections.abc import Sequence

from kvconf.conformance import __version__
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.protocol import CopyOp, Inserted, Match
from kvconf.conformance.errors import EngineRejected
from kvconf.reference import CacheConfig, CacheError, PrefixCache, Tier, block_hash
from kvconf.reference.kv_events import KVEvent
from kvconf.reference.snapshot import CacheSnapshot


class ReferenceCacheAdapter:
    name = "reference"
    version = __version__
    features = frozenset(
        {
            Feature.SNAPSHOT,
            Feature.HOST_TIER,
            Feature.NAMESPACES,
            Feature.KV_EVENTS,
            Feature.LOCK_HANDLES,
            Feature.UNLOAD,
            Feature.COUNTERS,
            Feature.RESET,
        }
    )

    def __init__(self, config: EngineConfig, cache_cls: type[PrefixCache] = PrefixCache) -> None:
        self.page_size = config.page_size
        self.cache = cache_cls(
            CacheConfig(
                page_size=config.page_size,
                device_pages=config.device_pages,
                host_pages=config.host_pages,
            )
        )

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except CacheError as e:
            raise EngineRejected(e.code, e.message) from None

    def tick(self) -> None:
        self.cache.tick()

    def alloc(self, n: int) -> list[int] | None:
        return self._call(self.cache.alloc, n)

    def free(self, pages: Sequence[int]) -> None:
        self._call(self.cache.free, pages)

    def match(self, namespace: int, tokens: Sequence[int]) -> Match:
        m = self._call(self.cache.match, namespace, tokens)
        return Match(
            m.device_len, m.host_len, m.device_pages, m.host_pages, m.device_node, m.host_node
        )

    def insert(self, namespace: int, tokens: Sequence[int], pages: Sequence[int]) -> Inserted:
        r = self._call(self.cache.insert, namespace, tokens, pages)
        return Inserted(r.cached_len, r.freed)

    def lock(self, node: int, tier: Tier) -> int:
        return self._call(self.cache.lock, node, tier)

    def unlock(self, handle: int) -> None:
        self._call(self.cache.unlock, handle)

    def evict(self, tier: Tier, num_pages: int) -> int:
        return self._call(self.cache.evict, tier, num_pages)

    def _op(self, t) -> CopyOp | None:
        return None if t is None else CopyOp(t.op_id, t.kind, tuple(t.pairs))

    def start_writeback(self, node: int) -> CopyOp | None:
        return self._op(self._call(self.cache.start_writeback, node))

    def start_loadback(self, node: int) -> CopyOp | None:
        return self._op(self._call(self.cache.start_loadback, node))

    def finish_transfer(self, op_id: int, success: bool) -> None:
        self._call(self.cache.finish_transfer, op_id, success)

    def drain_events(self) -> list[KVEvent]:
        return self.cache.drain_events()

    def block_hash(self, parent: int | None, namespace: int, tokens: Sequence[int]) -> int:
        return block_hash(parent, namespace, tokens)

    def unload(self, namespace: int) -> int:
        return self._call(self.cache.unload, namespace)

    def reset(self) -> bool:
        return self._call(self.cache.reset)

    def snapshot(self) -> CacheSnapshot:
        return self.cache.snapshot()

    def counters(self) -> dict[str, int]:
        """The reference's own counts (POOL-6): free, cached and evictable pages per tier, and
        its hit statistics (POOL-8), which only the cache level reports."""
        out = self.cache.counters()
        out["query_tokens"], out["hit_tokens"] = self.cache.query_tokens, self.cache.hit_tokens
        return out


def reference(config: EngineConfig) -> ReferenceCacheAdapter:
    """The bundled reference under its short name: this cache level, and the scheduler level
    its ``scheduler`` attribute names (a function, so adapters that subclass the class do not
    inherit a scheduler level)."""
    return ReferenceCacheAdapter(config)


reference.scheduler = "kvconf.conformance.adapters.reference_scheduler:ReferenceSchedulerAdapter"
reference.hybrid = "kvconf.conformance.adapters.reference_hybrid:ReferenceHybridAdapter"
