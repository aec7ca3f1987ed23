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
}


# Engines that also speak the scheduler level (submit / next_plan / advance); their factory takes
# a conformance.sched_trace.SchedConfig.
SCHED_ENGINES: dict[str, str] = {
    "reference": "conformance.adapters.reference_scheduler:ReferenceSchedulerAdapter",
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


def engine_factory(name: str) -> Callable[[EngineConfig], CacheEngine]:
    """The factory for ``name``; unknown names are a one-line error listing the known ones."""
    target = ENGINES.get(name)
    if target is None:
        raise KitError(f"unknown engine {name!r} (known: {', '.join(known_engines())})")
    module, attr = target.split(":")
    return getattr(import_module(module), attr)
