"""Scheduler-level workloads (drawn from a seed in a fuzz search, or as Hypothesis strategies
for tests: ``kvconf.conformance.scheduler.draws``), and the run that plays them.

Prompts come from a three-token alphabet and are mostly built from earlier prompts (a cut plus a
suffix), so shared prefixes, mid-flight reuse and duplicate inserts are common; pools are tight
so eviction and retraction really happen; acknowledgements are held back or failed; aborts land in
every state. Shrinking is the kit's own (bounded, on the workload), as for cache traces.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hypothesis import strategies as st

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.oracles.base import Violation
from kvconf.conformance.running import flight, judged
from kvconf.conformance.runtime.memory import MemoryFactory, shadow_memory
from kvconf.conformance.scheduler.draws import Draws, HypothesisDraws, SeededDraws
from kvconf.conformance.scheduler.driver import SchedulerDriver, sample
from kvconf.conformance.scheduler.tape import replay
from kvconf.conformance.scheduler.trace import AbortAt, Arrival, Preload, SchedConfig, SchedTrace

ACKS = ("now", "now", "later", "fail")
L3_ACKS = ("now", "now", "later", "partial", "lose")


def draw_workload(d: Draws, config: SchedConfig, max_requests: int = 6,
                  namespaces: int = 2, sequences: bool = False, gap: int = 2) -> SchedTrace:
    """A workload at ``config``, its choices from ``d``. With ``sequences``, a prompt may also
    extend an earlier request's whole sequence (its
    prompt and the tokens the runtime will sample for it, known from the seed), the prefix a
    finished request publishes with its state (MAMBA-7, MAMBA-10), and with Mamba half the
    workloads end with a wave of such requests in one plan (MAMBA-6); ``gap`` bounds the plans
    between two arrivals."""
    seed = d.integer(0, 1000) if sequences else None
    # With Mamba at least two requests: one alone has no state to reuse and no other to make
    # room for (MAMBA-3, MAMBA-4, MAMBA-6 are about what one request leaves another).
    n = d.integer(2 if config.mamba else 1, max(2, max_requests))
    prompts: list[list[int]] = []
    # What later prompts are cut from: (tokens, the request whose sequence it is, or None for
    # a prompt; the plan by which that request has likely finished).
    bases: list[tuple[list[int], int | None, int]] = []
    arrivals = []
    at = 0
    for i in range(n):
        suffix = d.integers(0, 2, 1, 3 * config.page_size)
        owner, ready = None, 0
        # With sequences, half the later requests extend an earlier request's whole sequence:
        # the depth it published at finish, arriving once it has likely finished, in its
        # namespace; a quarter cut an earlier prompt, a quarter are fresh.
        kind = (d.integer(0, 3) if sequences else int(d.boolean())) if prompts else 0
        if kind >= 2:
            base, owner, ready = d.choice([b for b in bases if b[1] is not None])
            tokens = base + suffix
        elif kind:
            base = d.choice(prompts)
            tokens = base[: d.integer(0, len(base))] + suffix
        else:
            tokens = d.integers(0, 2, 1, 4 * config.page_size) + suffix
        new_tokens = d.integer(1, 6)
        # Most requests fit on the device alone, so liveness (LIVE-1) is judged; a few don't,
        # but never one that extends a sequence (it is there to reuse what that one left).
        if kind >= 2 or d.integer(0, 9):
            room = (config.device_pages - 1) * config.page_size - new_tokens
            tokens = tokens[: max(1, room)]
        prompts.append(tokens)
        at = max(at + d.integer(0, gap), ready)
        ns = d.integer(0, namespaces - 1) if i else 0
        if owner is not None:
            ns = arrivals[owner].ns
        if seed is not None:
            done = at + -(-len(tokens) // config.max_tokens) + new_tokens + 3
            bases.append((tokens, None, 0))
            bases.append((tokens + [sample(seed, f"r{i}", len(tokens) + j)
                                    for j in range(new_tokens)], i, done))
        arrivals.append(Arrival(at=at, rid=f"r{i}", ns=ns,
                                tokens=tokens, new_tokens=new_tokens))
    owners = [b for b in bases if b[1] is not None]
    if config.mamba and len(owners) >= 2 and d.boolean():
        # A wave: requests that extend two or three different earlier sequences arrive in one
        # plan, once all of those have likely finished, so that rows of one plan resume from
        # cached states of their own (MAMBA-6).
        wave = d.distinct(owners, 2, 3)  # owners are distinct requests
        at = max([at, *(b[2] for b in wave)])
        for base, owner, _ready in wave:
            suffix = d.integers(0, 2, 1, config.page_size)
            new_tokens = d.integer(1, 3)
            room = (config.device_pages - 1) * config.page_size - new_tokens  # fits alone
            arrivals.append(Arrival(at=at, rid=f"r{len(arrivals)}", ns=arrivals[owner].ns,
                                    tokens=(base + suffix)[: max(1, room)],
                                    new_tokens=new_tokens))
        n = len(arrivals)
    aborts = [
        # Some wait for the request's writeback, whenever the engine emits it (E-2).
        AbortAt(at=d.integer(0, at + 8), rid=f"r{k}",
                in_flight=d.integer(0, 3) == 0)
        for k in sorted(set(d.integers(0, n - 1, 0, 2)))
    ]
    l3: dict = {}
    if config.l3_store:
        # The store holds some prompts' prefixes (some in another namespace, some extended
        # past the prompt), so prefetches hit, miss, stop short and cross namespaces.
        preload = []
        for a in arrivals:
            if d.boolean():
                cut = d.integer(1, len(a.tokens))
                more = d.integers(0, 2, 0, 2 * config.page_size)
                ns = a.ns if d.integer(0, 3) else d.integer(0, namespaces - 1)
                preload.append(Preload(ns=ns, tokens=a.tokens[:cut] + more))
        l3 = {"l3_preload": preload, "l3_acks": d.choices(L3_ACKS, 0, 6)}
    seed = seed if seed is not None else d.integer(0, 1000)
    return SchedTrace(name="fuzz-scheduler", config=config, seed=seed,
                      arrivals=arrivals, aborts=aborts, acks=d.choices(ACKS, 0, 6), **l3)


# Swarm testing: the switches of the scheduler's configuration drawn per workload, each with the
# engine feature that offers it (None: every scheduler engine has it). A workload's switches are
# read off its trace (``switches``), so every fuzz case records the pairs it played together.
SWARM_SWITCHES: dict[str, Feature | None] = {
    "mamba": Feature.MAMBA,
    "l3_store": Feature.L3_STORE,
    "sliding_window": Feature.SLIDING_WINDOW,
    "namespaces": Feature.NAMESPACES,
    "adapter_cap": Feature.ADAPTER_CAP,
    "host_tier": Feature.HOST_TIER,
    "publish_mid_flight": None,
    "mixed": None,
}
# Pairs no configuration holds: the L3 store keeps KV only, so it is never combined with Mamba
# (chapter mamba, "Left open to engines").
EXCLUDED_PAIRS = frozenset({("l3_store", "mamba")})


def offered(features: frozenset[Feature]) -> list[str]:
    """The switches an engine declaring ``features`` offers, in a fixed order. An engine that
    declares mixed_only has no mixed switch: every batch it computes is mixed (PLAN-3), so a
    workload with the switch off plays as one with it on, and a pair with ``mixed`` would be
    counted reached by workloads that never turned it off."""
    fixed = {"mixed"} if Feature.MIXED_ONLY in features else set()
    return [name for name, f in SWARM_SWITCHES.items()
            if (f is None or f in features) and name not in fixed]


def declared_pairs(features: frozenset[Feature]) -> list[tuple[str, str]]:
    """Every pair of offered switches a configuration can hold together (the swarm's goal)."""
    names = sorted(offered(features))
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1:]
            if (a, b) not in EXCLUDED_PAIRS]


