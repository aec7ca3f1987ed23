"""Pictures for the compliance report, as inline SVG (no plotting library, nothing to fetch).

The request state machine's transition coverage is drawn in layers: a state's column is its
distance from the initial state (networkx's shortest paths), states as boxes, legal transitions
as arrows, green where the run took them, red and dashed where it did not. The kill matrix is
drawn as one bar per mutant: seconds to kill, red where it survived.
"""

from __future__ import annotations

import math
from html import escape

import networkx as nx

GREEN, RED, GREY, INK = "#2e7d32", "#c62828", "#9e9e9e", "#212121"


def layers(edges: list[tuple[str, str, str, bool]], start: str) -> dict[str, tuple[int, int]]:
    """(column, row) per state: the column is the distance from ``start``."""
    g = nx.DiGraph()
    g.add_edges_from((a, b) for a, _e, b, _x in edges)
    dist = nx.single_source_shortest_path_length(g, start) if start in g else {}
    far = max(dist.values(), default=0) + 1
    # A state nothing leaves (but itself) ends the picture, whatever its distance.
    sinks = {s for s in g.nodes if all(t == s for t in g.successors(s))}
    cols: dict[int, list[str]] = {}
    for s in sorted(g.nodes):
        cols.setdefault(far if s in sinks else dist.get(s, far), []).append(s)
    return {s: (c, r) for c, names in cols.items() for r, s in enumerate(names)}


def transition_graph(edges: list[tuple[str, str, str, bool]], start: str,
                     width: int = 1150, height: int = 620) -> str:
    """``edges``: (from state, event, to state, exercised). Deterministic: a fixed layout."""
    grid = layers(edges, start)
    states = sorted(grid)
    ncols = max(c for c, _r in grid.values()) + 1
    nrows = max(r for _c, r in grid.values()) + 1
    pad = 70

    def at(s: str) -> tuple[float, float]:
        c, r = grid[s]
        x = pad + c * (width - 2 * pad) / max(ncols - 1, 1)
        y = pad + r * (height - 2 * pad) / max(nrows - 1, 1)
        return x, y

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
             f'width="{width}" height="{height}" font-family="sans-serif" font-size="11">',
             '<defs>'
             f'<marker id="ok" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
             f'markerHeight="7" orient="auto"><path d="M0,0L10,5L0,10z" fill="{GREEN}"/></marker>'
             f'<marker id="miss" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
             f'markerHeight="7" orient="auto"><path d="M0,0L10,5L0,10z" fill="{RED}"/></marker>'
             '</defs>']
    seen: dict[tuple[str, str], int] = {}
    for a, ev, b, took in edges:
        k = seen.get((a, b), 0)
        seen[(a, b)] = k + 1
        color, marker, dash = ((GREEN, "ok", "") if took
                               else (RED, "miss", ' stroke-dasharray="5,4"'))
        title = f"<title>{escape(a)} --{escape(ev)}--&gt; {escape(b)}"
        title += (" (taken)" if took else " (never taken)") + "</title>"
        (x1, y1), (x2, y2) = at(a), at(b)
        if a == b:
            parts.append(f'<g>{title}<path d="M{x1 - 18:.1f},{y1 - 12:.1f} C{x1 - 40:.1f},'
                         f'{y1 - 60 - 14 * k:.1f} {x1 + 40:.1f},{y1 - 60 - 14 * k:.1f} '
                         f'{x1 + 18:.1f},{y1 - 12:.1f}" fill="none" stroke="{color}"{dash} '
                         f'marker-end="url(#{marker})"/></g>')
            continue
        dx, dy = x2 - x1, y2 - y1
        d = math.hypot(dx, dy) or 1
        # Shorten to the box edges and bend parallel edges apart.
        sx, sy = x1 + dx / d * 40, y1 + dy / d * 14
        ex, ey = x2 - dx / d * 42, y2 - dy / d * 16
        bend = 25 * (k + 1) * (1 if (a < b) else -1)
        cx, cy = (sx + ex) / 2 - dy / d * bend, (sy + ey) / 2 + dx / d * bend
        parts.append(f'<g>{title}<path d="M{sx:.1f},{sy:.1f} Q{cx:.1f},{cy:.1f} {ex:.1f},'
                     f'{ey:.1f}" fill="none" stroke="{color}" stroke-width="1.4"{dash} '
                     f'marker-end="url(#{marker})"/>'
                     f'<text x="{cx:.1f}" y="{cy:.1f}" fill="{color}" text-anchor="middle">'
                     f'{escape(ev)}</text></g>')
    for s in states:
        x, y = at(s)
        parts.append(f'<rect x="{x - 44:.1f}" y="{y - 13:.1f}" width="88" height="26" rx="6" '
                     f'fill="#fafafa" stroke="{INK}"/><text x="{x:.1f}" y="{y + 4:.1f}" '
                     f'text-anchor="middle" fill="{INK}">{escape(s)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def kill_bars(rows: list[tuple[str, float, bool]], width: int = 900) -> str:
    """``rows``: (mutant, seconds, killed); a log-scaled bar per mutant."""
    bar_h, gap, left = 14, 4, 230
    height = len(rows) * (bar_h + gap) + 40
    top = max([s for _n, s, _k in rows] + [1.0])
    scale = (width - left - 80) / math.log10(1 + top * 1000)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
             f'width="{width}" height="{height}" font-family="sans-serif" font-size="11">']
    for i, (name, secs, killed) in enumerate(rows):
        y = 10 + i * (bar_h + gap)
        w = max(2.0, math.log10(1 + secs * 1000) * scale)
        color = GREEN if killed else RED
        label = f"{secs:.2f} s" + ("" if killed else " (alive)")
        parts.append(f'<text x="{left - 6}" y="{y + 11}" text-anchor="end" fill="{INK}">'
                     f'{escape(name)}</text><rect x="{left}" y="{y}" width="{w:.1f}" '
                     f'height="{bar_h}" fill="{color}"><title>{escape(name)}: {label}</title>'
                     f'</rect><text x="{left + w + 4:.1f}" y="{y + 11}" fill="{GREY}">'
                     f'{label}</text>')
    parts.append(f'<text x="{left}" y="{height - 8}" fill="{GREY}">seconds to kill '
                 "(log scale)</text></svg>")
    return "".join(parts)
