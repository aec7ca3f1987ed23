"""The diagram pages, drawn from the reference: the request state machine from its table
(``TRANSITIONS``, ``HOLDS``, ``EXTERNAL``), and the page-ownership lifecycle observed while the
reference plays its own cache scenarios (every change of a page's owner, with the call that
made it). The chapters embed the same drawings (``chapters.DIAGRAMS``). They are SVG drawn here,
not Mermaid: the theme fetches Mermaid's script from a CDN, and the site loads nothing from the
network."""

from __future__ import annotations

from pathlib import Path

from kvconf.conformance.reporting.site.fsm_svg import state_machine_svg
from kvconf.conformance.reporting.site.lifecycle_svg import page_lifecycle_svg


def request_edges() -> list[tuple[str, str, str]]:
    """The table as (state, event, next state) triples, one per target."""
    from kvconf.reference.requests import TRANSITIONS

    return sorted((s.value, e.value, t.value)
                  for (s, e), targets in TRANSITIONS.items() for t in targets)


def request_svg() -> str:
    from kvconf.reference.requests import EXTERNAL, HOLDS, State

    return state_machine_svg(request_edges(), {s.value: HOLDS[s] for s in State},
                             [e.value for e in EXTERNAL], State.SUBMITTED.value,
                             State.FINISHED.value)


def render_diagrams(out: Path) -> None:
    from kvconf.reference.requests import HOLDS, State

    (out / "diagrams").mkdir(parents=True, exist_ok=True)
    (out / "diagrams" / "request-fsm.svg").write_text(request_svg(), encoding="utf-8")
    rows = [f"| {s.value} | {', '.join(sorted(HOLDS[s])) or 'nothing'} |" for s in State]
    fsm = ["---", "hide: [toc]", "---", "", "# The request state machine", "",
           "Drawn from the reference's own table (`reference/requests.py`, `TRANSITIONS`): every "
           "legal (state, event) pair and the state it leads to; a test reads the drawing back "
           "and compares it with the table. Solid arrows are the scheduler's decisions, taken "
           "while it builds a plan; dashed arrows are events the runtime reports through "
           "`advance`; the mark on a box's corner is its `Abort`, which leads to Finished from "
           "every state. A runtime event not drawn here must be rejected (REQ-2).", "",
           '<figure class="kv-diagram" markdown>',
           "![The request state machine](diagrams/request-fsm.svg)", "</figure>", "",
           "What each state holds (`HOLDS`, REQ-3):", "",
           "| state | holds |", "| --- | --- |", *rows, ""]
    (out / "state-machine.md").write_text("\n".join(fsm), encoding="utf-8")
    observed = page_lifecycle()
    (out / "diagrams" / "page-lifecycle.svg").write_text(page_lifecycle_svg(observed),
                                                         encoding="utf-8")
    rows = [f"| {a} | {op} | {b} |" for a, op, b in observed]
    life = ["---", "hide: [toc]", "---", "", "# The page-ownership lifecycle", "",
            "Observed on the reference itself: its scenarios are played and every change of a "
            "page's owner (as the pools report it) is recorded with the call that made it. "
            "Every page has exactly one owner at every step (POOL-1).", "",
            '<figure class="kv-diagram" markdown>',
            "![Page ownership](diagrams/page-lifecycle.svg)", "</figure>", "",
            "| from | call | to |", "| --- | --- | --- |", *rows, ""]
    (out / "page-lifecycle.md").write_text("\n".join(life), encoding="utf-8")


class _Watched:
    """The reference adapter, with every call's change of page owners recorded."""

    CALLS = ("alloc", "free", "insert", "unlock", "evict", "start_writeback", "start_loadback",
             "finish_transfer", "unload")

    def __init__(self, engine, seen: set[tuple[str, str, str]]) -> None:
        self._engine = engine
        self._seen = seen

    def __getattr__(self, name: str):
        attr = getattr(self._engine, name)
        if name not in self.CALLS:
            return attr

        def call(*args):
            from kvconf.reference.tiers import Tier

            before = self._engine.snapshot()
            out = attr(*args)
            after = self._engine.snapshot()
            for tier in (Tier.DEVICE, Tier.HOST):
                for a, b in zip(before.pools[tier].owners, after.pools[tier].owners,
                                strict=True):
                    ka, kb = a.split(":", 1)[0], b.split(":", 1)[0]
                    if ka != kb:
                        what = name
                        if name == "finish_transfer":
                            what += " (ok)" if args[1] else " (failed)"
                        self._seen.add((f"{ka} ({tier})", what, f"{kb} ({tier})"))
            return out

        return call


def page_lifecycle() -> list[tuple[str, str, str]]:
    """(owner before, call, owner after) for every change of a page's owner while the reference
    plays the cache scenarios; owners drop their ids (``node:3`` is ``node``)."""
    from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
    from kvconf.conformance.cache.driver import CacheDriver
    from kvconf.conformance.cache.scenarios import SCENARIOS
    from kvconf.conformance.engine.config import EngineConfig

    seen: set[tuple[str, str, str]] = set()
    for sc in SCENARIOS:
        trace = sc.trace(EngineConfig(page_size=2))
        engine = _Watched(ReferenceCacheAdapter(trace.config), seen)
        driver = CacheDriver(engine, trace.config, oracles=(), clock=trace.clock)
        driver.run(trace)
        driver.drain()
    return sorted(seen)
