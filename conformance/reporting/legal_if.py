"""What would make a failure legal: the allowances an engine did not declare.

A rule's registry entry names the allowances under which another behaviour than its own is legal
(``allowances``, spec/registry.py). An engine that takes such a choice without declaring it fails
the rule, and a message that only says so sends its author looking for a defect that is not
there: the failure says which declaration would make the behaviour legal, and the rule that
allows it. The choice is still the engine's to check: the hint says "may".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kvconf.conformance.engine.features import ALLOWANCES, Feature
from kvconf.spec.registry import load_registry

MARK = "; may be legal if the engine declares "


def undeclared_allowances(behaviours: Iterable[str], features: Iterable[str]) -> list[str]:
    """The allowances named by ``behaviours``' registry entries that ``features`` lacks, in the
    order the rules name them, each once."""
    rules = load_registry().behaviours
    declared = {str(f) for f in features}
    out: list[str] = []
    for rule in behaviours:
        b = rules.get(rule)
        for name in b.allowances if b is not None else ():
            if name not in declared and name not in out:
                out.append(name)
    return out


def legal_if(behaviours: Iterable[str], features: Iterable[str]) -> str:
    """``"; may be legal if the engine declares page_eviction (EVICT-6)"`` for a failure of
    ``behaviours`` by an engine declaring ``features``; empty when no allowance applies."""
    names = undeclared_allowances(behaviours, features)
    if not names:
        return ""
    return MARK + " or ".join(f"{n} ({ALLOWANCES[Feature(n)]})" for n in names)


def with_hint(message: str, behaviours: Sequence[str], features: Iterable[str]) -> str:
    """``message`` with its ``legal_if`` hint, once (a message that has one keeps it)."""
    if MARK in message:
        return message
    return message + legal_if(behaviours, features)


def annotate(result, features: Iterable[str]) -> None:
    """Add the hint to a FAIL result's message and to each of its findings' (in place)."""
    if result.status.value != "FAIL":
        return
    features = [str(f) for f in features]
    result.message = with_hint(result.message, result.behaviours, features)
    for f in result.findings:
        f.message = with_hint(f.message, f.behaviours, features)
