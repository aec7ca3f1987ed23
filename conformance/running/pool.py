"""The worker pool: the process that holds the run never runs the engine.

The parent keeps the case list, the deadlines and the report
(``kvconf.conformance.running.runner.Campaign``); ``jobs`` worker processes
(``kvconf.conformance.running.worker``) each import the engine and run whole units. Every line a
worker sends is a sign of life: one that stays silent past the per-call deadline is asked for its
threads' stacks (SIGUSR1, ``faulthandler``), killed, and its unit is TIMEOUT; one that dies (any
exit code, a signal, ``sys.exit`` inside the engine) gives its unit CRASH with how it ended, its
last output and the trace up to the step it died in, which a separate child process then shrinks
(``kvconf.conformance.running.crash``). Either way the worker is replaced and the run goes on (spec
chapter faults, FAULT-3 and "Statuses of a run")."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature, Missing
from kvconf.conformance.errors import KitError
from kvconf.conformance.oracles.process import ProcessOracle, WorkerMemoryOracle
from kvconf.conformance.reporting.report import CaseResult, Status, UnitResult
from kvconf.conformance.reporting.source_paths import relative_paths
from kvconf.conformance.running import bounds
from kvconf.conformance.running.crash import Ending, ending_of
from kvconf.conformance.running.findings import crash_finding, trace_name
from kvconf.conformance.running.flight import read_play
from kvconf.conformance.running.profiles import Budget, Profile
from kvconf.conformance.running.units import EngineUnit, Unit, failed
from kvconf.conformance.running.wire import frame
from kvconf.conformance.trace import write_atomic

GRACE_S = 10.0  # after an interrupt, how long workers may take to hand in what they found
STACK_WAIT_S = 2.0  # after SIGUSR1, how long a silent worker gets to write its stacks
OUTPUT_LINES = 40  # lines of an engine's last output kept in a result


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs to open the engine as the parent would (picklable)."""

    engine: str
    config: EngineConfig
    seed: int
    profile: Profile
    budget: Budget
    memory_spec: tuple[str, dict] | None = None
    memory_only: bool = False
    database: str | None = None
    first_only: bool = False  # stop a fuzz unit at its first finding (the kill matrix)
    worker_memory: int = bounds.DEFAULT_WORKER_MEMORY  # bytes of data per worker; 0: no limit


@dataclass
class Job:
    kind: str  # unit, shrink, replay, open
    unit: Unit | None = None
    crash: CaseResult | None = None  # shrink: the CRASH result that waits for its trace
    ending: Ending | None = None
    trace: str | None = None  # shrink: the trace up to the crash (kvconf-trace/1 JSON)


