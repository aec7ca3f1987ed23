"""How the engines the kit has judged fare on each rule, from their committed reports
(``docs/peers/<engine>/report.json``), each failure linked to its write-up where one exists.

A rule fails on an engine when a FAIL, CRASH or TIMEOUT result names it; it passes when a case
that cites it passed and none failed; it is undecided when the cases citing it ran but each
failed on another rule first; otherwise the engine was not judged on it (the cases need features
it does not declare). The write-up is the heading of the engine's guide that names the
finding (the defect or rule its expectation entry begins with, else the failing rule), else the
one about the revision, else the engine's section.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kvconf.conformance.errors import KitError
from kvconf.conformance.reporting.site.headings import headings

BAD = {"FAIL", "CRASH", "TIMEOUT", "ERROR"}
SKIPPED = {"NOT_SUPPORTED", "NOT_APPLICABLE"}
ID = re.compile(r"\b[A-Z][A-Z0-9]*-\d+\b")
# Where each engine's findings are written up: the guide, and the section of it (a heading's
# words) that is about this engine; None: the whole guide.
WRITE_UPS: dict[str, tuple[str, str | None]] = {
    "tokenspeed": ("tokenspeed.md", None),
    "sglang-radix": ("peers.md", "SGLang RadixCache"),
    "sglang-radix-salt": ("peers.md", "SGLang RadixCache"),
    "sglang-unified": ("peers.md", "SGLang UnifiedRadixCache"),
    "vllm": ("peers.md", "vLLM KVCacheManager"),
    "vllm-salt": ("peers.md", "vLLM KVCacheManager"),
}


@dataclass(frozen=True, slots=True)
class Failure:
    case: str
    status: str
    link: str | None  # "<guide>.md#anchor", relative to the site root


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


def _section(docs: Path, engine: str) -> tuple[str, list] | None:
    family = engine if engine in WRITE_UPS else engine.split("-")[0]
    if family not in WRITE_UPS:
        return None
    page, title = WRITE_UPS[family]
    hs = headings(docs / page)
    if title is not None:
        start = next((i for i, h in enumerate(hs) if h.level == 2 and h.text.startswith(title)),
                     None)
        if start is None:  # the guide was reorganised: its findings are still on the page
            return page, [h for h in hs if h.level >= 3]
        end = next((i for i in range(start + 1, len(hs)) if hs[i].level <= 2), len(hs))
        hs = hs[start:end]
    return page, hs


def _write_up(docs: Path, engine: str, label: str, candidates: list[str]) -> str | None:
    """The heading that names a candidate ID; else one that begins with the revision
    (``pr268: ...``); else the engine's section or guide."""
    found = _section(docs, engine)
    if found is None:
        return None
    page, hs = found
    for cand in candidates:
        for h in hs:
            if h.level >= 3 and cand in ID.findall(h.text):
                return f"{page}#{h.anchor}"
    revision = label.removeprefix(f"{engine}-")
    for h in hs:
        if h.level >= 3 and h.text.startswith(f"{revision}:"):
            return f"{page}#{h.anchor}"
    return f"{page}#{hs[0].anchor}" if hs and hs[0].level == 2 else page


def load_runs(peers: Path, docs: Path,
              cited: Mapping[str, Iterable[str]] | None = None) -> list[EngineRun]:
    """Every committed report under ``peers``, the reference first, then by name. ``cited``:
    case -> the rules it cites (a failing result names only the rules it broke)."""
    cited = cited or {}
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
                    lead = ID.findall((r.get("known") or "")[:40])[:1]
                    link = _write_up(docs, run.engine, run.label, lead + rules)
                    for b in rules:
                        run.fails.setdefault(b, []).append(Failure(r["case"], r["status"], link))
                elif r["status"] == "PASS":
                    run.passes.update(rules)
        except (KeyError, TypeError, json.JSONDecodeError) as e:
            raise KitError(f"{path}: not a kvconf report ({e})") from None
        runs.append(run)
    return sorted(runs, key=lambda r: (r.label != "reference", r.label))
