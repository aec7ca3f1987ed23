"""The documentation site's results section: every engine and revision the kit has judged.

Its columns are the committed reports, ``docs/peers/<run>/report.json`` (the reference, SGLang,
vLLM, TokenSpeed per revision), and the reports a build is given (``kvconf docs build
--reports``). A given report replaces the committed one of the same engine, version and memory
(CI's fresh reference run replaces the committed reference column); any other adds a column.
Kill matrices come the same way (``docs/peers/<run>/mutants.json``, or given).

Out come the section's pages under ``results/``: the matrix (rules x engines, coloured, rules
with failures first, every failing cell linking to its trace's page and to the write-up of its
finding), "which engine fails what, and why", the kill matrix (a mutant that could not be run
here shown as skipped, with why), the request state machine's coverage, and a page per failing
trace (its steps as a table, the JSON beside it to download). Where a finding is written up is
data: ``docs/peers/writeups.toml``.
"""

from __future__ import annotations

import posixpath
import re
import shutil
import tomllib
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from kvconf.conformance.errors import KitError, read_input
from kvconf.conformance.mutants.kill import KillMatrix
from kvconf.conformance.reporting import trace_page
from kvconf.conformance.reporting.compliance import ORDER, Inputs, load_inputs
from kvconf.conformance.reporting.report import UNJUDGED, CaseResult, Report, Status
from kvconf.conformance.trace import parse_json
from kvconf.spec.registry import Registry, load_registry

DOCS_DIR = Path(__file__).resolve().parents[2] / "docs"
PEERS = "peers"  # under the docs folder: one folder per judged run
WRITEUPS = "peers/writeups.toml"
BAD = (Status.CRASH, Status.FAIL, Status.ERROR, Status.TIMEOUT)

# Column groups, in the order they are shown; an engine's group is its name's first word.
FAMILIES = {"reference": "kvconf", "sglang": "SGLang", "vllm": "vLLM",
            "tokenspeed": "TokenSpeed"}
# What a cell shows for each status (the legend spells them out).
SHORT = {Status.PASS: "pass", Status.FAIL: "FAIL", Status.CRASH: "CRASH", Status.ERROR: "ERR",
         Status.TIMEOUT: "T/O", Status.NOT_SUPPORTED: "n/s", Status.NOT_APPLICABLE: "n/a"}

# Where a reader learns to install an engine to replay its traces: page, anchor, title.
SETUP = {"SGLang": ("peers.md", "installing-them", "installing the peers"),
         "vLLM": ("peers.md", "installing-them", "installing the peers"),
         "TokenSpeed": ("tokenspeed.md", "judging-a-revision", "judging a revision")}

PAGES = {"Matrix": "results.md", "Which engine fails what": "results/findings.md",
         "Kill matrix": "results/kill-matrix.md",
         "State machine coverage": "results/coverage.md"}


def nav() -> list[dict[str, str]]:
    """The results section's entries in the site's navigation."""
    return [{title: page} for title, page in PAGES.items()]


# ---------------------------------------------------------------------------- the runs


@dataclass(slots=True)
class Run:
    """One column: a run report, where it came from and what it is called."""

    key: str  # a folder name: its trace pages' folder, its anchor on the findings page
    path: Path
    report: Report
    family: str
    short: str  # the column's header
    title: str  # engine and version, in full
    committed: bool

    @property
    def name(self) -> str:
        """The column's group and header, as a heading says it."""
        return self.family if self.short.lower() == self.family.lower() else \
            f"{self.family} {self.short}"


@dataclass(slots=True)
class Writeup:
    engines: list[str]
    reason: str
    page: str
    anchor: str
    title: str


@dataclass
class Results:
    runs: list[Run] = field(default_factory=list)
    kills: list[tuple[Path, KillMatrix]] = field(default_factory=list)
    writeups: list[Writeup] = field(default_factory=list)


def committed(docs: Path = DOCS_DIR) -> list[Path]:
    """The reports and kill matrices committed under ``docs/peers``, in folder order."""
    root = docs / PEERS
    return sorted(root.glob("*/report.json")) + sorted(root.glob("*/mutants.json"))


def family(engine: str) -> str:
    return FAMILIES.get(engine.split("-", 1)[0], engine)


def _identity(r: Report) -> tuple[str, str, str]:
    mem = (r.run_info.memory or {}).get("device", "torch") if r.run_info.memory else ""
    return r.run_info.engine, r.run_info.version, mem


