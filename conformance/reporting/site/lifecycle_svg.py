"""The page-ownership lifecycle, drawn as one small graph per tier side by side.

Owners are ``<kind> (<tier>)``; a tier's owners sit on a diamond (free at the top, a caller's
pages on the left, pages in flight on the right, a node's at the bottom), so the allocation
cycle and the transfer cycle read as two loops around the middle. Calls that move a page between
the same two owners share one line and one stacked label. An owner of a kind the diamond does
not place is an error that names it.
"""

from __future__ import annotations

from collections.abc import Iterable
from html import escape

from kvconf.conformance.errors import KitError
from kvconf.conformance.reporting.site.drawing import arrowhead, border, edge_group, label

INK, FAINT, LINE = "#263238", "#607d8b", "#1f5fa8"
BOX_W, BOX_H = 130, 40
KIND_AT = {"free": (0, 0), "caller": (-1, 1), "transfer": (1, 1), "node": (0, 2)}
TIER_X = {"device": 200, "host": 570}
DX, ROW0, ROW_H, WIDTH = 125, 80, 150, 780


def _at(owner: str) -> tuple[float, float]:
    kind, _, tier = owner.partition(" (")
    tier = tier.rstrip(")")
    if kind not in KIND_AT or tier not in TIER_X:
        raise KitError(f"the page-ownership diagram has no place for owner {owner!r}: add its "
                       "kind or tier to conformance/reporting/site/lifecycle_svg.py")
    col, row = KIND_AT[kind]
    return TIER_X[tier] + col * DX, ROW0 + row * ROW_H


def page_lifecycle_svg(moves: Iterable[tuple[str, str, str]]) -> str:
    """``moves``: (owner before, call, owner after), as observed."""
    lines: dict[tuple[str, str], list[str]] = {}
    for a, call, b in sorted(set(moves)):
        lines.setdefault((a, b), []).append(call)
    owners = sorted({o for pair in lines for o in pair}, key=lambda o: (_at(o)[0], _at(o)[1]))
    height = ROW0 + 2 * ROW_H + BOX_H / 2 + 20
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height:.0f}" '
             f'width="{WIDTH}" height="{height:.0f}" font-family="sans-serif" font-size="13" '
             'role="img" aria-label="Page ownership">', "<defs>" + arrowhead("ln", LINE)
             + "</defs>"]
    for tier, x in TIER_X.items():
        parts.append(f'<text x="{x}" y="24" text-anchor="middle" font-weight="bold" '
                     f'font-size="15" fill="{INK}">{tier} pool</text>')
    for (a, b), calls in lines.items():
        (x1, y1), (x2, y2) = _at(a), _at(b)
        dx, dy = x2 - x1, y2 - y1
        sx, sy = border(x1, y1, dx, dy, BOX_W, BOX_H)
        ex, ey = border(x2, y2, -dx, -dy, BOX_W, BOX_H)
        two_way = (b, a) in lines
        # A pair drawn both ways bends apart; its label sits on the outer side of the bend.
        bend = 28 if two_way else 0
        length = ((ex - sx) ** 2 + (ey - sy) ** 2) ** 0.5 or 1
        nx, ny = -(ey - sy) / length, (ex - sx) / length
        cx, cy = (sx + ex) / 2 + nx * bend, (sy + ey) / 2 + ny * bend
        lx, ly = (sx + ex) / 2 + nx * bend * 0.6, (sy + ey) / 2 + ny * bend * 0.6
        anchor = "end" if lx < (x1 + x2) / 2 else "start"
        if abs(dx) < 1:  # a vertical line: its label beside it, on the side with room
            tier = a.partition(" (")[2]
            free_left = f"caller ({tier}" not in " ".join(owners)
            lx, anchor = (lx - 8, "end") if free_left else (lx + 8, "start")
        if bend:
            anchor = "end" if nx < 0 else "start"
            lx += -6 if nx < 0 else 6
        lab = "".join(label(lx, ly + 4 + 16 * (i - (len(calls) - 1) / 2), c, LINE, anchor)
                      for i, c in enumerate(calls))
        body = (f'<path d="M{sx:.0f},{sy:.0f} Q{cx:.0f},{cy:.0f} {ex:.0f},{ey:.0f}" '
                f'fill="none" stroke="{LINE}" stroke-width="1.6" marker-end="url(#ln)"/>{lab}')
        parts.append(edge_group(a, "|".join(calls), b, body))
    for o in owners:
        x, y = _at(o)
        kind = o.partition(" (")[0]
        parts.append(f'<g class="owner"><rect x="{x - BOX_W / 2:.0f}" y="{y - BOX_H / 2:.0f}" '
                     f'width="{BOX_W}" height="{BOX_H}" rx="8" fill="#f4f7fb" stroke="{INK}" '
                     f'stroke-width="1.4"/><text x="{x:.0f}" y="{y + 5:.0f}" '
                     f'text-anchor="middle" font-weight="bold" fill="{INK}">{escape(kind)}'
                     f'</text><title>{escape(o)}</title></g>')
    parts.append(f'<text x="{WIDTH / 2:.0f}" y="{height - 6:.0f}" text-anchor="middle" '
                 f'fill="{FAINT}">a box is who owns a page; an arrow, the call that moved it'
                 "</text></svg>")
    return "".join(parts)
