"""Engines whose memory grows with their calls, for the worker memory limit's tests (FAULT-5).

``Leaks`` is the reference cache that keeps 50 MB in module state on every match, as an engine
that caches each query's buffers and never frees them would; ``FillsQuietly`` keeps taking
memory on every match until none is left and swallows its own MemoryError, so the limit is met
outside any engine call (in the kit's own code). Run them as ``kvconf run --engine
leaky_engine:Leaks`` with this folder on the import path.
"""

from __future__ import annotations

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter

KEPT: list[bytearray] = []
CHUNK = 50 << 20


class Leaks(ReferenceCacheAdapter):
    name = "leaks"

    def match(self, *args, **kwargs):
        KEPT.append(bytearray(CHUNK))
        return super().match(*args, **kwargs)


class FillsQuietly(ReferenceCacheAdapter):
    name = "fills-quietly"

    def match(self, *args, **kwargs):
        size = CHUNK
        while size >= 1 << 10:  # take what is left, in smaller and smaller pieces
            try:
                KEPT.append(bytearray(size))
            except MemoryError:
                size //= 2
        return super().match(*args, **kwargs)
