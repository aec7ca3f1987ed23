"""The results section's matrix: rules x runs as one coloured HTML table.

Raw HTML (mkdocs-material renders it inside the page): rotated run headers grouped by engine,
the runs given to the build (the reader's own engine) first and marked, a sticky rule column, the
rules some run breaks first, and in each failing cell a link to its trace's page and one (**§**)
to the write-up of its finding. A cell is the run's verdict on the rule (``verdicts``): PASS only
where a check of it ran and held; a rule no check of which ran is not judged, with why.
"""

from __future__ import annotations

from html import escape

from kvconf.conformance.reporting.report import UNJUDGED, Status
from kvconf.conformance.reporting.results_runs import (
    BAD,
    Results,
    Run,
    href,
    rule_page,
    trace_page_of,
    writeup_of,
)
from kvconf.conformance.reporting.verdicts import (
    PREDATES,
    RuleVerdict,
    predates,
    run_verdicts,
)
from kvconf.spec.registry import Registry

# What a cell shows for each verdict (the legend spells them out); None: not judged.
SHORT = {Status.PASS: "pass", Status.FAIL: "FAIL", Status.CRASH: "CRASH", Status.ERROR: "ERR",
         Status.TIMEOUT: "T/O", Status.NOT_SUPPORTED: "n/s", Status.NOT_APPLICABLE: "n/a",
         None: "n/j"}

# ---------------------------------------------------------------------------- the matrix

Cell = RuleVerdict  # one run's verdict on one rule


def cells(res: Results, behaviours: list[str]) -> dict[str, dict[str, Cell]]:
    """Per rule per run: the run's verdict on it (``verdicts.run_verdicts``)."""
    out: dict[str, dict[str, Cell]] = {b: {} for b in behaviours}
    for run in res.runs:
        for b, v in run_verdicts(run.report, behaviours).items():
            out[b][run.key] = v
    return out


def row_order(behaviours: list[str], grid: dict[str, dict[str, Cell]]
              ) -> tuple[list[str], list[str], list[str]]:
    """Rules that fail somewhere (most failing columns first), rules judged and passed
    everywhere, and rules no engine was judged on."""
    failing, passing, unjudged = [], [], []
    for b in behaviours:
        row = grid[b].values()
        if any(c.status in BAD for c in row):
            failing.append(b)
        elif any(c.status not in (None, *UNJUDGED) for c in row):
            passing.append(b)
        else:
            unjudged.append(b)
    failing.sort(key=lambda b: -sum(1 for c in grid[b].values() if c.status in BAD))
    return failing, passing, unjudged


STYLE = """<style>
.kv-matrix { overflow-x: auto; max-width: 100%; }
.md-typeset table.kvm { border-collapse: collapse; font-size: .68rem; line-height: 1.25;
  width: auto; margin: .5em 0; }
.kv-matrix th, .kv-matrix td { min-width: 2.4em;
  border: 1px solid var(--md-default-fg-color--lightest);
  padding: .12rem .25rem; text-align: center; white-space: nowrap; }
.kv-matrix th.rule { vertical-align: bottom; }
.kv-matrix th.rule, .kv-matrix td.rule { position: sticky; left: 0; z-index: 1;
  text-align: left; background: var(--md-default-bg-color); }
.kv-matrix th.fam { font-weight: 700; background: var(--md-default-fg-color--lightest); }
.kv-matrix th.rev { height: 7.2em; vertical-align: bottom; padding: .3rem .1rem; }
.kv-matrix th.rev span { writing-mode: vertical-rl; transform: rotate(180deg);
  font-weight: 600; }
.kv-matrix td.FAIL, .kv-matrix td.CRASH, .kv-matrix td.ERROR, .kv-matrix td.TIMEOUT {
  background: #ffcdd2; color: #8e0000; font-weight: 700; }
.kv-matrix td.FAIL a, .kv-matrix td.CRASH a, .kv-matrix td.ERROR a, .kv-matrix td.TIMEOUT a {
  color: #8e0000; text-decoration: underline; }
.kv-matrix td.PASS { background: #c8e6c9; color: #1b5e20; }
.kv-matrix td.NOT_SUPPORTED { background: #fff9c4; color: #6d5d00; }
.kv-matrix td.NOT_APPLICABLE { background: #eceff1; color: #455a64; }
.kv-matrix td.NOT_JUDGED { color: #9e9e9e; }
.kv-matrix th.mine, .kv-matrix td.mine { border-left: 2px solid var(--md-accent-fg-color);
  border-right: 2px solid var(--md-accent-fg-color); }
.kv-matrix th.fam.mine { background: var(--md-accent-fg-color--transparent); }
.kv-matrix a.why { font-weight: 400; margin-left: .15rem; text-decoration: none; }
.kv-matrix tr.sep td { background: var(--md-default-fg-color--lightest); text-align: left;
  font-weight: 700; position: sticky; left: 0; }
.kv-legend { font-size: .7rem; }
.kv-legend span { padding: 0 .3rem; border-radius: .1rem; font-weight: 700; }
.kv-legend .FAIL, .kv-legend .CRASH { background: #ffcdd2; color: #8e0000; }
.kv-legend .PASS { background: #c8e6c9; color: #1b5e20; }
.kv-legend .NOT_SUPPORTED { background: #fff9c4; color: #6d5d00; }
.kv-legend .NOT_APPLICABLE { background: #eceff1; color: #455a64; }
.kv-legend .NOT_JUDGED { color: #9e9e9e; }
</style>"""


