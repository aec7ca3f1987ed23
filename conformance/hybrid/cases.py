"""The hybrid level's conformance cases: the hand-written scenarios and the seeded fuzz walks,
each needing the ``hybrid`` level with a window and a Mamba group."""

from __future__ import annotations

import time

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.hybrid import HybridConfig
from kvconf.conformance.hybrid.driver import play_hybrid
from kvconf.conformance.hybrid.generator import WalkStats, search, shrink
from kvconf.conformance.hybrid.memory import store_of
from kvconf.conformance.hybrid.scenarios import HYBRID_SCENARIOS, HybridScenario
from kvconf.conformance.oracles.hybrid import BEHAVIOURS
from kvconf.conformance.reporting.report import CaseResult, Status, UnitResult
from kvconf.conformance.running.cases import Case, RunContext, fail_result
from kvconf.conformance.running.seeding import stream_seed
from kvconf.conformance.violation import Violation

NEEDS = frozenset({Feature.HYBRID, Feature.SLIDING_WINDOW, Feature.MAMBA})
FUZZ_BEHAVIOURS = tuple(sorted({*BEHAVIOURS, "DET-1", "FAULT-2"}))


def _elapsed(t0: float) -> float:
    return round(time.perf_counter() - t0, 4)


def _where(ctx: RunContext, doc: str) -> str:
    """With ``--memory-only`` (``kvconf gpu``) the hybrid level is still judged in full: its
    oracle reads the memory and the engine's answers together, and it says so."""
    if not ctx.memory_only:
        return doc
    return f"{doc} (judged by every hybrid-level rule: that level has no memory-only mode)"


def scenario_case(sc: HybridScenario) -> Case:
    def run(ctx: RunContext) -> CaseResult:
        t0 = time.perf_counter()
        trace = sc.trace(ctx.config.page_size)
        try:
            log = play_hybrid(ctx.hybrid_factory, trace, store=store_of(ctx.memory))
        except Violation as v:
            path = ctx.save_trace(sc.name, trace)
            return fail_result(sc.name, sc.behaviours, v, t0, path)
        return CaseResult(case=sc.name, status=Status.PASS, behaviours=list(sc.behaviours),
                          duration_s=_elapsed(t0), steps=len(log), message=_where(ctx, sc.doc))

    return Case(sc.name, sc.behaviours, NEEDS, run)


def fuzz_config(page_size: int, pages: int) -> HybridConfig:
    return HybridConfig(page_size=page_size, pages=pages, state_slots=12,
                        window=2 * page_size + 1, mamba=True)


def fuzz_case(name: str, pages: int, doc: str) -> Case:
    """Seeded walks (``generator.walk``) at the run's page size on a KV pool of ``pages``."""

    def run(ctx: RunContext) -> CaseResult:
        t0 = time.perf_counter()
        budget, stream = ctx.stream()
        config = fuzz_config(ctx.config.page_size, pages)
        stats = WalkStats()
        index, of = (ctx.unit.index, ctx.unit.of) if ctx.unit is not None else (0, 1)

        def unit(status: Status) -> list[UnitResult]:
            return [UnitResult(index=index, of=of, status=status, examples=stats.examples,
                               steps=stats.steps, ops=dict(sorted(stats.ops.items())))]

        try:
            search(ctx.hybrid_factory, config, lambda k: stream_seed(ctx.seed, stream, k),
                   ctx.profile.steps, budget.examples, budget.seconds, stats,
                   store_of(ctx.memory))
        except Violation as v:
            trace = stats.last
            assert trace is not None
            trace, v = shrink(ctx.hybrid_factory, trace, v, ctx.profile.shrink_replays,
                              store_of(ctx.memory))
            path = ctx.save_trace(name, trace)
            return fail_result(name, FUZZ_BEHAVIOURS, v, t0, path, examples=stats.examples,
                               steps=len(trace.steps), units=unit(Status.FAIL))
        return CaseResult(case=name, status=Status.PASS, behaviours=list(FUZZ_BEHAVIOURS),
                          duration_s=_elapsed(t0), examples=stats.examples, steps=stats.steps,
                          message=_where(ctx, f"{doc}; ops played: "
                                         f"{dict(sorted(stats.ops.items()))}"),
                          units=unit(Status.PASS))

    return Case(name, FUZZ_BEHAVIOURS, NEEDS, run, fuzz=True, doc=doc)


def hybrid_cases() -> list[Case]:
    return [*(scenario_case(sc) for sc in HYBRID_SCENARIOS),
            fuzz_case("fuzz-hybrid", 40, "request walks over shared prefixes with a window "
                      "and Mamba states (prompts in chunks, output in decode rows), on a 40-page "
                      "pool"),
            fuzz_case("fuzz-hybrid-tight", 14, "request walks on a 14-page pool: pages "
                      "evicted and window pages reused while others run")]
