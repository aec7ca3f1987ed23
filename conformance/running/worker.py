"""A worker process: the engine lives here, never in the process that holds the run.

``python -m kvconf.conformance.running.worker FD RECORDER`` reads commands (length-prefixed pickles)
on its standard input, records the play in progress in the file RECORDER
(``kvconf.conformance.running.flight``), and answers on file descriptor FD, one typed line each
(``H``, a heartbeat, and):

- ``P<json>``: the engine opened: its features, version, and the levels it cannot run.
- ``R<json>``: a command's result (a unit's ``CaseResult`` and its trace; a shrunk trace).
- ``C<json>``: the engine raised SystemExit: the code and traceback (the worker then exits).
- ``M<json>``: the worker ran out of memory under its limit (``KVCONF_WORKER_MEMORY``,
  ``kvconf.conformance.running.bounds``) outside an engine call: the limit and the traceback
  (the worker then exits; FAULT-5).
- ``X<json>``: a fault of the kit or of the input (the run stops with it).
- ``I``: interrupted (SIGTERM from the parent); the worker exits.
- ``K``: the unit the parent cancelled (SIGUSR2, ``progress.cancel``) was dropped; the worker
  takes the next command.
- ``G<json>``: a progress note of the running fuzz unit (``kvconf.conformance.running.progress``),
  for the parent's display; like every line, a sign of life, and sent from the loop that plays the
  engine, so a hung engine sends none.

Its standard output and error are the engine's (a file the parent reads after a crash), with
``faulthandler`` on, so a native crash or a SIGUSR1 from the parent writes every thread's Python
stack there. The worker runs whole units in-process (driver, oracles and engine together).
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import traceback
from dataclasses import dataclass
from importlib import import_module

from kvconf.conformance.errors import EngineUnavailable, KitError
from kvconf.conformance.reporting.source_paths import relative_paths
from kvconf.conformance.running import bounds, flight, judged, progress, shrink
from kvconf.conformance.running.wire import read_command


def answer(kind: bytes, doc: dict | None = None) -> None:
    flight.send(kind + (json.dumps(doc, separators=(",", ":")).encode() if doc is not None
                        else b""))


def build_memory(spec):
    """The runtime's KV memory a worker builds from a picklable spec (None: the shadow dict)."""
    from kvconf.conformance.runtime.memory import shadow_memory

    if spec is None:
        return shadow_memory
    target, kwargs = spec
    module, _, attr = target.partition(":")
    return getattr(import_module(module), attr)(**kwargs)


@dataclass
class State:
    spec: object  # conformance.pool.WorkerSpec
    opened: object | None = None  # conformance.runner.Opened, once probed
    cases: dict | None = None


def _open(state: State, probe: bool) -> None:
    from kvconf.conformance.running.examples_db import open_database
    from kvconf.conformance.running.runner import all_cases, open_engine

    spec = state.spec
    if not probe:
        return
    opened = open_engine(spec.engine, spec.config, seed_value=spec.seed, profile=spec.profile,
                         budget=spec.budget, memory=build_memory(spec.memory_spec),
                         memory_only=spec.memory_only, database=open_database(spec.database))
    opened.ctx.deferred = {}
    opened.ctx.first_only = spec.first_only
    state.opened = opened
    state.cases = {c.name: c for c in all_cases()}
    answer(b"P", {"features": sorted(f.value for f in opened.ctx.features),
                  "version": opened.version,
                  "unavailable": {f.value: m.wire() for f, m in opened.unavailable.items()}})


def _unit(state: State, case: str, unit) -> None:
    from kvconf.conformance.running.runner import run_unit

    ctx = state.opened.ctx
    ctx.deferred = {}
    result = run_unit(ctx, state.cases[case], unit)
    # After a MemoryError under the limit the engine's leak stays in its module state: the
    # worker retires (``retire``) and a fresh process takes the next unit.
    answer(b"R", {"result": result.model_dump(mode="json"), "trace": ctx.deferred.get(case),
                  "traces": {k: v for k, v in ctx.deferred.items() if k != case},
                  "retire": bounds.hit})


