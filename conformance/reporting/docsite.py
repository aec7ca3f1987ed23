"""``kvconf docs build``: the documentation site, generated from the spec and the reference.

The hand-written guides in ``docs/`` are copied into a build folder; beside them every spec
chapter is rendered with each behaviour marker expanded (ID anchor, level, statement,
rationale, the catalog defects it guards, and the oracles, tests, mutants and proof obligations
that cite it), the catalog and its seeds get pages, the diagrams are drawn from the reference
(the request state machine from its table, the page-ownership lifecycle observed on the
reference's own pools), the trace and report formats come from their JSON Schemas, and the
compliance and kill matrices come from the latest reports. Nothing is copied by hand, so
nothing goes stale; mkdocs then builds the site (``--strict``: a broken link or anchor fails).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tomllib
from collections.abc import Iterable
from pathlib import Path

from kvconf.conformance.errors import KitError
from kvconf.spec.audit import MARKER, mutant_citations, oracle_citations, test_citations
from kvconf.spec.registry import Registry, load_registry

SPEC_DIR = Path(__file__).resolve().parents[2] / "spec"
DOCS_DIR = Path(__file__).resolve().parents[2] / "docs"


def seeds() -> dict[str, dict]:
    data = tomllib.loads((SPEC_DIR / "seeds.toml").read_text(encoding="utf-8"))
    return {s["id"]: s for s in data["seed"]}


def proof_citations() -> dict[str, list[str]]:
    """Behaviour -> proof obligations of the formal model, where the model is installed."""
    try:
        from kvconf.spec.formal.invariants import INVARIANTS
    except ImportError:  # the model needs z3
        return {}
    out: dict[str, list[str]] = {}
    for inv in INVARIANTS:
        for b in inv.behaviours:
            out.setdefault(b, []).append(inv.name)
    return out


def _list(items: Iterable[str]) -> str:
    items = list(items)
    return ", ".join(items) if items else "none yet"


def behaviour_block(reg: Registry, bid: str, ctx: dict) -> str:
    b = reg.behaviours[bid]
    guards = [f"[{d}](../catalog.md#{d})" for d in b.guards]
    oracles = [f"`{o}`" for o in ctx["oracles"].get(bid, [])]
    tests = [f"`{t}`" for t in ctx["tests"].get(bid, [])]
    mutants = sorted({m for d in b.guards for m in ctx["mutants"].get(d, [])})
    proofs = [f"`{p}`" for p in ctx["proofs"].get(bid, [])]
    rows = [
        f"### {bid} · {b.level.value} {{ #{bid} }}",
        "",
        f"> {b.statement}",
        "",
        f"*Why:* {b.rationale}",
        "",
        "| | |",
        "| --- | --- |",
        f"| guards | {_list(guards)} |",
        f"| oracles | {_list(oracles)} |",
        f"| tests | {_list(tests)} |",
        f"| mutants | {_list(f'`{m}`' for m in mutants)} |",
        f"| proofs | {_list(proofs)} |",
        "",
    ]
    return "\n".join(rows)


def render_chapters(reg: Registry, out: Path, ctx: dict) -> list[str]:
    """Every chapter with its markers expanded; returns the page names in index order."""
    (out / "spec").mkdir(parents=True, exist_ok=True)
    pages: list[str] = []
    for path in sorted((SPEC_DIR / "chapters").glob("*.md")):  # the index and every chapter
        text = path.read_text(encoding="utf-8")
        text = MARKER.sub(lambda m: behaviour_block(reg, m.group(1), ctx), text)
        # Links between chapters stay as they are; links out of spec/ point at the site's pages.
        text = re.sub(r"\]\(\.\./catalog\.toml\)", "](../catalog.md)", text)
        (out / "spec" / path.name).write_text(text, encoding="utf-8")
        pages.append(path.name)
    seen = {m for p in (out / "spec").glob("*.md")
            for m in re.findall(r"\{ #([A-Z][A-Z0-9]*-\d+) \}", p.read_text(encoding="utf-8"))}
    missing = sorted(set(reg.behaviours) - seen)
    if missing:
        raise KitError(f"behaviours without a page: {', '.join(missing)}")
    return pages


def render_catalog(reg: Registry, out: Path, ctx: dict) -> None:
    guarded = reg.guarded_by()
    seed = seeds()
    lines = ["# The defect catalog", "",
             "Real scheduler defects, each with a stable ID, the seed discussion it comes from, "
             "the behaviours that guard it and the mutants that plant it.", ""]
    for d in sorted(reg.catalog.values(), key=lambda d: d.id):
        if d.seed not in seed:
            raise KitError(f"spec/catalog.toml: {d.id}.seed: {d.seed} is not in spec/seeds.toml")
        chapter_of = {b: reg.behaviours[b].chapter for b in guarded[d.id]}
        beh = [f"[{b}](spec/{reg.chapters[chapter_of[b]].name}#{b})" for b in guarded[d.id]]
        muts = [f"`{m}`" for m in ctx["mutants"].get(d.id, [])]
        pr = f", PR {d.pr}" if d.pr else ""
        lines += [f"## {d.id} {{ #{d.id} }}", "", d.title + (" *(performance)*" if d.perf
                                                              else ""), "",
                  f"- seed: [{d.seed}](seeds.md#seed-{d.seed}){pr}",
                  f"- guarded by: {_list(beh)}", f"- mutants: {_list(muts)}", ""]
    (out / "catalog.md").write_text("\n".join(lines), encoding="utf-8")
    s = ["# Seeds", "", "The pull-request discussions the catalog's defects were found in.", ""]
    for sid, meta in seed.items():
        ids = [f"[{d.id}](catalog.md#{d.id})" for d in reg.catalog.values() if d.seed == sid]
        pr = f" (PR {meta['pr']})" if meta.get("pr") else ""
        s += [f"## {sid}: {meta['title']}{pr} {{ #seed-{sid} }}", "", meta["topic"] + ".", "",
              f"Defects: {_list(ids)}", ""]
    (out / "seeds.md").write_text("\n".join(s), encoding="utf-8")


def render_diagrams(out: Path) -> None:
    from kvconf.conformance.reporting.svg import transition_graph
    from kvconf.reference.requests import HOLDS, TRANSITIONS, State

    edges = [(s.value, e.value, t.value, True)
             for (s, e), targets in sorted(TRANSITIONS.items(),
                                           key=lambda kv: (kv[0][0].value, kv[0][1].value))
             for t in targets]
    (out / "diagrams").mkdir(parents=True, exist_ok=True)
    (out / "diagrams" / "request-fsm.svg").write_text(
        transition_graph(edges, State.SUBMITTED.value), encoding="utf-8")
    rows = [f"| {s.value} | {', '.join(sorted(HOLDS[s])) or 'nothing'} |" for s in State]
    fsm = ["# The request state machine", "",
           "Drawn from the reference's own table (`reference/requests.py`, `TRANSITIONS`): every "
           "legal (state, event) pair and the state it leads to. A runtime event not drawn here "
           "must be rejected (REQ-2, [requests](spec/requests.md#REQ-2)).", "",
           "![The request state machine](diagrams/request-fsm.svg)", "",
           "What each state holds (`HOLDS`; REQ-3, [requests](spec/requests.md#REQ-3)):", "",
           "| state | holds |", "| --- | --- |", *rows, ""]
    (out / "state-machine.md").write_text("\n".join(fsm), encoding="utf-8")
    observed = page_lifecycle()
    (out / "diagrams" / "page-lifecycle.svg").write_text(
        transition_graph([(a, op, b, True) for (a, op, b) in observed], "free",
                         width=900, height=420), encoding="utf-8")
    rows = [f"| {a} | {op} | {b} |" for a, op, b in observed]
    life = ["# The page-ownership lifecycle", "",
            "Observed on the reference itself: its scenarios are played and every change of a "
            "page's owner (as the pools report it) is recorded with the call that made it. "
            "Every page has exactly one owner at every step "
            "([POOL-1](spec/pools.md#POOL-1)).", "",
            "![Page ownership](diagrams/page-lifecycle.svg)", "",
            "| from | call | to |", "| --- | --- | --- |", *rows, ""]
    (out / "page-lifecycle.md").write_text("\n".join(life), encoding="utf-8")


class _Watched:
    """The reference adapter, with every call's change of page owners recorded."""

    CALLS = ("alloc", "free", "insert", "unlock", "evict", "start_writeback", "start_loadback",
             "finish_transfer", "unload")

    def __init__(self, engine, seen: set[tuple[str, str, str]]) -> None:
        self._engine = engine
        self._seen = seen

    def __getattr__(self, name: str):
        attr = getattr(self._engine, name)
        if name not in self.CALLS:
            return attr

        def call(*args):
            from kvconf.reference.tiers import Tier

            before = self._engine.snapshot()
            out = attr(*args)
            after = self._engine.snapshot()
            for tier in (Tier.DEVICE, Tier.HOST):
                for a, b in zip(before.pools[tier].owners, after.pools[tier].owners,
                                strict=True):
                    ka, kb = a.split(":", 1)[0], b.split(":", 1)[0]
                    if ka != kb:
                        what = name
                        if name == "finish_transfer":
                            what += " (ok)" if args[1] else " (failed)"
                        self._seen.add((f"{ka} ({tier})", what, f"{kb} ({tier})"))
            return out

        return call


