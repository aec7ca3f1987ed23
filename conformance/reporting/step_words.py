"""Steps and answers of a trace in words: what a trace page's table and ``kvconf replay
--explain`` show for each step (its arguments, what the trace expects, a cache-level answer)."""

from __future__ import annotations

import json

# Token lists longer than this are shown by their start and their length.
SHOW_TOKENS = 16


def tokens(ts: list) -> str:
    shown = " ".join(str(t) for t in ts[:SHOW_TOKENS])
    more = f" … ({len(ts)} tokens)" if len(ts) > SHOW_TOKENS else f" ({len(ts)})"
    return f"`{shown}`{more}"


def _value(key: str, v) -> str:
    if key == "tokens" and isinstance(v, list):
        return tokens(v)
    if key == "step":
        return f"of step {v}"
    return f"{key} {json.dumps(v) if not isinstance(v, str) else v}"


def describe_expect(e: dict | None) -> str:
    """What a step's ``expect`` asks, in words."""
    if not e:
        return ""
    parts = []
    for k, v in e.items():
        if v is None:
            continue
        if k == "rejected":
            parts.append("rejected" if v else "accepted")
        elif k == "started":
            parts.append("transfer started" if v else "transfer declined")
        elif k == "cleared":
            parts.append("cleared" if v else "refused")
        elif k == "behaviours":
            parts.append("rules " + ", ".join(v))
        else:
            parts.append(f"{k.replace('_', ' ')} = {v}")
    return "expects " + ", ".join(parts) if parts else ""


def describe_args(step: dict) -> str:
    """A step's arguments, in words (its operation and expectation left out)."""
    return ", ".join(_value(k, v) for k, v in step.items() if k not in ("op", "expect"))


def _events(evs: list) -> str:
    counts: dict[str, int] = {}
    for kind, hashes in evs:  # an AllBlocksCleared names no hash: it counts as one
        counts[kind] = counts.get(kind, 0) + (len(hashes) or 1)
    return ", ".join(f"{n} {k}" for k, n in counts.items())


def _pages(pages: list) -> str:
    return f"pages {' '.join(str(p) for p in pages)}" if pages else "no pages"


def answer(out: dict) -> str:
    """An answer to one cache-level step (the reference's or an engine's), in words."""
    op = out.get("op")
    parts: list[str] = []
    if op == "match":
        parts.append(f"matches {out.get('device_len', 0)} tokens on device, "
                     f"{out.get('host_len', 0)} on host")
    elif op in ("insert", "extend"):
        parts.append(f"had {out.get('cached_len', 0)} tokens cached; "
                     f"{_pages(out.get('pages', []))}")
        if out.get("freed"):
            parts.append(f"frees {_pages(out['freed'])}")
    elif op == "reset":
        parts.append("clears the cache" if out.get("cleared") else "refuses the reset")
    elif "rejected" in out:
        parts.append("rejects it" if out["rejected"] else "accepts it")
    elif "evicted" in out:
        parts.append(f"evicts {out['evicted']} pages")
    elif "started" in out:
        parts.append("starts the copy" if out["started"] else "declines the copy")
    if out.get("events"):
        parts.append(_events(out["events"]))
    return "; ".join(parts)


AT_REST = "kvconf-at-rest"  # the driver's own request, played once the workload is done


def plans_in_words(log: list) -> list[tuple[int, str, str]]:
    """A scheduler driver's plans, up to the kit's at-rest check: (plan, its rows: each
    request, kind and token positions; the copies it asks for). Page tables are left out:
    they are the engine's own ids."""
    out = []
    for entry in log:
        if not entry or entry[0] != "plan":
            continue
        _tag, step, prows, copies = entry[:4]
        if any(r[0] == AT_REST for r in prows):
            break
        work = "; ".join(
            f"`{rid}` {kind} " + (f"positions {start}-{start + n - 1}" if n > 1
                                  else f"position {start}")
            + (f" (reuses {reused})" if reused else "")
            for rid, kind, start, n, reused, _table in prows)
        moved = "; ".join(f"{c[0]} {len(c[1])} pages" if len(c) == 2
                          else f"{c[0]} of `{c[1]}`" for c in copies)
        out.append((step, work or "nothing", moved))
    return out
