"""Crashes: how an engine's process ended, and the smallest trace that ends it the same way.

A worker that dies leaves the parent the trace up to the step it died in
(``kvconf.conformance.running.flight``). That trace is shrunk here, in a child process of its own:
each candidate is played in a forked grandchild, and a candidate counts when the grandchild ends the
way the worker did (the same signal, the same exit code, the same ``sys.exit`` code), judged by the
shrinkers the kit already has (``kvconf.conformance.running.shrink``), so a crash shrinks like any
other finding (FAULT-3)."""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from kvconf.conformance.oracles import Violation
from kvconf.conformance.oracles.process import ProcessOracle

CRASH_ORACLE = ProcessOracle.name
CRASH_BEHAVIOURS = ProcessOracle.behaviours


@dataclass(frozen=True, slots=True)
class Ending:
    """How a process ended: ``kind`` is signal, exit (the process exited with ``code``),
    sys.exit (the engine raised SystemExit, caught by the worker), memory (the worker ran out of
    memory under its limit, ``code`` bytes: FAULT-5), ok, violation, error or timeout."""

    kind: str
    code: int | None = None

    @property
    def signal_name(self) -> str | None:
        if self.kind != "signal" or self.code is None:
            return None
        try:
            return signal.Signals(self.code).name
        except ValueError:
            return f"signal {self.code}"

    def describe(self) -> str:
        if self.kind == "memory":  # ``code``: the limit, in bytes
            from kvconf.conformance.running.bounds import describe

            return (f"ran out of memory under the worker memory limit of "
                    f"{describe(self.code or 0)} (--worker-memory)")
        if self.kind == "signal":
            text = signal.strsignal(self.code) if self.code is not None else None
            return f"was killed by {self.signal_name}" + (f" ({text})" if text else "")
        if self.kind == "exit":
            return f"exited with code {self.code}"
        if self.kind == "sys.exit":
            return f"called sys.exit({self.code})"
        return self.kind

    @property
    def token(self) -> str:
        """How the process ended, as the last part of a crash's finding signature (spec chapter
        faults): ``SIGSEGV``, ``exit-17``, ``sys.exit-0`` (``signal-N`` for a nameless signal)."""
        if self.kind == "signal":
            name = self.signal_name or f"signal-{self.code}"
            return name.replace(" ", "-")
        if self.kind == "memory":
            return "memory-limit"
        return f"{self.kind}-{self.code}"

    def crashed(self) -> bool:
        return self.kind in ("signal", "exit", "sys.exit")


def ending_of(returncode: int) -> Ending:
    """A Popen return code as an Ending (negative: the signal that killed it)."""
    return Ending("signal", -returncode) if returncode < 0 else Ending("exit", returncode)


def play_in_fork(play: Callable[[], None], timeout: float) -> Ending:
    """Run ``play`` in a forked child and say how the child ended. The child reports a normal
    end on a pipe; a child that dies without reporting crashed."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(r)
        code = b"ok"
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            from kvconf.conformance.running import flight

            flight.attach(None)
            play()
        except Violation:
            code = b"violation"
        except SystemExit as e:
            code = b"sys.exit:%d" % (e.code if isinstance(e.code, int) else 1)
        except BaseException:
            code = b"error"
        os.write(w, code)
        os._exit(0)
    os.close(w)
    deadline = time.monotonic() + timeout
    said = b""
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return Ending("timeout")
            ready, _, _ = select.select([r], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(r, 64)
                if not chunk:
                    break
                said += chunk
    finally:
        os.close(r)
    _, status = os.waitpid(pid, 0)
    if said.startswith(b"sys.exit:"):
        return Ending("sys.exit", int(said.split(b":")[1]))
    if said:
        return Ending(said.decode())
    if os.WIFSIGNALED(status):
        return Ending("signal", os.WTERMSIG(status))
    return Ending("exit", os.WEXITSTATUS(status))


def crash_violation(ending: Ending, message: str = "") -> Violation:
    """A crash as the shrinkers see it: its signature names the way the process ended."""
    return Violation(f"{CRASH_ORACLE}:{ending.kind}:{ending.code}", CRASH_BEHAVIOURS,
                     message or f"the engine's process {ending.describe()}")


def shrink_crash(trace, want: Ending, replay: Callable[[object], None], *, max_replays: int,
                 timeout: float, beat: Callable[[], None] = lambda: None):
    """The smallest trace whose replay (in a forked child) still ends as ``want``; returns
    (trace, replays tried)."""
    from kvconf.conformance.hybrid.generator import shrink_with
    from kvconf.conformance.hybrid.trace import HybridTrace
    from kvconf.conformance.running.shrink import shrink
    from kvconf.conformance.scheduler.generator import shrink_sched
    from kvconf.conformance.scheduler.trace import SchedTrace

    tried = 0

    def attempt(candidate) -> None:
        nonlocal tried
        tried += 1
        beat()
        got = play_in_fork(lambda: replay(candidate), timeout)
        if got == want:
            raise crash_violation(got)

    v = crash_violation(want)
    if isinstance(trace, SchedTrace):
        best, _ = shrink_sched(trace, v, attempt, max_replays)
    elif isinstance(trace, HybridTrace):
        best, _ = shrink_with(trace, v, attempt, max_replays)
    else:
        best, _ = shrink(trace, v, attempt, max_replays=max_replays)
    return best, tried
