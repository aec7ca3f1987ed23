"""A run's verdict on each rule, as every view shows it (compliance report, JUnit, the site's
matrix and rule cards, ``kvconf diff``, the CLI): read from ``report.rule_verdicts`` alone, so
no view can pass a rule no check of which ran (spec chapter faults, "Verdicts of a rule").

A rule no case judged has no status: it is *not judged*, with why (the report predates
``kvconf-report/5``; its cases ran but no check of it did, for the features the engine declares;
its cases failed on another rule first; no case of the run cites it). That is never PASS, and
never NOT_SUPPORTED either, which is a case's status: the engine lacks what the case needs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from kvconf.conformance.reporting.report import (
    BAD,
    FORMATS,
    UNJUDGED,
    CaseResult,
    Report,
    Status,
    rule_verdicts,
)

# A rule's verdict over several cases is the worst: a failure first, then a judged pass, then a
# case that could not run (NOT_SUPPORTED, NOT_APPLICABLE).
ORDER = {Status.CRASH: 0, Status.FAIL: 1, Status.ERROR: 2, Status.TIMEOUT: 3, Status.PASS: 4,
         Status.NOT_SUPPORTED: 5, Status.NOT_APPLICABLE: 6}

NOT_JUDGED = "not judged"  # what every view writes for a rule with no verdict
JUDGED_SINCE = "kvconf-report/5"  # the first format whose cases record ``judged``
PREDATES = (f"this report predates {JUDGED_SINCE}, which records the rules a check of which "
            "ran")


@dataclass(slots=True)
class RuleVerdict:
    """One run's verdict on one rule: its status (None: not judged), the cases behind it (for
    a rule not judged, the cases that cite it), and, not judged, why."""

    status: Status | None
    cases: list[CaseResult] = field(default_factory=list)
    why: str = ""

    @property
    def label(self) -> str:
        return NOT_JUDGED if self.status is None else self.status.value

    def worst_bad(self) -> CaseResult | None:
        bad = [c for c in self.cases if c.status in BAD]
        return min(bad, key=lambda c: ORDER[c.status]) if bad else None


def predates(report: Report) -> bool:
    """A report whose format records no ``judged``: its cases pass no rule."""
    return report.format in FORMATS[:FORMATS.index(JUDGED_SINCE)]


def _why(report: Report, cited: list[CaseResult]) -> str:
    if predates(report):
        return PREDATES
    if not cited:
        return "no case of the run cites it"
    names = ", ".join(c.case for c in cited[:4]) + (", ..." if len(cited) > 4 else "")
    if all(c.status in BAD for c in cited):
        return f"its cases ({names}) failed on another rule before a check of it ran"
    if any(c.judged is None for c in cited):
        return f"its cases ({names}) record no rule judged"
    return (f"its cases ({names}) ran, but no check of it did for the features the engine "
            "declares")


def run_verdicts(report: Report, behaviours: Iterable[str]) -> dict[str, RuleVerdict]:
    """Per rule of ``behaviours``: the worst verdict the report's cases back, or not judged
    with why."""
    out: dict[str, RuleVerdict] = {}
    cited: dict[str, list[CaseResult]] = {}
    for x in report.results:
        for b in dict.fromkeys(x.behaviours):
            cited.setdefault(b, []).append(x)
        for b, st in rule_verdicts(x):
            v = out.get(b)
            if v is None:
                out[b] = v = RuleVerdict(st)
            elif ORDER[st] < ORDER[v.status]:  # type: ignore[index]
                v.status = st
            v.cases.append(x)
    return {b: out[b] if b in out else RuleVerdict(None, cited.get(b, []),
                                                  _why(report, cited.get(b, [])))
            for b in behaviours}


def tally(verdicts: dict[str, RuleVerdict]) -> str:
    """The rules' verdicts counted, for a run's line in a table: ``12 pass, 1 FAIL, 3 n/s,
    40 not judged``."""
    counts: dict[str, int] = {}
    for v in verdicts.values():
        key = {Status.PASS: "pass", Status.NOT_SUPPORTED: "n/s",
               Status.NOT_APPLICABLE: "n/a", None: NOT_JUDGED}.get(v.status)
        key = key or v.status.value  # type: ignore[union-attr]
        counts[key] = counts.get(key, 0) + 1
    order = ["pass", "FAIL", "CRASH", "ERROR", "TIMEOUT", "n/s", "n/a", NOT_JUDGED]
    return ", ".join(f"{counts[k]} {k}" for k in order if counts.get(k))


# "engine lacks host_tier, kv_events; <the engine's reasons>" (runner.not_supported)
_LACKS = re.compile(r"^engine lacks ([a-z0-9_, ]+?)(?:;|$)")
_MOOT = re.compile(r"^engine declares ([a-z0-9_, ]+?), which makes")


def missing_feature(x: CaseResult) -> str:
    """What a NOT_SUPPORTED case is grouped under: the features the engine lacks for it
    (``host_tier``), a feature whose declaration makes it moot, or else its message."""
    m = _LACKS.match(x.message)
    if m:
        return m.group(1)
    m = _MOOT.match(x.message)
    if m:
        return f"declares {m.group(1)} (moot)"
    return x.message or "not supported"


def not_supported_groups(report: Report) -> list[tuple[str, list[CaseResult]]]:
    """The NOT_SUPPORTED cases by what is missing, the largest group first."""
    groups: dict[str, list[CaseResult]] = {}
    for x in report.results:
        if x.status is Status.NOT_SUPPORTED:
            groups.setdefault(missing_feature(x), []).append(x)
    return sorted(groups.items(), key=lambda kv: -len(kv[1]))


__all__ = ["JUDGED_SINCE", "NOT_JUDGED", "ORDER", "PREDATES", "UNJUDGED", "RuleVerdict",
           "missing_feature", "not_supported_groups", "predates", "run_verdicts", "tally"]