def _short(r: Report, same_engine: int) -> str:
    """A column header short enough to stand rotated: the engine without its group's name,
    or, where one engine has several columns, the revision its version names."""
    engine = r.run_info.engine
    head, _, rest = engine.partition("-")
    name = rest if head in FAMILIES and rest else engine
    m = re.search(r"\(([^)]+)\)\s*$", r.run_info.version)
    if same_engine > 1 and m:
        name = m.group(1)
    if r.run_info.memory:
        name += f" · {r.run_info.memory.get('device', 'torch')}"
    return name


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "run"


def gather(given: list[Path], docs: Path = DOCS_DIR) -> Results:
    """The committed runs with the given ones laid over them (see the module's docstring)."""
    base = committed(docs)
    inputs = load_inputs(base + list(given)) if base or given else Inputs()
    in_base = set(base)
    out = Results(writeups=load_writeups(docs / WRITEUPS))
    runs: list[Run] = []
    for path, r in inputs.runs:
        mine = path in in_base
        ident = _identity(r)
        old = next((i for i, x in enumerate(runs) if _identity(x.report) == ident), None)
        key = path.parent.name if mine else _slug("-".join(x for x in ident if x))
        run = Run(key, path, r, family(r.run_info.engine), "", "", mine)
        if old is not None:  # a given report replaces the committed one, keeping its place
            run.key = runs[old].key
            runs[old] = run
        else:
            while any(x.key == run.key for x in runs):
                run.key += "-2"
            runs.append(run)
    order = list(FAMILIES.values())
    runs.sort(key=lambda x: (order.index(x.family) if x.family in order else len(order),
                             x.family))  # stable: folder order within a group
    for run in runs:
        same = sum(1 for x in runs if x.report.run_info.engine == run.report.run_info.engine)
        run.short = _short(run.report, same)
        i = run.report.run_info
        run.title = f"{i.engine} {i.version}" + (f" on {i.memory.get('device', 'torch')} "
                                                 "memory" if i.memory else "")
    out.runs = runs
    # Kill matrices given to the build replace the committed ones.
    given_kills = [(p, k) for p, k in inputs.kills if p not in in_base]
    out.kills = given_kills or [(p, k) for p, k in inputs.kills if p in in_base]
    return out


def load_writeups(path: Path) -> list[Writeup]:
    if not path.is_file():
        return []
    text = read_input(path, "write-ups")
    try:
        data = tomllib.loads(text)
        return [Writeup(**w) for w in data.get("writeup", [])]
    except (tomllib.TOMLDecodeError, TypeError) as e:
        raise KitError(f"{path}: {e}") from None


def writeup_for(engine: str, known: str | None, writeups: list[Writeup]) -> Writeup | None:
    """The write-up of a finding: the first entry for the engine whose ``reason`` starts the
    reason the engine's expectation file gives (a report result's ``known``)."""
    if not known:
        return None
    return next((w for w in writeups if engine in w.engines and known.startswith(w.reason)),
                None)


def writeup_of(res: Results, run: Run, x: CaseResult) -> Writeup | None:
    return writeup_for(run.report.run_info.engine, x.known, res.writeups)


# ---------------------------------------------------------------------------- links


def url(page: str) -> str:
    """The address mkdocs gives a page (directory URLs): ``a/b.md`` is ``a/b/``."""
    stem = page[:-3] if page.endswith(".md") else page
    if stem == "index" or stem.endswith("/index"):
        return stem[:-5]
    return stem + "/"


def href(src: str, dst: str, anchor: str = "") -> str:
    """A link from page ``src`` to page ``dst`` as raw HTML needs it (mkdocs rewrites the links
    of Markdown only)."""
    base = url(src) or "."
    rel = posixpath.relpath(url(dst) or ".", base)
    rel = "./" if rel == "." else rel + "/"
    return rel + (f"#{anchor}" if anchor else "")


def md_link(src: str, dst: str, anchor: str = "") -> str:
    """A link from Markdown page ``src`` to page ``dst`` (mkdocs checks and rewrites it)."""
    rel = posixpath.relpath(dst, posixpath.dirname(src) or ".")
    return rel + (f"#{anchor}" if anchor else "")


def rule_page(reg: Registry, bid: str) -> str:
    return f"spec/{Path(reg.chapters[reg.behaviours[bid].chapter].name).name}"


def trace_page_of(run: Run, trace: str) -> str:
    return f"results/traces/{run.key}/{Path(trace).stem}.md"


# ---------------------------------------------------------------------------- the matrix


@dataclass(slots=True)
class Cell:
    status: Status
    cases: list[CaseResult] = field(default_factory=list)

    def worst_bad(self) -> CaseResult | None:
        bad = [c for c in self.cases if c.status in BAD]
        return min(bad, key=lambda c: ORDER[c.status]) if bad else None


