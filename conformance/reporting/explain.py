"""An engine's answers beside the reference's, step by step: what ``kvconf replay --explain``
prints and what a trace page of the documentation site shows.

A failure names one step and one rule; to see how the engine got there its author needs every
answer it gave on the way and the answer the spec's reference gives to the same call. Both are
played unjudged (no oracle, no expected result) so that the engine's answers go on past the step
the judged run failed at, as far as the engine goes: a play stops only where the engine raised or
broke the protocol (the driver's own checks), and says so. Two answers differ when they differ in
anything but the engine's own page ids (a page list is compared by its length): the first such
step is where the engine's behaviour left the reference's, which may be well before the step a
rule caught it at. A difference is not a verdict: an engine that declares an allowance answers
otherwise legally (a match that leaves the last token, a page-by-page eviction).

The cache level and the hybrid cache level are played call by call. At the scheduler level the
engine decides every plan itself: its plans are set beside the reference's plan by plan (each
row's request, kind and positions, and the copies asked for; page tables, the engine's own ids,
left out), played with the memory checks alone and no probes, so the engine's column ends where
its run breaks a rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvconf.conformance.violation import Violation


@dataclass(slots=True)
class Play:
    """One engine's unjudged answers to a trace: one per step it got through, and why it
    stopped before the end (empty when it played every step)."""

    answers: list[dict[str, Any]] = field(default_factory=list)
    stopped: str = ""


@dataclass(slots=True)
class Side:
    """One step: its number, operation, arguments and expectation, and the two answers (None
    past the step a play stopped at)."""

    step: int
    op: str
    args: str
    expects: str
    engine: dict[str, Any] | None
    reference: dict[str, Any] | None
    differs: bool


@dataclass(slots=True)
class Explanation:
    level: str
    rows: list[Side]
    first_difference: int | None
    failed_step: int | None
    engine_stopped: str
    reference_stopped: str


def play_unjudged(factory: Callable, trace) -> Play:
    """``trace`` on a fresh engine of ``factory`` with no oracle and no expected result."""
    from kvconf.conformance.hybrid.trace import HybridTrace

    got = Play()
    try:
        if isinstance(trace, HybridTrace):
            from kvconf.conformance.hybrid.driver import HybridDriver

            driver = HybridDriver(factory(trace.config), judge=False)
        else:
            from kvconf.conformance.cache.driver import CacheDriver

            driver = CacheDriver(factory(trace.config), trace.config, (), trace.behaviours,
                                 clock=trace.clock, expect=False)
        got.answers = driver.log  # the driver appends each step's answer as it ends
        for i, step in enumerate(trace.steps):
            driver.step(i, step)
    except Violation as v:
        got.stopped = f"[{v.oracle}] {', '.join(v.behaviours)}: {v.message}"
    except Exception as e:  # the engine would not even start: said, not raised
        got.stopped = f"{type(e).__name__}: {e}"
    return got


def play_plans(factory: Callable, trace) -> Play:
    """A workload's plans on a fresh scheduler engine of ``factory``, in words
    (``plans_in_words``): as far as the run goes with the memory checks alone."""
    from kvconf.conformance.reporting.step_words import plans_in_words
    from kvconf.conformance.runtime.memory import shadow_memory
    from kvconf.conformance.scheduler.generator import _driver

    got = Play()
    driver = None
    try:
        driver = _driver(factory, trace, shadow_memory, True, probes="none")
        driver.run()
    except Violation as v:
        got.stopped = f"[{v.oracle}] {', '.join(v.behaviours)}: {v.message}"
    except Exception as e:  # the engine would not even start: said, not raised
        got.stopped = f"{type(e).__name__}: {e}"
    log = driver.log if driver is not None else []
    got.answers = [{"op": "plan", "step": step, "rows": work, "copies": moved}
                   for step, work, moved in plans_in_words(log)]
    return got


def explain_plans(trace, factory: Callable, reference: Callable,
                  failed_step: int | None = None) -> Explanation:
    """A workload's plans on the engine and on the reference, plan by plan."""
    mine, ref = play_plans(factory, trace), play_plans(reference, trace)
    steps = sorted({a["step"] for a in mine.answers} | {a["step"] for a in ref.answers})
    by_mine = {a["step"]: a for a in mine.answers}
    by_ref = {a["step"]: a for a in ref.answers}
    rows, first = [], None
    for k in steps:
        a, b = by_mine.get(k), by_ref.get(k)
        differs = visible(a) != visible(b)
        if differs and first is None:
            first = k
        rows.append(Side(k, "plan", "", "", a, b, differs))
    return Explanation("scheduler", rows, first, failed_step, mine.stopped, ref.stopped)


def _count(v: Any) -> Any:
    """A page list by its length; a list of page lists (a hybrid table per group) by theirs."""
    if isinstance(v, list) and any(isinstance(x, list) for x in v):
        return tuple(_count(x) for x in v)
    return len(v) if isinstance(v, list) else v


