"""A logical clock: the reference's only notion of time (spec EVICT-2, EVICT-3, D248-1).

The caller advances it, once per scheduling step, so everything that happens within one step
shares one time: equal access times are real, and the sequence-number tie-break decides them.
"""

from dataclasses import dataclass


@dataclass(slots=True)
class LogicalClock:
    """Monotonic counter; operations stamp nodes with ``now``, only ``tick`` advances it."""

    now: int = 0

    def tick(self) -> int:
        self.now += 1
        return self.now
