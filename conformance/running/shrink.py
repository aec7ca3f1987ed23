"""Trace shrinking with a time budget: the smallest trace that still breaks the same rule.

Hypothesis finds failing traces quickly but can spend minutes shrinking a stateful run, and it
gives no knob for that. So the generators run without Hypothesis's shrink phase and a failure is
reduced here instead, on the trace itself, within a budget of seconds: whole steps are removed
(chunks first, then one at a time, delta-debugging style), then token lists are cut by whole pages.
A candidate counts only when it fails with the same finding signature as the original (oracle,
rules, kind of step, the engine's error: ``kvconf.conformance.running.findings``); the
best trace found so far is kept when the budget runs out, so a deadline never loses the finding.
The budget is a number of replays, so the same failure always shrinks to the same trace; a cap in
seconds is only a safety net for very slow engines.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pydantic import ValidationError

from kvconf.conformance.errors import KitError
from kvconf.conformance.oracles import Violation
from kvconf.conformance.running.findings import signature
from kvconf.conformance.trace import Trace

_interrupted = False  # an interrupt arrived while shrinking: the caller stops after this case


def interrupted() -> bool:
    """True once an interrupt cut a shrink short (the finding was kept); the run must stop."""
    return _interrupted


def reset_interrupted() -> None:
    """A new run starts with no interrupt pending."""
    global _interrupted
    _interrupted = False


def _without(trace: Trace, drop: set[int]) -> Trace | None:
    """``trace`` minus the steps in ``drop`` and every step that refers to a dropped one."""
    keep: list[int] = []
    index: dict[int, int] = {}
    for i, s in enumerate(trace.steps):
        ref = getattr(s, "step", None)
        if i in drop or (ref is not None and ref not in index):
            continue
        index[i] = len(keep)
        keep.append(i)
    if len(keep) == len(trace.steps):
        return None
    steps = []
    for i in keep:
        s = trace.steps[i]
        ref = getattr(s, "step", None)
        steps.append(s if ref is None else s.model_copy(update={"step": index[ref]}))
    return _valid(trace, steps)


def _valid(trace: Trace, steps: list) -> Trace | None:
    data = trace.model_dump(mode="json", exclude={"steps"})
    data["steps"] = [s.model_dump(mode="json") for s in steps]
    try:
        return Trace.model_validate(data)
    except ValidationError:
        return None


def _shorter_tokens(trace: Trace, i: int) -> Trace | None:
    """Step ``i`` with its last page of tokens (or its partial tail) cut, if it has tokens."""
    s = trace.steps[i]
    tokens = getattr(s, "tokens", None)
    if not tokens:
        return None
    p = trace.config.page_size
    cut = len(tokens) % p or p
    steps = list(trace.steps)
    steps[i] = s.model_copy(update={"tokens": tokens[: len(tokens) - cut]})
    return _valid(trace, steps)


class Attempts:
    """Replays candidates within a budget and keeps the smallest that breaks the same rule."""

    def __init__(self, trace, violation: Violation, replay: Callable, max_replays: int,
                 max_seconds: float) -> None:
        self.want = signature(violation, trace)
        self.best, self.best_v = trace, violation
        self.replay = replay
        self.left = max_replays
        self.deadline = time.monotonic() + max_seconds

    def spent(self) -> bool:
        return self.left <= 0 or time.monotonic() >= self.deadline

    def fails(self, candidate) -> bool:
        """True (and ``candidate`` becomes the best) when it still breaks the same rule."""
        if candidate is None or self.spent():
            return False
        self.left -= 1
        try:
            self.replay(candidate)
        except KeyboardInterrupt:
            # Interrupted (Ctrl-C, SIGTERM): the best trace so far is the finding; keep it.
            global _interrupted
            _interrupted = True
            self.left = 0
            return False
        except Violation as v:
            if signature(v, candidate) == self.want:
                self.best, self.best_v = candidate, v
                return True
        except KitError:
            pass  # the cut left a step that no longer makes sense (an ack of nothing)
        return False


def shrink(
    trace: Trace,
    violation: Violation,
    replay: Callable[[Trace], None],
    max_replays: int = 1000,
    max_seconds: float = 120.0,
) -> tuple[Trace, Violation]:
    """Reduce ``trace`` while ``replay`` keeps raising a Violation with the same signature."""
    a = Attempts(trace, violation, replay, max_replays, max_seconds)
    fails, out_of_budget = a.fails, a.spent

    chunk = max(1, len(a.best.steps) // 2)
    while chunk >= 1 and not out_of_budget():
        start, progress = 0, False
        while start < len(a.best.steps) and not out_of_budget():
            drop = set(range(start, min(start + chunk, len(a.best.steps))))
            if fails(_without(a.best, drop)):
                progress = True  # the same start now names the steps that followed
            else:
                start += chunk
        if not progress:
            chunk //= 2
    changed = True
    while changed and not out_of_budget():
        changed = False
        for i in range(len(a.best.steps)):
            if out_of_budget():
                break
            while fails(_shorter_tokens(a.best, i)):
                changed = True
    return a.best, a.best_v
