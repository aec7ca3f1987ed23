"""The runs the documentation site's results section shows, and where their findings are
written up.

The committed reports, ``docs/peers/<run>/report.json`` (the reference, SGLang, vLLM, TokenSpeed
per revision), with the reports a build is given (``kvconf docs build --reports``) laid over
them: a given report replaces the committed one of the same engine, version and memory (CI's
fresh reference run replaces the committed reference column); any other adds a column, the
reader's own engine, and those come first (``Run.own``). Kill
matrices given replace the committed ones (``docs/peers/<run>/mutants.json``). Where a finding
is written up is data, ``docs/peers/writeups.toml``; where each page lives, and the links
between them, are here too.
"""

from __future__ import annotations

import posixpath
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from kvconf.conformance.errors import KitError, read_input
from kvconf.conformance.mutants.kill import KillMatrix
from kvconf.conformance.reporting.compliance import Inputs, load_inputs
from kvconf.conformance.reporting.report import CaseResult, Report, Status
from kvconf.spec.registry import Registry

DOCS_DIR = Path(__file__).resolve().parents[2] / "docs"
PEERS = "peers"  # under the docs folder: one folder per judged run
WRITEUPS = "peers/writeups.toml"
BAD = (Status.CRASH, Status.FAIL, Status.ERROR, Status.TIMEOUT)

# Column groups, in the order they are shown; an engine's group is its name's first word.
FAMILIES = {"reference": "kvconf", "sglang": "SGLang", "vllm": "vLLM",
            "tokenspeed": "TokenSpeed"}
PAGES = {"Matrix": "results.md", "Which engine fails what": "results/findings.md",
         "Kill matrix": "results/kill-matrix.md",
         "State machine coverage": "results/coverage.md"}



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
    own: bool = False  # given to the build and no committed run's: the reader's own engine

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
        run = Run(key, path, r, family(r.run_info.engine), "", "", mine, own=not mine)
        if old is not None:  # a given report replaces the committed one, keeping its place
            run.key = runs[old].key
            run.own = runs[old].own
            runs[old] = run
        else:
            while any(x.key == run.key for x in runs):
                run.key += "-2"
            runs.append(run)
    order = list(FAMILIES.values())
    runs.sort(key=lambda x: (not x.own, order.index(x.family) if x.family in order
                             else len(order), x.family))  # stable: folder order within a group
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


# Where a result's ``known`` names the findings it explains: "<signature>: <reason> (<ref>)",
# joined by "; " (an expectation file that lists the case by its findings' signatures).
_SIGNED = re.compile(r"(?:^|; )([^\s;]+/[^\s;]*): ")


def known_reasons(known: str | None) -> dict[str | None, str]:
    """The reasons a result's ``known`` gives: by finding signature, or under None for the
    whole case (an expectation entry without a signature, or an older report)."""
    if not known:
        return {}
    marks = list(_SIGNED.finditer(known))
    if not marks:
        return {None: known}
    return {m.group(1): known[m.end():(marks[i + 1].start() if i + 1 < len(marks)
                                        else len(known))]
            for i, m in enumerate(marks)}


def reason_of(x: CaseResult, signature: str | None = None) -> str | None:
    """The expectation file's reason for one finding of a case (its first by default)."""
    reasons = known_reasons(x.known)
    if signature is None and x.findings:
        signature = x.findings[0].signature
    if signature in reasons:
        return reasons[signature]
    return reasons.get(None) or next(iter(reasons.values()), None)


def findings_of(x: CaseResult) -> list[tuple[str | None, str | None, str | None]]:
    """(signature, reason, trace) per distinct finding a failing case shows: each of its
    findings where the report lists them (a fuzz case can show several), else the case. A
    reason given for the whole case (an expectation entry without a signature) is each
    finding's; one given by signature is that finding's alone."""
    if not x.findings:
        return [(None, reason_of(x), x.trace)]
    reasons = known_reasons(x.known)
    return [(f.signature, reasons.get(f.signature, reasons.get(None)), f.trace or x.trace)
            for f in x.findings]


def writeup_of(res: Results, run: Run, x: CaseResult,
               signature: str | None = None) -> Writeup | None:
    return writeup_for(run.report.run_info.engine, reason_of(x, signature), res.writeups)


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
