"""The kit's mutants: the reference with one catalog defect planted each.

Each mutant is a subclass of the reference cache (``cache``), scheduler (``scheduler``) or hybrid
cache (``hybrid``), or of
the GPU harness's memory (``memory``: a defect on the runtime side); no source is edited. The
head of its docstring, before the first colon, names the behaviours it breaks and the catalog
defects it is, e.g. ``"PLAN-6 / D268-2: ..."``. ``kvconf mutants`` runs the suite against every
one of them and reports which the kit kills.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial
from typing import Literal

ID = re.compile(r"\b[A-Z][A-Z0-9]*-[0-9]+\b")
Level = Literal["cache", "scheduler", "memory", "hybrid"]


@dataclass(frozen=True, slots=True)
class Mutant:
    name: str
    level: Level
    cls: type
    ids: tuple[str, ...]  # behaviour and catalog IDs named by the docstring's head
    summary: str

    def factory(self):
        """The engine factory the runner takes for this mutant (a memory mutant is its own
        factory: ``cls(page_size, device_pages, host_pages, layout, device)``)."""
        if self.level == "memory":
            return self.cls
        if self.level == "hybrid":
            from kvconf.conformance.adapters.reference_hybrid import ReferenceHybridAdapter

            return partial(ReferenceHybridAdapter, cache_cls=self.cls)
        if self.level == "cache":
            from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter

            return partial(ReferenceCacheAdapter, cache_cls=self.cls)
        from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter

        return partial(ReferenceSchedulerAdapter, scheduler_cls=self.cls)

    def cites(self, known) -> tuple[str, ...]:
        """The IDs it names that are in ``known`` (the catalog, or the behaviours)."""
        return tuple(i for i in self.ids if i in known)


def _mutant(name: str, level: Level, cls: type) -> Mutant:
    head, _, rest = (cls.__doc__ or "").partition(":")
    return Mutant(name, level, cls, tuple(ID.findall(head)), " ".join(rest.split()))


def all_mutants() -> list[Mutant]:
    """Every mutant, cache level first, each level by name."""
    from kvconf.conformance.mutants.cache import PLANTED
    from kvconf.conformance.mutants.hybrid import PLANTED_HYBRID
    from kvconf.conformance.mutants.mamba import PLANTED_MAMBA
    from kvconf.conformance.mutants.scheduler import PLANTED_SCHED
    from kvconf.conformance.mutants.window import PLANTED_WINDOW

    sched = {**PLANTED_SCHED, **PLANTED_MAMBA, **PLANTED_WINDOW}
    out = ([_mutant(n, "cache", c) for n, c in sorted(PLANTED.items())]
           + [_mutant(n, "scheduler", c) for n, c in sorted(sched.items())]
           + [_mutant(n, "hybrid", c) for n, c in sorted(PLANTED_HYBRID.items())])
    try:  # the runtime side's mutants need torch (the GPU harness)
        from kvconf.gpu_harness.mutants import MEMORY_MUTANTS
    except ImportError:
        return out
    return out + [_mutant(n, "memory", c) for n, c in sorted(MEMORY_MUTANTS.items())]
