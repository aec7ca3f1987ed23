"""Hand-written hybrid-level cases: each a short trace aimed at named rules.

Written at page size 1 and widened to the run's page size (every token a page, a decode step
the decode rows of a page, the window 2 pages + 1 token: a hit then needs the two window pages
before it at any page size). Every
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
    DecodeStep,
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
                           steps=[t for s in self.steps for t in _scale(s, p)])


def _scale(step: HybridStep, p: int) -> list[HybridStep]:
    if isinstance(step, DecodeStep):  # a page of decode rows, one position each
        return [step] * p
    data = step.model_dump()
    for field in ("tokens", "output"):
        if data.get(field):
            data[field] = [t for t in data[field] for _ in range(p)]
    if data.get("upto"):
        data["upto"] *= p
    exp = data.get("expect")
    if exp:
        for k in ("full", "window", "mamba", "length"):
            if exp.get(k) is not None:
                exp[k] *= p
    return [type(step).model_validate(data)]


def E(**kw) -> HybridExpect:
    return HybridExpect(**kw)


A = [1, 2, 3, 4, 5, 6, 7, 8]
L = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]
OUT = [9, 7, 9, 3, 2, 3, 8, 4]  # what the runtime samples for a request decoding after A

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
    HybridScenario(
        "hybrid-decode",
        ("WIN-7", "WIN-4", "MAMBA-1", "TREE-2", "MAMBA-8", "POOL-5"),
        (
            AdmitStep(rid="r1", tokens=A, output=OUT),
            ExtendStep(rid="r1", upto=4),
            ExtendStep(rid="r1", upto=8),
            AdmitStep(rid="r2", tokens=A[:6] + [42, 42], output=[5, 5, 5, 5], expect=E(length=4)),
            ExtendStep(rid="r2", upto=8),
            *(step for _ in range(4) for step in (DecodeStep(rid="r1"), DecodeStep(rid="r2"))),
            *(DecodeStep(rid="r1") for _ in range(4)),
            FinishStep(rid="r1"),
            FinishStep(rid="r2"),
            # What a request decoded is published as the cache chooses (WIN-7), and states may
            # have been evicted for the decode rows' own: the hits are judged, full attention's
            # reach over the prompt stated.
            HitStep(tokens=A + OUT + [42]),
            HitStep(tokens=A + [42], expect=E(full=8)),
            AdmitStep(rid="r3", tokens=A + OUT[:5] + [42], output=[6, 6]),
            ExtendStep(rid="r3", upto=14),
            DecodeStep(rid="r3"),
            FinishStep(rid="r3"),
        ),
        "two requests decode side by side after their prompts, one position a row: each row "
        "has a page for its position, window pages go back only behind its window, its state "
        "resumes from its own depth; what they decoded, where cached, holds their tokens",
    ),
)
