"""How the engines the kit has judged fare on each rule, from their committed reports
(``docs/peers/<engine>/report.json``), each failure linked to its write-up where one exists.

A rule fails on an engine when a FAIL, CRASH or TIMEOUT result names it; it passes when a case
that cites it passed and none failed; it is undecided when the cases citing it ran but each
failed on another rule first; otherwise the engine was not judged on it (the cases need features
it does not declare). A failure's write-up is the one the results section gives it:
``docs/peers/writeups.toml``, matched by engine and by the start of the reason the engine's
expectation file gives the finding (``results_runs.writeup_for``); a finding no entry matches
has none.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from kvconf.conformance.errors import KitError
from kvconf.conformance.reporting.report import CaseResult
from kvconf.conformance.reporting.results_runs import (
    WRITEUPS,
    Writeup,
    findings_of,
    load_writeups,
    writeup_for,
)

BAD = {"FAIL", "CRASH", "TIMEOUT", "ERROR"}
SKIPPED = {"NOT_SUPPORTED", "NOT_APPLICABLE"}


@dataclass(frozen=True, slots=True)
class Failure:
    case: str
    status: str
    links: tuple[tuple[str, str], ...]  # its findings' write-ups: ("<guide>.md#anchor" from
    # the site root, the write-up's title)


@dataclass(slots=True)
class EngineRun:
    """One committed report: an engine at one revision."""

    label: str  # the report's folder: tokenspeed-pr162, vllm, reference
    engine: str
    version: str
    fails: dict[str, list[Failure]] = field(default_factory=dict)  # rule -> its failures
    passes: set[str] = field(default_factory=set)
    ran: set[str] = field(default_factory=set)  # rules cited by a case that ran

    def status(self, rule: str) -> str:
        """fail; pass; undecided (every case citing it that ran failed on another rule
        first); not judged (no case citing it ran)."""
        if rule in self.fails:
            return "fail"
        if rule in self.passes:
            return "pass"
        return "undecided" if rule in self.ran else "not judged"


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


def load_runs(peers: Path, docs: Path,
              cited: Mapping[str, Iterable[str]] | None = None) -> list[EngineRun]:
    """Every committed report under ``peers``, the reference first, then by name. ``cited``:
    case -> the rules it cites (a failing result names only the rules it broke)."""
    cited = cited or {}
    writeups = load_writeups(docs / WRITEUPS)
    runs: list[EngineRun] = []
    for path in sorted(peers.glob("*/report.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            info = data["run_info"]
            run = EngineRun(path.parent.name, info["engine"], info.get("version", ""))
            for r in data["results"]:
                rules = list(r.get("behaviours") or [])
                if r["status"] == "PASS":  # the rules its case cited when it ran
                    run.ran.update(rules)
                elif r["status"] not in SKIPPED:  # the rules it broke, and what it cites now
                    run.ran.update(rules, cited.get(r["case"], ()))
                if r["status"] in BAD:
                    links = _write_ups(run.engine, CaseResult.model_validate(r), writeups)
                    for b in rules:
                        run.fails.setdefault(b, []).append(
                            Failure(r["case"], r["status"], tuple(sorted(links.get(b, ())))))
                elif r["status"] == "PASS":
                    run.passes.update(rules)
        except (KeyError, TypeError, json.JSONDecodeError, ValidationError) as e:
            raise KitError(f"{path}: not a kvconf report ({e})") from None
        runs.append(run)
    return sorted(runs, key=lambda r: (r.label != "reference", r.label))
