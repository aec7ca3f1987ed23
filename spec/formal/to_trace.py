"""A model path turned into a cache-level kit trace (``conformance/trace.py``), replayable with
``kvconf replay``.

Every model action maps to one step: insert -> ``insert``; lock -> ``match`` with ``lock`` on the
tier; unlock -> ``unlock`` of that match; evict -> ``evict`` of one page; writeback / loadback ->
the step of that name on the lock, acknowledged ``later``; ack -> ``ack``. After the path, a
``match`` of every prefix the last state caches on either tier lets the content oracle look at
what is served there. The scope fixes the argument domains (tokens ``1..tokens``, namespaces
``0..namespaces-1``, page size 1, the scope's pools), so no out-of-range value comes out.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.trace import (
    AckStep,
    EvictStep,
    InsertStep,
    LoadbackStep,
    MatchStep,
    Trace,
    UnlockStep,
    WritebackStep,
)
from kvconf.reference.tiers import Tier
from kvconf.spec.formal.actions import Action
from kvconf.spec.formal.scope import Scope


def tier(dev: bool) -> Tier:
    return Tier.DEVICE if dev else Tier.HOST


class NotATrace(ValueError):
    """The path uses an action a cache-level trace cannot express (a request event)."""


def to_trace(scope: Scope, actions: Sequence[Action], last: dict | None = None, *,
             name: str = "", behaviours: Sequence[str] = ()) -> Trace:
    steps: list = []
    lock_step: dict[int, int] = {}
    start_step: dict[int, int] = {}
    for a in actions:
        p = a.params
        if a.kind == "insert":
            steps.append(InsertStep(ns=p[0], tokens=list(p[1])))
        elif a.kind == "lock":
            lock_step[p[0]] = len(steps)
            steps.append(MatchStep(ns=scope.ns(p[1]), tokens=list(scope.tokens_of(p[1])),
                                   lock=tier(p[2])))
        elif a.kind == "unlock":
            steps.append(UnlockStep(step=lock_step.pop(p[0])))
        elif a.kind == "evict":
            steps.append(EvictStep(tier=tier(p[1]), pages=1))
        elif a.kind in ("writeback", "loadback"):
            start_step[p[0]] = len(steps)
            cls = WritebackStep if a.kind == "writeback" else LoadbackStep
            steps.append(cls(step=lock_step[p[1]], ack="later"))
        elif a.kind == "ack":
            steps.append(AckStep(step=start_step.pop(p[0]), success=p[1]))
        else:
            raise NotATrace(f"{a.label(scope)}: a request event has no cache-level step")
    if last is not None:
        for x in range(scope.n):
            if last["dev"][x] or last["host"][x]:
                steps.append(MatchStep(ns=scope.ns(x), tokens=list(scope.tokens_of(x))))
    config = EngineConfig(page_size=1, device_pages=scope.device_pages,
                          host_pages=scope.host_pages)
    return Trace(name=name, behaviours=list(behaviours), config=config, steps=steps)
