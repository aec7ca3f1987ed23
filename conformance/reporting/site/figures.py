"""Figures of results in the guides, generated from the committed reports, never typed by hand.

A guide marks each figure a run gives with an HTML comment pair, and the text between is what the
reports under ``docs/peers/<run>/report.json`` say today:

- ``<!-- figures:counts RUN -->8 PASS, 5 FAIL, 44 NOT_SUPPORTED<!-- /figures -->``: a run's
  case counts, inline;
- ``<!-- figures:table RUN ... -->`` ... ``<!-- /figures -->``: a table of runs, a row each
  (the report's engine and version, its case counts, and its first failures by rule: each bad
  case counted once, under the rules its first finding cites, or as CRASH with its signal).

``kvconf docs build`` writes every marked figure afresh into the site it builds, so the site
shows what the reports say; ``tests/test_doc_figures.py`` fails when the committed guide
disagrees with them (a stale figure) or when a guide types a case count outside a marker.
``python -m kvconf.conformance.reporting.site.figures DOCS`` rewrites the guides in place.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from kvconf.conformance.errors import KitError
from kvconf.conformance.reporting.report import BAD, Report, Status, load_report

MARK = re.compile(r"<!-- figures:(\w+)((?: [\w.-]+)+) -->(.*?)<!-- /figures -->", re.S)
# A case count typed by hand: a number before a status name, outside every marker.
TYPED = re.compile(r"\b\d+ (?:PASS|FAIL|CRASH|NOT_SUPPORTED|NOT_APPLICABLE)\b")
ORDER = (Status.PASS, Status.FAIL, Status.CRASH, Status.TIMEOUT, Status.ERROR,
         Status.NOT_SUPPORTED, Status.NOT_APPLICABLE)


def counts(r: Report) -> str:
    """PASS and FAIL always, every other status that occurs, in the statuses' order."""
    n = Counter(x.status for x in r.results)
    return ", ".join(f"{n[s]} {s.value}" for s in ORDER
                     if n[s] or s in (Status.PASS, Status.FAIL))


def first_failures(r: Report) -> str:
    """Each bad case once: the rules its first finding cites, or how its process ended."""
    labels: Counter[str] = Counter()
    for x in r.results:
        if x.status not in BAD:
            continue
        if x.status is Status.CRASH:
            labels[f"CRASH {x.signal or f'exit {x.exit_code}'}"] += 1
        elif x.status is Status.FAIL:
            labels["+".join(sorted(x.behaviours)) or "FAIL"] += 1
        else:
            labels[x.status.value] += 1
    return ", ".join(f"{k} (x{v})" for k, v in sorted(labels.items())) or "none"


def table(runs: list[tuple[str, Report]]) -> str:
    cols = [s for s in ORDER if s in (Status.PASS, Status.FAIL, Status.NOT_SUPPORTED)
            or any(x.status is s for _, r in runs for x in r.results)]
    head = ["run", "engine", "version", *(s.value for s in cols), "first failures, by rule"]
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for name, r in runs:
        n = Counter(x.status for x in r.results)
        cells = [f"`{name}`", f"`{r.run_info.engine}`", r.run_info.version,
                 *(str(n[s]) for s in cols), first_failures(r)]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def render(text: str, report_of: Callable[[str], Report], where: str = "") -> str:
    """``text`` with every marked figure written afresh from the reports."""

    def one(m: re.Match) -> str:
        kind, names = m.group(1), m.group(2).split()
        if kind == "counts" and len(names) == 1:
            body = counts(report_of(names[0]))
        elif kind == "table":
            body = "\n" + table([(n, report_of(n)) for n in names]) + "\n"
        else:
            raise KitError(f"{where}: figures:{kind}{m.group(2)}: unknown figure (counts RUN "
                           "or table RUN ...)")
        return f"<!-- figures:{kind}{m.group(2)} -->{body}<!-- /figures -->"

    return MARK.sub(one, text)


def typed_by_hand(text: str) -> list[str]:
    """The case counts ``text`` types outside its markers."""
    return TYPED.findall(MARK.sub("", text))


def runs_reader(runs_dir: Path) -> Callable[[str], Report]:
    cache: dict[str, Report] = {}

    def report_of(name: str) -> Report:
        if name not in cache:
            path = runs_dir / name / "report.json"
            if not path.is_file():
                raise KitError(f"{path}: no committed report for the figure of run {name!r}")
            cache[name] = load_report(path)
        return cache[name]

    return report_of


def render_guides(folder: Path, runs_dir: Path) -> list[Path]:
    """Rewrite the marked figures of every guide in ``folder``; returns those that changed."""
    report_of, changed = runs_reader(runs_dir), []
    for page in sorted(folder.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        new = render(text, report_of, str(page))
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed.append(page)
    return changed


if __name__ == "__main__":  # rewrite the guides' figures in place from their committed reports
    docs = Path(sys.argv[1] if len(sys.argv) > 1 else "docs")
    for p in render_guides(docs, docs / "peers"):
        print(f"rewrote {p}")
