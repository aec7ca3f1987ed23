"""A saved trace as a page people read: its config summarised, its steps as a table.

A failing case's trace is JSON (``kvconf-trace/1``); the results section of the documentation
site shows it as a page instead of opening the raw file: a cache-level trace's steps (number,
operation, arguments, what the trace expects) with the step the run failed at marked, a
scheduler-level trace's workload in plan order (arrivals, aborts, how each writeback and L3
transfer is acknowledged). Beside them, what the reference does with the same trace (its answer
to each cache-level step, its plans for a workload): the behaviour the engine was held to. Where
the engine that ran is installed where the site is built, at the version that ran, the page
shows its answer beside the reference's at every step (its plans beside the reference's, for a
workload), as ``kvconf replay --explain`` prints it (``kvconf.conformance.reporting.explain``).
The JSON itself stays beside the page, to download and replay.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kvconf.conformance.errors import KitError
from kvconf.conformance.reporting.step_words import (
    answer,
    describe_args,
    describe_expect,
    plans_in_words,
    tokens,
)


@dataclass(slots=True)
class Row:
    """One row of a trace's step table."""

    step: str
    op: str
    args: str
    outcome: str
    failed: bool = False


_LOGS: dict[str, tuple[list | None, str]] = {}  # one play per distinct trace in a build


def reference_log(trace: dict) -> tuple[list | None, str]:
    """The reference's log of the trace, or None and why not. Played for its plans alone: the
    memory checks only, no probes, no second run (the plans are the same; the oracles' work
    is most of a play's time)."""
    text = json.dumps(trace, sort_keys=True)
    if text not in _LOGS:
        _LOGS[text] = _play_reference(text)
    return _LOGS[text]


def _play_reference(text: str) -> tuple[list | None, str]:
    from kvconf.conformance.adapters import engine_factory, sched_engine_factory
    from kvconf.conformance.running.runner import play
    from kvconf.conformance.scheduler.generator import play_sched
    from kvconf.conformance.trace import Trace, parse_any_trace

    try:
        t = parse_any_trace(text)
        if isinstance(t, Trace):
            return play(engine_factory("reference"), t, determinism=False, oracles=()), ""
        return play_sched(sched_engine_factory("reference"), t, determinism=False,
                          memory_only=True, probes="none").log, ""
    except Exception as e:  # any failure: the page says so and the build goes on
        return None, f"the reference does not play it either: {type(e).__name__}: {e}"


def cache_rows(trace: dict, failed_step: int | None, log: list | None = None) -> list[Row]:
    """One row per step: its index (the number a report's ``step`` and an unlock's ``step``
    name), the operation, its arguments, what the trace expects of it and what the reference
    answers."""
    rows = []
    for i, s in enumerate(trace.get("steps", [])):
        outcome = describe_expect(s.get("expect"))
        if log is not None and i < len(log):
            ref = answer(log[i])
            outcome = "; ".join(x for x in (outcome, f"reference: {ref}" if ref else "") if x)
        rows.append(Row(str(i), str(s.get("op", "?")), describe_args(s), outcome,
                        i == failed_step))
    return rows


MAX_PLANS = 60


def plan_rows(log: list) -> list[Row]:
    """The reference's plans for a workload, up to the kit's at-rest check."""
    return [Row(str(step), work, moved, "") for step, work, moved in plans_in_words(log)]


def scheduler_rows(trace: dict) -> list[Row]:
    """The workload in plan order: each arrival before its plan, each abort after its plan."""
    events: list[tuple[int, int, Row]] = []
    for a in trace.get("arrivals", []):
        args = (f"request `{a['rid']}`, namespace {a.get('ns', 0)}, prompt "
                f"{tokens(a['tokens'])}, generates {a.get('new_tokens', 1)}")
        events.append((a["at"], 0, Row(f"before plan {a['at']}", "submit", args, "")))
    for a in trace.get("aborts", []):
        when = (" (once a writeback of it is in flight)" if a.get("in_flight") else "")
        events.append((a["at"], 1, Row(f"after plan {a['at']}", "abort",
                                       f"request `{a['rid']}`{when}", "")))
    return [r for _at, _k, r in sorted(events, key=lambda e: (e[0], e[1]))]


def config_line(config: dict) -> str:
    return ", ".join(f"{k.replace('_', ' ')} {json.dumps(v)}" for k, v in config.items())


def _table(rows: list[Row], step_head: str, outcome: bool = True) -> list[str]:
    if not outcome:
        out = [f"| {step_head} | operation | arguments |", "| --- | --- | --- |"]
        return out + [f"| {r.step} | {r.op} | {r.args} |" for r in rows]
    out = [f"| {step_head} | operation | arguments | outcome |", "| --- | --- | --- | --- |"]
    for r in rows:
        mark = "**" if r.failed else ""
        outcome_ = r.outcome
        if r.failed:
            outcome_ = (outcome_ + "; " if outcome_ else "") + "**the run failed here**"
        out.append(f"| {mark}{r.step}{mark} | {mark}{r.op}{mark} | {r.args} | {outcome_} |")
    return out