def cells(res: Results, behaviours: list[str]) -> dict[str, dict[str, Cell]]:
    """Per rule per run: the worst status of the run's cases that judged it."""
    out: dict[str, dict[str, Cell]] = {b: {} for b in behaviours}
    for run in res.runs:
        for x in run.report.results:
            for b in x.behaviours:
                if b not in out:
                    continue
                cell = out[b].setdefault(run.key, Cell(x.status))
                if ORDER[x.status] < ORDER[cell.status]:
                    cell.status = x.status
                cell.cases.append(x)
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
        elif any(c.status not in UNJUDGED for c in row):
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
.kv-matrix td.none { color: #9e9e9e; }
.kv-matrix a.why { font-weight: 400; margin-left: .15rem; text-decoration: none; }
.kv-matrix tr.sep td { background: var(--md-default-fg-color--lightest); text-align: left;
  font-weight: 700; position: sticky; left: 0; }
.kv-legend { font-size: .7rem; }
.kv-legend span { padding: 0 .3rem; border-radius: .1rem; font-weight: 700; }
.kv-legend .FAIL, .kv-legend .CRASH { background: #ffcdd2; color: #8e0000; }
.kv-legend .PASS { background: #c8e6c9; color: #1b5e20; }
.kv-legend .NOT_SUPPORTED { background: #fff9c4; color: #6d5d00; }
.kv-legend .NOT_APPLICABLE { background: #eceff1; color: #455a64; }
.kv-legend .none { color: #9e9e9e; }
</style>"""


def _legend() -> str:
    items = [("FAIL", "FAIL", "broke the rule: click for its trace, <b>§</b> for the "
              "finding's write-up"), ("CRASH", "CRASH", "the engine's process died"),
             ("PASS", "pass", "judged and held"),
             ("NOT_SUPPORTED", "n/s", "not supported (the engine lacks a feature its cases "
              "need)"), ("NOT_APPLICABLE", "n/a", "not applicable at the run's config"),
             ("none", "—", "no case of the run cites the rule")]
    return ("<p class='kv-legend'>"
            + " ".join(f"<span class='{c}'>{escape(s)}</span> {d};" for c, s, d in items)
            + "</p>")


def matrix_html(res: Results, reg: Registry, page: str) -> str:
    behaviours = list(reg.behaviours)
    grid = cells(res, behaviours)
    failing, passing, unjudged = row_order(behaviours, grid)
    groups: list[tuple[str, int]] = []
    for run in res.runs:
        if groups and groups[-1][0] == run.family:
            groups[-1] = (run.family, groups[-1][1] + 1)
        else:
            groups.append((run.family, 1))
    head = ("<thead><tr><th class='rule' rowspan='2'>rule</th>"
            + "".join(f"<th class='fam' colspan='{n}'>{escape(f)}</th>" for f, n in groups)
            + "</tr><tr>"
            + "".join(f"<th class='rev' title='{escape(r.title, quote=True)}'>"
                      f"<span>{escape(r.short)}</span></th>" for r in res.runs)
            + "</tr></thead>")

    def row(b: str) -> str:
        beh = reg.behaviours[b]
        tip = escape(f"{beh.level.value}: {beh.statement}", quote=True)
        tds = [f"<td class='rule'><a href='{href(page, rule_page(reg, b), b)}' title='{tip}'>"
               f"{escape(b)}</a> <small>{escape(beh.level.value)}</small></td>"]
        for run in res.runs:
            cell = grid[b].get(run.key)
            if cell is None:
                tds.append("<td class='none'>—</td>")
                continue
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
            tds.append(f"<td class='{st.value}' title='{escape(cases, quote=True)}'>"
                       f"{text}</td>")
        return "<tr>" + "".join(tds) + "</tr>"

    span = len(res.runs) + 1
    body = [f"<tr class='sep'><td colspan='{span}'>rules broken somewhere "
            f"({len(failing)})</td></tr>"] + [row(b) for b in failing]
    body += [f"<tr class='sep'><td colspan='{span}'>rules judged and held everywhere they "
             f"were judged ({len(passing)})</td></tr>"] + [row(b) for b in passing]
    out = [STYLE, _legend(), "<div class='kv-matrix'><table class='kvm'>" + head + "<tbody>"
           + "".join(body) + "</tbody></table></div>"]
    if unjudged:
        out.append(f"<details><summary>{len(unjudged)} rules no engine here was judged on "
                   "(every case citing them not supported or not applicable, or none ran)"
                   "</summary><div class='kv-matrix'><table class='kvm'>" + head + "<tbody>"
                   + "".join(row(b) for b in unjudged) + "</tbody></table></div></details>")
    return "\n".join(out)


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
    rows = ["| column | engine | version | judged | against | summary |",
            "| --- | --- | --- | --- | --- | --- |"]
    for run in res.runs:
        i = run.report.run_info
        exp = (i.expectations or {}).get("file") if i.expectations else None
        src = "committed" if run.committed else "this build"
        rows.append(f"| {run.name} | `{i.engine}` | {i.version} | "
                    f"{i.started[:10]} ({i.profile}, seed {i.seed}; {src}) | "
                    f"{f'`{exp}`' if exp else 'no expectation file'} | {_summary(run.report)} |")
    lines = ["---", "hide:", "  - toc", "---", "", "# Results: every engine the kit has judged",
             "",
             "Each column is one run of the suite: the reference, SGLang's and vLLM's prefix "
             "caches, and TokenSpeed's scheduler revision by revision. A cell is the worst "
             "status among the run's cases that cite the rule; the rules some engine breaks "
             "come first, those none was judged on are folded at the end. Click a failing cell "
             f"for its trace, **§** for the finding's write-up; [which engine fails what, and "
             f"why]({md_link(page, PAGES['Which engine fails what'])}) lists the same "
             "failures by engine. Hover a header for the engine's full name and version, a "
             "cell for its cases.", "", matrix_html(res, reg, page), "",
             "## The runs", "",
             f"The committed runs are `docs/{PEERS}/<run>/report.json` (from `bash .ci/peers` "
             "and `bash .ci/tokenspeed`, each judged against its expectation file). A report "
             "given to `kvconf docs build --reports` replaces the committed one of the same "
             "engine, version and memory (so CI's fresh reference run replaces the committed "
             "reference column) and otherwise adds a column.", "", *rows, ""]
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
    for run in res.runs:
        fails = [x for x in run.report.results if x.status in BAD]
        distinct = {(w.anchor if (w := writeup_of(res, run, x)) else x.known or x.message)
                    for x in fails}
        lines.append(f"| [{run.name}](#{run.key}) | {len(fails) or 'none'} | "
                     f"{len(distinct) or ''} |")
    lines.append("")
    for run in res.runs:
        i = run.report.run_info
        lines += [f"## {run.name} {{ #{run.key} }}", "",
                  f"`{i.engine}` {i.version}, judged {i.started[:10]} at `--profile "
                  f"{i.profile}`, seed {i.seed}: {_summary(run.report)}.", ""]
        fails = [x for x in run.report.results if x.status in BAD]
        if not fails:
            lines += ["No failures.", ""]
            continue
        found: dict[str, tuple[Writeup | None, str, list[CaseResult]]] = {}
        for x in fails:
            w = writeup_of(res, run, x)
            key = w.anchor if w else f"new:{x.known or x.message}"
            found.setdefault(key, (w, x.known or x.message, []))[2].append(x)
        lines += ["| finding | rules | cases (trace) |", "| --- | --- | --- |"]
        for w, reason, xs in sorted(found.values(), key=lambda f: (f[0] is None,
                                                                     -len(f[2]))):
            rules = sorted({b for x in xs for b in x.behaviours})
            rule_links = ", ".join(f"[{b}]({md_link(page, rule_page(reg, b), b)})"
                                   if b in reg.behaviours else b for b in rules)
            if w is not None:
                what = f"[{w.title}]({md_link(page, w.page, w.anchor)})"
            else:
                what = f"**not written up**: {_one_line(reason)}"
            cases = ", ".join(
                (f"[{x.case}]({md_link(page, trace_page_of(run, x.trace))})" if x.trace
                 else x.case) + (f" {x.status.value}" if x.status is not Status.FAIL else "")
                for x in xs)
            lines.append(f"| {what} | {rule_links} | {cases} |")
        lines.append("")
    (out / page).write_text("\n".join(lines), encoding="utf-8")


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
    w = writeup_of(res, run, x)
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
    if w is not None:
        lines += [f"**Why** (the engine's expectation file): {_one_line(x.known or '', 600)}",
                  "", f"Written up: [{w.title}]({md_link(page, w.page, w.anchor)}).", ""]
    elif x.known:
        lines += [f"**Why** (the engine's expectation file): {_one_line(x.known, 600)}", ""]
    else:
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
    lines += trace_page.render(data, failed_step=step, source=str(src))
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