@dataclass
class Worker:
    proc: subprocess.Popen
    fd: int
    log: Path
    recorder: Path  # the play in progress (conformance.flight)
    last: float = field(default_factory=time.monotonic)
    buf: bytes = b""
    job: Job | None = None
    log_from: int = 0
    said: list[tuple[bytes, bytes]] = field(default_factory=list)  # (kind, payload) answers
    exit_info: dict | None = None  # a C line: the engine raised SystemExit
    memory_info: dict | None = None  # an M line: the worker ran out of memory under its limit
    notes: list[dict] = field(default_factory=list)  # G lines: progress, for the display
    eof: bool = False
    started: float = 0.0
    spec: WorkerSpec | None = None  # the engine it opened (or is opening)
    cancelled: bool = False  # asked to drop its unit (SIGUSR2); it answers K or its result

    def send(self, obj: object) -> None:
        self.proc.stdin.write(frame(obj))
        self.proc.stdin.flush()

    def begin(self, job: Job) -> None:
        self.job = job
        with contextlib.suppress(OSError):  # no play of an earlier job is taken for this one's
            os.truncate(self.recorder, 0)
        self.last = self.started = time.monotonic()
        self.log_from = self.log.stat().st_size if self.log.exists() else 0

    def pump(self) -> None:
        """Read what the worker sent: heartbeats, and answers, which are kept."""
        try:
            chunk = os.read(self.fd, 1 << 16)
        except OSError:
            chunk = b""
        if not chunk:
            self.eof = True
            return
        self.last = time.monotonic()
        self.buf += chunk
        *lines, self.buf = self.buf.split(b"\n")
        for line in lines:
            kind, payload = line[:1], line[1:]
            if kind == b"H":
                pass
            elif kind == b"G":
                self.notes.append(json.loads(payload))
            elif kind == b"C":
                self.exit_info = json.loads(payload)
            elif kind == b"M":
                self.memory_info = json.loads(payload)
            else:
                self.said.append((kind, payload))

    def ending(self) -> Ending:
        """How the dead worker ended: the engine's sys.exit it reported, its memory limit met
        (an M line), else its exit status."""
        if self.exit_info is not None:
            return Ending("sys.exit", self.exit_info["code"])
        if self.memory_info is not None:
            self.proc.wait()
            return Ending("memory", self.memory_info["limit"])
        return ending_of(self.proc.wait())

    def last_words(self) -> tuple[str, str | None]:
        """Its output since the job began, and the stacks of the moment it died or stalled:
        the traceback of a sys.exit it reported, else what ``faulthandler`` wrote."""
        output, stacks = split_stacks(self.output())
        said = self.exit_info or self.memory_info or {}
        return (relative_paths(output),
                said.get("traceback") or (stacks and relative_paths(stacks)))

    def output(self) -> str:
        """The engine's last output since the current job began."""
        try:
            with self.log.open("rb") as f:
                size = f.seek(0, os.SEEK_END)
                start = max(self.log_from, size - 16384)
                f.seek(start)
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-OUTPUT_LINES:])

    def stacks(self) -> None:
        """Ask a silent worker for every thread's Python stack (``faulthandler`` on SIGUSR1)
        and give it until its output stops growing (at most STACK_WAIT_S) to write them."""
        try:
            before = self.log.stat().st_size
            os.kill(self.proc.pid, signal.SIGUSR1)
        except (OSError, ProcessLookupError):
            return
        end = time.monotonic() + STACK_WAIT_S
        size, still = before, 0
        while time.monotonic() < end and still < 3:
            time.sleep(0.05)
            now = self.log.stat().st_size
            still = still + 1 if now == size and now > before else 0
            size = now

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)


TMP_PREFIX = "kvconf-workers-"  # the pool's folder: kvconf-workers-<pid of the run>-<random>


def remove_stale_folders() -> None:
    """Remove the pool folders of runs that are gone (killed outright, SIGKILL or the OOM
    killer, with no chance to remove their own): their run's pid, in the name, is no process."""
    for folder in Path(tempfile.gettempdir()).glob(f"{TMP_PREFIX}*-*"):
        pid = folder.name[len(TMP_PREFIX):].partition("-")[0]
        if not pid.isdigit() or not folder.is_dir() or folder.owner() != _me():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except (PermissionError, OverflowError):
            continue


