"""``kvconf report``: run reports and kill matrices turned into a compliance report people read.

Inputs are the JSON files ``kvconf run`` / ``kvconf gpu`` write (one per engine, or several
runs of one) and ``kvconf mutants`` kill matrices. Out come ``compliance.md`` and a
self-contained ``index.html``: the behaviours x engines matrix (each run's verdict on each rule,
``verdicts``: PASS only where a check of it ran and held, FAIL, NOT_SUPPORTED, NOT_APPLICABLE,
or not judged with why; a failing cell linking the minimal trace that shows it), expectation
differences, the request state machine's transition coverage drawn as a graph, and the kill matrix.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from pydantic import ValidationError

from kvconf.conformance.errors import KitError, read_input
from kvconf.conformance.mutants.kill import FORMAT as KILL_FORMAT
from kvconf.conformance.mutants.kill import KillMatrix
from kvconf.conformance.reporting.report import FORMAT as REPORT_FORMAT
from kvconf.conformance.reporting.report import FORMATS as REPORT_FORMATS
from kvconf.conformance.reporting.report import UNJUDGED, Report, Status
from kvconf.conformance.reporting.svg import kill_bars, transition_graph
from kvconf.conformance.reporting.verdicts import (
    NOT_JUDGED,
    PREDATES,
    not_supported_groups,
    predates,
    run_verdicts,
    tally,
)
from kvconf.conformance.trace import parse_json, validation_error, write_atomic

# What an HTML matrix cell shows for the verdicts whose names would widen every column.
CELL = {Status.NOT_SUPPORTED: "n/s", Status.NOT_APPLICABLE: "n/a", None: "n/j"}


@dataclass
class Cell:
    """One run's verdict on one rule (``verdicts``); ``status`` None: not judged, ``why``."""

    status: Status | None
    cases: list[str] = field(default_factory=list)
    traces: list[str] = field(default_factory=list)  # relative to the output folder
    why: str = ""

    @property
    def label(self) -> str:
        return NOT_JUDGED if self.status is None else self.status.value


@dataclass
class Inputs:
    runs: list[tuple[Path, Report]] = field(default_factory=list)
    kills: list[tuple[Path, KillMatrix]] = field(default_factory=list)


def load_inputs(paths: list[Path]) -> Inputs:
    """Each file is a run report or a kill matrix, told apart by its ``format``."""
    out = Inputs()
    for path in paths:
        text = read_input(path, "report")
        data = parse_json(text, str(path))
        fmt = data.get("format") if isinstance(data, dict) else None
        try:
            if fmt in REPORT_FORMATS:
                out.runs.append((path, Report.model_validate(data)))
            elif fmt == KILL_FORMAT:
                out.kills.append((path, KillMatrix.model_validate(data)))
            else:
                raise KitError(f"{path}: format: {fmt!r} is neither {REPORT_FORMAT} nor "
                               f"{KILL_FORMAT}")
        except ValidationError as e:
            raise validation_error(e, text, str(path)) from None
    if not out.runs and not out.kills:
        raise KitError("no input: give run reports and/or kill matrices")
    return out


def run_key(path: Path, all_runs: list[tuple[Path, Report]]) -> str:
    """A name for one run: the file's stem, with its folder where stems repeat (one
    ``report.json`` per revision in folders of their own)."""
    same = [p for p, _ in all_runs if p.stem == path.stem]
    return path.stem if len(same) <= 1 else f"{path.parent.name}-{path.stem}"


def _label(path: Path, r: Report, all_runs: list[tuple[Path, Report]]) -> str:
    """Column name: the engine, with the memory, and where engines repeat the version (one
    column per revision) or else the run."""
    name = r.run_info.engine
    if r.run_info.memory:
        name += f" ({r.run_info.memory.get('device', 'torch')})"
    same = [o for p, o in all_runs if o.run_info.engine == r.run_info.engine
            and bool(o.run_info.memory) == bool(r.run_info.memory)]
    if len(same) <= 1:
        return name
    if len({o.run_info.version for o in same}) == len(same):
        return f"{name} {r.run_info.version}"
    return f"{name} [{run_key(path, all_runs)}]"


