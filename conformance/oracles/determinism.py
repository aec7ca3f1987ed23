"""Determinism oracle (DET-1): the same trace twice gives the same outcome log."""

from __future__ import annotations

from typing import Any

from kvconf.conformance.oracles.base import Oracle, Violation


class DeterminismOracle(Oracle):
    """Run-level: compares two outcome logs of one trace, step by step."""

    name = "determinism"
    behaviours = ("DET-1",)

    def compare(self, first: list[Any], second: list[Any], offset: int = 0) -> None:
        """``offset``: the index of the logs' first entry in the whole run."""
        for i, (a, b) in enumerate(zip(first, second, strict=False), start=offset):
            if a != b:
                v = self.fail("DET-1", f"step {i} differs between two runs: {a} then {b}")
                v.step = i
                raise v
        if len(first) != len(second):
            raise self.fail("DET-1", f"runs differ in length: {len(first)} vs {len(second)} steps")


__all__ = ["DeterminismOracle", "Violation"]
