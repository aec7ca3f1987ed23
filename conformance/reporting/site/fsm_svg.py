"""The request state machine drawn from the reference's table, to read at page width.

States sit on a fixed grid (``PLACE``: the reading order of a request's life, top to bottom),
edges are drawn from ``TRANSITIONS`` alone, every one as a ``<g>`` carrying ``data-from``,
``data-event`` and ``data-to`` so a test can read the drawing back and compare it with the
table. An Abort that leads to Finished (every state has one) is a mark on the state's box, not a
line, so ten crossing lines do not bury the rest; the legend says so. A state the grid does not
place is an error that names it, never a state silently left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from html import escape

from kvconf.conformance.errors import KitError
from kvconf.conformance.reporting.site.drawing import arrowhead, border, edge_group, label

DECISION, RUNTIME, INK, FAINT, ABORT = "#1f5fa8", "#b54708", "#263238", "#607d8b", "#b71c1c"
COLS = {"A": 110, "B": 330, "C": 550}
ROW0, ROW_H, BOX_W, BOX_H = 70, 82, 150, 46
# (column, row) per state: a request's life reads top to bottom; side branches (the L3
# prefetch, finish with a writeback, retraction) to the sides of the main line.
PLACE: dict[str, tuple[str, int]] = {
    "Submitted": ("B", 0), "Prefetching": ("A", 1), "PrefetchDone": ("A", 2),
    "Prefilling": ("C", 3), "PrefillDone": ("B", 4), "Decoding": ("B", 5),
    "Draining": ("A", 6), "Retracting": ("C", 6), "WritingBack": ("A", 7),
    "Retracted": ("C", 7), "Finished": ("B", 8),
}
# Edges that go back up the page run along a rail at the right margin: (state, event) -> rail x.
RAILS = {("Retracted", "chunk"): 690, ("Retracted", "last_chunk"): 660}
LOOP_SIDE = {("Prefilling", "chunk"): "top", ("Decoding", "decode"): "left",
             ("Decoding", "ExtendResult"): "right"}
# Labels placed off the middle of their edge: off a line the edge crosses, or off a box it passes.
LABEL_AT = {("PrefetchDone", "chunk"): 0.28, ("Decoding", "retract_no_copy"): 0.3}
WIDTH = 740
Edge = tuple[str, str, str]


def _at(state: str) -> tuple[float, float]:
    if state not in PLACE:
        raise KitError(f"the state machine diagram has no place for state {state!r}: "
                       "add it to PLACE in conformance/reporting/site/fsm_svg.py")
    col, row = PLACE[state]
    return float(COLS[col]), float(ROW0 + row * ROW_H)


def _style(ev: str, runtime: frozenset[str]) -> tuple[str, str, str]:
    if ev in runtime:
        return RUNTIME, "rt", ' stroke-dasharray="7,4"'
    return DECISION, "dec", ""


def _self_loop(s: str, ev: str, color: str, marker: str, dash: str) -> str:
    x, y = _at(s)
    side = LOOP_SIDE.get((s, ev), "right")
    if side == "top":
        x1, x2, top = x + 15, x + 55, y - BOX_H / 2
        path = (f"M{x1:.0f},{top - 2:.0f} C{x1 - 5:.0f},{top - 42:.0f} {x2 + 5:.0f},"
                f"{top - 42:.0f} {x2:.0f},{top - 4:.0f}")
        lab = label(x2 + 12, top - 26, ev, color, "start")
    else:
        sign = 1 if side == "right" else -1
        edge = x + sign * BOX_W / 2
        path = (f"M{edge + sign * 2:.0f},{y - 10:.0f} C{edge + sign * 50:.0f},{y - 34:.0f} "
                f"{edge + sign * 50:.0f},{y + 34:.0f} {edge + sign * 4:.0f},{y + 10:.0f}")
        lab = label(edge + sign * 52, y + 4, ev, color, "start" if sign > 0 else "end")
    return (f'<path d="{path}" fill="none" stroke="{color}" stroke-width="1.6"{dash} '
            f'marker-end="url(#{marker})"/>{lab}')


def _rail(a: str, ev: str, b: str, rail: float, color: str, marker: str, dash: str) -> str:
    (x1, y1), (x2, y2) = _at(a), _at(b)
    off = 8 if rail > 670 else -8  # two rails leave the box at two heights
    sx, ex = x1 + BOX_W / 2 + 2, x2 + BOX_W / 2 + 4
    path = (f"M{sx:.0f},{y1 + off:.0f} H{rail:.0f} V{y2:.0f} H{ex:.0f}")
    lab = label((ex + rail) / 2, y2 - 7, ev, color)  # on the run into the target
    return (f'<path d="{path}" fill="none" stroke="{color}" stroke-width="1.6"{dash} '
            f'marker-end="url(#{marker})"/>{lab}')


def _straight(a: str, ev: str, b: str, color: str, marker: str, dash: str) -> str:
    (x1, y1), (x2, y2) = _at(a), _at(b)
    dx, dy = x2 - x1, y2 - y1
    sx, sy = border(x1, y1, dx, dy, BOX_W, BOX_H)
    ex, ey = border(x2, y2, -dx, -dy, BOX_W, BOX_H)
    t = LABEL_AT.get((a, ev), 0.5)
    lx, ly = sx + (ex - sx) * t, sy + (ey - sy) * t
    vertical = abs(dx) < 1  # its label beside it
    lab = label(lx + 7 if vertical else lx, ly + 4, ev, color, "start" if vertical else "middle")
    return (f'<path d="M{sx:.0f},{sy:.0f} L{ex:.0f},{ey:.0f}" fill="none" stroke="{color}" '
            f'stroke-width="1.6"{dash} marker-end="url(#{marker})"/>{lab}')


def _box(s: str, holds: Iterable[str], initial: bool, final: bool, abort: bool) -> str:
    x, y = _at(s)
    held = " · ".join(sorted(h.replace("_", " ") for h in holds)) or "nothing"
    parts = [f'<g class="state" data-state="{escape(s)}">',
             f'<rect x="{x - BOX_W / 2:.0f}" y="{y - BOX_H / 2:.0f}" width="{BOX_W}" '
             f'height="{BOX_H}" rx="8" fill="#f4f7fb" stroke="{INK}" stroke-width="1.4"/>']
    if final:
        parts.append(f'<rect x="{x - BOX_W / 2 + 3:.0f}" y="{y - BOX_H / 2 + 3:.0f}" '
                     f'width="{BOX_W - 6}" height="{BOX_H - 6}" rx="6" fill="none" '
                     f'stroke="{INK}"/>')
    parts += [f'<text x="{x:.0f}" y="{y - 3:.0f}" text-anchor="middle" font-weight="bold" '
              f'fill="{INK}">{escape(s)}</text>',
              f'<text x="{x:.0f}" y="{y + 15:.0f}" text-anchor="middle" font-size="11.5" '
              f'fill="{FAINT}">holds {escape(held)}</text>']
    if initial:
        top = y - BOX_H / 2
        parts.append(f'<circle cx="{x:.0f}" cy="{top - 34:.0f}" r="7" fill="{INK}"/>'
                     f'<path d="M{x:.0f},{top - 27:.0f} V{top - 4:.0f}" stroke="{INK}" '
                     'stroke-width="1.6" marker-end="url(#ink)"/>')
    parts.append("</g>")
    if abort:  # the Abort edge, drawn as a mark on the box
        cx, cy = x + BOX_W / 2 - 2, y - BOX_H / 2 + 2
        parts.append(edge_group(s, "Abort", "Finished",
                                 f'<circle cx="{cx:.0f}" cy="{cy:.0f}" r="8" fill="#fff" '
                                 f'stroke="{ABORT}" stroke-width="1.4"/><path d="M{cx - 3.5:.1f},'
                                 f'{cy - 3.5:.1f} l7,7 m0,-7 l-7,7" stroke="{ABORT}" '
                                 'stroke-width="1.6"/>'))
    return "".join(parts)


def _legend(y: float) -> str:
    def line(x: float, color: str, dash: str, marker: str, text: str) -> str:
        return (f'<path d="M{x},{y} h38" stroke="{color}" stroke-width="1.6"{dash} '
                f'marker-end="url(#{marker})"/><text x="{x + 46}" y="{y + 4}" fill="{INK}">'
                f'{escape(text)}</text>')

    y2 = y + 26
    return ('<g class="legend">'
            + line(20, DECISION, "", "dec", "scheduler decision (while building a plan)")
            + line(390, RUNTIME, ' stroke-dasharray="7,4"', "rt",
                   "runtime event (reported by advance)")
            + f'<circle cx="36" cy="{y2}" r="8" fill="#fff" stroke="{ABORT}" '
              f'stroke-width="1.4"/><path d="M32.5,{y2 - 3.5} l7,7 m0,-7 l-7,7" '
              f'stroke="{ABORT}" stroke-width="1.6"/><text x="66" y="{y2 + 4}" fill="{INK}">'
              "Abort: the state leads to Finished on Abort</text>"
            + f'<text x="390" y="{y2 + 4}" fill="{INK}">holds: what a request holds '
              "in the state</text></g>")


def state_machine_svg(transitions: Iterable[Edge], holds: Mapping[str, Iterable[str]],
                      runtime: Iterable[str], initial: str, final: str) -> str:
    """``transitions``: (state, event, next state) triples, one per target; ``holds``: what
    each state holds; ``runtime``: the events the runtime reports (drawn dashed)."""
    edges = sorted(set(transitions))
    rt = frozenset(runtime)
    states = sorted({s for a, _e, b in edges for s in (a, b)} | set(holds),
                    key=lambda s: (_at(s)[1], _at(s)[0]))
    aborts = {a for a, ev, b in edges if ev == "Abort" and b == final}
    height = ROW0 + (max(PLACE[s][1] for s in states)) * ROW_H + BOX_H / 2 + 90
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height:.0f}" '
             f'width="{WIDTH}" height="{height:.0f}" font-family="sans-serif" font-size="13" '
             'role="img" aria-label="The request state machine">',
             "<defs>" + arrowhead("dec", DECISION) + arrowhead("rt", RUNTIME)
             + arrowhead("ink", INK) + "</defs>"]
    body: list[str] = []
    for a, ev, b in edges:
        if ev == "Abort" and b == final:
            continue  # a mark on the box
        color, marker, dash = _style(ev, rt)
        if a == b:
            drawn = _self_loop(a, ev, color, marker, dash)
        elif (a, ev) in RAILS:
            drawn = _rail(a, ev, b, RAILS[(a, ev)], color, marker, dash)
        else:
            drawn = _straight(a, ev, b, color, marker, dash)
        body.append(edge_group(a, ev, b, drawn))
    boxes = [_box(s, holds.get(s, ()), s == initial, s == final, s in aborts) for s in states]
    parts += body + boxes + [_legend(height - 52), "</svg>"]
    return "".join(parts)
