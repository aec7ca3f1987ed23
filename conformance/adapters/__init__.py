"""Engine adapters, found by name. Imports are lazy so a missing engine costs nothing."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module

from conformance.engine_config import EngineConfig
from conformance.errors import KitError
from conformance.protocol import CacheEngine

# name -> "module:factory"; a factory takes an EngineConfig and returns a CacheEngine.
ENGINES: dict[str, str] = {
    "reference": "conformance.adapters.reference_cache:ReferenceCacheAdapter",
    "sglang-radix": "conformance.adapters.sglang_radix:SGLangRadixAdapter",
    "sglang-radix-salt": "conformance.adapters.sglang_radix:SGLangRadixSaltAdapter",
    "sglang-unified": "conformance.adapters.sglang_unified:SGLangUnifiedAdapter",
    "vllm": "conformance.adapters.vllm_cache:VLLMAdapter",
    "vllm-salt": "conformance.adapters.vllm_cache:VLLMSaltAdapter",
}


# Engines that also speak the scheduler level (submit / next_plan / advance); their factory takes
# a conformance.sched_trace.SchedConfig.
SCHED_ENGINES: dict[str, str] = {
    "reference": "conformance.adapters.reference_scheduler:ReferenceSchedulerAdapter",
    "tokenspeed": "conformance.adapters.tokenspeed:TokenSpeedAdapter",
}


def known_engines() -> list[str]:
    return sorted(set(ENGINES) | set(SCHED_ENGINES))


def sched_engine_factory(name: str) -> Callable | None:
    """The scheduler-level factory for ``name``, or None when it offers only the cache level."""
    target = SCHED_ENGINES.get(name)
    if target is None:
        return None
    module, attr = target.split(":")
    return getattr(import_module(module), attr)


def cache_engine_factory(name: str) -> Callable[[EngineConfig], CacheEngine] | None:
    """The cache-level factory for ``name``, or None when it offers only the scheduler level."""
    target = ENGINES.get(name)
    if target is None:
        return None
    module, attr = target.split(":")
    return getattr(import_module(module), attr)


def check_engine(name: str) -> None:
    """Unknown names are a one-line error listing the known ones."""
    if name not in ENGINES and name not in SCHED_ENGINES:
        raise KitError(f"unknown engine {name!r} (known: {', '.join(known_engines())})")


def engine_factory(name: str) -> Callable[[EngineConfig], CacheEngine]:
    """The cache-level factory for ``name``; a one-line error when it has none."""
    check_engine(name)
    factory = cache_engine_factory(name)
    if factory is None:
        raise KitError(f"engine {name!r} offers no cache-level adapter")
    return factory
