"""The spec chapters as site pages, in the reading order the spec's index gives.

Each behaviour marker becomes the rule's card; each diagram marker (``{{ diagram("name") }}``)
the drawing of that name, so a chapter shows the state machine or the ownership lifecycle where
it explains them. A chapter the index does not list, or a behaviour left without a page, is an
error that names it.
"""

from __future__ import annotations

import re
from pathlib import Path

from kvconf.conformance.errors import KitError
from kvconf.conformance.reporting.site.cards import Facts, behaviour_card
from kvconf.spec.audit import MARKER
from kvconf.spec.registry import Registry

# A diagram marker is a line of its own (the index names the markers in running text).
DIAGRAM = re.compile(r"""^\{\{\s*diagram\(\s*["']([a-z0-9-]+)["']\s*\)\s*\}\}\s*$""", re.M)
# A diagram marker's name -> (the drawing, the page that explains it), relative to the site.
DIAGRAMS = {"request-states": ("diagrams/request-fsm.svg", "state-machine.md"),
            "page-ownership": ("diagrams/page-lifecycle.svg", "page-lifecycle.md")}
_LISTED = re.compile(r"^\s*[-*]\s*\[[^\]]+\]\(([a-z0-9_]+\.md)\)", re.M)


def reading_order(chapters_dir: Path) -> list[str]:
    """The chapter files in the order ``index.md`` lists them, then the pages it does not list
    (the formal model, which states no rule) by name. A listed file that does not exist is an
    error."""
    listed = list(dict.fromkeys(
        _LISTED.findall((chapters_dir / "index.md").read_text(encoding="utf-8"))))
    files = {p.name for p in chapters_dir.glob("*.md")} - {"index.md"}
    unknown = [f for f in listed if f not in files]
    if unknown:
        raise KitError(f"{chapters_dir / 'index.md'}: the chapter list names missing files "
                       f"{', '.join(unknown)}")
    return listed + sorted(files - set(listed))


def diagram(name: str, where: Path, root: str) -> str:
    if name not in DIAGRAMS:
        raise KitError(f"{where}: unknown diagram {name!r} (known: {', '.join(DIAGRAMS)})")
    svg, page = DIAGRAMS[name]
    return (f'<figure class="kv-diagram" markdown>\n![{name}]({root}{svg})\n'
            f"<figcaption markdown=\"span\">Drawn from the reference; the full page: "
            f"[{name.replace('-', ' ')}]({root}{page}).</figcaption>\n</figure>")


def render_chapters(reg: Registry, chapters_dir: Path, out: Path, facts: Facts) -> list[str]:
    """Every chapter with its markers expanded; returns the chapter files in reading order."""
    (out / "spec").mkdir(parents=True, exist_ok=True)
    order = reading_order(chapters_dir)
    for name in ["index.md", *order]:
        path = chapters_dir / name
        text = path.read_text(encoding="utf-8")
        text = MARKER.sub(lambda m: behaviour_card(reg, m.group(1), facts), text)
        text = DIAGRAM.sub(lambda m, p=path: diagram(m.group(1), p, "../"), text)
        # Links between chapters stay as they are; links out of spec/ point at the site's pages.
        text = re.sub(r"\]\(\.\./catalog\.toml\)", "](../catalog.md)", text)
        (out / "spec" / name).write_text(text, encoding="utf-8")
    seen = {m for p in (out / "spec").glob("*.md")
            for m in re.findall(r"\{ #([A-Z][A-Z0-9]*-\d+) \}", p.read_text(encoding="utf-8"))}
    missing = sorted(set(reg.behaviours) - seen)
    if missing:
        raise KitError(f"behaviours without a page: {', '.join(missing)}")
    return order
