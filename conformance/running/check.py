"""``kvconf check-engine``: an engine held to the adapter contract before any case runs.

Every level the engine's factory offers is built with the run's default configuration and
checked against its protocol (``conformance/engine/contract.py``); every problem is one line.
An engine that meets it is opened as a run would open it, and the cases it can run, and those
it cannot with the missing feature, are counted: what a first run will judge, in a second.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from kvconf.conformance.adapters import levels, target_of
from kvconf.conformance.engine import contract
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.hybrid import HybridConfig
from kvconf.conformance.errors import EngineUnavailable, KitError
from kvconf.conformance.scheduler.trace import SchedConfig


@dataclass
class Checked:
    """What ``check`` found: the problems (none: the engine meets the contract) and, for an
    engine that does, what it declares and which cases it can run."""

    engine: str
    target: str
    problems: list[str] = field(default_factory=list)
    levels: list[str] = field(default_factory=list)  # a line per level that started
    notes: list[str] = field(default_factory=list)  # levels that cannot start here
    features: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)  # the cases it can run
    unjudged: dict[str, int] = field(default_factory=dict)  # why not -> cases

    @property
    def ok(self) -> bool:
        return not self.problems

    def text(self) -> list[str]:
        """The lines ``kvconf check-engine`` prints."""
        if not self.ok:
            return self.problems
        named = self.engine if self.target == self.engine else f"{self.engine} ({self.target})"
        out = [f"{named} meets the adapter contract", *self.levels,
               *self.notes, f"declares: {', '.join(self.features) or 'nothing'}",
               f"can run {len(self.runs)} cases: {', '.join(self.runs) or 'none'}"]
        for why, n in self.unjudged.items():
            out.append(f"{n} not judged: {why}")
        return out


def check(engine: str, config: EngineConfig) -> Checked:
    """Hold ``engine`` (a short name or ``module:factory``) to the contract of every level it
    offers. An unknown or unimportable engine is bad input (``KitError``), not a problem."""
    target = target_of(engine)
    offered = levels(engine)
    done = Checked(engine, target)
    built = [(lv, make, cfg) for lv, make, cfg in (
        (Feature.CACHE, offered.cache, config),
        (Feature.SCHEDULER, offered.scheduler, SchedConfig()),
        (Feature.HYBRID, offered.hybrid, HybridConfig())) if make is not None]
    for level, make, cfg in built:
        where = f"{engine} ({level.value} level)" if len(built) > 1 else engine
        try:
            probe = make(cfg)
        except EngineUnavailable as e:
            done.notes.append(f"{level.value} level: not available here ({e}); its cases are "
                              "NOT_SUPPORTED")
            continue
        except Exception as e:
            done.problems.append(f"{where}: the factory raised {type(e).__name__}: {e} (called "
                                 f"with {type(cfg).__name__}({cfg.model_dump()}))")
            continue
        found = contract.problems(probe, level, cfg)
        done.problems.extend(contract.lines(where, found))
        if not found:
            done.levels.append(f"{level.value} level: {probe.name} {probe.version}, page_size "
                               f"{probe.page_size}")
    if done.problems:
        return done
    _cases(done, engine, config)
    return done


def _cases(done: Checked, engine: str, config: EngineConfig) -> None:
    """The engine opened as a run opens it (its ``lacks`` judged too), and its cases sorted into
    those it runs and those it does not, by why."""
    from kvconf.conformance.running.profiles import PROFILES, Budget
    from kvconf.conformance.running.runner import all_cases, open_engine, unjudged

    try:
        opened = open_engine(engine, config, seed_value=0, profile=PROFILES["ci"],
                             budget=Budget(examples=1))
    except KitError as e:
        done.problems.extend(str(e).splitlines())
        return
    features = opened.ctx.features
    done.features = sorted(f.value for f in features)
    why: Counter[str] = Counter()
    for case in all_cases():
        r = unjudged(case, features, opened.unavailable, config)
        if r is None:
            done.runs.append(case.name)
            continue
        missing = sorted(f.value for f in case.needs - features)
        why[f"{r.status.value}, needs {', '.join(missing)}" if missing
            else f"{r.status.value}, {r.message}"] += 1
    done.unjudged = dict(sorted(why.items(), key=lambda kv: (-kv[1], kv[0])))
