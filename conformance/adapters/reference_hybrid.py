"""The bundled reference engine at the hybrid cache level (``reference/hybrid_cache.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kvconf.conformance import __version__
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.hybrid import Admitted, Extended, HybridConfig, HybridHit
from kvconf.conformance.errors import EngineRejected
from kvconf.reference.errors import CacheError
from kvconf.reference.hybrid_cache import HybridCache


class ReferenceHybridAdapter:
    """The reference hybrid cache behind the protocol; ``cache_cls`` swaps in a mutant or a
    legal variant (``kvconf.conformance.mutants`` / ``variants``)."""

    level = "hybrid"
    name = "reference"
    version = __version__
    features = frozenset({Feature.HYBRID, Feature.SLIDING_WINDOW, Feature.MAMBA})

    def __init__(self, config: HybridConfig,
                 cache_cls: type[HybridCache] = HybridCache) -> None:
        self.page_size = config.page_size
        self.cache = cache_cls(config.page_size, config.pages, config.state_slots,
                               config.window, config.mamba)
        self.groups = self.cache.groups
        self.pool_sizes = dict(self.cache.pool_sizes)
        if hasattr(self.cache, "computed"):  # a variant that publishes after the forward
            self.computed = lambda rid: self._call(self.cache.computed, rid)

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except CacheError as e:
            raise EngineRejected(e.code, e.message) from None

    def hit(self, namespace: int, tokens: Sequence[int]) -> HybridHit:
        return self._call(self.cache.hit, namespace, list(tokens))

    def admit(self, rid: str, namespace: int, tokens: Sequence[int]) -> Admitted:
        return self._call(self.cache.admit, rid, namespace, list(tokens))

    def extend(self, rid: str, upto: int) -> Extended | None:
        return self._call(self.cache.extend, rid, upto)

    def decode(self, rid: str, token: int) -> Extended | None:
        return self._call(self.cache.decode, rid, token)

    def finish(self, rid: str) -> None:
        self._call(self.cache.finish, rid)

    def available(self) -> Mapping[str, int]:
        return self.cache.available()