def switches(trace: SchedTrace) -> frozenset[str]:
    """The switches a workload really played: on in its config (namespaces: some request
    arrives outside the base namespace)."""
    c = trace.config
    on = {"mamba": c.mamba, "l3_store": c.l3_store, "sliding_window": c.sliding_window > 0,
          "namespaces": any(a.ns for a in trace.arrivals), "adapter_cap": c.max_adapters > 0,
          "host_tier": c.host_pages > 0, "publish_mid_flight": c.publish_mid_flight,
          "mixed": c.mixed}
    return frozenset(k for k, v in on.items() if v)


# Switches a trace carries that an engine without the feature still plays: host pages are room
# such an engine leaves unused, as every fixed scheduler case assumes (fuzz-scheduler's default
# configuration has 32 host pages and needs no host tier). Whether a host tier is used is the
# engine's doing, never the trace's; what needs one on the trace's side (the L3 store's
# prefetches land on host) is a switch of its own.
CAPACITY_SWITCHES = frozenset({"host_tier"})


def demanded(trace: SchedTrace) -> frozenset[str]:
    """The switches a workload cannot be played without: ``switches`` less those that are
    only capacity (``CAPACITY_SWITCHES``)."""
    return switches(trace) - CAPACITY_SWITCHES


def missing_switches(features: frozenset[Feature], trace: SchedTrace) -> list[str]:
    """The switches ``trace`` demands that an engine declaring ``features`` lacks, sorted:
    played anyway, such a trace fails for reasons that say nothing about the engine (the run
    path never plays it there either: the case that needs the feature is NOT_SUPPORTED)."""
    return [name for name in sorted(demanded(trace))
            if SWARM_SWITCHES[name] is not None and SWARM_SWITCHES[name] not in features]


