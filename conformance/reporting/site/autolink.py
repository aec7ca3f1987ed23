"""Every behaviour and defect ID on every page a link to its card or catalog entry.

A pass over the site's Markdown before mkdocs reads it. It leaves alone what must not become a
link: fenced code, headings (their anchors would change), HTML blocks, existing links and
images, attribute lists, URLs, and an ID inside inline code that says more than the ID. An ID in
inline code on its own (`` `PIN-2` ``) becomes a link around the code.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

_FENCE = re.compile(r"^\s*(```|~~~)")
# What a line is cut into, in order of precedence: each alternative but the last is kept whole.
_TOKEN = re.compile(
    r"(?P<keep>!?\[[^\]]*\]\([^)]*\)"  # a link or image
    r"|\[[^\]]*\]\[[^\]]*\]"  # a reference link
    r"|<[^>]+>"  # an HTML tag
    r"|\{[^}]*\}"  # an attribute list
    r"|https?://\S+)"  # a URL
    r"|(?P<code>`+)(?P<inner>.+?)(?P=code)"  # inline code
    r"|(?P<id>\b[A-Z][A-Z0-9]*-\d+\b)")


def link_line(line: str, targets: Mapping[str, str]) -> str:
    def sub(m: re.Match) -> str:
        if m.group("keep"):
            return m.group(0)
        if m.group("code"):
            inner = m.group("inner").strip()
            return f"[{m.group(0)}]({targets[inner]})" if inner in targets else m.group(0)
        bid = m.group("id")
        return f"[{bid}]({targets[bid]})" if bid in targets else bid

    return _TOKEN.sub(sub, line)


def link_text(text: str, targets: Mapping[str, str]) -> str:
    """``targets``: ID -> the link to it from this page."""
    out: list[str] = []
    fenced = html = False
    indented_code = False
    prev_blank = True
    for line in text.split("\n"):
        stripped = line.strip()
        if _FENCE.match(line):
            fenced = not fenced
            out.append(line)
            prev_blank = not fenced  # a closed fence ends a block as a blank line does
            continue
        if not stripped:
            html = False
        elif prev_blank and line.startswith("<") and not line.startswith(("<span", "<a ")):
            html = not re.match(r"<(div|figure)[^>]*\bmarkdown\b", line)
        starts_code = prev_blank and line.startswith("    ") and not stripped.startswith(
            ("|", "-", "*", "!", "?"))
        indented_code = starts_code or (indented_code and bool(stripped))
        if fenced or html or stripped.startswith("#") or indented_code:
            out.append(line)
        else:
            out.append(link_line(line, targets))
        prev_blank = not stripped
    return "\n".join(out)


def link_site(src: Path, anchors: Mapping[str, str]) -> None:
    """Link every ID in every page under ``src``; ``anchors``: ID -> page#anchor from the
    site's root. A page's links are relative to where the page is."""
    for page in sorted(src.rglob("*.md")):
        rel = page.relative_to(src)
        targets = {}
        for bid, target in anchors.items():
            path, _, anchor = target.partition("#")
            if Path(path) == rel:
                targets[bid] = f"#{anchor}"
            else:
                there = Path(os.path.relpath(src / path, page.parent)).as_posix()
                targets[bid] = f"{there}#{anchor}"
        text = page.read_text(encoding="utf-8")
        linked = link_text(text, targets)
        if linked != text:
            page.write_text(linked, encoding="utf-8")