def _legend() -> str:
    items = [("FAIL", "FAIL", "broke the rule: click for its trace, <b>§</b> for the "
              "finding's write-up"), ("CRASH", "CRASH", "the engine's process died"),
             ("PASS", "pass", "a check of the rule ran and held"),
             ("NOT_SUPPORTED", "n/s", "not supported (the engine lacks a feature its cases "
              "need)"), ("NOT_APPLICABLE", "n/a", "not applicable at the run's config"),
             ("NOT_JUDGED", "n/j", "not judged: no check of the rule ran in the run (hover "
              "for why); never a pass")]
    return ("<p class='kv-legend'>"
            + " ".join(f"<span class='{c}'>{escape(s)}</span> {d};" for c, s, d in items)
            + "</p>")


def _mine(run: Run) -> str:
    """The class that marks a column of the reader's own engine (a report given to the build
    that adds a column)."""
    return " mine" if run.own else ""


def matrix_html(res: Results, reg: Registry, page: str) -> str:
    behaviours = list(reg.behaviours)
    grid = cells(res, behaviours)
    failing, passing, unjudged = row_order(behaviours, grid)
    groups: list[tuple[str, bool, int]] = []  # (family, given to the build, columns)
    for run in res.runs:
        if groups and groups[-1][:2] == (run.family, run.own):
            groups[-1] = (run.family, run.own, groups[-1][2] + 1)
        else:
            groups.append((run.family, run.own, 1))
    head = ("<thead><tr><th class='rule' rowspan='2'>rule</th>"
            + "".join(f"<th class='fam mine' colspan='{n}'>yours</th>" if own else
                      f"<th class='fam' colspan='{n}'>{escape(f)}</th>" for f, own, n in groups)
            + "</tr><tr>"
            + "".join(f"<th class='rev{_mine(r)}' title='{escape(_title(r), quote=True)}'>"
                      f"<span>{escape(r.short)}</span></th>" for r in res.runs)
            + "</tr></thead>")

    def row(b: str) -> str:
        beh = reg.behaviours[b]
        tip = escape(f"{beh.level.value}: {beh.statement}", quote=True)
        tds = [f"<td class='rule'><a href='{href(page, rule_page(reg, b), b)}' title='{tip}'>"
               f"{escape(b)}</a> <small>{escape(beh.level.value)}</small></td>"]
        for run in res.runs:
            cell = grid[b][run.key]
            st = cell.status
            cases = "; ".join(f"{c.case}: {c.status.value}" for c in cell.cases[:12])
            text = SHORT[st]
            bad = cell.worst_bad()
            if bad is not None and bad.trace:
                text = (f"<a href='{href(page, trace_page_of(run, bad.trace))}'>"
                        f"{escape(SHORT[st])}</a>")
            if bad is not None:
                w = writeup_of(res, run, bad)
                if w is not None:
                    text += (f"<a class='why' href='{href(page, w.page, w.anchor)}' "
                             f"title='{escape(w.title, quote=True)}'>§</a>")
                cases = f"{bad.case}: {bad.message[:200]} | {cases}"
            elif st in UNJUDGED and cell.cases:  # why it was not judged (the engine's lacks)
                first = cell.cases[0]
                cases = f"{first.case}: {first.message[:200]} | {cases}"
            elif st is None:
                cases = f"not judged: {cell.why}" + (f" | {cases}" if cases else "")
            css = st.value if st is not None else "NOT_JUDGED"
            tds.append(f"<td class='{css}{_mine(run)}' title='{escape(cases, quote=True)}'>"
                       f"{text}</td>")
        return "<tr>" + "".join(tds) + "</tr>"

    span = len(res.runs) + 1
    body = [f"<tr class='sep'><td colspan='{span}'>rules broken somewhere "
            f"({len(failing)})</td></tr>"] + [row(b) for b in failing]
    body += [f"<tr class='sep'><td colspan='{span}'>rules judged and held everywhere they "
             f"were judged ({len(passing)})</td></tr>"] + [row(b) for b in passing]
    out = [STYLE, _legend()]
    old = [r for r in res.runs if predates(r.report)]
    if old:
        known = [r for r in res.runs if not r.own]
        names = ("every committed run" if old == known and len(known) > 1
                 else ", ".join(r.name for r in old))
        out.append(f"<p class='kv-legend'>n/j in {escape(names)}: {escape(PREDATES)}; "
                   "their passing cases pass no rule, their failures still show.</p>")
    out.append("<div class='kv-matrix'><table class='kvm'>" + head + "<tbody>"
               + "".join(body) + "</tbody></table></div>")
    if unjudged:
        out.append(f"<details><summary>{len(unjudged)} rules no engine here was judged on "
                   "(no check of them ran: their cases were not supported or not applicable, "
                   "passed without checking them, or none ran)</summary>"
                   "<div class='kv-matrix'><table class='kvm'>" + head + "<tbody>"
                   + "".join(row(b) for b in unjudged) + "</tbody></table></div></details>")
    return "\n".join(out)


def _title(run: Run) -> str:
    """A column header's hover text: the engine in full, and why a column passes nothing."""
    return run.title + (f" (not judged: {PREDATES})" if predates(run.report) else "")
