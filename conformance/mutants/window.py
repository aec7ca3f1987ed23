"""Copies of the reference with a sliding-window defect planted: the config read (WIN-1 /
D381-6), and pages freed while the window still reads them (WIN-4 / E-19)."""

from __future__ import annotations

from kvconf.conformance.variants.scheduler import FreesBehindWindow
from kvconf.reference.scheduler import Scheduler


def _top_level_only(cfg):
    """Reads ``sliding_window`` at the top level only, as the scheduler did before D381-6."""
    value = cfg.get("sliding_window")
    return value if isinstance(value, int) and cfg.get("use_sliding_window", True) else 0


class WindowFromTopLevelOnly(Scheduler):
    """WIN-1 / D381-6: the nested text config's window is not read."""

    model_window = staticmethod(_top_level_only)


class FreesInsideWindow(FreesBehindWindow):
    """WIN-4 / REQ-3 / E-19: freeing pages behind the window (a legal variant) one page too
    early: the page holding the oldest position the window still reads is freed too, and may
    serve another request while this one reads it."""

    def _freeable(self, r) -> int:
        behind = super()._freeable(r)
        return min(behind + 1, r.computed // self.p)  # never the page the row writes into


PLANTED_WINDOW: dict[str, type] = {
    WindowFromTopLevelOnly.__name__: WindowFromTopLevelOnly,
    FreesInsideWindow.__name__: FreesInsideWindow,
}
