"""A logical clock: the reference's only notion of time (spec EVICT-3, D248-1)."""

from dataclasses import dataclass


@dataclass(slots=True)
class LogicalClock:
    """Monotonic counter; every cache operation that touches nodes reads one tick."""

    now: int = 0

    def tick(self) -> int:
        self.now += 1
        return self.now