def visible(answer: dict[str, Any] | None) -> Any:
    """What of an answer two engines must agree on: every value but a page list, which is the
    engine's own ids, counted instead."""
    if answer is None:
        return None
    return {k: v if k == "events" else _count(v) for k, v in answer.items()
            if k not in OWN_IDS}


OWN_IDS = frozenset({"state"})  # a hybrid answer's Mamba state slots: the engine's own ids


def explain(trace, factory: Callable, reference: Callable,
            failed_step: int | None = None) -> Explanation:
    """Both plays of a cache- or hybrid-level ``trace`` side by side (module docstring)."""
    from kvconf.conformance.hybrid.trace import HybridTrace
    from kvconf.conformance.reporting.step_words import describe_args, describe_expect

    mine, ref = play_unjudged(factory, trace), play_unjudged(reference, trace)
    rows: list[Side] = []
    first = None
    for i, step in enumerate(trace.steps):
        doc = step.model_dump(mode="json", exclude_none=True)
        a = mine.answers[i] if i < len(mine.answers) else None
        b = ref.answers[i] if i < len(ref.answers) else None
        differs = visible(a) != visible(b)
        if differs and first is None:
            first = i
        rows.append(Side(i, str(doc.get("op", "?")), describe_args(doc),
                         describe_expect(doc.get("expect")), a, b, differs))
    return Explanation("hybrid" if isinstance(trace, HybridTrace) else "cache", rows, first,
                       failed_step, mine.stopped, ref.stopped)


def words(answer: dict[str, Any] | None, level: str = "cache") -> str:
    """An answer in words (``matches 4 tokens on device, 0 on host``), ``-`` for none."""
    if answer is None:
        return "-"
    from kvconf.conformance.reporting.step_words import answer as cache_words

    said = cache_words(answer) if level == "cache" else ""
    if said:
        return said
    if level == "scheduler":
        return answer["rows"] + (f"; copies: {answer['copies']}" if answer["copies"] else "")
    rest = {k: v for k, v in answer.items() if k != "op"}
    return ", ".join(f"{k} {v}" for k, v in rest.items()) or "done"


def marks(row: Side, ex: Explanation) -> str:
    """``first difference`` (``differs`` at any later one) and ``failed here``, where they
    fall."""
    out = []
    if row.step == ex.first_difference:
        out.append("first difference")
    elif row.differs:
        out.append("differs")
    if row.step == ex.failed_step:
        out.append("failed here")
    return ", ".join(out)


def head(ex: Explanation, engine: str) -> tuple[str, ...]:
    """The columns: a step's number, operation, arguments and expectation (a plan's number
    alone at the scheduler level), the two answers, the marks."""
    first = ("plan",) if ex.level == "scheduler" else ("step", "op", "arguments", "expects")
    return (*first, engine, "reference", "")


def cells(ex: Explanation) -> list[tuple[str, ...]]:
    """Each row as text, as ``head`` names the columns (Markdown's backticks left out)."""
    out = []
    for r in ex.rows:
        first = ((str(r.step),) if ex.level == "scheduler"
                 else (str(r.step), r.op, r.args, r.expects))
        row = (*first, words(r.engine, ex.level), words(r.reference, ex.level), marks(r, ex))
        out.append(tuple(c.replace("`", "") for c in row))
    return out


def summary(ex: Explanation, engine: str) -> list[str]:
    """What the table shows, in a line or three: where the answers part, where the run failed,
    and where a play stopped."""
    unit = "plan" if ex.level == "scheduler" else "step"
    how = ("with the memory checks alone" if ex.level == "scheduler" else "unjudged")
    lines = [f"{engine} beside the reference, {unit} by {unit}, each played {how}: "
             + (f"they first differ at {unit} {ex.first_difference}" if ex.first_difference
                is not None else f"they answer alike at every {unit}")
             + (f"; the judged run failed at {unit} {ex.failed_step}" if ex.failed_step
                is not None else "") + "."]
    if ex.engine_stopped:
        lines.append(f"{engine} stopped: {ex.engine_stopped}")
    if ex.reference_stopped:
        lines.append(f"the reference stopped: {ex.reference_stopped}")
    return lines


def plain(ex: Explanation, engine: str) -> list[str]:
    """The explanation as aligned plain text (a pipe, a log)."""
    rows = [head(ex, engine), *cells(ex)]
    width = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    text = ["  ".join(c.ljust(w) for c, w in zip(r, width, strict=True)).rstrip() for r in rows]
    return [*summary(ex, engine), "", *text]


def table(ex: Explanation, engine: str):
    """The explanation as a rich table (a terminal): differing answers in yellow, the failing
    step in red."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(title="\n".join(summary(ex, engine)), title_justify="left")
    for name in head(ex, engine):
        t.add_column(escape(name), overflow="fold")
    for r, row in zip(ex.rows, cells(ex), strict=True):
        style = "red" if r.step == ex.failed_step else "yellow" if r.differs else None
        t.add_row(*(escape(c) for c in row), style=style)
    return t
