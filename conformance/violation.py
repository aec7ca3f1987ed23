"""A broken rule: what every oracle, driver and probe raises, and every report records.

It lives apart from the oracles so that the runtime's memory, which the oracles read, can raise
one without importing them.
"""

from __future__ import annotations

from collections.abc import Sequence


class Violation(Exception):
    """A broken rule: the oracle, the behaviour IDs, and what was seen."""

    def __init__(self, oracle: str, behaviours: Sequence[str], message: str) -> None:
        super().__init__(f"[{oracle}] {', '.join(behaviours)}: {message}")
        self.oracle = oracle
        self.behaviours = tuple(behaviours)
        self.message = message
        self.step: int | None = None
        self.probe = False  # found by the driver's probes (REQ-2, REQ-6): never masks others
