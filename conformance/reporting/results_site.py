"""The documentation site's results section: every engine and revision the kit has judged.

Its pages under ``results/``: the matrix (``results_matrix``), "which engine fails what, and
why", the kill matrix (a mutant that could not be run here shown as skipped, with why), the
request state machine's coverage, and a page per failing trace (``trace_page``: its steps as a
table, what the reference does with it, the JSON beside it to download). Which runs, and where
their findings are written up: ``results_runs``.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from kvconf.conformance.errors import KitError, read_input
from kvconf.conformance.mutants.kill import KillMatrix
from kvconf.conformance.reporting import trace_page
from kvconf.conformance.reporting.report import CaseResult, Report, Status
from kvconf.conformance.reporting.results_matrix import matrix_html
from kvconf.conformance.reporting.results_runs import (
    BAD,
    DOCS_DIR,
    PAGES,
    PEERS,
    WRITEUPS,
    Results,
    Run,
    Writeup,
    findings_of,
    gather,
    load_writeups,
    md_link,
    reason_of,
    rule_page,
    trace_page_of,
    writeup_for,
    writeup_of,
)
from kvconf.conformance.reporting.verdicts import (
    not_supported_groups,
    predates,
    run_verdicts,
    tally,
)
from kvconf.conformance.trace import parse_json
from kvconf.spec.registry import Registry, load_registry

__all__ = ["BAD", "DOCS_DIR", "PAGES", "WRITEUPS", "Results", "Run", "gather", "load_writeups",
           "nav", "render", "writeup_for", "writeup_of"]

# Where a reader learns to install an engine to replay its traces: page, anchor, title.
SETUP = {"SGLang": ("peers.md", "installing-them", "installing the peers"),
         "vLLM": ("peers.md", "installing-them", "installing the peers"),
         "TokenSpeed": ("tokenspeed.md", "judging-a-revision", "judging a revision")}


def nav() -> list[dict[str, str]]:
    """The results section's entries in the site's navigation."""
    return [{title: page} for title, page in PAGES.items()]


def _summary(r: Report) -> str:
    return ", ".join(f"{k.value if hasattr(k, 'value') else k} {v}"
                     for k, v in r.summarize().summary.items() if v)


def _given_path(run: Run, docs: Path) -> str:
    """How a reader names the run's file in a command: relative to the project for a
    committed run."""
    try:
        return str(run.path.resolve().relative_to(docs.resolve().parent))
    except ValueError:
        return str(run.path)


def render_matrix(res: Results, reg: Registry, out: Path, docs: Path) -> None:
    page = "results.md"
    behaviours = list(reg.behaviours)
    rows = ["| column | engine | version | judged | against | summary | rules |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for run in res.runs:
        i = run.report.run_info
        exp = (i.expectations or {}).get("file") if i.expectations else None
        src = "yours, given to this build" if run.own else (
            "committed" if run.committed else "this build")
        rules = tally(run_verdicts(run.report, behaviours))
        if predates(run.report):
            rules += " (the report predates kvconf-report/5: no pass recorded)"
        rows.append(f"| {run.name} | `{i.engine}` | {i.version} | "
                    f"{i.started[:10]} ({i.profile}, seed {i.seed}; {src}) | "
                    f"{f'`{exp}`' if exp else 'no expectation file'} | {_summary(run.report)} "
                    f"| {rules} |")
    mine = [r.name for r in res.runs if r.own]
    lines = ["---", "hide:", "  - toc", "---", "",
             "# Results: every engine the kit has judged", "",
             "Each column is one run of the suite: "
             + (f"first yours ({', '.join(mine)}, given to this build), then " if mine else "")
             + "the reference, SGLang's and vLLM's prefix caches, and TokenSpeed's scheduler "
             "revision by revision. A cell is the run's verdict on the rule: **pass** only "
             "where a check of the rule ran in some case and held, **n/j** (not judged) where "
             "none did (a passing case that cites a rule passes only the rules it checked; "
             "hover for why). The rules some engine breaks come first, those none was judged "
             "on are folded at the end. Click a failing cell for its trace, **§** for the "
             f"finding's write-up; [which engine fails what, and why]"
             f"({md_link(page, PAGES['Which engine fails what'])}) lists the same failures by "
             "engine, and each run's cases not supported, by the feature they need. Hover a "
             "header for the engine's full name and version, a cell for its cases.", "",
             matrix_html(res, reg, page), "",
             "## The runs", "",
             f"The committed runs are `docs/{PEERS}/<run>/report.json` (from `bash .ci/peers` "
             "and `bash .ci/tokenspeed`, each judged against its expectation file). A report "
             "given to `kvconf docs build --reports` replaces the committed one of the same "
             "engine, version and memory (so CI's fresh reference run replaces the committed "
             "reference column) and otherwise adds a column, first: your own engine. *Rules* "
             "counts the run's verdicts over every rule of the spec.", "", *rows, ""]
    (out / page).write_text("\n".join(lines), encoding="utf-8")


# ---------------------------------------------------------------------------- findings


def _one_line(text: str, limit: int = 160) -> str:
    text = re.sub(r"\s*\(https?://[^)]*\)\s*$", "", text).strip()
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " …"


def render_findings(res: Results, reg: Registry, out: Path) -> None:
    page = PAGES["Which engine fails what"]
    lines = ["# Which engine fails what, and why", "",
             "Per engine and revision, the findings its failing cases show: the rules broken, "
             "the finding in one line with a link to its write-up, and the cases that show it "
             "(each linking to its trace). A finding with no write-up is one the engine's "
             "expectation file does not explain: a regression, or a defect still to be "
             "traced.", "", "| run | failing cases | findings they show |", "| --- | --- | --- |"]
    per_run = {run.key: _findings(res, run) for run in res.runs}
    for run in res.runs:
        fails = [x for x in run.report.results if x.status in BAD]
        lines.append(f"| [{run.name}](#{run.key}) | {len(fails) or 'none'} | "
                     f"{len(per_run[run.key]) or ''} |")
    lines.append("")
    for run in res.runs:
        i = run.report.run_info
        lines += [f"## {run.name} {{ #{run.key} }}", "",
                  f"`{i.engine}` {i.version}, judged {i.started[:10]} at `--profile "
                  f"{i.profile}`, seed {i.seed}: {_summary(run.report)}.", ""]
        found = per_run[run.key]
        lacking = _not_supported(run)
        if not found:
            lines += ["No failures.", "", *lacking]
            continue
        lines += ["| finding | rules | cases (trace) |", "| --- | --- | --- |"]
        for w, reason, shown in sorted(found.values(), key=lambda f: (f[0] is None,
                                                                        -len(f[2]))):
            rules = sorted({b for x, _t in shown for b in x.behaviours})
            rule_links = ", ".join(f"[{b}]({md_link(page, rule_page(reg, b), b)})"
                                   if b in reg.behaviours else b for b in rules)
            if w is not None:
                what = f"[{w.title}]({md_link(page, w.page, w.anchor)})"
            else:
                what = f"**not written up**: {_one_line(reason)}"
            cases = ", ".join(
                (f"[{x.case}]({md_link(page, trace_page_of(run, t))})" if t else x.case)
                + (f" {x.status.value}" if x.status is not Status.FAIL else "")
                for x, t in shown)
            lines.append(f"| {what} | {rule_links} | {cases} |")
        lines += ["", *lacking]
    (out / page).write_text("\n".join(lines), encoding="utf-8")


def _not_supported(run: Run) -> list[str]:
    """The run's NOT_SUPPORTED cases grouped by the feature they need and the engine does
    not declare (or the declaration that makes them moot): one line per feature, not one per
    case."""
    groups = not_supported_groups(run.report)
    if not groups:
        return []
    n = sum(len(xs) for _g, xs in groups)
    out = [f"Not supported ({n} cases), by what the engine does not declare:", "",
           "| the engine lacks | cases |", "| --- | --- |"]
    for what, xs in groups:
        names = ", ".join(f"`{x.case}`" for x in xs)
        lacks = ", ".join(f"`{f.strip()}`" for f in what.split(",")) if " " not in \
            what.replace(", ", ",") else what
        out.append(f"| {lacks.replace('|', chr(92) + '|')} | {len(xs)}: {names} |")
    return [*out, ""]


def _findings(res: Results, run: Run
              ) -> dict[str, tuple[Writeup | None, str, list[tuple[CaseResult, str | None]]]]:
    """A run's distinct findings, by write-up (or, unexplained, by reason or message): the
    write-up, the reason, and each (case, trace) that shows it."""
    found: dict[str, tuple[Writeup | None, str, list[tuple[CaseResult, str | None]]]] = {}
    for x in run.report.results:
        if x.status not in BAD:
            continue
        for signature, reason, trace in findings_of(x):
            w = writeup_for(run.report.run_info.engine, reason, res.writeups)
            what = reason or (f"{signature}: {x.message}" if signature else x.message)
            key = w.anchor if w else f"new:{what}"
            shown = found.setdefault(key, (w, what, []))[2]
            if (x, trace) not in shown:
                shown.append((x, trace))
    return found


# ---------------------------------------------------------------------------- traces


def render_traces(res: Results, reg: Registry, out: Path, docs: Path) -> int:
    """A page per failing trace, the JSON beside it; returns how many."""
    n = 0
    for run in res.runs:
        for x in run.report.results:
            if x.status not in BAD:
                continue
            shown = [(x.trace, x.step, x.message, x.behaviours, None)] if x.trace else []
            shown += [(f.trace, f.step, f.message, f.behaviours, f.signature)
                      for f in x.findings if f.trace and f.trace != x.trace]
            for trace, step, message, rules, signature in shown:
                _trace(res, reg, out, docs, run, x, trace, step, message, rules, signature)
                n += 1
    return n


def _trace(res: Results, reg: Registry, out: Path, docs: Path, run: Run, x: CaseResult,
           trace: str, step: int | None, message: str, rules: list[str],
           signature: str | None) -> None:
    page = trace_page_of(run, trace)
    src = (run.path.parent / trace)
    dst = out / page
    dst.parent.mkdir(parents=True, exist_ok=True)
    name = Path(trace).name
    if not src.is_file():
        raise KitError(f"{run.path}: results[{x.case}].trace: {src} does not exist")
    shutil.copyfile(src, dst.parent / name)
    data = parse_json(read_input(src, "trace"), str(src))
    w = writeup_of(res, run, x, signature)
    why = reason_of(x, signature)
    rule_links = ", ".join(f"[{b}]({md_link(page, rule_page(reg, b), b)})"
                           if b in reg.behaviours else b for b in rules)
    back = md_link(page, PAGES["Which engine fails what"], run.key)
    replay = f"{_given_path(run, docs).rsplit('/', 1)[0]}/{trace}" if "/" in _given_path(
        run, docs) else trace
    lines = [f"# {x.case} on {run.name}", "",
             f"**{x.status.value}**"
             + (f" at step {step}" if step is not None else "")
             + f" ({x.oracle or 'kit'}; {rule_links or 'no rule'}): {message}", ""]
    if signature:
        lines += [f"Finding `{signature}`.", ""]
    if why:
        lines += [f"**Why** (the engine's expectation file): {_one_line(why, 600)}", ""]
    if w is not None:
        lines += [f"Written up: [{w.title}]({md_link(page, w.page, w.anchor)}).", ""]
    elif not why:
        lines += ["Not in the engine's expectation file: a new finding.", ""]
    if x.output:
        tail = x.output.strip().splitlines()[-3:]
        lines += ["The engine's last output:", "", "```text", *tail, "```", ""]
    setup = SETUP.get(run.family)
    needs = (f" (with the engine installed: [{setup[2]}]({md_link(page, setup[0], setup[1])}))"
             if setup else "")
    lines += [f"Engine `{run.report.run_info.engine}` {run.report.run_info.version} "
              f"([all its findings]({back})). Replay it{needs}:", "", "```bash",
              f"kvconf replay {replay} --engine {run.report.run_info.engine}", "```", "",
              f"[Download the trace (JSON)]({name}){{ download=\"{run.key}-{name}\" }}", "",
              "## The trace", ""]
    lines += trace_page.render(data, failed_step=step, source=str(src),
                               engine=run.report.run_info.engine,
                               version=run.report.run_info.version)
    dst.write_text("\n".join(lines) + "\n", encoding="utf-8")


# ---------------------------------------------------------------------------- kill matrix


def kill_rows(k: KillMatrix) -> list[tuple[str, str, str]]:
    """(mutant, outcome, by) per mutant, alive first, then skipped, then killed: a mutant
    that could not be run here is skipped, with why, never counted alive."""
    rows = []
    for m in k.mutants:
        if m.killed:
            rows.append((2, m.id, "killed",
                         f"{m.case} [{m.oracle}] {', '.join(m.behaviours)}"))
        elif m.skipped:
            rows.append((1, m.id, "skipped", m.skipped))
        else:
            rows.append((0, m.id, "**ALIVE**", m.message))
    return [(i, o, b) for _k, i, o, b in sorted(rows, key=lambda r: r[0])]


def render_kills(res: Results, out: Path) -> None:
    page = PAGES["Kill matrix"]
    lines = ["---", "hide:", "  - toc", "---", "", "# Kill matrix", "",
             "Every catalog defect planted, one at a time, in an engine built from the "
             "reference (`kvconf mutants`): the case, oracle and rules that caught each, and "
             "how fast. A mutant that needs what this run did not have (a CUDA device, for the "
             "runtime-side ones) is skipped, not counted alive.", ""]
    if not res.kills:
        lines += ["This build was given no kill matrix (`kvconf docs build --reports "
                  "mutants.json`, from `kvconf mutants --report mutants.json`).", ""]
    by_id = {}
    for path, k in res.kills:
        s = k.summarize().summary
        i = k.run_info
        run = sum(1 for m in k.mutants if not m.skipped)
        lines += [f"`{path.name}`, {i.started[:10]}: seed {i.seed}, `--profile {i.profile}`, "
                  f"{i.budget}{', fuzz only' if i.fuzz_only else ''}.", "",
                  f"**Killed {s['killed']} of the {run} run** (of {s['total']}); alive: "
                  f"{', '.join(s['alive']) or 'none'}; skipped: "
                  + (", ".join(f"{m.id} ({m.skipped})" for m in k.mutants if m.skipped)
                     or "none")
                  + f". Median {s['median_seconds_to_kill']} s to kill, max "
                  f"{s['max_seconds_to_kill']} s.", "",
                  "| mutant | level | defect | outcome | seconds | caught by (case [oracle] "
                  "rules) / why not |", "| --- | --- | --- | --- | --- | --- |"]
        by_id = {m.id: m for m in k.mutants}
        for mid, outcome, by in kill_rows(k):
            m = by_id[mid]
            defects = ", ".join(f"[{d}]({md_link(page, 'catalog.md', d)})" for d in m.catalog)
            secs = "" if m.skipped else f"{m.seconds:.2f}"
            lines.append(f"| `{mid}` | {m.level} | {defects} | {outcome} | {secs} | {by} |")
        lines.append("")
    (out / page).write_text("\n".join(lines), encoding="utf-8")


# ---------------------------------------------------------------------------- coverage


def render_coverage(res: Results, out: Path) -> None:
    from kvconf.conformance.reporting.compliance import coverage_pairs

    page = PAGES["State machine coverage"]
    lines = ["# Request state machine coverage", "",
             "Which legal (state, event) pairs of the request state machine each "
             "scheduler-level run took, and which illegal runtime events it tried and saw "
             "rejected (REQ-2). Coverage is kept per pair: a pair that may lead to two states "
             "is taken or not as one. The pairs a run never took come first.", ""]
    shown = 0
    for run in res.runs:
        cov = run.report.run_info.coverage
        if not cov:
            continue
        shown += 1
        rows = sorted(coverage_pairs(run.report), key=lambda x: x[3])
        took = sum(1 for *_x, t in rows if t)
        illegal = cov.get("illegal", {})
        lines += [f"## {run.name}", "",
                  f"(State, event) pairs taken: **{took} of {len(rows)}**; never taken: "
                  f"{len(rows) - took}. Illegal runtime events tried and rejected: "
                  f"{illegal.get('tried')} of {illegal.get('total')}.", "",
                  "| state | event | leads to | taken |", "| --- | --- | --- | --- |"]
        lines += [f"| {a} | {e} | {' or '.join(b)} | {'yes' if t else '**never taken**'} |"
                  for a, e, b, t in rows]
        lines.append("")
    if not shown:
        lines += ["No run here recorded coverage.", ""]
    (out / page).write_text("\n".join(lines), encoding="utf-8")


# ---------------------------------------------------------------------------- the section


def render(out: Path, reports: list[Path], docs: Path = DOCS_DIR) -> Results:
    """Write the results section into the site's source folder ``out``."""
    reg = load_registry()
    res = gather(reports, docs)
    (out / "results").mkdir(parents=True, exist_ok=True)
    render_matrix(res, reg, out, docs)
    render_findings(res, reg, out)
    render_traces(res, reg, out, docs)
    render_kills(res, out)
    render_coverage(res, out)
    return res