def trace_link(path: Path, trace: str, out_dir: Path, copy: bool, key: str | None = None
               ) -> str:
    """A link from the report folder to a failing trace (copied in, under the run's ``key``,
    when ``copy``, so a site built from the folder holds every trace it links)."""
    src = (path.parent / trace).resolve()
    if not copy:
        return os.path.relpath(src, out_dir.resolve())
    dst = out_dir / "traces" / (key or path.stem) / Path(trace).name
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_file():
        shutil.copyfile(src, dst)
    return f"traces/{key or path.stem}/{Path(trace).name}"


def matrix(inputs: Inputs, behaviours: list[str], out_dir: Path, copy: bool = False
           ) -> tuple[list[str], dict[str, dict[str, Cell]]]:
    """Columns, and per behaviour per column the run's verdict on it (``verdicts``: the worst
    its cases back; not judged, with why, where none judged it)."""
    cols: list[str] = []
    cells: dict[str, dict[str, Cell]] = {b: {} for b in behaviours}
    for path, r in inputs.runs:
        col = _label(path, r, inputs.runs)
        cols.append(col)
        for b, v in run_verdicts(r, behaviours).items():
            cell = cells[b][col] = Cell(v.status, why=v.why)
            for res in v.cases:
                cell.cases.append(f"{res.case}: {res.status.value}")
                if res.trace and res.status in (Status.FAIL, Status.CRASH, Status.TIMEOUT):
                    cell.traces.append(trace_link(path, res.trace, out_dir, copy,
                                                  run_key(path, inputs.runs)))
    return cols, cells


def coverage_edges(r: Report) -> list[tuple[str, str, str, bool]]:
    from kvconf.reference.requests import TRANSITIONS

    cov = r.run_info.coverage or {}
    missed = set(cov.get("legal", {}).get("missed", []))
    out = []
    for (s, e), targets in sorted(TRANSITIONS.items(), key=lambda kv: (kv[0][0].value,
                                                                       kv[0][1].value)):
        for t in targets:
            out.append((s.value, e.value, t.value, f"{s.value} --{e.value}-->" not in missed))
    return out


def coverage_pairs(r: Report) -> list[tuple[str, str, list[str], bool]]:
    """(state, event, the states it may lead to, taken) per legal (state, event) pair of the
    request table: a run's coverage is kept per pair, so a pair with two next states is taken
    or not as one."""
    from kvconf.reference.requests import TRANSITIONS

    cov = r.run_info.coverage or {}
    missed = set(cov.get("legal", {}).get("missed", []))
    return [(s.value, e.value, [t.value for t in targets],
             f"{s.value} --{e.value}-->" not in missed)
            for (s, e), targets in sorted(TRANSITIONS.items(),
                                          key=lambda kv: (kv[0][0].value, kv[0][1].value))]


def coverage_line(pairs: list[tuple[str, str, list[str], bool]]) -> str:
    """What the list under a coverage heading is: the pairs never taken."""
    never = sum(1 for *_x, t in pairs if not t)
    return f"Never taken ({never}):" if never else "Every legal (state, event) pair was taken."


def never_taken(pairs: list[tuple[str, str, list[str], bool]]) -> list[str]:
    return [f"{a} --{e}--> {' or '.join(b)}" for a, e, b, t in pairs if not t]


def kill_outcome(m) -> tuple[str, str]:
    """A mutant's outcome and what caught it (or why not): one that could not be run here
    (``skipped``, e.g. it needs a CUDA device) is skipped, never alive."""
    if m.killed:
        return "killed", f"{m.case} [{m.oracle}] {', '.join(m.behaviours)}"
    if m.skipped:
        return "skipped", m.skipped
    return "ALIVE", m.message


def failing_first(behaviours: list[str], cells: dict[str, dict[str, Cell]]) -> list[str]:
    """The rules some column fails first (most failing columns first), then the rest, each
    group in registry order."""
    bad = {Status.CRASH, Status.FAIL, Status.ERROR, Status.TIMEOUT}
    n = {b: sum(1 for c in cells[b].values() if c.status in bad) for b in behaviours}
    return sorted(behaviours, key=lambda b: -n[b])


