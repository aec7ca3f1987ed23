"""Hypothesis strategies for scheduler-level workloads, and the run that plays them.

Prompts come from a three-token alphabet and are mostly built from earlier prompts (a cut plus a
suffix), so shared prefixes, mid-flight reuse and duplicate inserts are common; pools are tight
so eviction and retraction really happen; acknowledgements are held back or failed; aborts land in
every state. Shrinking is the kit's own (bounded, on the workload), as for cache traces.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kvconf.conformance.oracles.base import Violation
from kvconf.conformance.running import flight
from kvconf.conformance.runtime.memory import MemoryFactory, shadow_memory
from kvconf.conformance.scheduler.driver import SchedulerDriver
from kvconf.conformance.scheduler.trace import AbortAt, Arrival, Preload, SchedConfig, SchedTrace

ACKS = st.lists(st.sampled_from(["now", "now", "later", "fail"]), max_size=6)
L3_ACKS = st.lists(st.sampled_from(["now", "now", "later", "partial", "lose"]), max_size=6)


@st.composite
def workloads(draw, config: SchedConfig, max_requests: int = 6,
              namespaces: int = 2) -> SchedTrace:
    n = draw(st.integers(1, max_requests))
    prompts: list[list[int]] = []
    arrivals = []
    at = 0
    for i in range(n):
        suffix = draw(st.lists(st.integers(0, 2), min_size=1, max_size=3 * config.page_size))
        if prompts and draw(st.booleans()):
            base = draw(st.sampled_from(prompts))
            tokens = base[: draw(st.integers(0, len(base)))] + suffix
        else:
            tokens = draw(st.lists(st.integers(0, 2), min_size=1,
                                   max_size=4 * config.page_size)) + suffix
        new_tokens = draw(st.integers(1, 6))
        # Most requests fit on the device alone, so liveness (LIVE-1) is judged; a few don't.
        if draw(st.integers(0, 9)):
            room = (config.device_pages - 1) * config.page_size - new_tokens
            tokens = tokens[: max(1, room)]
        prompts.append(tokens)
        at += draw(st.integers(0, 2))
        ns = draw(st.integers(0, namespaces - 1)) if i else 0
        arrivals.append(Arrival(at=at, rid=f"r{i}", ns=ns,
                                tokens=tokens, new_tokens=new_tokens))
    aborts = [
        # Some wait for the request's writeback, whenever the engine emits it (E-2).
        AbortAt(at=draw(st.integers(0, at + 8)), rid=f"r{k}",
                in_flight=draw(st.integers(0, 3)) == 0)
        for k in sorted(set(draw(st.lists(st.integers(0, n - 1), max_size=2))))
    ]
    l3: dict = {}
    if config.l3_store:
        # The store holds some prompts' prefixes (some in another namespace, some extended
        # past the prompt), so prefetches hit, miss, stop short and cross namespaces.
        preload = []
        for a in arrivals:
            if draw(st.booleans()):
                cut = draw(st.integers(1, len(a.tokens)))
                more = draw(st.lists(st.integers(0, 2), max_size=2 * config.page_size))
                ns = a.ns if draw(st.integers(0, 3)) else draw(st.integers(0, namespaces - 1))
                preload.append(Preload(ns=ns, tokens=a.tokens[:cut] + more))
        l3 = {"l3_preload": preload, "l3_acks": draw(L3_ACKS)}
    return SchedTrace(name="fuzz-scheduler", config=config, seed=draw(st.integers(0, 1000)),
                      arrivals=arrivals, aborts=aborts, acks=draw(ACKS), **l3)


def play_sched(factory: Callable[[SchedConfig], object], trace: SchedTrace,
               determinism: bool = True,
               memory: MemoryFactory = shadow_memory,
               memory_only: bool = False, probes: str = "all") -> SchedulerDriver:
    """Play a workload with every oracle; then again on a fresh engine (DET-1)."""
    flight.begin(trace)
    driver = SchedulerDriver(factory(trace.config), trace, memory, memory_only, probes=probes)
    try:
        log = driver.run()
    except Violation as v:
        found = driver.probe_finding
        if found is None or v is found:
            raise
        # A probe the engine wrongly accepted may have caused this: judge the run without
        # probes. Its own failure is the case's; if it has none, the probe's finding is.
        flight.begin(trace)
        try:
            SchedulerDriver(factory(trace.config), trace, memory, memory_only,
                            probes="none").run()
        except Violation as own:
            own.message += (f" (with probes, the run also had a probe's finding: "
                            f"[{found.oracle}] {', '.join(found.behaviours)}: {found.message})")
            raise
        found.message += (f"; and the run then broke another rule ([{v.oracle}] "
                          f"{', '.join(v.behaviours)}: {v.message}), which it does not break "
                          "without the probes")
        raise found from None
    if determinism:
        from kvconf.conformance.oracles.determinism import DeterminismOracle

        flight.begin(trace)
        again = SchedulerDriver(factory(trace.config), trace, memory, probes=probes).run()
        DeterminismOracle().compare(log, again)
    if driver.ignored:  # REQ-6: the same run without the events the engine ignored
        flight.begin(trace)
        without = SchedulerDriver(factory(trace.config), trace, memory, memory_only,
                                  probes="known").run()
        finding = driver.events.ignored_changed(log, without)
        if finding is not None:
            raise finding
    return driver


def fuzz_sched(factory, config: SchedConfig, examples: int | None, seconds: float | None,
               base_seed: int, holder: dict, ctx=None, namespaces: int = 2, stream: int = 0,
               database=None, on_finding: Callable[[SchedTrace, Violation], None] | None = None
               ) -> None:
    """Generate workloads until the budget is spent. Without ``on_finding`` the first
    Violation is raised (unshrunk); with it, each failing workload's (trace, violation) goes to
    ``on_finding`` and the search resumes with the next seed for the rest of the budget, so a
    defect every workload reaches cannot hide the others (only the first batch replays from
    the example ``database``). ``stream`` picks the seeds (a unit's index).

    A probe's finding (the engine accepted an event it must reject) never ends the search: it
    is kept, later workloads are played without probes, and it is reported only when the budget
    is spent with nothing else found, so an engine that fails a probe on every workload is
    still searched for every other rule."""
    from kvconf.conformance.running.seeding import seeded, stream_seed
    from kvconf.conformance.running.shrink import interrupted

    deadline = None if seconds is None else time.perf_counter() + seconds
    meter = getattr(ctx, "meter", None)  # progress notes for the display only
    played = 0  # scheduling steps of the workloads that ran to the end (for the notes)
    reported = False  # a finding went to ``on_finding``
    k = 0
    while True:
        n = examples - holder.get("examples", 0) if examples is not None else 25
        if n <= 0:
            break

        @settings(max_examples=n, deadline=None, database=database, print_blob=False,
                  suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
                  phases=(Phase.explicit, Phase.reuse, Phase.generate))
        @given(trace=workloads(config, namespaces=namespaces))
        def test(trace: SchedTrace) -> None:
            nonlocal played
            if meter is not None:
                meter.tick(holder.get("examples", 0), played)
            holder["trace"] = trace
            holder["examples"] = holder.get("examples", 0) + 1
            try:
                driver = play_sched(factory, trace, memory=getattr(ctx, "memory", shadow_memory),
                                    memory_only=getattr(ctx, "memory_only", False),
                                    probes="none" if "probe" in holder else "all")
            except Violation as v:
                if not v.probe:
                    if "probe" in holder:
                        p = holder["probe"][1]
                        v.message += (f" (the engine also accepted a probe in an earlier "
                                      f"workload: [{p.oracle}] {', '.join(p.behaviours)}: "
                                      f"{p.message})")
                    raise
                holder["probe"] = (trace, v)
                return
            if ctx is not None:  # transition coverage for the report
                ctx.exercised |= driver.exercised
                ctx.illegal |= driver.illegal
            if meter is not None:
                played += sum(1 for entry in driver.log if entry[0] == "plan")

        try:
            seeded(test, stream_seed(base_seed, stream, k), database)()
            found = False
        except Violation as v:
            if on_finding is None:
                raise
            on_finding(holder["trace"], v)
            found, reported, database = True, True, None
            if interrupted():
                return
        k += 1
        if deadline is None and not found:
            break  # the whole budget of examples ran without a failure
        if deadline is not None and time.perf_counter() >= deadline:
            break
    if "probe" in holder and not reported:  # nothing else found: the probe's finding is it
        holder["trace"], v = holder["probe"]
        if on_finding is None:
            raise v
        on_finding(holder["trace"], v)


def shrink_sched(trace: SchedTrace, v: Violation, replay, max_replays: int = 300) -> tuple[
        SchedTrace, Violation]:
    """Drop arrivals, aborts and generated tokens while the same rule still breaks."""
    from kvconf.conformance.running.shrink import Attempts

    a = Attempts(trace, v, replay, max_replays, max_seconds=120.0)
    changed = True
    while changed and not a.spent():
        changed = False
        for rid in [x.rid for x in a.best.arrivals]:
            cand = a.best.model_copy(update={
                "arrivals": [x for x in a.best.arrivals if x.rid != rid],
                "aborts": [x for x in a.best.aborts if x.rid != rid]})
            if cand.arrivals and a.fails(cand):
                changed = True
        for i in range(len(a.best.aborts) - 1, -1, -1):
            if i < len(a.best.aborts) and a.fails(a.best.model_copy(
                    update={"aborts": a.best.aborts[:i] + a.best.aborts[i + 1:]})):
                changed = True
        for i, x in enumerate(list(a.best.arrivals)):
            if x.new_tokens > 1 and i < len(a.best.arrivals):
                arr = list(a.best.arrivals)
                arr[i] = arr[i].model_copy(update={"new_tokens": 1})
                if a.fails(a.best.model_copy(update={"arrivals": arr})):
                    changed = True
    return a.best, a.best_v
