"""The built site's own links, checked in its HTML: every local link names a file that exists
and, on a page, an anchor that page has. mkdocs checks the Markdown's links; this catches what it
cannot see (links inside raw HTML, generated tables, the theme's own pages)."""

from __future__ import annotations

import re
from pathlib import Path

_HREF = re.compile(r'<a\b[^>]*?\bhref="([^"]+)"')
_ID = re.compile(r'\bid="([^"]+)"')


def broken_links(site: Path) -> list[str]:
    """``page: href`` for every local link of the built site that leads nowhere."""
    ids: dict[Path, set[str]] = {}
    bad: list[str] = []
    for page in sorted(site.rglob("*.html")):
        if page.name == "404.html" and page.parent == site:  # its links start at the root
            continue
        text = page.read_text(encoding="utf-8")
        for href in _HREF.findall(text):
            if re.match(r"(?:[a-z][a-z0-9+.-]*:|//)", href) or href == "#":
                continue
            path, _, anchor = href.partition("#")
            target = (page.parent / path).resolve() if path else page
            if target.is_dir():
                target = target / "index.html"
            where = f"{page.relative_to(site)}: {href}"
            if not target.exists():
                bad.append(where)
            elif anchor and target.suffix == ".html":
                if target not in ids:
                    ids[target] = set(_ID.findall(target.read_text(encoding="utf-8")))
                if anchor not in ids[target]:
                    bad.append(where)
    return bad
