"""The cache-level fuzz search: one seeded walk per trace, the seeds from the run's seed.

The walk (``kvconf.conformance.cache.walk``) plays each rule as it draws it, so every oracle
judges every step as it happens. A failing walk's seed goes to Hypothesis's example database,
which replays it first in the next run (``seeding.walk_search``); a failure is shrunk by the kit,
on the trace (``kvconf.conformance.running.shrink``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from kvconf.conformance.cache.walk import RULES, CacheWalk, EngineFactory, TraceHolder, swarm_rules
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.oracles import STEP_ORACLES, Oracle
from kvconf.conformance.running import judged
from kvconf.conformance.running.profiles import Budget
from kvconf.conformance.running.seeding import walk_search
from kvconf.conformance.runtime.memory import MemoryFactory, shadow_memory
from kvconf.conformance.trace import Trace
from kvconf.conformance.violation import Violation

__all__ = ["TraceHolder", "fuzz_walks", "play_walk"]


def play_walk(factory: EngineFactory, config: EngineConfig, holder: TraceHolder, seed: int,
              steps: int, *, swarm: bool = False, determinism: bool = True,
              memory: MemoryFactory = shadow_memory,
              oracles: Sequence[type[Oracle]] = STEP_ORACLES) -> CacheWalk:
    """The trace of ``seed``: ``steps`` rules drawn and played, then the engine brought to rest
    and the trace replayed (DET-1). The first broken rule raises; ``holder.last`` is its trace."""
    rng = random.Random(seed)
    rules = swarm_rules(rng) if swarm else RULES
    walk = CacheWalk(rng, factory, config, holder, rules=rules, memory=memory, oracles=oracles)
    try:
        walk.run(steps)
        walk.finish(determinism)
    finally:  # what ran is judged, whether or not it held
        judged.record(walk.driver.judged())
    return walk


def fuzz_walks(factory: EngineFactory, config: EngineConfig, holder: TraceHolder,
               budget: Budget, steps: int, base_seed: int, *, stream: int = 0, database=None,
               on_finding: Callable[[Trace, Violation], None] | None = None,
               swarm: bool = False, memory: MemoryFactory = shadow_memory,
               oracles: Sequence[type[Oracle]] = STEP_ORACLES) -> bool:
    """Play seeded walks for ``budget`` (``seeding.walk_search``): the example database's
    seeds first, then the unit's own. Returns whether a finding went to ``on_finding``."""
    from kvconf.conformance.running.shrink import interrupted

    return walk_search(
        lambda seed: play_walk(factory, config, holder, seed, steps, swarm=swarm,
                               memory=memory, oracles=oracles),
        lambda: (budget.examples - holder.examples if budget.examples is not None else None),
        None if budget.examples is not None else (budget.seconds or 0),
        base_seed, stream, database, on_finding,
        lambda: holder.last or Trace(config=config), interrupted)