def rule_ref(reg, bid: str, spec_base: str | None) -> str:
    """A rule's ID as HTML: a link to its anchor in the spec site when the site's address is
    known (``spec_base``, e.g. ``../spec/`` inside the docs site), else the plain ID with its
    statement on hover (a standalone report has no site to point at)."""
    b = reg.behaviours.get(bid)
    if b is None:
        return escape(bid)
    tip = escape(b.statement, quote=True)
    if spec_base is None:
        return f"<abbr title='{tip}'>{escape(bid)}</abbr>"
    page = Path(reg.chapters[b.chapter].name).stem
    return f"<a href='{escape(spec_base)}{escape(page)}/#{escape(bid)}' title='{tip}'>" \
           f"{escape(bid)}</a>"


def build(inputs: Inputs, out_dir: Path, copy_traces: bool = False,
          spec_base: str | None = None) -> tuple[Path, Path]:
    """Write ``compliance.md`` and ``index.html``. The HTML is for a person: it opens with
    the failures (what broke, where, how to replay it), then the matrix, with the behaviours
    no engine supports folded away; ``copy_traces`` copies the failing traces into
    ``out_dir`` so the folder can be moved or published without breaking a link."""
    from kvconf.reference.requests import State
    from kvconf.spec.registry import load_registry

    reg = load_registry()
    behaviours = list(reg.behaviours)
    cols, cells = matrix(inputs, behaviours, out_dir, copy_traces)
    md: list[str] = ["# kvconf compliance report", ""]
    html: list[str] = []
    html_matrix: list[str] = []  # placed after the failures
    html_runs: list[str] = []

    # ---------------------------------------------------------------- the runs
    if inputs.runs:
        md += ["## Runs", "", "| run | engine | version | memory | seed | profile | budget | "
               "summary | rules |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        html_runs.append("<h2>Runs</h2><table><tr><th>run</th><th>engine</th><th>version</th>"
                    "<th>memory</th><th>seed</th><th>profile</th><th>budget</th>"
                    "<th>summary</th><th>rules</th></tr>")
        for path, r in inputs.runs:
            i = r.run_info
            mem = (i.memory or {}).get("device", "kit") if i.memory else "kit"
            summ = ", ".join(f"{k.value if hasattr(k, 'value') else k} {v}"
                             for k, v in r.summarize().summary.items() if v)
            run = run_key(path, inputs.runs) + path.suffix
            col = _label(path, r, inputs.runs)
            rules = tally({b: cells[b][col] for b in behaviours})  # type: ignore[misc]
            if predates(r):
                rules += f" ({NOT_JUDGED}: {PREDATES})"
            md.append(f"| {run} | {i.engine} | {i.version} | {mem} | {i.seed} | "
                      f"{i.profile} | {i.budget} | {summ} | {rules} |")
            html_runs.append("<tr>" + "".join(f"<td>{escape(str(x))}</td>" for x in (
                run, i.engine, i.version, mem, i.seed, i.profile, i.budget, summ, rules))
                + "</tr>")
        html_runs.append("</table>")
        old = [_label(p, r, inputs.runs) for p, r in inputs.runs if predates(r)]
        note = (f"Not judged in {', '.join(old)}: {PREDATES}; its passing cases pass no rule, "
                "its failures still show." if old else "")  # why a column passes nothing

        # ------------------------------------------------------------ the matrix
        md += ["", "## Behaviours x engines", "", *([note, ""] if note else []),
               "| behaviour | level | " + " | ".join(cols) + " |",
               "| --- | --- | " + " | ".join("---" for _ in cols) + " |"]
        head = ("<tr><th>behaviour</th><th>level</th>"
                + "".join(f"<th class='col'>{escape(c)}</th>" for c in cols) + "</tr>")
        shown: list[str] = []
        folded: list[str] = []  # no engine supports it (or no case cites it)
        for b in failing_first(behaviours, cells):
            row_md, row_html = [], []
            for c in cols:
                cell = cells[b][c]
                st = cell.label
                link = cell.traces[0] if cell.traces else None
                row_md.append(f"[{st}]({link})" if link else st)
                tip = escape("; ".join(([f"{NOT_JUDGED}: {cell.why}"] if cell.why else [])
                                       + cell.cases[:12]), quote=True)
                short = CELL.get(cell.status, st)
                body = f"<a href='{escape(link)}'>{short}</a>" if link else short
                css = cell.status.value if cell.status is not None else "NOT_JUDGED"
                row_html.append(f"<td class='{css}' title='{tip}'>{body}</td>")
            beh = reg.behaviours[b]
            md.append(f"| {b} | {beh.level.value} | " + " | ".join(row_md) + " |")
            row = (f"<tr><td>{rule_ref(reg, b, spec_base)}</td>"
                   f"<td>{escape(beh.level.value)}</td>" + "".join(row_html) + "</tr>")
            supported = any(cells[b][c].status not in (None, *UNJUDGED) for c in cols)
            (shown if supported else folded).append(row)
        html_matrix.append("<h2 id='matrix'>Behaviours &times; engines</h2>"
                           + (f"<p class='note'>{escape(note)}</p>" if note else "")
                           + "<table class='m'>" + head + "".join(shown) + "</table>")
        if folded:
            html_matrix.append(f"<details><summary>{len(folded)} behaviours no engine "
                               "was judged on here (no check of them ran: their cases were "
                               "NOT_SUPPORTED or NOT_APPLICABLE, or passed without checking "
                               "them, or none ran)</summary><table class='m'>"
                               + head + "".join(folded) + "</table></details>")

        # ------------------------------------------------------------ failures
        fails = [(p, r, x) for p, r in inputs.runs for x in r.results
                 if x.status is not Status.PASS and x.status not in UNJUDGED]
        md += ["", "## Failures", ""]
        html.append(f"<h2>Failures ({len(fails)})</h2>")
        if not fails:
            md.append("None.")
            html.append("<p>None: every case passed or was not judged (not supported, or not "
                        "applicable at the run's config).</p>")
        else:
            html.append("<table class='f'><tr><th>run / case</th><th>status</th><th>rules</th>"
                        "<th>step</th><th>what happened</th><th>replay</th></tr>")
        for p, r, x in fails:
            trace = (trace_link(p, x.trace, out_dir, copy_traces, run_key(p, inputs.runs))
                     if x.trace else None)
            where = f" step {x.step}," if x.step is not None else ""
            given = str(p.parent / x.trace) if x.trace else None  # as the caller named it
            replay = (f" Replay: `kvconf replay {given} --engine {r.run_info.engine}`"
                      if trace else "")
            col = _label(p, r, inputs.runs)
            md.append(f"- **{col} / {x.case}** {x.status.value}:{where} "
                      f"[{x.oracle or '-'}] {', '.join(x.behaviours)}: {x.message}"
                      + (f" ([trace]({trace}))" if trace else "") + replay)
            known = (f"<br><i>known ({escape(x.expectation or '')}): {escape(x.known)}</i>"
                     if x.known else "")
            if x.unexpected:
                md.append(f"  - new findings (not in the expectation file): "
                          f"{', '.join(x.unexpected)}")
                known += (f"<br><b>new findings (not in the expectation file): "
                          f"{escape(', '.join(x.unexpected))}</b>")
            if len(x.findings) > 1 or x.unexpected:  # every distinct finding, with its trace
                items = []
                for f in x.findings:
                    link = (trace_link(p, f.trace, out_dir, copy_traces, run_key(p, inputs.runs))
                            if f.trace else None)
                    md.append(f"  - finding `{f.signature}`: {f.message}"
                              + (f" ([trace]({link}))" if link else ""))
                    items.append(f"<li><code>{escape(f.signature)}</code>: {escape(f.message)}"
                                 + (f" (<a href='{escape(link)}'>trace</a>)" if link else "")
                                 + "</li>")
                repeats = f", {x.repeats} repeats skipped" if x.repeats else ""
                known += (f"<br>{len(x.findings)} distinct findings{repeats}:"
                          f"<ul>{''.join(items)}</ul>")
            html.append(
                f"<tr><td><b>{escape(col)}</b> / {escape(x.case)}</td>"
                f"<td class='{x.status.value}'>{x.status.value}</td>"
                f"<td>{', '.join(rule_ref(reg, b, spec_base) for b in x.behaviours)}</td>"
                f"<td>{'' if x.step is None else x.step}</td>"
                f"<td>[{escape(x.oracle or '-')}] {escape(x.message)}{known}</td>"
                + (f"<td><code>kvconf replay {escape(str(given))} --engine "
                   f"{escape(r.run_info.engine)}</code> (<a href='{escape(trace)}'>trace</a>)"
                   "</td>" if trace else "<td>no trace</td>") + "</tr>")
        if fails:
            html.append("</table>")
        html += html_matrix + html_runs

        # ------------------------------------------------------------ not supported
        lacking = [(p, r, g) for p, r in inputs.runs if (g := not_supported_groups(r))]
        if lacking:  # one line per missing feature set, not one per case
            md += ["", "## Not supported, by what the engine lacks", ""]
            html.append("<h2>Not supported, by what the engine lacks</h2><ul>")
            for p, r, groups in lacking:
                col = _label(p, r, inputs.runs)
                parts = [f"{what} ({len(xs)}: {', '.join(x.case for x in xs)})"
                         for what, xs in groups]
                md.append(f"- **{col}**: " + "; ".join(parts))
                html.append(f"<li><b>{escape(col)}</b>: {escape('; '.join(parts))}</li>")
            html.append("</ul>")

        # ------------------------------------------------------------ expectations
        exp = [(p, r) for p, r in inputs.runs if r.run_info.expectations]
        if exp:
            md += ["", "## Against the expectation files", ""]
            html.append("<h2>Against the expectation files</h2>")
            for p, r in exp:
                e = r.run_info.expectations or {}
                line = (f"{_label(p, r, inputs.runs)} ({e.get('file')}): "
                        f"{len(e.get('expected', []))} as expected; "
                        f"regressions: {', '.join(e.get('regression', [])) or 'none'}"
                        f"; improvements: {', '.join(e.get('improvement', [])) or 'none'}")
                md.append(f"- {line}")
                html.append(f"<p>{escape(line)}</p>")

        # ------------------------------------------------------------ coverage
        for p, r in inputs.runs:
            if not r.run_info.coverage:
                continue
            edges = coverage_edges(r)
            pairs = coverage_pairs(r)
            took = sum(1 for *_x, t in pairs if t)
            title = (f"Request state machine: {_label(p, r, inputs.runs)} took {took} of "
                     f"{len(pairs)} (state, event) pairs")
            md += ["", f"## {title}", "", coverage_line(pairs), ""]
            md += [f"- {x}" for x in never_taken(pairs)]
            illegal = r.run_info.coverage.get("illegal", {})
            md.append(f"\nIllegal runtime events tried and rejected: {illegal.get('tried')} of "
                      f"{illegal.get('total')}.")
            html.append(f"<h2>{escape(title)}</h2><p>Green: taken; red, dashed: never taken "
                        f"(hover an arrow for its name). {escape(coverage_line(pairs))} "
                        + escape(", ".join(never_taken(pairs))) + "</p>"
                        + transition_graph(edges, State.SUBMITTED.value))

    # ---------------------------------------------------------------- the kill matrix
    for p, k in inputs.kills:
        s = k.summarize().summary
        head = (f"Kill matrix ({p.name}: seed {k.run_info.seed}, {k.run_info.profile}, "
                f"{k.run_info.budget}{', fuzz only' if k.run_info.fuzz_only else ''})")
        ran = [m for m in k.mutants if not m.skipped]
        skipped = [f"{m.id} ({m.skipped})" for m in k.mutants if m.skipped]
        verdict = (f"killed {s['killed']} of the {len(ran)} run (of {s['total']}); median "
                   f"{s['median_seconds_to_kill']} s, max {s['max_seconds_to_kill']} s to kill;"
                   f" alive: {', '.join(s['alive']) or 'none'}; skipped, not run here: "
                   f"{', '.join(skipped) or 'none'}")
        md += ["", f"## {head}", "", verdict, "",
               "| mutant | catalog | outcome | caught by / why not | s |",
               "| --- | --- | --- | --- | --- |"]
        html.append(f"<h2>{escape(head)}</h2><p>{escape(verdict)}</p>")
        html.append(kill_bars([(m.id, m.seconds, m.killed) for m in ran]))
        html.append("<table class='k'><tr><th>mutant</th><th>catalog</th><th>outcome</th>"
                    "<th>caught by / why not</th><th>s</th></tr>")
        order = {"ALIVE": 0, "skipped": 1, "killed": 2}
        for m in sorted(k.mutants, key=lambda m: order[kill_outcome(m)[0]]):
            outcome, by = kill_outcome(m)
            secs = "" if m.skipped else f"{m.seconds:.2f}"
            md.append(f"| {m.id} | {', '.join(m.catalog)} | {outcome} | {by} | {secs} |")
            html.append(f"<tr><td>{escape(m.id)}</td><td>{escape(', '.join(m.catalog))}</td>"
                        f"<td class='{outcome}'>{outcome}</td><td>{escape(by)}</td>"
                        f"<td>{secs}</td></tr>")
        html.append("</table>")

    md_path = write_atomic(out_dir / "compliance.md", "\n".join(md) + "\n")
    html_path = write_atomic(out_dir / "index.html", _page("\n".join(html)))
    return md_path, html_path


