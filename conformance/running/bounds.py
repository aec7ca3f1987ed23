"""The run's bounds: how many workers, how much memory each may hold (spec chapter faults,
"The bounds of a run").

A run must never take the machine down: the worker count is cut to the units of work (the pool,
``kvconf.conformance.running.pool``), a count above the machine's CPUs is said in one line, and
each worker runs under a memory limit, so an engine that leaks is a finding of its own (FAULT-5)
rather than the kernel's OOM killer choosing a victim among the machine's processes.

Why ``RLIMIT_DATA`` and not ``RLIMIT_AS``: measured, a worker of the reference at ``--profile
ci`` peaks at about 35 MB of data (VmData) and 50 MB resident (VmHWM); importing torch and z3
reserves about 570 MB of address space (VmPeak) of which only 160 MB is data. An address-space
limit would have to allow for every library's reservations (CUDA's run to many GiB) and so
bound a leak only loosely; the data limit counts what a leak grows (the heap and private
anonymous mappings, where Python's objects and a native ``malloc`` live) and is enforced by the
kernel at the allocation itself, so a Python engine gets ``MemoryError`` in the very call that
leaked. A watchdog that polls resident memory from the parent would notice a leak of 50 MB per
call only after gigabytes more.
"""

from __future__ import annotations

import os
import re
import sys

from kvconf.conformance.errors import KitError

MiB = 1 << 20
GiB = 1 << 30
# About 80 times what a worker of the reference needs, and 25 times a worker that imports
# torch (the peers' adapters): a limit no sane engine meets at the kit's configurations.
DEFAULT_WORKER_MEMORY = 4 * GiB
ENV = "KVCONF_WORKER_MEMORY"  # bytes, set by the pool in each worker's environment

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*", re.IGNORECASE)
_FACTOR = {"": 1, "b": 1, "k": 1 << 10, "m": MiB, "g": GiB, "t": 1 << 40}

# The limit this process runs under (bytes; 0: none), for the messages that name it.
limit: int = 0
# Set once an engine call raised MemoryError under the limit: the worker retires after its
# unit, since what the engine leaked stays in its module state for every later unit.
hit: bool = False


def parse_memory(text: str | int | None, option: str = "--worker-memory") -> int:
    """A size in bytes from ``4GiB``, ``700MiB``, ``512M``, ``2G``, or a plain number of bytes
    (powers of 1024 either way); 0 is no limit. Anything else is a one-line KitError."""
    if text is None:
        return DEFAULT_WORKER_MEMORY
    if isinstance(text, int):
        value = text
    else:
        m = _SIZE.fullmatch(text)
        if not m:
            raise KitError(f"{option} {text!r}: expected a size such as 4GiB or 700MiB, or 0 "
                           "for no limit")
        unit = (m.group(2) or "").lower()[:1]
        value = int(float(m.group(1)) * _FACTOR[unit])
    if value < 0:
        raise KitError(f"{option} {text!r}: must be 0 (no limit) or a positive size")
    if 0 < value < 64 * MiB:
        raise KitError(f"{option} {text!r}: below 64 MiB no Python process starts; give at "
                       "least 64MiB, or 0 for no limit")
    return value


def describe(size: int) -> str:
    """``4 GiB``, ``700 MiB``: a limit as a person reads it."""
    if size == 0:
        return "no limit"
    for unit, factor in (("GiB", GiB), ("MiB", MiB)):
        if size >= factor:
            n = size / factor
            return f"{n:g} {unit}" if n == int(n) else f"{n:.1f} {unit}"
    return f"{size} bytes"


def apply_memory_limit(size: int) -> None:
    """Limit this process's data (the heap and private anonymous mappings) to ``size`` bytes (0:
    leave it as it is); a worker calls it first of all, so the engine's import counts too."""
    global limit
    limit = size
    if size <= 0 or not sys.platform.startswith("linux"):
        return
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        size = min(size, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (size, hard))


def data_size() -> int | None:
    """This process's data now (VmData, bytes), what RLIMIT_DATA counts; None where unknown."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def at_limit() -> bool:
    """Whether a MemoryError just raised is the limit's: a limit is set and this process holds
    at least half of it still. An engine that raises MemoryError far below the limit (its own
    signal for a full pool, say) raised an exception like any other (FAULT-2), not a leak."""
    if not limit:
        return False
    size = data_size()
    return size is None or size >= limit // 2


def under_limit() -> str:
    """The phrase a memory finding ends with: the limit it was raised under."""
    return (f" under the worker memory limit of {describe(limit)} (--worker-memory; the "
            "engine's memory grew past what the run allows each worker)")


def jobs_warning(jobs: int) -> str | None:
    """The one line a worker count above the machine's CPUs earns (None when it fits)."""
    cpus = os.cpu_count() or 1
    if jobs <= cpus:
        return None
    return (f"warning: --jobs {jobs} is more than this machine's {cpus} CPUs: the workers "
            "share them (at most one worker per unit of work is started)")
