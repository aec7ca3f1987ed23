"""The parts both diagrams of the site are drawn with: labels with a halo, arrowheads, edges
that carry what they show as data, and the reader that takes those edges back out (the tests
compare it with the reference's tables)."""

from __future__ import annotations

from html import escape
from xml.etree import ElementTree

Edge = tuple[str, str, str]


def border(x: float, y: float, dx: float, dy: float, box_w: float,
           box_h: float) -> tuple[float, float]:
    """Where a ray from a box's centre along (dx, dy) leaves the box (plus a small gap)."""
    hw, hh = box_w / 2 + 3, box_h / 2 + 3
    t = min(hw / abs(dx) if dx else float("inf"), hh / abs(dy) if dy else float("inf"))
    return x + dx * t, y + dy * t


def label(x: float, y: float, text: str, color: str, anchor: str = "middle") -> str:
    return (f'<text x="{x:.0f}" y="{y:.0f}" fill="{color}" text-anchor="{anchor}" '
            f'stroke="#fff" stroke-width="5" paint-order="stroke" '
            f'stroke-linejoin="round">{escape(text)}</text>')


def edge_group(a: str, ev: str, b: str, body: str) -> str:
    """One drawn edge; ``ev`` may name several events (``a|b``) that share the line."""
    return (f'<g class="edge" data-from="{escape(a)}" data-event="{escape(ev)}" '
            f'data-to="{escape(b)}"><title>{escape(a)} --{escape(ev)}--&gt; {escape(b)}</title>'
            f'{body}</g>')


def arrowhead(mid: str, color: str) -> str:
    return (f'<marker id="{mid}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" '
            f'markerHeight="8" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" '
            f'fill="{color}"/></marker>')


def drawn_edges(svg: str) -> set[Edge]:
    """The (state, event, next state) triples a drawing shows, read back from its markup."""
    root = ElementTree.fromstring(svg)
    return {(g.get("data-from"), ev, g.get("data-to"))
            for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("class") == "edge"
            for ev in g.get("data-event", "").split("|")}
