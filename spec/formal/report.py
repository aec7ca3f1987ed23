"""All obligations at one scope, as the report ``kvconf prove`` writes.

A failed induction is followed by bounded model checking from the initial state: when a real
path to the violation exists within the depth and uses only cache actions, it is saved as a kit
trace (``traces/prove-<obligation>.json`` next to the report) for ``kvconf replay``.

The ``agreement`` obligation replays seeded random reference traces in the model step by step
(``spec/formal/agreement.py``); its first disagreement is saved as ``traces/prove-agreement.json``.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from kvconf.spec.formal.actions import Model
from kvconf.spec.formal.agreement import agree
from kvconf.spec.formal.invariants import INVARIANTS
from kvconf.spec.formal.prove import (
    COUNTEREXAMPLE,
    PROVED,
    UNKNOWN,
    Result,
    bmc,
    induction,
    reachable,
)
from kvconf.spec.formal.scope import Scope
from kvconf.spec.formal.to_trace import NotATrace, to_trace

REACH_BEHAVIOURS = ("REQ-1",)
AGREE_BEHAVIOURS = ("PIN-1", "PIN-2", "TREE-4", "TREE-5", "HOST-2", "HOST-4")
AGREE_TRACES = 100


def prove_all(scope: Scope, *, depth: int = 10, timeout_ms: int = 60000,
              out_dir: Path | None = None, model: Model | None = None,
              agree_traces: int = AGREE_TRACES) -> dict:
    model = model or Model(scope)
    t0 = time.perf_counter()
    res = induction(model, timeout_ms)
    results = [res[inv.name] for inv in INVARIANTS]
    for r, inv in zip(results, INVARIANTS, strict=True):
        if r.status == COUNTEREXAMPLE:
            _counterexample(model, inv, r, depth, timeout_ms, out_dir)
    results.append(_reach(model, depth, timeout_ms))
    results.append(_agreement(model, agree_traces, out_dir))
    doc = {
        "format": "kvconf-prove/1",
        "scope": {**{f.name: getattr(scope, f.name) for f in dataclasses.fields(scope)
                     if f.init}, "positions": scope.n, "text": scope.describe()},
        "actions": len(model.actions()),
        "obligations": [dataclasses.asdict(r) for r in results],
        "seconds": round(time.perf_counter() - t0, 3),
    }
    doc["ok"] = all(r.status == PROVED for r in results)
    return doc


def _counterexample(model: Model, inv, r: Result, depth: int, timeout_ms: int,
                    out_dir: Path | None) -> None:
    from kvconf.conformance.trace import dump_trace, write_atomic

    run = bmc(model, depth, inv, cache_only=True, faithful=True, timeout_ms=timeout_ms)
    if run is None:
        run = bmc(model, depth, inv, timeout_ms=timeout_ms)
    if run is None:
        r.detail += f"; no path from the initial state within {depth} actions"
        return
    r.detail += f"; reachable in {len(run.actions)} actions"
    r.cti = run.render(model.scope) + ["", "counterexample to induction:", *r.cti]
    try:
        trace = to_trace(model.scope, run.actions, run.states[-1], name=f"prove-{inv.name}",
                         behaviours=inv.behaviours)
    except NotATrace as e:
        r.detail += f"; no kit trace ({e})"
        return
    if out_dir is not None:
        path = Path(out_dir) / "traces" / f"prove-{inv.name}.json"
        write_atomic(path, dump_trace(trace))
        r.trace = str(path)


def _reach(model: Model, depth: int, timeout_ms: int) -> Result:
    t0 = time.perf_counter()
    reached, missed = reachable(model, depth, timeout_ms=timeout_ms)
    secs = round(time.perf_counter() - t0, 3)
    if not missed:
        return Result("non-vacuity-reachability", REACH_BEHAVIOURS, PROVED, secs,
                      f"all {len(reached)} request states and actions reached within {depth}")
    return Result("non-vacuity-reachability", REACH_BEHAVIOURS, UNKNOWN, secs,
                  f"not reached within {depth} actions: {', '.join(sorted(missed))}")


def _agreement(model: Model, traces: int, out_dir: Path | None) -> Result:
    """Every step of ``traces`` seeded random reference traces is a step of the model."""
    from kvconf.conformance.trace import dump_trace, write_atomic

    o = agree(model.scope, traces, model=model)
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(o.counts.items()))
    if o.disagreement is None:
        return Result("agreement", AGREE_BEHAVIOURS, PROVED, o.seconds,
                      f"{o.traces} random reference traces, {o.steps} steps, each a step of the "
                      f"model ({kinds})")
    d = o.disagreement
    r = Result("agreement", AGREE_BEHAVIOURS, COUNTEREXAMPLE, o.seconds, d.describe())
    if out_dir is not None:
        path = Path(out_dir) / "traces" / "prove-agreement.json"
        write_atomic(path, dump_trace(d.trace))
        r.trace = str(path)
    return r
