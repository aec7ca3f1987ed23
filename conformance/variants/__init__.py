"""The kit's legal variants: the reference taking, each, another choice the spec permits.

The dual of ``kvconf.conformance.mutants``. Each variant is a small subclass of the reference
cache (``cache``) or scheduler (``scheduler``) that takes the other side of a MAY rule or of an
allowance (``ALLOWANCES``): it frees pages behind the window, evicts page by page, ignores
unknown ids, keeps the window-equivalent KV... The head of its docstring, before the first
colon, names the rules it exercises (``"WIN-4: ..."``); its ``features`` class attribute the
features it declares, an allowance's among them where the rule is one (the only way a case may
judge it differently: never a list of cases to leave out). ``kvconf variants`` runs the whole
suite of its level against every variant: each must PASS every case it runs, and behave unlike
the reference on some trace (``witness``), or it proves nothing.

A MAY rule or allowance with no variant yet is listed in ``NOT_BUILT`` with the reason, and
shown so in the matrix: never as a pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from kvconf.conformance.engine.features import Feature

ID = re.compile(r"\b[A-Z][A-Z0-9]*-[0-9]+\b")
Level = Literal["cache", "scheduler", "hybrid"]

# Rules the spec leaves open for which no variant is built yet, with the reason.
NOT_BUILT: dict[str, str] = {}


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    level: Level
    cls: type
    rules: tuple[str, ...]  # the MAY rules and allowances it exercises (its docstring's head)
    features: frozenset[Feature]  # what it declares beyond the reference adapter's features
    summary: str

    def factory(self, with_features: bool = True):
        """The engine factory for this variant: the reference adapter of its level with the
        variant's class and its features (``with_features=False``: the reference's features
        alone, to show what the declaration changes)."""
        return _adapter(self.level, self.cls, self.features if with_features else frozenset())

    def reference_factory(self, with_features: bool = True):
        """The reference at the same level, declaring what the variant declares (or, with
        ``with_features=False``, its own features alone): what the variant is compared with
        (``matrix.witness``)."""
        from kvconf.reference import PrefixCache
        from kvconf.reference.hybrid_cache import HybridCache
        from kvconf.reference.scheduler import Scheduler

        cls = {"cache": PrefixCache, "hybrid": HybridCache}.get(self.level, Scheduler)
        return _adapter(self.level, cls, self.features if with_features else frozenset())


def _adapter(level: Level, cls: type, features: frozenset[Feature]):
    """An adapter class of ``level`` over ``cls``, declaring ``features`` beside the reference
    adapter's; attributes the class offers for the driver (``null_page``, ``page_ids``) are
    read from its instance."""
    if level == "hybrid":
        from kvconf.conformance.adapters.reference_hybrid import ReferenceHybridAdapter

        class HybridVariantAdapter(ReferenceHybridAdapter):
            def __init__(self, config) -> None:
                super().__init__(config, cache_cls=cls)

        HybridVariantAdapter.features = ReferenceHybridAdapter.features | features
        HybridVariantAdapter.name = f"variant:{cls.__name__}"
        return HybridVariantAdapter
    if level == "cache":
        from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter

        class CacheVariantAdapter(ReferenceCacheAdapter):
            def __init__(self, config) -> None:
                super().__init__(config, cache_cls=cls)
                _offer(self, self.cache)

        CacheVariantAdapter.features = ReferenceCacheAdapter.features | features
        CacheVariantAdapter.name = f"variant:{cls.__name__}"
        return CacheVariantAdapter
    from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter

    class SchedulerVariantAdapter(ReferenceSchedulerAdapter):
        def __init__(self, config) -> None:
            super().__init__(config, scheduler_cls=cls)
            _offer(self, self.sched)

    SchedulerVariantAdapter.features = ReferenceSchedulerAdapter.features | features
    SchedulerVariantAdapter.name = f"variant:{cls.__name__}"
    return SchedulerVariantAdapter


def _offer(adapter, engine) -> None:
    for attr in ("null_page", "page_ids"):
        value = getattr(engine, attr, None)
        if value is not None:
            setattr(adapter, attr, value)


def _variant(level: Level, cls: type) -> Variant:
    head, _, rest = (cls.__doc__ or "").partition(":")
    return Variant(cls.__name__, level, cls, tuple(ID.findall(head)),
                   frozenset(getattr(cls, "features", frozenset())), " ".join(rest.split()))


def all_variants() -> list[Variant]:
    """Every variant, cache level first, each level by name."""
    from kvconf.conformance.variants.cache import CACHE_VARIANTS
    from kvconf.conformance.variants.hybrid import HYBRID_VARIANTS
    from kvconf.conformance.variants.scheduler import SCHED_VARIANTS

    return ([_variant("cache", c) for c in sorted(CACHE_VARIANTS, key=lambda c: c.__name__)]
            + [_variant("scheduler", c) for c in sorted(SCHED_VARIANTS,
                                                        key=lambda c: c.__name__)]
            + [_variant("hybrid", c) for c in sorted(HYBRID_VARIANTS,
                                                     key=lambda c: c.__name__)])


def open_rules(registry) -> dict[str, str]:
    """The rules the spec leaves open, each with what makes it one: the MAY rules, and the
    rules of the allowances (``ALLOWANCES``, whatever their level)."""
    from kvconf.conformance.engine.features import ALLOWANCES

    out = {b.id: "MAY" for b in registry.behaviours.values() if b.level.value == "MAY"}
    for feature, rule in ALLOWANCES.items():
        out[rule] = f"allowance {feature}" if rule not in out else f"MAY, allowance {feature}"
    return dict(sorted(out.items()))