def _page(body: str) -> str:
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kvconf compliance report</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1200px;
        color: #212121; padding: 0 1rem; }}
h1 {{ font-size: 1.6rem; }} h2 {{ font-size: 1.2rem; margin-top: 2rem; }}
table {{ border-collapse: collapse; margin: .5rem 0; font-size: .9rem; }}
th, td {{ border: 1px solid #ddd; padding: .25rem .5rem; text-align: left; }}
th {{ background: #f5f5f5; position: sticky; top: 0; }}
td.PASS, span.PASS {{ background: #e8f5e9; color: #1b5e20; }}
td.FAIL, span.FAIL, td.ERROR, span.ERROR, td.TIMEOUT, span.TIMEOUT, td.CRASH,
span.CRASH {{ background: #ffebee; color: #b71c1c; font-weight: bold; }}
td.NOT_SUPPORTED {{ background: #fffde7; color: #8d6e00; }}
td.NOT_APPLICABLE {{ background: #eceff1; color: #455a64; }}
td.NOT_JUDGED {{ color: #9e9e9e; }}
p.note {{ color: #555; font-size: .9rem; }}
td.killed {{ background: #e8f5e9; color: #1b5e20; }}
td.ALIVE {{ background: #ffebee; color: #b71c1c; font-weight: bold; }}
td.skipped {{ background: #eceff1; color: #455a64; }}
svg {{ max-width: 100%; height: auto; border: 1px solid #eee; }}
code {{ background: #f5f5f5; padding: 0 .2rem; }}
table.f td {{ vertical-align: top; }}
table.f code {{ word-break: break-all; }}
table.m th.col {{ writing-mode: vertical-rl; transform: rotate(180deg); white-space: nowrap;
                 vertical-align: bottom; padding: .4rem .1rem; }}
table.m td {{ text-align: center; white-space: nowrap; font-size: .8rem; }}
table.m td:first-child {{ text-align: left; position: sticky; left: 0; background: #fff; }}
details {{ margin: .5rem 0; }} summary {{ cursor: pointer; color: #555; }}
</style></head>
<body><h1>kvconf compliance report</h1>
<p>First what failed and how to replay it; then the matrix, where each cell is the run's verdict
on the behaviour, the behaviours some engine fails first (hover a cell for the cases, click a
failure for its minimal trace). PASS: a check of it ran in some case and held; n/s: not
supported, the engine lacks a feature the cases need; n/a: not applicable at the run's config;
n/j: not judged, no check of it ran (hover for why); unknown is never pass.</p>
{body}
</body></html>
"""
