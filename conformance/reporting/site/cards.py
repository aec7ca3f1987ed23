"""A behaviour's card: what an engine author reads about one rule.

The level as a badge, the statement first and plain, why it exists, the defects it guards,
how to check an engine against it (the cases, the command, the features to declare), how the
known engines fare (each failure linked to its write-up), and, folded, the kit's internals that
hold it (oracles, tests, mutants, proof obligations). A row with nothing to say is left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvconf.conformance.reporting.site.checks import CaseRef
from kvconf.conformance.reporting.site.engines import EngineRun
from kvconf.spec.registry import Registry


@dataclass(slots=True)
class Facts:
    """Everything the cards and the rule index are drawn from, gathered once per build."""

    oracles: dict[str, list[str]] = field(default_factory=dict)
    tests: dict[str, list[str]] = field(default_factory=dict)
    mutants: dict[str, list[str]] = field(default_factory=dict)  # defect -> mutants
    proofs: dict[str, list[str]] = field(default_factory=dict)
    cases: dict[str, list[CaseRef]] = field(default_factory=dict)
    allowances: dict[str, str] = field(default_factory=dict)
    runs: list[EngineRun] = field(default_factory=list)


def level_badge(level: str) -> str:
    css = level.lower().replace(" ", "-")
    return f'<span class="kv-level kv-{css}">{level}</span>'


def _case_table(refs: list[CaseRef]) -> list[str]:
    rows = ["| case | the engine declares |", "| --- | --- |"]
    for r in refs:
        needs = ", ".join(f"`{n}`" for n in (r.level, *r.needs))
        kind = " (fuzz)" if r.fuzz else ""
        rows.append(f"| `{r.name}`{kind} | {needs} |")
    return rows


def check_section(bid: str, facts: Facts) -> list[str]:
    refs = facts.cases.get(bid, [])
    if not refs:
        return []
    scenarios = [r for r in refs if not r.fuzz]
    fuzz = [r for r in refs if r.fuzz]
    first = (scenarios or fuzz)[0]
    out = ["**Check your engine.** "
           + ("The cases that exercise it, and what the engine must declare for each to run "
              "(a case it cannot run is NOT_SUPPORTED, never PASS):"), ""]
    out += _case_table(scenarios + fuzz)
    out += ["", "```bash", f"kvconf run --engine <yours> --case {first.name}", "```", ""]
    if bid in facts.allowances:
        out += [f"The rule leaves a choice open: an engine that makes it declares "
                f"`{facts.allowances[bid]}` and is held to that form.", ""]
    return out


def engines_section(bid: str, facts: Facts, root: str) -> list[str]:
    fails, passes, undecided, unjudged = [], [], [], []
    for run in facts.runs:
        st = run.status(bid)
        if st == "fail":
            links = sorted({link for f in run.fails[bid] for link in f.links})
            cases = sorted({f.case for f in run.fails[bid]})
            # One write-up: "why"; several (the case's findings break the rule in more than
            # one way, or its expectation reason covers several): each by its title.
            why = "" if not links else f"[why]({root}{links[0][0]})" if len(links) == 1 else \
                "why: " + ", ".join(f"[{title}]({root}{link})" for link, title in links)
            fails.append(f'<span class="kv-eng kv-fail">{run.label}</span> '
                         f"({', '.join(f'`{c}`' for c in cases[:3])}"
                         f"{', ...' if len(cases) > 3 else ''}{'; ' + why if why else ''})")
        elif st == "pass":
            passes.append(f'<span class="kv-eng kv-pass">{run.label}</span>')
        elif st == "undecided":
            undecided.append(run.label)
        else:
            unjudged.append(run)
    if not (fails or passes):
        return []
    out = ["**Known engines** (their committed reports):", ""]
    if fails:
        out += ["- fails: " + "; ".join(fails)]
    if passes:
        out += ["- passes: " + " ".join(passes)]
    if undecided:
        out += ["- undecided (its cases failed on another rule first): " + ", ".join(undecided)]
    if unjudged and facts.cases.get(bid):  # a rule no case cites is judged on every case
        families: dict[str, list[str]] = {}
        for run in unjudged:
            families.setdefault(run.engine, []).append(run.label.removeprefix(f"{run.engine}-"))
        out += ["- not judged (the cases need features the engine does not declare): "
                + "; ".join(e if revs == [e] else f"{e} {', '.join(revs)}"
                            for e, revs in families.items())]
    return out + [""]


def internals(bid: str, guards: tuple[str, ...], facts: Facts) -> list[str]:
    rows = []
    mutants = sorted({m for d in guards for m in facts.mutants.get(d, [])})
    for name, items in (("oracles", facts.oracles.get(bid, [])),
                        ("tests", facts.tests.get(bid, [])),
                        ("mutants", mutants),
                        ("proof obligations", facts.proofs.get(bid, []))):
        if items:
            rows.append(f"    | {name} | {', '.join(f'`{i}`' for i in items)} |")
    if not rows:
        return []
    return ['??? note "What holds it in the kit: oracles, tests, mutants, proofs"', "",
            "    | | |", "    | --- | --- |", *rows, ""]


def behaviour_card(reg: Registry, bid: str, facts: Facts, root: str = "../") -> str:
    """The card, as Markdown for a page ``root`` below the site's root."""
    b = reg.behaviours[bid]
    out = ['<div class="kv-card" markdown>', "",
           f"### {bid} {level_badge(b.level.value)} {{ #{bid} }}", "",
           b.statement, "{ .kv-statement }", "",
           f"**Why.** {b.rationale}", ""]
    if b.guards:
        guards = [f"- [{d}]({root}catalog.md#{d}): {reg.catalog[d].title}" for d in b.guards]
        out += ["**Guards** the defects:", "", *guards, ""]
    out += check_section(bid, facts)
    out += engines_section(bid, facts, root)
    out += internals(bid, b.guards, facts)
    out += ["</div>", ""]
    return "\n".join(out)
