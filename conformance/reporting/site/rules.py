"""The rule index: every behaviour on one page, in reading order, with its level, statement,
chapter and how the known engines fare on it, so a reader scans the spec or finds a rule by ID."""

from __future__ import annotations

from pathlib import Path

from kvconf.conformance.reporting.site.cards import Facts, level_badge
from kvconf.spec.registry import Registry


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def engines_cell(bid: str, facts: Facts) -> str:
    """The reader's own engines' verdicts first, then which known engines fail the rule and
    how many pass it (a check of it ran and held); else not judged."""
    known = [r for r in facts.runs if not r.own]
    fails = [r.label for r in known if r.status(bid) == "fail"]
    passes = sum(1 for r in known if r.status(bid) == "pass")
    parts = [f"<b>{r.label}</b>: {r.status(bid)}" for r in facts.runs if r.own]
    if fails:
        parts.append('<span class="kv-eng kv-fail">fails</span> ' + ", ".join(fails))
    if passes:
        parts.append(f'<span class="kv-eng kv-pass">passes</span> {passes} of '
                     f"{len(known)}")
    return "<br>".join(parts) or "not judged"


def render_rules(reg: Registry, order: list[str], out: Path, facts: Facts) -> None:
    rank = {name: i for i, name in enumerate(order)}
    rows = sorted(reg.behaviours.values(),
                  key=lambda b: (rank.get(reg.chapters[b.chapter].name, len(rank)),
                                 b.id.split("-")[0], int(b.id.split("-")[1])))
    judged = sum(1 for r in facts.runs if not r.own)
    lines = ["---", "hide: [toc]", "---", "", "# Rule index", "",
             f"Every rule of the spec ({len(rows)}), in the chapters' reading order. The ID "
             "opens the rule's card: why it exists, the cases that check it, the features an "
             "engine declares for them, and each known engine's result. *Engines* gives the "
             "verdict of the reports given to the build (your own engine) first, then counts "
             f"the {judged} known reports (the reference, SGLang, vLLM and TokenSpeed "
             "revisions): which fail the rule, and how many pass it (a check of it ran and "
             "held; a report older than kvconf-report/5 passes none).", "",
             '<div class="kv-rules" markdown>', "",
             "| rule | level | statement | chapter | engines |",
             "| --- | --- | --- | --- | --- |"]
    for b in rows:
        chapter = reg.chapters[b.chapter].name
        title = _chapter_title(reg.chapters[b.chapter])
        lines.append(f"| [{b.id}](spec/{chapter}#{b.id}) | {level_badge(b.level.value)} | "
                     f"{_cell(b.statement)} | [{title}](spec/{chapter}) | "
                     f"{engines_cell(b.id, facts)} |")
    lines += ["", "</div>"]
    (out / "rules.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _chapter_title(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return path.stem
