"""The rules a case judged: what a check of which ran in it, for the features the engine declares.

The drivers record, once per play (never per step), the rules their checks ran for
(``record``); the runner collects them per unit (``sink``) and keeps only the rules whose
``needs`` (``spec/registry/*.toml``) the engine declares (``allowed``): a rule of a feature an
engine does not offer is never judged for it, however many cases pass (spec chapter faults,
"Verdicts of a rule")."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import lru_cache

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.errors import KitError

_sink: set[str] | None = None
# True in a worker process: its parent holds every call to the per-call deadline and sees the
# process end, so a case that came back judged FAULT-3 (every call returned) for its calls.
watched = False


def process_rules(bounded_memory: bool) -> tuple[str, ...]:
    """The rules of the process a case ran in that held if it came back with a verdict: FAULT-3
    where a parent watched it, FAULT-5 where its data had a limit (``running.bounds``)."""
    return (("FAULT-3",) if watched else ()) + (("FAULT-5",) if bounded_memory else ())


def record(rules: Iterable[str]) -> None:
    """Rules a check of which ran (held or not), for the unit running in this process."""
    if _sink is not None:
        _sink.update(rules)


@contextmanager
def sink() -> Iterator[set[str]]:
    """Collect what ``record`` gets for the span of a block (a unit of a case)."""
    global _sink
    previous, _sink = _sink, set()
    try:
        yield _sink
    finally:
        _sink = previous


@lru_cache(maxsize=1)
def rule_needs() -> dict[str, frozenset[Feature]]:
    """Each rule's needs, as features; a name that is no feature is a spec error, said here."""
    from kvconf.spec.registry import load_registry

    known = {f.value: f for f in Feature}
    out: dict[str, frozenset[Feature]] = {}
    for b in load_registry().behaviours.values():
        bad = [n for n in b.needs if n not in known]
        if bad:
            raise KitError(f"spec/registry/{b.chapter}.toml: {b.id}.needs: {bad[0]!r} is not a "
                           f"feature (known: {', '.join(known)})")
        out[b.id] = frozenset(known[n] for n in b.needs)
    return out


def allowed(rules: Iterable[str], features: frozenset[Feature]) -> list[str]:
    """``rules`` less those of a feature the engine does not declare, sorted. A rule the registry
    does not know is kept out too: nothing can be judged against no statement."""
    needs = rule_needs()
    return sorted({r for r in rules if r in needs and needs[r] <= features})
