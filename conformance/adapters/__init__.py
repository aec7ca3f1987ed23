"""Engine adapters, found by name. Imports are lazy so a missing engine costs nothing."""

from __future__ import annotations

import os
import sys
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
    "tokenspeed": "conformance.adapters.tokenspeed:tokenspeed_adapter",
}


def known_engines() -> list[str]:
    return sorted(set(ENGINES) | set(SCHED_ENGINES))


def _load(target: str) -> Callable:
    """``module:attr``, imported (the current folder first, as ``python -m`` would); a
    one-line error naming what is missing."""
    module, _, attr = target.partition(":")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return getattr(import_module(module), attr)
    except ImportError as e:
        raise KitError(f"engine {target!r}: cannot import {module!r} ({e})") from None
    except AttributeError:
        raise KitError(f"engine {target!r}: module {module!r} has no {attr!r}") from None


def _level(name: str) -> str:
    """An engine given as ``module:factory`` speaks the level its factory's ``level`` names
    (``"cache"`` when it names none; ``"scheduler"`` takes a SchedConfig)."""
    return getattr(_load(name), "level", "cache")


def sched_engine_factory(name: str) -> Callable | None:
    """The scheduler-level factory for ``name``, or None when it offers only the cache level."""
    if ":" in name:
        return _load(name) if _level(name) == "scheduler" else None
    target = SCHED_ENGINES.get(name)
    if target is None:
        return None
    return _load(target)


def cache_engine_factory(name: str) -> Callable[[EngineConfig], CacheEngine] | None:
    """The cache-level factory for ``name``, or None when it offers only the scheduler level."""
    if ":" in name:
        return _load(name) if _level(name) == "cache" else None
    target = ENGINES.get(name)
    if target is None:
        return None
    return _load(target)


def check_engine(name: str) -> None:
    """Unknown names are a one-line error listing the known ones; ``module:factory`` must
    import."""
    if ":" in name:
        _load(name)
        return
    if name not in ENGINES and name not in SCHED_ENGINES:
        raise KitError(f"unknown engine {name!r} (known: {', '.join(known_engines())}, or "
                       "module:factory)")


def engine_factory(name: str) -> Callable[[EngineConfig], CacheEngine]:
    """The cache-level factory for ``name``; a one-line error when it has none."""
    check_engine(name)
    factory = cache_engine_factory(name)
    if factory is None:
        raise KitError(f"engine {name!r} offers no cache-level adapter")
    return factory