def pairs_of(trace: SchedTrace) -> set[tuple[str, str]]:
    on = sorted(switches(trace))
    return {(a, b) for i, a in enumerate(on) for b in on[i + 1:]}


def draw_swarm_config(d: Draws, features: frozenset[Feature]) -> tuple[SchedConfig, int]:
    """A configuration drawn from what the engine declares, and the namespaces to draw from:
    each offered switch on or off (swarm testing: every pair of switches is played together,
    and each one without the others), sizes of pages, pools and batches drawn too, small enough
    that eviction, retraction and transfers happen. Deterministic under the seed."""
    on = {name for name in offered(features) if d.boolean()}
    if {"mamba", "l3_store"} <= on:
        on.discard(d.choice(["mamba", "l3_store"]))
    if {"mamba", "sliding_window"} <= on and d.boolean():
        on.discard("sliding_window")  # a window publishes nothing: leave Mamba's reuse room
    if "adapter_cap" in on:
        on.add("namespaces")  # a cap over one namespace binds nothing
    if "l3_store" in on:
        if "host_tier" in offered(features):
            on.add("host_tier")  # prefetches land on host
        else:
            on.discard("l3_store")
    host = "host_tier" in on
    page = d.choice([1, 2, 2, 4])
    config = SchedConfig(
        page_size=page,
        # Tight pools evict and retract; roomy ones keep what finished requests published.
        device_pages=d.integer(8, 16) if d.boolean() else d.integer(24, 48),
        host_pages=d.integer(4, 12) if host else 0,
        max_tokens=d.integer(4, 12),
        max_batch=d.integer(1, 4),
        max_slots=d.integer(2, 6),
        mixed="mixed" in on or Feature.MIXED_ONLY in features,  # as it is played (PLAN-3)
        publish_mid_flight="publish_mid_flight" in on,
        sliding_window=d.integer(2, 6) if "sliding_window" in on else 0,
        l3_store="l3_store" in on,
        prefetch_threshold=d.integer(1, 2) if "l3_store" in on else 1,
        max_adapters=d.integer(1, 2) if "adapter_cap" in on else 0,
        mamba="mamba" in on,
        mamba_slots=d.integer(3, 12) if "mamba" in on else 16,
        mamba_host_slots=(d.integer(1, 4) if host else 0) if "mamba" in on else 16,
    )
    namespaces = (config.max_adapters + 2 if config.max_adapters
                  else 2 if "namespaces" in on else 1)
    return config, namespaces


def draw_swarm_workload(d: Draws, features: frozenset[Feature]) -> SchedTrace:
    """A workload on a configuration of its own (``draw_swarm_config``)."""
    config, namespaces = draw_swarm_config(d, features)
    trace = draw_workload(d, config, namespaces=namespaces, sequences=True, gap=4)
    return trace.model_copy(update={"name": "fuzz-scheduler-swarm"})


def draw_case_workload(d: Draws, configs: SchedConfig | Sequence[SchedConfig],
                       namespaces: int = 2) -> SchedTrace:
    """A workload at one configuration, or at one of several drawn per workload (a feature whose
    rules need sizes that exclude each other: a device tight enough to retract, and one roomy
    enough to admit several reusing requests in one plan). With Mamba a workload also extends
    finished requests' whole sequences, the only prefixes that hold a state to reuse."""
    c = configs if isinstance(configs, SchedConfig) else d.choice(list(configs))
    return draw_workload(d, c, namespaces=namespaces, sequences=c.mamba)


@st.composite
def workloads(draw, config: SchedConfig, max_requests: int = 6, namespaces: int = 2,
              sequences: bool = False, gap: int = 2) -> SchedTrace:
    """``draw_workload`` as a Hypothesis strategy (tests and properties)."""
    return draw_workload(HypothesisDraws(draw), config, max_requests, namespaces, sequences, gap)


@st.composite
def swarm_workloads(draw, features: frozenset[Feature]) -> SchedTrace:
    """``draw_swarm_workload`` as a Hypothesis strategy."""
    return draw_swarm_workload(HypothesisDraws(draw), features)


def seeded_workload(seed: int, config: SchedConfig | Sequence[SchedConfig] | None,
                    features: frozenset[Feature], namespaces: int = 2) -> SchedTrace:
    """The fuzz search's workload of ``seed``: at ``config`` (one, or one of several), or with
    no config the swarm's, from the switches in ``features``."""
    d = SeededDraws(seed)
    if config is None:
        return draw_swarm_workload(d, features)
    return draw_case_workload(d, config, namespaces)