def _player(engine: str, trace, memory_spec=None, memory_only: bool = False):
    """How to play ``trace`` on ``engine`` with every oracle: (trace, determinism) -> log."""
    from kvconf.conformance.adapters import engine_factory, sched_engine_factory
    from kvconf.conformance.oracles import MEMORY_ORACLES, STEP_ORACLES
    from kvconf.conformance.running.runner import play
    from kvconf.conformance.scheduler.generator import play_sched
    from kvconf.conformance.trace import Trace

    if getattr(trace, "level", None) == "hybrid":
        from kvconf.conformance.adapters import hybrid_engine_factory
        from kvconf.conformance.hybrid.driver import play_hybrid
        from kvconf.conformance.hybrid.memory import store_of

        hybrid = hybrid_engine_factory(engine)
        if hybrid is None:
            raise KitError(f"a hybrid-level trace, and engine {engine} offers no hybrid level")
        store = store_of(build_memory(memory_spec))
        return lambda t, det=True: play_hybrid(hybrid, t, determinism=det, store=store)
    memory = build_memory(memory_spec)
    if isinstance(trace, Trace):
        factory = engine_factory(engine)
        oracles = MEMORY_ORACLES if memory_only else STEP_ORACLES
        return lambda t, det=True: play(factory, t, determinism=det, memory=memory,
                                        oracles=oracles)
    factory = sched_engine_factory(engine)
    if factory is None:
        raise KitError(f"a scheduler-level trace, and engine {engine} speaks only the "
                       "cache level")
    return lambda t, det=True: play_sched(factory, t, determinism=det, memory=memory,
                                          memory_only=memory_only).log


def _missing_switches(engine: str, trace) -> list[str]:
    """The configuration switches a scheduler-level trace demands that the engine does not
    declare (its config's mamba, l3_store, sliding_window, ...; ``missing_switches``)."""
    from kvconf.conformance.adapters import sched_engine_factory
    from kvconf.conformance.scheduler.generator import missing_switches
    from kvconf.conformance.trace import Trace

    if isinstance(trace, Trace) or getattr(trace, "level", None) == "hybrid":
        return []
    factory = sched_engine_factory(engine)
    if factory is None:
        return []  # _player says why
    return missing_switches(factory(trace.config).features, trace)


def _contract(engine: str, trace) -> None:
    """The engine of the trace's level, built with its config, held to the adapter contract
    (every problem a line, as at the start of a run)."""
    from kvconf.conformance.adapters import levels
    from kvconf.conformance.engine.contract import require
    from kvconf.conformance.engine.features import Feature
    from kvconf.conformance.trace import Trace

    offered = levels(engine)
    level = ("hybrid" if getattr(trace, "level", None) == "hybrid"
             else "cache" if isinstance(trace, Trace) else "scheduler")
    make = getattr(offered, level)
    if make is not None:  # a level it lacks: ``_player`` says so
        require(engine, make(trace.config), Feature(level), trace.config)


def replay_doc(engine: str, trace, determinism: bool = True, memory_spec=None,
               memory_only: bool = False) -> dict:
    """Play one trace in this process: PASS with its steps, or FAIL with the broken rule
    (what ``kvconf replay`` prints, from a worker or, with --in-process, from itself)."""
    from kvconf.conformance.oracles import Violation

    _contract(engine, trace)
    missing = _missing_switches(engine, trace)
    if missing:
        return {"status": "NOT_SUPPORTED",
                "message": f"the trace plays {', '.join(missing)}, which engine {engine} does not "
                           "declare (a case that needs it is NOT_SUPPORTED there, never run)"}
    try:
        log = _player(engine, trace, memory_spec, memory_only)(trace, determinism)
    except Violation as v:
        from kvconf.conformance.reporting.legal_if import with_hint

        return {"status": "FAIL", "oracle": v.oracle, "behaviours": list(v.behaviours),
                "message": with_hint(v.message, v.behaviours, _declared(engine, trace)),
                "step": v.step}
    return {"status": "PASS", "steps": len(log)}


def _declared(engine: str, trace) -> frozenset:
    """The features ``engine`` declares at ``trace``'s level and config (for a failure's
    allowance hint); none when it will not say."""
    from kvconf.conformance.adapters import levels
    from kvconf.conformance.trace import Trace

    try:
        lv = levels(engine)
        factory = (lv.cache if isinstance(trace, Trace)
                   else lv.hybrid if getattr(trace, "level", None) == "hybrid" else lv.scheduler)
        return frozenset(str(f) for f in factory(trace.config).features)
    except Exception:  # the hint is a help, never a reason for replay to fail
        return frozenset()