def _me() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def split_stacks(output: str) -> tuple[str, str | None]:
    """The output before the Python stacks ``faulthandler`` wrote into it, and the stacks."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(("Fatal Python error", "Current thread", "Thread 0x")):
            return "\n".join(lines[:i]).rstrip(), "\n".join(lines[i:])
    return output, None


class Pool:
    def __init__(self, spec: WorkerSpec, jobs: int, call_timeout: float,
                 most: int | None = None) -> None:
        """``jobs`` workers at most, and never more than ``most``, the units of work the run
        can have (spec chapter faults, "The bounds of a run"): a worker with no unit to run is
        a process, and its memory, for nothing."""
        if jobs < 1:
            raise KitError(f"--jobs {jobs}: a pool needs at least one worker")
        if call_timeout <= 0:
            raise KitError(f"--call-timeout {call_timeout:g}: must be more than 0 seconds")
        self.spec = spec
        self.jobs = max(1, min(jobs, most)) if most is not None else jobs
        self.call_timeout = call_timeout
        remove_stale_folders()
        self.tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-"))
        self.workers: list[Worker] = []
        self.shrinker: Worker | None = None
        self.spawned = 0  # processes started, replacements and shrinkers included
        self.gone: list[Worker] = []  # ended workers whose files are still to be removed
        # (folder, trace name) -> lowest failing unit that saved it
        self.written: dict[tuple[Path | None, str], int] = {}
        self.cancel_unwanted = False
        self.spec_of: Callable[[Unit], WorkerSpec] = lambda unit: self.spec
        self.out_dir_of: Callable[[Unit], Path | None] = lambda unit: self.out_dir

    # ----------------------------------------------------------------- processes
    def _spawn(self, probe: bool, spec: WorkerSpec | None = None) -> Worker:
        spec = spec or self.spec
        self.spawned += 1
        log = self.tmp / f"worker-{self.spawned}.log"
        recorder = self.tmp / f"worker-{self.spawned}.play"
        r, w = os.pipe()
        # The worker imports what this process can import (an engine next to the user's code,
        # a test's folder), and the engine's Python output reaches the log before a crash.
        path = [p for p in sys.path if p and Path(p).exists()]
        env = dict(os.environ, PYTHONUNBUFFERED="1", KVCONF_WORKER_PARENT=str(os.getpid()),
                   PYTHONPATH=os.pathsep.join([*path, os.environ.get("PYTHONPATH", "")]))
        env[bounds.ENV] = str(spec.worker_memory)
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "kvconf.conformance.running.worker", str(w), str(recorder)],
                stdin=subprocess.PIPE, stdout=out, stderr=out, pass_fds=(w,),
                start_new_session=True, env=env)
        os.close(w)
        worker = Worker(proc, r, log, recorder)
        self._open_on(worker, spec, probe)
        return worker

    def _open_on(self, worker: Worker, spec: WorkerSpec, probe: bool = True) -> None:
        """Have ``worker`` open the engine of ``spec`` (again, when it ran another's units);
        it answers P and takes work once it has."""
        worker.spec = spec
        worker.begin(Job("open"))
        worker.send(("open", spec, probe))

    def _await_answer(self, worker: Worker, deadline_s: float) -> tuple[bytes, bytes] | None:
        """Block until ``worker`` answers; None when it died or fell silent."""
        while not worker.said:
            if worker.eof:
                return None
            left = worker.last + deadline_s - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([worker.fd], [], [], min(left, 1.0))
            if ready:
                worker.pump()
        return worker.said.pop(0)

    def open(self) -> tuple[frozenset[Feature], str, dict[Feature, Missing]]:
        """Start the workers and learn from the first what the engine offers (it opens it, not
        us); the others open it meanwhile and take work when they are ready."""
        worker = self._spawn(probe=True)
        for _ in range(self.jobs - 1):
            self.workers.append(self._spawn(probe=True))
        got = self._await_answer(worker, max(self.call_timeout, 60.0))
        if got is None or got[0] != b"P":
            if got is not None and got[0] == b"X":
                worker.kill()
                raise KitError(json.loads(got[1])["message"])
            how = self._how_it_ended(worker)
            out = worker.output()
            worker.kill()
            raise KitError(f"engine {self.spec.engine}: its worker {how} while opening it"
                           + (f"; its last output:\n{out}" if out else ""))
        worker.job = None
        self.workers.insert(0, worker)
        doc = json.loads(got[1])
        return (frozenset(Feature(f) for f in doc["features"]), doc["version"],
                {Feature(k): Missing.from_wire(v) for k, v in doc["unavailable"].items()})

    def _how_it_ended(self, worker: Worker) -> str:
        if not worker.eof:
            return f"was silent for {self.call_timeout:g} s"
        return worker.ending().describe()

    def close(self) -> None:
        for w in [*self.workers, *([self.shrinker] if self.shrinker else [])]:
            w.close()
            w.kill()
        self.workers, self.shrinker = [], None
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ----------------------------------------------------------------- one trace
    def replay(self, text: str, determinism: bool) -> dict:
        """Play one trace in a worker: PASS or FAIL as the oracles say, or CRASH / TIMEOUT
        with how the engine's process ended, its stacks and its last output."""
        w = self._spawn(probe=False)
        w.begin(Job("replay"))
        w.send(("replay", text, determinism))
        got = self._await_answer(w, self.call_timeout)
        if got is not None:
            kind, payload = got
            if kind == b"X":
                raise KitError(json.loads(payload)["message"])
            return json.loads(payload)
        if not w.eof:
            w.stacks()
            w.kill()
            status, how = "TIMEOUT", f" did not answer for {self.call_timeout:g} s"
            ending = None
        else:
            ending = w.ending()
            status, how = "CRASH", f"'s process {ending.describe()}"
        _, step, where = self._where(w)
        output, stacks = w.last_words()
        w.close()
        return {"status": status, "message": f"the engine{how} {where}", "step": step,
                "signal": ending.signal_name if ending else None,
                "exit_code": ending.code if ending and ending.kind != "signal" else None,
                "traceback": stacks, "output": output}

    # ----------------------------------------------------------------- the run
    def run(self, units: list[Unit], campaign, out_dir: Path | None, *,
            spec_of: Callable[[Unit], WorkerSpec] | None = None,
            out_dir_of: Callable[[Unit], Path | None] | None = None,
            cancel_unwanted: bool = False) -> None:
        """Run ``units`` on the workers until each is done or no longer wanted. Units of several
        engines can share the pool (the kill matrix: a mutant each): ``spec_of`` says which
        engine a unit runs on (default: the pool's), and a worker that ran another engine's
        units opens the unit's first; ``out_dir_of`` where a unit's traces go (default:
        ``out_dir``). With ``cancel_unwanted`` a worker whose unit is no longer wanted (the kill
        matrix: a unit past its mutant's killer) is asked to drop it at its next step or example
        (SIGUSR2, ``progress.cancel``) rather than left to finish work nobody reads."""
        self.campaign, self.out_dir = campaign, out_dir
        self.cancel_unwanted = cancel_unwanted
        if spec_of is not None:
            self.spec_of = spec_of
        if out_dir_of is not None:
            self.out_dir_of = out_dir_of
        queue = deque(units)
        shrinks: deque[Job] = deque()
        try:
            while True:
                self._dispatch(queue, shrinks)
                busy = [w for w in self.workers if w.job is not None]
                if self.shrinker is not None and self.shrinker.job is not None:
                    busy.append(self.shrinker)
                if not busy:
                    return
                self._wait(busy, shrinks)
        except KeyboardInterrupt:
            self._wind_down(shrinks)
            raise

    def _sweep(self) -> None:
        """Remove the log and play files of the workers that ended, their last words read:
        the pool's folder holds the live workers' files, not one pair per worker ever started."""
        for w in self.gone:
            w.log.unlink(missing_ok=True)
            w.recorder.unlink(missing_ok=True)
        self.gone.clear()

    def retire_beyond(self, units: int) -> None:
        """Stop the workers past one per unit of the run (``open`` started them before the
        cases the engine cannot run were known), the opening first, then the idle."""
        spare = sorted((w for w in self.workers if w.job is None or w.job.kind == "open"),
                       key=lambda w: w.job is None)
        for w in spare[:max(0, len(self.workers) - max(1, units))]:
            w.kill()
            self._forget(w)

    def _dispatch(self, queue: deque, shrinks: deque) -> None:
        self._sweep()
        if self.cancel_unwanted:
            for w in self.workers:
                if (w.job is not None and w.job.kind == "unit" and not w.cancelled
                        and not self.campaign.wanted(w.job.unit)):
                    w.cancelled = True
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(w.proc.pid, signal.SIGUSR2)
        if self.shrinker is None and shrinks:
            job = shrinks.popleft()
            spec = self.spec_of(job.unit)
            self.shrinker = self._spawn(probe=False, spec=spec)
            self.shrinker.begin(job)
            self.shrinker.send(("shrink", job.trace, job.ending,
                                spec.profile.shrink_replays, self.call_timeout))
        while queue:
            unit = queue[0]
            if not self.campaign.wanted(unit):
                queue.popleft()
                continue
            spec = self.spec_of(unit)
            idle = [w for w in self.workers if w.job is None]
            ready = next((w for w in idle if w.spec == spec), None)
            if ready is None:
                if idle:  # it ran another engine's units: it opens this one's first
                    self._open_on(idle[0], spec)
                    continue
                opening = sum(w.job is not None and w.job.kind == "open" for w in self.workers)
                if (len(self.workers) >= self.jobs
                        or opening >= sum(map(self.campaign.wanted, queue))):
                    return  # enough workers, or one opening already for each unit left
                self.workers.append(self._spawn(probe=True, spec=spec))
                continue  # it takes work once it has opened the engine
            idle = ready
            queue.popleft()
            self.campaign.start(unit)
            idle.begin(Job("unit", unit))
            idle.send(("unit", unit.case, unit))

    def _wait(self, busy: list[Worker], shrinks: deque) -> None:
        now = time.monotonic()
        deadline = min(w.last + self._limit(w) for w in busy)
        ready, _, _ = select.select([w.fd for w in busy], [], [],
                                    max(0.0, min(deadline - now, 1.0)))
        for w in busy:
            if w.fd in ready:
                w.pump()
            notes, w.notes = w.notes, []
            for doc in notes:
                self.campaign.note(doc, w.job.unit if w.job is not None else None)
            self._settle(w, shrinks)

    def _limit(self, w: Worker) -> float:
        return max(self.call_timeout, 60.0) if w.job and w.job.kind == "open" else (
            self.call_timeout)

    def _settle(self, w: Worker, shrinks: deque) -> None:
        """Act on what ``w`` said, on its death, or on its silence."""
        while w.said:
            kind, payload = w.said.pop(0)
            if kind == b"X":
                raise KitError(json.loads(payload)["message"])
            if kind == b"I":
                continue
            if kind == b"K":  # it dropped the unit it was asked to: no result, free again
                w.job, w.cancelled = None, False
                continue
            if kind == b"P":  # a new worker opened the engine: it can take work
                w.job = None
                continue
            if kind == b"R":
                doc = json.loads(payload)
                job, w.job, w.cancelled = w.job, None, False
                if job.kind == "shrink":  # a shrinker does one job and goes
                    w.close()
                    w.kill()
                    self._forget(w)
                    self._shrunk(job, doc)
                    return
                self._unit_done(job.unit, doc)
                if doc.get("retire"):  # its memory limit met: a fresh worker takes the next
                    w.kill()
                    self._forget(w)
                    return
        if w.job is None and not w.eof:
            return
        if w.eof:
            self._died(w, shrinks)
        elif time.monotonic() - w.last > self._limit(w):
            self._silent(w)

    def _forget(self, w: Worker) -> None:
        w.close()
        self.gone.append(w)  # its files go once what it left is read (``_sweep``)
        if w is self.shrinker:
            self.shrinker = None
        elif w in self.workers:
            self.workers.remove(w)

    def _died(self, w: Worker, shrinks: deque) -> None:
        ending = w.ending()
        job = w.job
        self._forget(w)
        if job is None:
            return  # it had finished its work (a worker retired after SystemExit)
        if job.kind == "open":
            raise KitError(f"engine {w.spec.engine}: a worker {ending.describe()} while "
                           f"opening it; its last output:\n{w.output()}")
        if job.kind == "shrink":  # the shrinker itself died: keep the unshrunk trace
            self._shrunk(job, None)
            return
        result, text = self._fault_result(w, job.unit, Status.CRASH, ending)
        if text is not None and ending.crashed():
            shrinks.append(Job("shrink", job.unit, result, ending, text))
        else:
            self._add_crash(job.unit, result, text)

    def _silent(self, w: Worker) -> None:
        """Past the per-call deadline: ask for the stacks, kill, TIMEOUT."""
        job = w.job
        if job.kind == "open":
            w.kill()
            self._forget(w)
            raise KitError(f"engine {w.spec.engine}: a worker was silent for "
                           f"{self._limit(w):g} s while opening it; its last output:\n"
                           f"{w.output()}")
        w.stacks()
        w.kill()
        self._forget(w)
        if job.kind == "shrink":
            self._shrunk(job, None)
            return
        _, _, where = self._where(w)
        self._add(job.unit, *self._fault_result(
            w, job.unit, Status.TIMEOUT, None,
            message=f"the engine did not answer for {self.call_timeout:g} s {where} "
                    "(the per-call deadline, --call-timeout): its worker was killed"))

    # ----------------------------------------------------------------- results
    def _where(self, w: Worker) -> tuple[str | None, int | None, str]:
        """The trace of the play in progress (text), the step it reached, and a phrase."""
        _, text, step, where = self._played(w)
        return text, step, where

    def _played(self, w: Worker) -> tuple[object | None, str | None, int | None, str]:
        """``_where``, with the trace of the play in progress itself (None if none)."""
        from kvconf.conformance.hybrid.trace import HybridTrace
        from kvconf.conformance.running.cases import trace_text
        from kvconf.conformance.scheduler.trace import SchedTrace
        from kvconf.conformance.trace import Trace

        play = read_play(str(w.recorder))
        if not play or play[0][:1] not in (b"B", b"W"):
            return None, None, None, "before any trace began"
        head, steps = play[0], play[1:]
        try:
            if head[:1] == b"B":
                data = json.loads(head[1:])
                data["steps"] = [json.loads(s[1:]) for s in steps]
                level = data.get("level", "cache")
                trace = (HybridTrace if level == "hybrid" else Trace).model_validate(data)
                return trace, trace_text(trace), len(steps) - 1, (
                    f"at step {len(steps) - 1} of a {level}-level trace" if steps
                    else f"while starting a {level}-level trace")
            trace = SchedTrace.model_validate_json(head[1:])
            return trace, trace_text(trace), None, "while playing a scheduler-level workload"
        except ValueError as e:
            return None, None, None, f"in a trace the kit could not rebuild ({e})"

    def _fault_result(self, w: Worker, unit: Unit, status: Status, ending: Ending | None,
                      message: str | None = None) -> tuple[CaseResult, str | None]:
        """A CRASH or TIMEOUT result for ``unit``, and the trace the worker was playing. A CRASH
        carries its finding (``findings.crash_finding``): a crash is a finding like a FAIL's,
        so it does not end a fuzz case (``units.ends``)."""
        trace, text, step, where = self._played(w)
        output, stacks = w.last_words()  # the stacks go to the traceback field
        if message is None and ending is not None and ending.kind == "memory":
            message = (f"the engine's process {ending.describe()} {where}, outside any engine "
                       "call that could raise it; memory that grows with the calls is a leak "
                       "(give --worker-memory more if the engine needs more)")
        if message is None:
            message = (f"the engine's process {ending.describe()} {where}; an exit or a signal "
                       "inside the engine is never a pass")
        case = self.campaign.cases[unit.case]
        steps = None if text is None else (step + 1 if step is not None else None)
        oracle = (WorkerMemoryOracle if ending is not None and ending.kind == "memory"
                  else ProcessOracle)
        result = CaseResult(
            case=unit.case, status=status, behaviours=list(oracle.behaviours),
            message=message, oracle=oracle.name, step=step,
            duration_s=round(time.monotonic() - w.started, 4),
            trace=None if text is None else f"traces/{unit.case}.json",
            traceback=stacks, output=output or None,
            exit_code=ending.code if ending is not None and ending.kind != "signal" else None,
            signal=ending.signal_name if ending is not None else None,
            steps=steps,
            judged=list(oracle.behaviours),  # the parent's own check of the process
            units=[UnitResult(index=unit.index, of=unit.of, status=status,
                              duration_s=round(time.monotonic() - w.started, 4))]
            if case.fuzz else None,
        )
        if status is Status.CRASH and ending is not None:
            result.findings = [crash_finding(result, ending.token, trace,
                                             unit.index if case.fuzz else None, oracle)]
        return result, text

    def _shrunk(self, job: Job, doc: dict | None) -> None:
        result, text = job.crash, job.trace
        if doc is not None:
            text = doc["trace"]
            n = doc["steps"]
            what = ("request" if '"level": "scheduler"' in text else "step") + "s" * (n != 1)
            result.found_steps, result.steps = result.steps, doc["steps"]
            result.message += (f"; shrunk in a child process to {doc['steps']} {what} "
                               f"({doc['tried']} replays)")
            result.step = None
        else:
            result.message += "; the trace could not be shrunk (the shrinking process failed)"
        self._add_crash(job.unit, result, text)

    def _add_crash(self, unit: Unit, result: CaseResult, text: str | None) -> None:
        """A CRASH result, its finding brought up to date with the result (its trace shrunk,
        or not), and its trace saved as the case's and as the finding's."""
        more: dict[str, str] = {}
        for f in result.findings:
            f.message, f.step = result.message, result.step
            f.steps, f.found_steps = result.steps, result.found_steps
            if f.trace is not None and text is not None:
                more[trace_name(result.case, f.signature)] = text
        self._add(unit, result, text, more)

    def _unit_done(self, unit: Unit, doc: dict) -> None:
        """A worker's answer to a unit: its result, and the trace it saved."""
        self._add(unit, CaseResult.model_validate(doc["result"]), doc.get("trace"),
                  doc.get("traces") or {})

    def _add(self, unit: Unit, result: CaseResult, trace: str | None,
             more: dict[str, str] | None = None) -> None:
        """A unit's result, and the traces it saved: ``trace`` the case's
        (``traces/<case>.json``), ``more`` its findings' by name. Of a path several units
        saved, the lowest unit's is kept, whichever finished first."""
        out_dir = self.out_dir_of(unit)
        if failed(result.status) and self.campaign.wanted(unit):
            saved = dict(more or {})
            if trace is not None:
                saved[unit.case] = trace
            for name, text in sorted(saved.items()):
                best = self.written.get((out_dir, name))
                if best is None or unit.index < best:
                    self.written[(out_dir, name)] = unit.index
                    if out_dir is not None:
                        write_atomic(out_dir / "traces" / f"{name}.json", text)
        if out_dir is None:
            result.trace = None
            for f in result.findings:
                f.trace = None
        self.campaign.add(unit, result)

    # ----------------------------------------------------------------- interrupts
    def _wind_down(self, shrinks: deque) -> None:
        """Ask every worker to stop (SIGTERM): a shrink in progress hands in its best trace.
        What arrives within the grace period is kept; then every worker is killed."""
        live = [w for w in self.workers if w.job is not None and w.job.kind == "unit"]
        for w in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(w.proc.pid, signal.SIGTERM)
        # A crash waiting for its shrink is a finding already made: keep it unshrunk.
        pending = list(shrinks)
        if self.shrinker is not None and self.shrinker.job is not None:
            pending.insert(0, self.shrinker.job)
        shrinks.clear()
        for job in pending:
            job.crash.message += "; not shrunk (the run was interrupted)"
            self._add_crash(job.unit, job.crash, job.trace)
        end = time.monotonic() + GRACE_S
        while live and time.monotonic() < end:
            ready, _, _ = select.select([w.fd for w in live], [], [], 0.5)
            for w in list(live):
                if w.fd in ready:
                    w.pump()
                while w.said:
                    kind, payload = w.said.pop(0)
                    if kind == b"R" and w.job is not None and w.job.kind == "unit":
                        self._unit_done(w.job.unit, json.loads(payload))
                        w.job = None
                if w.job is None or w.eof:
                    live.remove(w)


def run_engines(units: list[EngineUnit], specs: dict[str, WorkerSpec], campaign,
                out_dir: Path | None, jobs: int, call_timeout: float) -> None:
    """Units of several engines (``EngineUnit.engine`` names each one's spec in ``specs``) on
    one pool of ``jobs`` workers: each engine's traces go to its own folder under ``out_dir``,
    and a unit the campaign no longer wants is cancelled (the kill and variant matrices, where
    one finding decides a verdict). The workers are closed whatever happens, with signals held."""
    from kvconf.conformance.running.signals import hold_signals

    if not units:
        return
    pool = Pool(specs[units[0].engine], jobs, call_timeout, len(units))
    try:
        pool.run(units, campaign, out_dir, spec_of=lambda u: specs[u.engine],
                 out_dir_of=lambda u: out_dir / u.engine if out_dir is not None else None,
                 cancel_unwanted=True)
    finally:
        with hold_signals():
            pool.close()
