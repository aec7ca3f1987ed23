"""``kvconf docs build``: the documentation site, generated from the spec and the reference.

The hand-written guides in ``docs/`` are copied into a build folder; beside them every spec
chapter is rendered in the index's reading order with a card per behaviour (``site.cards``:
level, statement, why, the defects it guards, the cases and features that check it, how the
known engines fare, and the kit's internals folded), a rule index, the catalog and its seeds,
the diagrams drawn from the reference (``site.diagrams``), the formats from their schemas, and
the compliance and kill matrices from the latest reports. Every behaviour and defect ID on every
page becomes a link (``site.autolink``). Nothing is copied by hand, so nothing goes stale;
mkdocs then builds the site strictly: a broken link or anchor fails it, and the theme loads
nothing from the network (its fonts are the system's, search runs in the page).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

from kvconf.conformance.errors import KitError
from kvconf.conformance.reporting.site.autolink import link_site
from kvconf.conformance.reporting.site.cards import Facts
from kvconf.conformance.reporting.site.catalog import render_catalog
from kvconf.conformance.reporting.site.chapters import render_chapters
from kvconf.conformance.reporting.site.checks import allowance_of, cases_by_behaviour
from kvconf.conformance.reporting.site.diagrams import render_diagrams
from kvconf.conformance.reporting.site.engines import load_runs
from kvconf.conformance.reporting.site.figures import render_guides
from kvconf.conformance.reporting.site.formats import render_formats
from kvconf.conformance.reporting.site.links import broken_links
from kvconf.conformance.reporting.site.rules import render_rules
from kvconf.conformance.reporting.site.search import boost_cards
from kvconf.spec.audit import mutant_citations, oracle_citations, test_citations
from kvconf.spec.registry import Registry, load_registry

SPEC_DIR = Path(__file__).resolve().parents[2] / "spec"
DOCS_DIR = Path(__file__).resolve().parents[2] / "docs"
ASSETS = Path(__file__).resolve().parent / "site" / "assets"  # the site's own stylesheet


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


def gather(reg: Registry, reports: list[Path] = ()) -> Facts:  # type: ignore[assignment]
    """What the cards and the rule index are drawn from, read once per build; ``reports``:
    the run reports given to the build (the reader's own engine, on every card first)."""
    tests_dir = DOCS_DIR.parent / "tests"
    mutants, _gaps = mutant_citations(reg)
    cases = cases_by_behaviour()
    cited: dict[str, set[str]] = {}
    for bid, refs in cases.items():
        for ref in refs:
            cited.setdefault(ref.name, set()).add(bid)
    return Facts(oracles=oracle_citations(),
                 tests=test_citations(tests_dir) if tests_dir.is_dir() else {},
                 mutants=mutants, proofs=proof_citations(), cases=cases,
                 allowances=allowance_of(),
                 runs=load_runs(DOCS_DIR, reg.behaviours, cited, reports))


def id_anchors(reg: Registry) -> dict[str, str]:
    """Every behaviour and defect ID -> its page and anchor, from the site's root."""
    out = {d: f"catalog.md#{d}" for d in reg.catalog}
    out.update({b.id: f"spec/{reg.chapters[b.chapter].name}#{b.id}"
                for b in reg.behaviours.values()})
    return out


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
    spec = [{"Index": "spec/index.md"}, {"Rule index": "rules.md"}] + [
        {_title(SPEC_DIR / "chapters" / c): f"spec/{c}"} for c in chapters if c != "index.md"]
    return [
        {"Home": "index.md"},
        {"Guides": [{"Run the suite against your engine": "engine-guide.md"},
                    {"The Python API": "api.md"},
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
    render_guides(src, src / "peers")  # the guides' figures, from the committed reports
    facts = gather(reg, reports)
    chapters = render_chapters(reg, SPEC_DIR / "chapters", src, facts)
    render_rules(reg, chapters, src, facts)
    render_catalog(reg, SPEC_DIR, src, facts)
    render_diagrams(src)
    render_formats(src)
    render_results(src, reports)
    link_site(src, id_anchors(reg))
    shutil.copytree(ASSETS, src / "assets", dirs_exist_ok=True)
    return {
        "site_name": "kvconf",
        "site_description": "The spec and conformance kit for LLM-serving KV / Mamba caches",
        "docs_dir": str(src),
        "theme": {"name": "material", "font": False,
                  "features": ["navigation.sections", "toc.follow", "search.highlight",
                               "content.code.copy"]},
        "extra_css": ["assets/kvconf.css"],
        "plugins": ["search"],
        "markdown_extensions": ["attr_list", "tables", "admonition", "md_in_html",
                                "pymdownx.details", {"toc": {"permalink": True}},
                                "pymdownx.superfences"],
        "validation": {"links": {"absolute_links": "warn", "unrecognized_links": "warn",
                                 "anchors": "warn"}},
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
    boost_cards(out, load_registry().behaviours)
    bad = broken_links(out) if strict else []
    if bad:
        raise KitError(f"the site has {len(bad)} broken link(s): {'; '.join(bad[:5])}")
    return out


class _Collect(logging.Handler):
    """Keeps mkdocs' warnings and errors, so a failed build says what failed."""

    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(" ".join(record.getMessage().split()))
