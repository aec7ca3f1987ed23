"""Trace shrinking with a time budget: the smallest trace that still breaks the same rule.

Hypothesis finds failing traces quickly but can spend minutes shrinking a stateful run, and it
gives no knob for that. So the generators run without Hypothesis's shrink phase and a failure is
reduced here instead, on the trace itself, within a budget of seconds: whole steps are removed
(chunks first, then one at a time, delta-debugging style), then token lists are cut by whole pages.
A candidate counts only when it fails with the same oracle and behaviours as the original; the
best trace found so far is kept when the budget runs out, so a deadline never loses the finding.
The budget is a number of replays, so the same failure always shrinks to the same trace; a cap in
seconds is only a safety net for very slow engines.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pydantic import ValidationError

from conformance.errors import KitError
from conformance.oracles import Violation
from conformance.trace import Trace

Signature = tuple[str, tuple[str, ...]]


def signature(v: Violation) -> Signature:
    return (v.oracle, tuple(sorted(v.behaviours)))


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


def shrink(
    trace: Trace,
    violation: Violation,
    replay: Callable[[Trace], None],
    max_replays: int = 1000,
    max_seconds: float = 120.0,
) -> tuple[Trace, Violation]:
    """Reduce ``trace`` while ``replay`` keeps raising a Violation with the same signature."""
    want = signature(violation)
    deadline = time.monotonic() + max_seconds
    best, best_v = trace, violation
    replays = 0

    def out_of_budget() -> bool:
        return replays >= max_replays or time.monotonic() >= deadline

    def fails(candidate: Trace | None) -> bool:
        nonlocal best, best_v, replays
        if candidate is None or out_of_budget():
            return False
        replays += 1
        try:
            replay(candidate)
        except Violation as v:
            if signature(v) == want:
                best, best_v = candidate, v
                return True
        except KitError:
            pass  # the cut left a step that no longer makes sense (an ack of nothing)
        return False

    chunk = max(1, len(best.steps) // 2)
    while chunk >= 1 and not out_of_budget():
        start, progress = 0, False
        while start < len(best.steps) and not out_of_budget():
            drop = set(range(start, min(start + chunk, len(best.steps))))
            if fails(_without(best, drop)):
                progress = True  # the same start now names the steps that followed
            else:
                start += chunk
        if not progress:
            chunk //= 2
    changed = True
    while changed and not out_of_budget():
        changed = False
        for i in range(len(best.steps)):
            if out_of_budget():
                break
            while fails(_shorter_tokens(best, i)):
                changed = True
    return best, best_v
