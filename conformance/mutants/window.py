"""Copies of the reference with a sliding-window config defect planted (WIN-1 / D381-6)."""

from __future__ import annotations

from kvconf.reference.scheduler import Scheduler


def _top_level_only(cfg):
    """Reads ``sliding_window`` at the top level only, as the scheduler did before D381-6."""
    value = cfg.get("sliding_window")
    return value if isinstance(value, int) and cfg.get("use_sliding_window", True) else 0


class WindowFromTopLevelOnly(Scheduler):
    """WIN-1 / D381-6: the nested text config's window is not read."""

    model_window = staticmethod(_top_level_only)
