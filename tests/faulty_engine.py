"""Engines that end or stall the process that calls them, for the worker boundary's tests.

Each is the reference cache until an insert of four or more pages in namespace 1, where it
exits, aborts, dereferences a null pointer, hangs or raises; every other case runs as the
reference does (``HybridAborts``: the reference hybrid cache, aborting on a long extend). Run
them as ``kvconf run --engine faulty_engine:Aborts`` with this folder on the import path.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.adapters.reference_hybrid import ReferenceHybridAdapter


class _Faulty(ReferenceCacheAdapter):
    name = "faulty"

    def fault(self) -> None:
        raise NotImplementedError

    def insert(self, namespace, tokens, pages):
        if namespace == 1 and len(tokens) >= 4 * self.page_size:
            print(f"faulty engine: insert of {len(tokens)} tokens in namespace 1", flush=True)
            self.fault()
        return super().insert(namespace, tokens, pages)


class ExitsZero(_Faulty):
    def fault(self) -> None:
        sys.exit(0)


class ExitsHard(_Faulty):
    def fault(self) -> None:
        os._exit(17)


class ExitsHardZero(_Faulty):
    def fault(self) -> None:
        os._exit(0)


class Aborts(_Faulty):
    def fault(self) -> None:
        os.abort()


class Segfaults(_Faulty):
    def fault(self) -> None:
        ctypes.string_at(0)


class Hangs(_Faulty):
    def fault(self) -> None:
        time.sleep(3600)


class Raises(_Faulty):
    def fault(self) -> None:
        raise RuntimeError("the engine's own bug")


class RaisesRarely(_Faulty):
    """Raises only on an insert of eight or more pages in namespace 1: fuzzing finds it, after a
    while, in some cases and not in others."""

    def insert(self, namespace, tokens, pages):
        if namespace == 1 and len(tokens) >= 8 * self.page_size:
            raise RuntimeError("the engine's own rare bug")
        return ReferenceCacheAdapter.insert(self, namespace, tokens, pages)


class HybridAborts(ReferenceHybridAdapter):
    """The reference hybrid cache until a request extends to five pages or more, where the
    process aborts (a hybrid-level engine's native crash)."""

    name = "faulty-hybrid"

    def extend(self, rid, upto):
        if upto >= 5 * self.page_size:
            print(f"faulty hybrid engine: {rid} extends to {upto}", flush=True)
            os.abort()
        return super().extend(rid, upto)