def page_lifecycle() -> list[tuple[str, str, str]]:
    """(owner before, call, owner after) for every change of a page's owner while the reference
    plays the cache scenarios and a short fuzz campaign; owners drop their ids (``node:3`` is
    ``node``)."""
    from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
    from kvconf.conformance.cache.driver import CacheDriver
    from kvconf.conformance.cache.scenarios import SCENARIOS
    from kvconf.conformance.engine.config import EngineConfig

    seen: set[tuple[str, str, str]] = set()
    for sc in SCENARIOS:
        trace = sc.trace(EngineConfig(page_size=2))
        engine = _Watched(ReferenceCacheAdapter(trace.config), seen)
        driver = CacheDriver(engine, trace.config, oracles=(), clock=trace.clock)
        driver.run(trace)
        driver.drain()
    return sorted(seen)


def render_formats(out: Path) -> None:
    from kvconf.conformance.mutants.kill import KillMatrix
    from kvconf.conformance.reporting.report import report_schema
    from kvconf.conformance.scheduler.trace import SchedTrace
    from kvconf.conformance.trace import trace_schema

    parts = ["# Trace and report formats", "",
             "Generated from the JSON Schemas the kit validates with (`kvconf schema trace`, "
             "`kvconf schema report`).", ""]
    for title, schema in (("Cache-level trace (`kvconf-trace/1`)", trace_schema()),
                          ("Scheduler-level trace", SchedTrace.model_json_schema()),
                          ("Run report (`kvconf-report/2`)", report_schema()),
                          ("Kill matrix (`kvconf-kill-matrix/1`)",
                           KillMatrix.model_json_schema())):
        parts += [f"## {title}", "", "```json", json.dumps(schema, indent=2), "```", ""]
    (out / "formats.md").write_text("\n".join(parts), encoding="utf-8")


