"""Oracle base: an oracle watches the driver's calls and raises a Violation citing behaviours.

Oracles are stateful per run (one instance per driver). White-box oracles read the engine's
snapshot and are skipped for engines that do not declare ``snapshot``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kvconf.conformance.cache.ledger import Ledger
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.protocol import CacheEngine, CopyOp, Inserted, Match
from kvconf.conformance.violation import Violation  # re-exported: the oracles raise it
from kvconf.reference.kv_events import KVEvent
from kvconf.reference.snapshot import CacheSnapshot
from kvconf.reference.tiers import Tier


@dataclass(slots=True)
class Ctx:
    """Where the driver is: the step, the engine, the kit's ledger and the step's snapshots."""

    index: int
    op: str
    engine: CacheEngine
    ledger: Ledger
    before: CacheSnapshot | None = None
    after: CacheSnapshot | None = None
    mid: CacheSnapshot | None = None  # after a locking match's match, before its lock
    events: list[KVEvent] = field(default_factory=list)
    acks: list[tuple[CopyOp, bool]] = field(default_factory=list)
    counters: dict[str, int] | None = None  # the engine's counts after the step (POOL-6)


class Oracle:
    name: ClassVar[str] = "oracle"
    # Whether an oracle may skip what it judged already: a step whose inputs to a check are the
    # very objects (or equal values) of a step that passed it is not judged again. False: every
    # check runs every step; tests run both ways on many traces and compare the verdicts.
    incremental: ClassVar[bool] = True
    behaviours: ClassVar[tuple[str, ...]] = ()
    needs: ClassVar[frozenset[Feature]] = frozenset()
    # Whether ``after_step`` judges only the copies acknowledged in the step (``Ctx.acks``) and
    # does nothing in a step with none: the cache driver then calls it only after a step that
    # acknowledged one, unless ``incremental`` is off (tests play both ways and compare).
    after_acks_only: ClassVar[bool] = False
    # Which of ``behaviours`` a play judged (``judged``; spec chapter faults, "Verdicts of a
    # rule"). A rule listed under a hook is judged only where the driver called that hook on the
    # oracle; a rule in ``conditional`` only where the oracle marked it at the check that ran
    # (``mark``: a check made only when a copy failed, say); every other rule of ``behaviours``
    # whenever the oracle took part in the play. Set once per play, never per step.
    hook_rules: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    conditional: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def applies(cls, engine: CacheEngine) -> bool:
        return cls.needs <= engine.features

    def mark(self, *rules: str) -> None:
        """The check of ``rules`` (of ``conditional``) ran: call it where the condition held,
        at most once per play where it can (a check of a set is enough)."""
        marked = self.__dict__.get("_marked")
        if marked is None:
            marked = self.__dict__["_marked"] = set()
        marked.update(rules)

    def judged(self, hooks: Collection[str] | None = None) -> set[str]:
        """The rules this oracle judged in a play, given the hooks the driver called on it
        (None: a driver that calls no hooks, only the oracle's own methods)."""
        skip = set(self.conditional)
        for hook, rules in self.hook_rules.items():
            if hooks is None or hook not in hooks:
                skip.update(rules)
        out = {b for b in self.behaviours if b not in skip}
        out.update(self.__dict__.get("_marked", ()))
        return out

    def fail(self, behaviour: str | Sequence[str], message: str) -> Violation:
        ids = (behaviour,) if isinstance(behaviour, str) else tuple(behaviour)
        assert all(b in self.behaviours for b in ids), (self.name, ids)
        return Violation(self.name, ids, message)

    # Hooks; each may raise a Violation. Snapshots are given only to white-box engines.
    def on_alloc(self, ctx: Ctx, pages: list[int]) -> None: ...
    def on_forward(self, ctx: Ctx, pages: Sequence[int]) -> None:
        """The runtime just wrote KV into these device pages (before the engine hears of it)."""
    def on_match(self, ctx: Ctx, ns: int, tokens: Sequence[int], m: Match) -> None: ...
    def on_insert(
        self, ctx: Ctx, ns: int, tokens: Sequence[int], pages: Sequence[int], r: Inserted
    ) -> None: ...
    def on_evict(
        self,
        ctx: Ctx,
        tier: Tier,
        asked: int,
        freed: int,
        before: CacheSnapshot | None,
        after: CacheSnapshot | None,
    ) -> None: ...
    def on_unchanged_call(
        self,
        ctx: Ctx,
        call: str,
        detail: Any,
        before: CacheSnapshot | None,
        after: CacheSnapshot | None,
    ) -> None:
        """A call that the spec says changes nothing: a rejection or a declined transfer."""
    def on_unload(self, ctx: Ctx, ns: int) -> None: ...
    def on_reset(self, ctx: Ctx, cleared: bool, before: CacheSnapshot | None,
                 after: CacheSnapshot | None) -> None:
        """A reset returned ``cleared`` (EVICT-8, EVICT-9); the snapshots around the call."""
    def after_step(self, ctx: Ctx) -> None: ...
