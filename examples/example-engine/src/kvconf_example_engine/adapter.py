"""The engine's adapter to kvconf's cache-level protocol (``kvconf.conformance.engine.protocol``).

``factory`` is what the ``kvconf.engines`` entry point names: kvconf calls it with an
``EngineConfig`` and drives the engine it returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.protocol import CopyOp, Inserted, Match
from kvconf.conformance.errors import EngineRejected
from kvconf.reference import Tier, block_hash
from kvconf_example_engine import __version__
from kvconf_example_engine.cache import HouseCache, HouseCacheError


class ExampleAdapter:
    name = "example-engine"
    version = __version__
    # What it can be judged on; cases that need more (a host tier, KV events) are NOT_SUPPORTED.
    features = frozenset({Feature.SNAPSHOT, Feature.NAMESPACES, Feature.LOCK_HANDLES})

    def __init__(self, config: EngineConfig) -> None:
        self.page_size = config.page_size
        self.cache = HouseCache(config.page_size, config.device_pages)

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except HouseCacheError as e:  # a refusal the kit checks changed nothing (FAULT-1)
            raise EngineRejected(e.code, str(e)) from None

    def tick(self) -> None:
        self.cache.step()

    def alloc(self, n: int) -> list[int] | None:
        return self._call(self.cache.allocate, n)

    def free(self, pages: Sequence[int]) -> None:
        self._call(self.cache.release, pages)

    def match(self, namespace: int, tokens: Sequence[int]) -> Match:
        hit = self._call(self.cache.lookup, namespace, tokens)
        return Match(hit.tokens, 0, hit.pages, (), hit.node, hit.root)

    def insert(self, namespace: int, tokens: Sequence[int], pages: Sequence[int]) -> Inserted:
        cached, freed = self._call(self.cache.publish, namespace, tokens, pages)
        return Inserted(cached, freed)

    def lock(self, node: Any, tier: Tier) -> Any:
        return self._call(self.cache.pin, node, tier)

    def unlock(self, handle: Any) -> None:
        self._call(self.cache.unpin, handle)

    def evict(self, tier: Tier, num_pages: int) -> int:
        if tier is not Tier.DEVICE:
            return 0
        return self._call(self.cache.reclaim, num_pages)

    def start_writeback(self, node: Any) -> CopyOp | None:
        return None  # no host tier: every transfer is declined

    def start_loadback(self, node: Any) -> CopyOp | None:
        return None

    def finish_transfer(self, op_id: Any, success: bool) -> None:
        raise EngineRejected("no_transfer", "the example engine has no host tier")

    def drain_events(self) -> list:
        return []

    def block_hash(self, parent: int | None, namespace: int, tokens: Sequence[int]) -> int:
        return block_hash(parent, namespace, tokens)

    def snapshot(self):
        return self.cache.state()


def factory(config: EngineConfig) -> ExampleAdapter:
    """The entry point: an engine for ``config``."""
    return ExampleAdapter(config)
