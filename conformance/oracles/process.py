"""Process oracles (FAULT-3, FAULT-5): every engine call returns to the process that made it.

It judges from outside: the worker pool (``kvconf.conformance.running.pool``) sees a worker die (an
exit of any code, ``sys.exit``, a signal) or stay silent past the per-call deadline, and gives the
unit CRASH or TIMEOUT citing this oracle. Nothing inside the dying process could say it."""

from __future__ import annotations

from kvconf.conformance.oracles.base import Oracle


class ProcessOracle(Oracle):
    name = "worker"
    behaviours = ("FAULT-3",)


class WorkerMemoryOracle(Oracle):
    """FAULT-5: the engine's memory stays within the run's per-worker limit. Judged where the
    limit bites: an engine call that raises MemoryError (``kvconf.conformance.faults.raised``)
    and a worker that runs out of memory anywhere else (the pool, an ``M`` line)."""

    name = "worker-memory"
    behaviours = ("FAULT-5",)
