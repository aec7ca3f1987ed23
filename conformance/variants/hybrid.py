"""Legal variants of the reference hybrid cache: each takes another choice the spec permits."""

from __future__ import annotations

from kvconf.reference.hybrid_cache import HybridCache


class KeepsWindowPages(HybridCache):
    """WIN-4: window pages behind the window are never given back while the request runs (the
    rule lets a cache free them; it need not): they go back with everything else at finish."""

    def _release_window(self, r):
        return []


HYBRID_VARIANTS: tuple[type, ...] = (KeepsWindowPages,)
