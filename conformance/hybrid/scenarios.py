"""Hand-written hybrid-level cases: each a short trace aimed at named rules.

Written at page size 1 and widened to the run's page size (every token a page, the window
2 pages + 1 token: a hit then needs the two window pages before it at any page size). Every
expected hit ends where a chunk ended on a page boundary, where every engine keeps a Mamba
state; an engine that keeps more states (a legal choice) meets the same expectations. Queries
end with a token nobody computed (42), so an engine that leaves a query's last token to compute
(TREE-7) gives the same hits.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvconf.conformance.engine.hybrid import HybridConfig
from kvconf.conformance.hybrid.trace import (
    AdmitStep,
    ExtendStep,
    FinishStep,
    HitStep,
    HybridExpect,
    HybridStep,
    HybridTrace,
)

# The pools every scenario fits in without eviction (at any page size).
POOLS = {"pages": 64, "state_slots": 16}


@dataclass(frozen=True)
class HybridScenario:
    name: str
    behaviours: tuple[str, ...]
    steps: tuple[HybridStep, ...]
    doc: str

    def trace(self, page_size: int) -> HybridTrace:
        p = page_size
        config = HybridConfig(page_size=p, window=2 * p + 1, mamba=True, **POOLS)
        return HybridTrace(name=self.name, behaviours=list(self.behaviours), config=config,
                           steps=[_scale(s, p) for s in self.steps])


def _scale(step: HybridStep, p: int) -> HybridStep:
    data = step.model_dump()
    if data.get("tokens"):
        data["tokens"] = [t for t in data["tokens"] for _ in range(p)]
    if data.get("upto"):
        data["upto"] *= p
    exp = data.get("expect")
    if exp:
        for k in ("full", "window", "mamba", "length"):
            if exp.get(k) is not None:
                exp[k] *= p
    return type(step).model_validate(data)


def E(**kw) -> HybridExpect:
    return HybridExpect(**kw)


A = [1, 2, 3, 4, 5, 6, 7, 8]
L = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]

HYBRID_SCENARIOS: tuple[HybridScenario, ...] = (
    HybridScenario(
        "hybrid-group-hits",
        ("TREE-1", "WIN-3", "MAMBA-3", "WIN-6"),
        (
            AdmitStep(rid="r1", tokens=A, expect=E(length=0)),
            ExtendStep(rid="r1", upto=4),
            ExtendStep(rid="r1", upto=8),
            FinishStep(rid="r1"),
            HitStep(tokens=A + [42], expect=E(full=8, window=8, mamba=8, length=8)),
            # The window's own reach here is not stated: positions 4 and 5 were computed in
            # r1's last chunk, and a cache may give back its window pages before it publishes
            # them once that chunk is computed (WIN-4, judged from the next row's first read).
            HitStep(tokens=A[:6] + [42, 42], expect=E(full=6, length=4,
                                                       behaviours=["MAMBA-3", "WIN-6"])),
            AdmitStep(rid="r2", tokens=A[:6] + [42, 42], expect=E(length=4)),
            ExtendStep(rid="r2", upto=8),
            FinishStep(rid="r2"),
        ),
        "each group reports how far it serves a query; the combined hit is the deepest all of "
        "them serve: full attention reaches 6 tokens, the Mamba state only 4",
    ),
    HybridScenario(
        "hybrid-resume-from-state",
        ("MAMBA-1", "MAMBA-3", "WIN-6"),
        (
            AdmitStep(rid="r1", tokens=A),
            ExtendStep(rid="r1", upto=4),
            ExtendStep(rid="r1", upto=8),
            FinishStep(rid="r1"),
            AdmitStep(rid="r2", tokens=A + [9, 42], expect=E(length=8)),
            ExtendStep(rid="r2", upto=10),
            AdmitStep(rid="r3", tokens=A[:4] + [7, 7, 7, 42], expect=E(length=4)),
            ExtendStep(rid="r3", upto=8),
            FinishStep(rid="r2"),
            FinishStep(rid="r3"),
            HitStep(tokens=A + [9, 42, 43], expect=E(full=10, length=10)),
        ),
        "a request admitted on a cached state resumes from exactly its depth and leaves its "
        "own state where the engine says; the state it resumed from stays cached",
    ),
    HybridScenario(
        "hybrid-window-release",
        ("WIN-4", "WIN-3", "POOL-5"),
        (
            AdmitStep(rid="r1", tokens=L + [42]),
            *(ExtendStep(rid="r1", upto=k) for k in range(2, 13, 2)),
            FinishStep(rid="r1"),
            AdmitStep(rid="r2", tokens=L[:10] + [42, 42], expect=E(length=10)),
            ExtendStep(rid="r2", upto=12),
            FinishStep(rid="r2"),
        ),
        "window pages a request no longer reads may be given back as it decodes, never one its "
        "window still reads; the last window pages before a boundary still serve a hit there",
    ),
    HybridScenario(
        "hybrid-shared-prefix",
        ("POOL-2", "MAMBA-8", "WIN-4", "WIN-6"),
        (
            AdmitStep(rid="r1", tokens=A + [42]),
            ExtendStep(rid="r1", upto=4),
            AdmitStep(rid="r2", tokens=A + [43], expect=E(length=4)),
            ExtendStep(rid="r2", upto=6),
            ExtendStep(rid="r1", upto=8),
            ExtendStep(rid="r2", upto=8),
            ExtendStep(rid="r1", upto=9),
            ExtendStep(rid="r2", upto=9),
            FinishStep(rid="r1"),
            FinishStep(rid="r2"),
            HitStep(tokens=A + [44], expect=E(full=8, window=8, mamba=8, length=8)),
        ),
        "two requests share a prefix while both run: neither is handed a page or a state slot "
        "the other holds, and their states stay apart",
    ),
)
