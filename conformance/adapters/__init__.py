"""Engine adapters, found by name. Imports are lazy so a missing engine costs nothing.

An engine is a factory named ``module:attr``: called with an ``EngineConfig`` it returns a
cache-level engine; one whose ``level`` attribute is ``"scheduler"`` is called with a
``SchedConfig`` instead; a cache-level factory whose ``scheduler`` attribute names another
factory (a callable or ``module:attr``) offers that as its scheduler level, and one whose
``hybrid`` attribute names one offers a hybrid cache level (``level = "hybrid"``, called with a
``HybridConfig``; conformance/engine/hybrid.py). Short names come
from the ``kvconf.engines`` entry point group, so an installed package registers its engine as
kvconf registers its own (pyproject.toml); ``BUILTIN`` is the same table, used when the
installation has no entry point metadata.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import import_module, metadata

from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.protocol import CacheEngine
from kvconf.conformance.errors import KitError

GROUP = "kvconf.engines"
DIST = "kvconf"  # the distribution whose entry points are BUILTIN

# name -> "module:factory", exactly pyproject.toml's [project.entry-points."kvconf.engines"].
BUILTIN: dict[str, str] = {
    "reference": "kvconf.conformance.adapters.reference_cache:reference",
    "sglang-radix": "kvconf.conformance.adapters.sglang_radix:SGLangRadixAdapter",
    "sglang-radix-salt": "kvconf.conformance.adapters.sglang_radix:SGLangRadixSaltAdapter",
    "sglang-unified": "kvconf.conformance.adapters.sglang_unified:SGLangUnifiedAdapter",
    "sglang-hicache": "kvconf.conformance.adapters.sglang_hicache:SGLangHiCacheAdapter",
    "tokenspeed": "kvconf.conformance.adapters.tokenspeed:tokenspeed_adapter",
    "vllm": "kvconf.conformance.adapters.vllm_cache:VLLMAdapter",
    "vllm-hybrid": "kvconf.conformance.adapters.vllm_hybrid:VLLMHybridAdapter",
    "sglang-hybrid": "kvconf.conformance.adapters.sglang_hybrid:SGLangHybridAdapter",
    "vllm-salt": "kvconf.conformance.adapters.vllm_cache:VLLMSaltAdapter",
    "vllm-scheduler": "kvconf.conformance.adapters.vllm_scheduler:VLLMEngine",
    "vllm-offload": "kvconf.conformance.adapters.vllm_offload:VLLMOffloadAdapter",
}

LEVELS = ("cache", "scheduler", "hybrid")


@dataclass(frozen=True)
class Registered:
    """The targets one short name was registered with, and by which distributions."""

    name: str
    targets: dict[str, list[str]]  # "module:attr" -> distributions that registered it

    @property
    def target(self) -> str:
        """The one target; two different ones for a name is an error, not a choice."""
        if len(self.targets) > 1:
            who = "; ".join(f"{t} (by {', '.join(d)})" for t, d in sorted(self.targets.items()))
            raise KitError(f"engine {self.name!r} is registered more than once: {who}; "
                           "uninstall one, or name the engine by module:factory")
        return next(iter(self.targets))


@cache
def registry() -> dict[str, Registered]:
    """Every short name: the ``kvconf.engines`` entry points of the installed packages, and
    kvconf's own table when its metadata is missing (a copy run from source, an odd install)."""
    found: dict[str, dict[str, list[str]]] = {}
    own = False
    for ep in metadata.entry_points(group=GROUP):
        dist = ep.dist.name if ep.dist is not None else "?"
        own = own or (dist or "").lower() == DIST
        who = found.setdefault(ep.name, {}).setdefault(ep.value.replace(" ", ""), [])
        if dist not in who:
            who.append(dist)
    if not own:
        for name, target in BUILTIN.items():
            found.setdefault(name, {}).setdefault(target, []).append(f"{DIST} (built in)")
    return {name: Registered(name, targets) for name, targets in sorted(found.items())}


def known_engines() -> list[str]:
    return sorted(registry())


def _load(target: str) -> object:
    """``module:attr``, imported (the current folder first, as ``python -m`` would); a
    one-line error naming what is missing."""
    module, _, attr = target.partition(":")
    if not module or not attr:
        raise KitError(f"engine {target!r}: expected module:factory")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found = import_module(module)
    except ImportError as e:
        raise KitError(f"engine {target!r}: cannot import {module!r} ({e})") from None
    except Exception as e:  # the module itself raised while importing
        raise KitError(f"engine {target!r}: importing {module!r} raised "
                       f"{type(e).__name__}: {e}") from None
    try:
        for part in attr.split("."):
            found = getattr(found, part)
    except AttributeError:
        raise KitError(f"engine {target!r}: module {module!r} has no {attr!r}") from None
    return found


def _factory(target: str) -> Callable:
    made = _load(target)
    if not callable(made):
        raise KitError(f"engine {target!r}: {type(made).__name__} is not callable (a factory "
                       "takes an EngineConfig, or a SchedConfig at the scheduler level)")
    return made


@dataclass(frozen=True)
class Levels:
    """The factories an engine offers: cache level, scheduler level, hybrid cache level (None:
    not offered)."""

    cache: Callable[[EngineConfig], CacheEngine] | None
    scheduler: Callable | None
    hybrid: Callable | None = None


def target_of(name: str) -> str:
    """The ``module:factory`` an engine name stands for; a one-line error for an unknown or
    ambiguous name."""
    if ":" in name:
        return name
    found = registry().get(name)
    if found is None:
        raise KitError(f"unknown engine {name!r} (known: {', '.join(known_engines())}, or "
                       "module:factory)")
    return found.target


def levels(name: str) -> Levels:
    """Find ``name`` (a short name or ``module:factory``) and the levels its factory offers."""
    target = target_of(name)
    made = _factory(target)
    level = getattr(made, "level", "cache")
    if level not in LEVELS:
        raise KitError(f"engine {target!r}: level {level!r} (known: {', '.join(LEVELS)})")
    if level == "scheduler":
        return Levels(None, made)
    if level == "hybrid":
        return Levels(None, None, made)
    return Levels(made, _attached(target, made, "scheduler"), _attached(target, made, "hybrid"))


def _attached(target: str, made: Callable, attr: str) -> Callable | None:
    """The factory of another level a cache-level factory names as its ``attr``."""
    other = getattr(made, attr, None)
    if isinstance(other, str):
        return _factory(other)
    if other is not None and not callable(other):
        raise KitError(f"engine {target!r}: its {attr} attribute is not a factory")
    return other


def sched_engine_factory(name: str) -> Callable | None:
    """The scheduler-level factory for ``name``, or None when it offers only the cache level."""
    return levels(name).scheduler


def hybrid_engine_factory(name: str) -> Callable | None:
    """The hybrid-cache-level factory for ``name``, or None when it offers none."""
    return levels(name).hybrid


def cache_engine_factory(name: str) -> Callable[[EngineConfig], CacheEngine] | None:
    """The cache-level factory for ``name``, or None when it offers only the scheduler level."""
    return levels(name).cache


def check_engine(name: str) -> None:
    """Unknown or ambiguous names are a one-line error listing the known ones; a factory must
    import and be callable."""
    levels(name)


def engine_factory(name: str) -> Callable[[EngineConfig], CacheEngine]:
    """The cache-level factory for ``name``; a one-line error when it has none."""
    factory = cache_engine_factory(name)
    if factory is None:
        raise KitError(f"engine {name!r} offers no cache-level adapter")
    return factory