def engine_side(trace: dict, engine: str | None, version: str | None,
                failed_step: int | None):
    """The engine's answers beside the reference's at every step of a cache-level trace (plan
    by plan at the scheduler level; ``kvconf.conformance.reporting.explain``, what ``kvconf
    replay --explain`` prints), when ``engine`` is installed here at the ``version`` that ran;
    else None (the page then shows the reference's answers alone)."""
    if not engine or engine == "reference" or trace.get("level") not in ("cache", "scheduler"):
        return None
    from kvconf.conformance.adapters import engine_factory, sched_engine_factory
    from kvconf.conformance.reporting.explain import explain, explain_plans
    from kvconf.conformance.trace import Trace, parse_any_trace

    try:
        t = parse_any_trace(json.dumps(trace))
        cache = isinstance(t, Trace)
        factory = engine_factory(engine) if cache else sched_engine_factory(engine)
        if factory is None or factory(t.config).version != version:
            return None  # another build of the engine would answer for one that did not run
        if cache:
            return explain(t, factory, engine_factory("reference"), failed_step)
        return explain_plans(t, factory, sched_engine_factory("reference"), failed_step)
    except Exception:  # not installed, or will not start here: the reference's answers alone
        return None


def _side_table(ex, engine: str) -> list[str]:
    from kvconf.conformance.reporting.explain import cells, head, summary

    names = head(ex, engine)
    out = [*summary(ex, f"`{engine}`"), "", "| " + " | ".join(names) + " |",
           "|" + " --- |" * len(names)]
    for r, row in zip(ex.rows, cells(ex), strict=True):
        mark = "**" if r.step == ex.failed_step or r.step == ex.first_difference else ""
        row = [c.replace("|", "\\|") for c in row]
        row[0], row[-1] = f"{mark}{row[0]}{mark}", f"{mark}{row[-1]}{mark}" if row[-1] else ""
        out.append("| " + " | ".join(row) + " |")
    return out


def render(trace: dict, *, failed_step: int | None, source: str, engine: str | None = None,
           version: str | None = None) -> list[str]:
    """The trace's body as Markdown lines (config, then steps); ``source`` names the file in
    messages; ``engine`` and ``version``, the run's, set its answers beside the reference's
    where it is installed here (``engine_side``)."""
    level = trace.get("level")
    if trace.get("format") != "kvconf-trace/1" or level not in ("cache", "scheduler"):
        raise KitError(f"{source}: not a kvconf-trace/1 trace (format {trace.get('format')!r},"
                       f" level {level!r})")
    cfg = trace.get("config", {})
    lines = [f"**Level**: {level}. **Config**: {config_line(cfg) or 'the defaults'}."]
    if trace.get("behaviours"):
        lines[0] += f" **Written for**: {', '.join(trace['behaviours'])}."
    lines.append("")
    side = engine_side(trace, engine, version, failed_step)
    if side is not None and level == "cache":
        lines += [f"{len(side.rows)} steps (clock: {trace.get('clock', 'per_step')}; an "
                  "`unlock`, `writeback` or `ack` names the step it refers to by its number), "
                  f"replayed here with `{engine}` {version}.", ""]
        return lines + _side_table(side, engine)
    log, why = reference_log(trace)
    if level == "cache":
        rows = cache_rows(trace, failed_step, log)
        lines += [f"{len(rows)} steps (clock: {trace.get('clock', 'per_step')}; an `unlock`, "
                  "`writeback` or `ack` names the step it refers to by its number).", ""]
        lines += _table(rows, "step")
        if why:
            lines += ["", why]
        return lines
    rows = scheduler_rows(trace)
    lines += [f"The workload the driver plays through the engine's plan / event loop "
              f"(sampling seed {trace.get('seed', 0)}, at most {trace.get('max_plans', 400)} "
              "plans); the engine decides every plan."
              + (f" The run failed at plan {failed_step}." if failed_step is not None else ""),
              ""]
    lines += _table(rows, "when", outcome=False)
    acks = trace.get("acks") or []
    lines += ["", "Writebacks are acknowledged, in order and then cycled: "
              + (", ".join(f"#{i + 1} {a}" for i, a in enumerate(acks)) if acks
                 else "all at once, each a success") + "."]
    if trace.get("l3_preload"):
        lines += ["", "The L3 store holds before the run: "
                  + "; ".join(f"namespace {p.get('ns', 0)} {tokens(p['tokens'])}"
                              for p in trace["l3_preload"]) + "."]
    if trace.get("l3_acks"):
        lines += ["", "L3 transfers end, in order and then cycled: "
                  + ", ".join(f"#{i + 1} {a}" for i, a in enumerate(trace["l3_acks"])) + "."]
    if side is not None:
        return lines + ["", "## The engine's plans beside the reference's", "",
                        *_side_table(side, engine)]
    lines += ["", "## What the reference plans for it", ""]
    if log is None:
        return lines + [why]
    plans = plan_rows(log)
    lines += [f"The reference's plans for this workload, {len(plans)} until every request is "
              "done (then the kit's own request checks the engine at rest): each row's "
              "request, kind and token positions, and the copies the plan asks for. The "
              "engine's plans differ where the failure above says.", "",
              "| plan | rows | copies |", "| --- | --- | --- |"]
    lines += [f"| {r.step} | {r.op} | {r.args} |" for r in plans[:MAX_PLANS]]
    if len(plans) > MAX_PLANS:
        lines.append(f"| … | {len(plans) - MAX_PLANS} more plans | |")
    return lines
