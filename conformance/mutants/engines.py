"""Every mutant as an engine named ``module:factory``, so a worker process opens it by name.

``kvconf mutants --jobs N`` runs the mutants' cases in the kit's worker processes
(``kvconf.conformance.running.pool``), which open an engine from a name alone, as they open any
engine of ``kvconf run``: ``kvconf.conformance.mutants.engines:EvictsPinned`` is the mutant
``EvictsPinned``'s factory, at its level (``Mutant.engine``). A mutant the kit does not list (one a
test adds in its own process) has no such name.
"""

from __future__ import annotations

from collections.abc import Callable


def __getattr__(name: str) -> Callable:
    from kvconf.conformance.mutants import all_mutants

    found = next((m for m in all_mutants(memory=False) if m.name == name), None)
    if found is None:
        raise AttributeError(f"no mutant {name!r}")
    factory = found.factory()
    factory.level = found.level  # a scheduler-level factory is called with a SchedConfig
    return factory