def _driver(factory: Callable[[SchedConfig], object], trace: SchedTrace, *args,
            **kwargs) -> SchedulerDriver:
    """A driver on a fresh engine, able to make another one (the at-rest request is a leak,
    POOL-5, only where a fresh engine serves it)."""
    driver = SchedulerDriver(factory(trace.config), trace, *args, **kwargs)
    driver.fresh = lambda: factory(trace.config)
    return driver


def play_sched(factory: Callable[[SchedConfig], object], trace: SchedTrace,
               determinism: bool = True,
               memory: MemoryFactory = shadow_memory,
               memory_only: bool = False, probes: str = "all") -> SchedulerDriver:
    """Play a workload with every oracle; then its calls again on a fresh engine, comparing
    the plans (DET-1)."""
    flight.begin(trace)
    driver = _driver(factory, trace, memory, memory_only, probes=probes)
    try:
        return _play(factory, trace, driver, determinism, memory, memory_only)
    finally:  # what ran is judged, whether or not it held
        judged.record(driver.judged())


def _play(factory, trace: SchedTrace, driver: SchedulerDriver, determinism: bool,
          memory: MemoryFactory, memory_only: bool) -> SchedulerDriver:
    """``play_sched`` past the first driver's making."""
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
            _driver(factory, trace, memory, memory_only,
                            probes="none").run()
        except Violation as own:
            own.message += (f" (with probes, the run also had a probe's finding: "
                            f"[{found.oracle}] {', '.join(found.behaviours)}: {found.message})")
            raise
        found.message += (f"; and the run then broke another rule ([{v.oracle}] "
                          f"{', '.join(v.behaviours)}: {v.message}), which it does not break "
                          "without the probes")
        raise found from None
    if determinism:  # the first play's calls on a fresh engine, plan by plan (tape.py)
        judged.record(("DET-1",))
        flight.begin(trace)
        replay(factory(trace.config), driver.tape)
    if driver.ignored:  # REQ-6: the same run without the events the engine ignored
        flight.begin(trace)
        without = _driver(factory, trace, memory, memory_only,
                                  probes="known").run()
        finding = driver.events.ignored_changed(log, without)
        if finding is not None:
            raise finding
    return driver


def fuzz_sched(factory, config: SchedConfig | Sequence[SchedConfig] | None, examples: int | None,
               seconds: float | None, base_seed: int, holder: dict, ctx=None,
               namespaces: int = 2, stream: int = 0, database=None,
               on_finding: Callable[[SchedTrace, Violation], None] | None = None,
               features: frozenset[Feature] | None = None) -> None:
    """Generate workloads until the budget is spent, one seeded workload at a time
    (``seeded_workload``, ``seeding.walk_search``): the seeds the example ``database`` keeps for
    the case first (workloads that failed before), then the unit's own (``stream`` picks them).
    Without ``on_finding`` the first Violation is raised (unshrunk); with it, each failing
    workload's (trace, violation) goes to ``on_finding`` and the search resumes with the next
    seed for the rest of the budget, so a defect every workload reaches cannot hide the others.
    With no ``config``, each workload draws its own from ``features`` (or the context's): the
    swarm (``draw_swarm_workload``).

    A probe's finding (the engine accepted an event it must reject) never ends the search: it
    is kept, later workloads are played without probes, and it is reported only when the budget
    is spent with nothing else found, so an engine that fails a probe on every workload is
    still searched for every other rule."""
    from kvconf.conformance.running.seeding import walk_search
    from kvconf.conformance.running.shrink import interrupted

    meter = getattr(ctx, "meter", None)  # progress notes for the display only
    played = 0  # scheduling steps of the workloads that ran to the end (for the notes)
    offer = frozenset(features if features is not None else getattr(ctx, "features", ()))

    def play(seed: int) -> None:
        nonlocal played
        if meter is not None:
            meter.tick(holder.get("examples", 0), played)
        trace = seeded_workload(seed, config, offer, namespaces)
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
        holder.setdefault("pairs", set()).update(pairs_of(trace))
        holder.setdefault("unjudged", set()).update(driver.unjudged)
        if ctx is not None:  # transition and switch-pair coverage for the report
            ctx.exercised |= driver.exercised
            ctx.illegal |= driver.illegal
            ctx.pairs |= pairs_of(trace)
        # scheduling steps (plans) of the workloads that ran to the end: the case's steps
        plans = sum(1 for entry in driver.log if entry[0] == "plan")
        played += plans
        holder["steps"] = holder.get("steps", 0) + plans

    reported = walk_search(play, lambda: (examples - holder.get("examples", 0)
                                          if examples is not None else None),
                           seconds, base_seed, stream, database, on_finding,
                           lambda: holder["trace"], interrupted)
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
