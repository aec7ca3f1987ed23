"""What an engine author runs to check one rule: the suite's cases that cite it, the level each
speaks, the features an engine must declare for it to run, and the allowance a rule leaves to an
engine's choice. Read from the suite itself (``select_cases``), so the site says what runs."""

from __future__ import annotations

from dataclasses import dataclass

from kvconf.conformance.engine.features import ALLOWANCES, Feature

LEVELS = (Feature.CACHE, Feature.SCHEDULER)


@dataclass(frozen=True, slots=True)
class CaseRef:
    name: str
    level: str  # "cache" or "scheduler"
    needs: tuple[str, ...]  # features besides the level
    fuzz: bool


def cases_by_behaviour() -> dict[str, list[CaseRef]]:
    """Behaviour -> the cases that cite it, hand-written scenarios before fuzz cases."""
    from kvconf.conformance.running.runner import select_cases

    out: dict[str, list[CaseRef]] = {}
    for case in select_cases(None):
        level = next((f.value for f in LEVELS if f in case.needs), "cache")
        needs = tuple(sorted(f.value for f in case.needs if f not in LEVELS))
        ref = CaseRef(case.name, level, needs, case.fuzz)
        for b in case.behaviours:
            out.setdefault(b, []).append(ref)
    for refs in out.values():
        refs.sort(key=lambda r: r.fuzz)  # stable: the suite's order within each kind
    return out


def allowance_of() -> dict[str, str]:
    """Behaviour -> the feature an engine declares to take the choice the rule leaves open."""
    return {bid: f.value for f, bid in ALLOWANCES.items()}
