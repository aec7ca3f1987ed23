"""A cache engine with two independent defects that one fuzz case reaches, for the findings'
tests (class 10 of issue 21: one finding must not mask the rest).

``TwoDefects`` is the reference with the mutant ``MUTANT`` planted and, beside it, an insert
that raises on six pages in namespace 1 (FAULT-2). A fuzz case that stopped at its first
failure would report only one of them. Run it as ``kvconf run --engine two_defects:TwoDefects``
with this folder on the import path.
"""

from __future__ import annotations

import ctypes
import os

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.mutants import cache as mutants
from kvconf.conformance.mutants.scheduler import AbortRaisesWhileWritingBack, FailedWritebackIsDone

MUTANT = getattr(mutants, os.environ.get("TWO_DEFECTS_MUTANT", "EvictsPinned"))


class TwoDefects(ReferenceCacheAdapter):
    name = "two-defects"

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config, cache_cls=MUTANT)

    def insert(self, namespace, tokens, pages):
        if namespace == 1 and len(tokens) >= 6 * self.page_size:
            raise RuntimeError("the engine's own bug on long inserts")
        return super().insert(namespace, tokens, pages)


class FailedWritebackAndAbortRaises(FailedWritebackIsDone, AbortRaisesWhileWritingBack):
    """The scheduler level's two defects of TokenSpeed's radix-era revisions (issue 21): a
    failed writeback taken as done (REQ-5, E-1), met first by nearly every workload, and an
    Abort refused while the request's writeback is in flight (REQ-4, E-2)."""


class CrashesAndEvictsPinned(ReferenceCacheAdapter):
    """A crash beside a FAIL (issue 21, class 10): the reference with ``MUTANT`` planted (an
    EVICT-1 FAIL) whose process dies of SIGSEGV on an insert of ``crash_pages`` or more pages in
    namespace 1 (at seed 4 of ``fuzz-cache`` a FAIL comes first, at seed 0 the crash). A crash
    must not hide the FAIL, nor the FAIL the crash."""

    name = "crashes-and-evicts-pinned"
    crash_pages = 10

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config, cache_cls=MUTANT)

    def insert(self, namespace, tokens, pages):
        if namespace == 1 and len(tokens) >= self.crash_pages * self.page_size:
            print(f"crashing engine: insert of {len(tokens)} tokens in namespace 1", flush=True)
            ctypes.string_at(0)
        return super().insert(namespace, tokens, pages)
