"""How the engines the kit has judged fare on each rule, from the results section's runs (the
committed reports, ``docs/peers/<run>/report.json``, with the reports a build is given laid over
them: ``results_runs.gather``), each failure linked to its write-up where one exists.

A run's verdict on a rule is ``verdicts.run_verdicts``'s: it fails the rule when a FAIL, CRASH,
TIMEOUT or ERROR result names it; it passes it only where a case judged it (a check of it ran)
and held; it is not supported where every case citing it was NOT_SUPPORTED or NOT_APPLICABLE;
undecided where the cases citing it ran but each failed on another rule first; otherwise it is
not judged, with why (the report predates ``kvconf-report/5``; no check of it ran for the
features the engine declares). A failure's write-up is the one the results section gives it:
``docs/peers/writeups.toml``, matched by engine and by the start of the reason the engine's
expectation file gives the finding (``results_runs.writeup_for``); a finding no entry matches
has none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kvconf.conformance.reporting.report import BAD, UNJUDGED, CaseResult, Status
from kvconf.conformance.reporting.results_runs import (
    Writeup,
    findings_of,
    gather,
    writeup_for,
)
from kvconf.conformance.reporting.verdicts import RuleVerdict, run_verdicts


@dataclass(frozen=True, slots=True)
class Failure:
    case: str
    status: str
    links: tuple[tuple[str, str], ...]  # its findings' write-ups: ("<guide>.md#anchor" from
    # the site root, the write-up's title)


@dataclass(slots=True)
class EngineRun:
    """One run of the results section: an engine at one revision."""

    label: str  # a committed run's folder (tokenspeed-pr162, vllm, reference); else its title
    engine: str
    version: str
    fails: dict[str, list[Failure]] = field(default_factory=dict)  # rule -> its failures
    verdicts: dict[str, RuleVerdict] = field(default_factory=dict)
    ran: set[str] = field(default_factory=set)  # rules cited by a case that ran and failed
    own: bool = False  # given to the build, no committed run's: the reader's own engine

    def status(self, rule: str) -> str:
        """fail; pass; not supported; undecided (every case citing it that ran failed on
        another rule first); not judged (no check of it ran: ``why``)."""
        if rule in self.fails:
            return "fail"
        v = self.verdicts.get(rule)
        if v is not None and v.status is Status.PASS:
            return "pass"
        if v is not None and v.status in UNJUDGED:
            return "not supported"
        return "undecided" if rule in self.ran else "not judged"

    def why(self, rule: str) -> str:
        """Why the run did not judge ``rule``."""
        v = self.verdicts.get(rule)
        return v.why if v is not None and v.why else "no case of the run cites it"


def _write_ups(engine: str, x: CaseResult,
               writeups: list[Writeup]) -> dict[str, set[tuple[str, str]]]:
    """Rule -> the write-ups (``<guide>.md#anchor``, title) of the findings of failing result
    ``x`` that break it, each as the results section links it."""
    found = x.findings or [None]
    out: dict[str, set[tuple[str, str]]] = {b: set() for b in x.behaviours}
    for f, (_sig, reason, _trace) in zip(found, findings_of(x), strict=True):
        w = writeup_for(engine, reason, writeups)
        if w is None:
            continue
        for b in (f.behaviours if f is not None and f.behaviours else x.behaviours):
            out.setdefault(b, set()).add((f"{w.page}#{w.anchor}", w.title))
    return out


def load_runs(docs: Path, behaviours: Iterable[str],
              cited: Mapping[str, Iterable[str]] | None = None,
              given: Iterable[Path] = ()) -> list[EngineRun]:
    """The results section's runs (``given``: the reports a build is given), the reader's own
    first, then the reference, then by name. ``cited``: case -> the rules it cites (a failing
    result names only the rules it broke)."""
    cited = cited or {}
    behaviours = list(behaviours)
    res = gather(list(given), docs)
    runs: list[EngineRun] = []
    for r in res.runs:
        info = r.report.run_info
        run = EngineRun(r.title if r.own else r.key, info.engine, info.version,
                        verdicts=run_verdicts(r.report, behaviours), own=r.own)
        for x in r.report.results:
            if x.status in BAD:
                run.ran.update(x.behaviours, cited.get(x.case, ()))
                links = _write_ups(run.engine, x, res.writeups)
                for b in x.behaviours:
                    run.fails.setdefault(b, []).append(
                        Failure(x.case, x.status.value, tuple(sorted(links.get(b, ())))))
        runs.append(run)
    return sorted(runs, key=lambda r: (not r.own, r.label != "reference", r.label))
