"""A behaviour's card: what an engine author reads about one rule.

The level as a badge, the statement first and plain, why it exists, the defects it guards,
how to check an engine against it (the cases, the command, the features to declare), the
verdict of the reader's own engine (a report given to the build) first, then how the known
engines fare (each failure linked to its write-up; a rule no check of which ran is not judged,
with why, never a pass), and, folded, the kit's internals that
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


def _failure(run: EngineRun, bid: str, root: str) -> str:
    links = sorted({link for f in run.fails[bid] for link in f.links})
    cases = sorted({f.case for f in run.fails[bid]})
    # One write-up: "why"; several (the case's findings break the rule in more than one way,
    # or its expectation reason covers several): each by its title.
    why = "" if not links else f"[why]({root}{links[0][0]})" if len(links) == 1 else \
        "why: " + ", ".join(f"[{title}]({root}{link})" for link, title in links)
    return (f'<span class="kv-eng kv-fail">{run.label}</span> '
            f"({', '.join(f'`{c}`' for c in cases[:3])}"
            f"{', ...' if len(cases) > 3 else ''}{'; ' + why if why else ''})")


def yours_section(bid: str, facts: Facts, root: str) -> list[str]:
    """The reader's own engines (the reports given to the build) first, each with its
    verdict, and why where it has none."""
    out = []
    for run in (r for r in facts.runs if r.own):
        st = run.status(bid)
        if st == "fail":
            out.append(f"- {_failure(run, bid, root)}")
        elif st == "pass":
            out.append(f'- <span class="kv-eng kv-pass">{run.label}</span> passes: a check of '
                       "it ran and held")
        elif st == "not supported":
            first = run.verdicts[bid].cases[0]
            out.append(f"- {run.label}: not supported (`{first.case}`: {first.message})")
        elif st == "undecided":
            out.append(f"- {run.label}: undecided (its cases failed on another rule first)")
        else:
            out.append(f"- {run.label}: **not judged** ({run.why(bid)})")
    return ["**Your engine** (the reports given to this build):", "", *out, ""] if out else []


def engines_section(bid: str, facts: Facts, root: str) -> list[str]:
    fails, passes, undecided, lacking = [], [], [], []
    unjudged: dict[str, list[EngineRun]] = {}  # why -> the runs
    for run in (r for r in facts.runs if not r.own):
        st = run.status(bid)
        if st == "fail":
            fails.append(_failure(run, bid, root))
        elif st == "pass":
            passes.append(f'<span class="kv-eng kv-pass">{run.label}</span>')
        elif st == "undecided":
            undecided.append(run.label)
        elif st == "not supported":
            lacking.append(run)
        else:
            why = run.why(bid)
            why = why.split(" (")[0] + why[why.index(")") + 1:] if why.startswith(
                "its cases (") else why  # the cases differ from run to run
            unjudged.setdefault(why, []).append(run)
    if not (fails or passes or undecided or lacking or unjudged):
        return []
    out = ["**Known engines** (the reports of this site):", ""]
    if fails:
        out += ["- fails: " + "; ".join(fails)]
    if passes:
        out += ["- passes: " + " ".join(passes)]
    if undecided:
        out += ["- undecided (its cases failed on another rule first): " + ", ".join(undecided)]
    if lacking and facts.cases.get(bid):  # a rule no case cites is judged on every case
        out += ["- not supported (the cases need features the engine does not declare): "
                + _by_engine(lacking)]
    for why, runs in unjudged.items():
        out += [f"- not judged ({why}): " + _by_engine(runs)]
    return out + [""]


def _by_engine(runs: list[EngineRun]) -> str:
    """Runs grouped by engine: ``sglang-hybrid; tokenspeed main-radix, pr162``."""
    families: dict[str, list[str]] = {}
    for run in runs:
        families.setdefault(run.engine, []).append(run.label.removeprefix(f"{run.engine}-"))
    return "; ".join(e if revs == [e] else f"{e} {', '.join(revs)}"
                     for e, revs in families.items())


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
    out += yours_section(bid, facts, root)
    out += engines_section(bid, facts, root)
    out += internals(bid, b.guards, facts)
    out += ["</div>", ""]
    return "\n".join(out)