def _shrink(state: State, text: str, want, max_replays: int, timeout: float) -> None:
    from kvconf.conformance.running.cases import trace_text
    from kvconf.conformance.running.crash import shrink_crash
    from kvconf.conformance.trace import parse_any_trace

    spec = state.spec
    trace = parse_any_trace(text)
    replay = _player(spec.engine, trace, spec.memory_spec, spec.memory_only)
    best, tried = shrink_crash(trace, want, replay, max_replays=max_replays, timeout=timeout,
                               beat=flight.beat)
    steps = len(best.steps) if hasattr(best, "steps") else len(best.arrivals)
    answer(b"R", {"trace": trace_text(best), "steps": steps, "tried": tried})


def _replay(state: State, text: str, determinism: bool) -> None:
    from kvconf.conformance.trace import parse_any_trace

    spec = state.spec
    try:
        answer(b"R", replay_doc(spec.engine, parse_any_trace(text), determinism,
                                spec.memory_spec, spec.memory_only))
    except EngineUnavailable as e:
        raise KitError(f"engine {spec.engine} is not available: {e}") from None


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _cancel(signum, frame) -> None:
    progress.cancel()  # the unit stops at its next tick (a safe point), not here


PARENT_ENV = "KVCONF_WORKER_PARENT"  # the pid of the kvconf process that started this worker


def die_with_parent() -> None:
    """No worker outlives its run: on Linux the kernel kills this process when the kvconf
    process that started it ends, however it ends (SIGKILL from a CI runner included), where
    otherwise a worker busy with a long fuzz unit would run on until the unit ended. A parent
    already gone before this call ends the worker too. Elsewhere it does nothing."""
    import ctypes
    import os

    parent = os.environ.get(PARENT_ENV)
    if not sys.platform.startswith("linux") or not parent:
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if str(os.getppid()) != parent:
        os._exit(0)


def _out_of_memory(state: State | None) -> None:
    """The worker ran out of memory under its limit outside an engine call that could say so
    (in the kit's own code, or an engine's module-level work): an ``M`` line for the parent's
    CRASH of FAULT-5, then the worker ends. The engine is dropped first, so the traceback has
    room to be written."""
    if state is not None:
        state.opened = None
    try:
        tb = relative_paths(traceback.format_exc())
    except MemoryError:
        tb = None
    answer(b"M", {"limit": bounds.limit, "traceback": tb})


def main(argv: list[str]) -> int:
    bounds.apply_memory_limit(int(os.environ.get(bounds.ENV, "0") or 0))
    judged.watched = True  # the parent holds each call to its deadline and the process's end
    die_with_parent()
    flight.attach(int(argv[1]), argv[2])
    progress.set_sink(lambda doc: answer(b"G", doc))
    faulthandler.enable(file=sys.stderr, all_threads=True)
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGUSR2, _cancel)
    commands = sys.stdin.buffer
    state: State | None = None
    while True:
        try:
            cmd = read_command(commands)
        except KeyboardInterrupt:
            answer(b"I")
            return 0
        if cmd is None:
            return 0
        kind, *args = cmd
        try:
            if kind == "open":
                state = State(args[0])
                _open(state, probe=args[1])
            elif kind == "unit":
                progress.cancel(wanted=True)
                try:
                    _unit(state, *args)
                except progress.Cancelled:
                    answer(b"K")
            elif kind == "shrink":
                _shrink(state, *args)
            elif kind == "replay":
                _replay(state, *args)
            else:
                raise KitError(f"worker: unknown command {kind!r}")
        except KitError as e:
            answer(b"X", {"message": str(e)})
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            answer(b"C", {"code": code, "traceback": relative_paths(traceback.format_exc())})
            return 0
        except KeyboardInterrupt:
            answer(b"I")
            return 0
        except MemoryError:
            _out_of_memory(state)
            return 0
        except Exception as e:
            from kvconf.conformance.running.signals import interrupt_inside

            if not interrupt_inside(e):  # a fault of the kit: the parent reports the death
                raise
            answer(b"I")
            return 0
        if shrink.interrupted():  # a finding was kept; the run is being stopped
            answer(b"I")
            return 0
        sys.stdout.flush()
        sys.stderr.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
