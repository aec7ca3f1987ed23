"""Search that finds a rule by its ID first.

The theme's search parses a query with lunr, which cuts a term at a hyphen whatever the index's
separator says: ``PIN-2`` is searched as ``pin`` and ``2*`` (the last part as a prefix). The
card whose title is that ID matches both parts in its title, so boosting the rules' cards puts
it first. One case needs more: ``MAMBA-1`` also matches ``MAMBA-10``'s title, and ``10`` is a
rarer word than ``1``, so a rule whose number begins a sibling's number gets twice the boost
(``MAMBA-10`` is still first for ``MAMBA-10``, which ``MAMBA-1`` does not match).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

CARD_BOOST = 4.0


def card_boosts(ids: Iterable[str]) -> dict[str, float]:
    ids = sorted(ids)
    out: dict[str, float] = {}
    for bid in ids:
        prefix, num = bid.rsplit("-", 1)
        shadowed = any(o != bid and o.rsplit("-", 1)[0] == prefix
                       and o.rsplit("-", 1)[1].startswith(num) for o in ids)
        out[bid] = CARD_BOOST * (2 if shadowed else 0.5 if len(num) > 1 else 1)
    return out


def boost_cards(site: Path, ids: Iterable[str]) -> None:
    """Set the boost of every card's entry in the built search index."""
    path = site / "search" / "search_index.json"
    index = json.loads(path.read_text(encoding="utf-8"))
    boosts = card_boosts(ids)
    for doc in index["docs"]:
        _page, _, anchor = doc["location"].partition("#")
        if doc["location"].startswith("spec/") and anchor in boosts:
            doc["boost"] = boosts[anchor]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(index, separators=(",", ":")), encoding="utf-8")
    tmp.replace(path)