def render_results(out: Path, reports: list[Path]) -> None:
    """The results section: every committed run and the given ``reports``
    (``results_site``)."""
    from kvconf.conformance.reporting import results_site

    results_site.render(out, reports)


def _title(path: Path) -> str:
    """A page's first heading, for the navigation."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return path.stem


def _results_nav() -> list:
    from kvconf.conformance.reporting import results_site

    return results_site.nav()


def nav(chapters: list[str]) -> list:
    spec = [{"Index": "spec/index.md"}] + [
        {_title(SPEC_DIR / "chapters" / c): f"spec/{c}"} for c in chapters if c != "index.md"]
    return [
        {"Home": "index.md"},
        {"Guides": [{"Run the suite against your engine": "engine-guide.md"},
                    {"Read a report, replay a trace": "reports.md"},
                    {"Workers, parallel runs, sharded campaigns": "campaigns.md"},
                    {"Write a new behaviour": "new-behaviour.md"},
                    {"The GPU harness": "gpu-harness.md"},
                    {"Peer engines (SGLang, vLLM)": "peers.md"},
                    {"TokenSpeed": "tokenspeed.md"},
                    {"Formats": "formats.md"}]},
        {"Spec": spec},
        {"Diagrams": [{"Request state machine": "state-machine.md"},
                      {"Page ownership": "page-lifecycle.md"}]},
        {"Catalog": [{"Defects": "catalog.md"}, {"Seeds": "seeds.md"}]},
        {"Results": _results_nav()},
    ]


def generate(src: Path, reports: list[Path]) -> dict:
    """Write the whole site source into ``src``; returns the mkdocs configuration."""
    reg = load_registry()
    if src.exists():
        shutil.rmtree(src)
    shutil.copytree(DOCS_DIR, src)
    tests_dir = DOCS_DIR.parent / "tests"
    mutants, _gaps = mutant_citations(reg)
    ctx = {"oracles": oracle_citations(),
           "tests": test_citations(tests_dir) if tests_dir.is_dir() else {},
           "mutants": mutants, "proofs": proof_citations()}
    chapters = render_chapters(reg, src, ctx)
    render_catalog(reg, src, ctx)
    render_diagrams(src)
    render_formats(src)
    render_results(src, reports)
    return {
        "site_name": "kvconf",
        "site_description": "The spec and conformance kit for LLM-serving KV / Mamba caches",
        "docs_dir": str(src),
        "theme": {"name": "material", "features": ["navigation.sections", "toc.follow",
                                                   "search.highlight"]},
        "markdown_extensions": ["attr_list", "tables", "admonition", "toc",
                                "pymdownx.superfences"],
        "validation": {"links": {"anchors": "warn", "unrecognized_links": "warn"}},
        "nav": nav(chapters),
    }


def build_site(out: Path, reports: list[Path], strict: bool = True) -> Path:
    """Generate the sources next to ``out`` and build the site into ``out``."""
    try:
        from mkdocs.commands.build import build
        from mkdocs.config import load_config
    except ImportError:
        raise KitError("kvconf docs build needs mkdocs-material: "
                       "pip install -e '.[docs]'") from None
    out = out.resolve()  # mkdocs reads paths relative to its config file
    src = out.parent / f".{out.name}-src"
    conf = generate(src, reports)
    cfg_path = out.parent / f".{out.name}-mkdocs.yml"
    cfg_path.write_text(json.dumps({**conf, "site_dir": str(out.resolve()), "strict": strict}),
                        encoding="utf-8")  # JSON is YAML
    os.environ.setdefault("NO_MKDOCS_2_WARNING", "1")  # the theme's banner, not a finding
    seen: list[str] = []
    handler = _Collect(seen)
    logging.getLogger("mkdocs").addHandler(handler)
    try:
        build(load_config(str(cfg_path)))
    except BaseException as e:  # strict-mode warnings and config errors end in an abort
        detail = "; ".join(seen[:5]) or str(e)
        raise KitError(f"the site does not build: {detail}") from None
    finally:
        logging.getLogger("mkdocs").removeHandler(handler)
    return out


class _Collect(logging.Handler):
    """Keeps mkdocs' warnings and errors, so a failed build says what failed."""

    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(" ".join(record.getMessage().split()))
