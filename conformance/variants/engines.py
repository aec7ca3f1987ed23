"""Every legal variant as an engine named ``module:factory``, so a worker process opens it by name.

``kvconf variants --jobs N`` runs the variants' cases in the kit's worker processes
(``kvconf.conformance.running.pool``), which open an engine from a name alone, as they open any
engine of ``kvconf run``: ``kvconf.conformance.variants.engines:FreesBehindWindow`` is the variant
``FreesBehindWindow``'s adapter class, at its level, declaring the variant's features.
"""

from __future__ import annotations


def engine_name(name: str) -> str:
    """The name a worker opens the variant ``name`` by."""
    return f"{__name__}:{name}"


def __getattr__(name: str):
    from kvconf.conformance.variants import all_variants

    found = next((v for v in all_variants() if v.name == name), None)
    if found is None:
        raise AttributeError(f"no variant {name!r}")
    factory = found.factory()
    factory.level = found.level  # a scheduler-level factory is called with a SchedConfig
    return factory
