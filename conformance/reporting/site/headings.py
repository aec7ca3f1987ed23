"""The anchors mkdocs gives a Markdown page's headings, so generated links can point at a
hand-written section (a finding's write-up) without the page having to name its anchors."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from markdown.extensions.toc import slugify, unique

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*(\{[^}]*\})?\s*$")


@dataclass(frozen=True, slots=True)
class Heading:
    level: int
    text: str
    anchor: str


def _plain(text: str) -> str:
    """The heading as toc sees it: inline code, emphasis and links reduced to their text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[`*_]", "", text)


def headings(path: Path) -> list[Heading]:
    """Every heading of ``path`` outside code blocks, with the anchor the toc extension gives it
    (an explicit ``{ #id }`` wins; a repeated slug gets ``_1``, ``_2``, as toc numbers them)."""
    out: list[Heading] = []
    used: set[str] = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else _HEADING.match(line)
        if not m:
            continue
        text, attrs = m.group(2), m.group(3) or ""
        explicit = re.search(r"#([\w-]+)", attrs)
        anchor = explicit.group(1) if explicit else unique(slugify(_plain(text), "-"), used)
        used.add(anchor)
        out.append(Heading(len(m.group(1)), _plain(text), anchor))
    return out
