"""Where a workload's choices come from: a seeded ``random.Random`` (the fuzz search) or a
Hypothesis ``draw`` (strategies for tests and properties), behind one small interface.

The generator (``kvconf.conformance.scheduler.generator``) is written once against ``Draws``. A fuzz
case draws each workload from ``SeededDraws(seed)``, so the same seed gives the same workload in
every process, and a draw costs a call into ``random``, not Hypothesis's bookkeeping of every
choice (which took a sixth of a scheduler fuzz case). Hypothesis still supplies the example
database (failing seeds replay first, ``seeding.walk_search``); shrinking is the kit's own, on the
workload (``generator.shrink_sched``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from hypothesis import strategies as st

T = TypeVar("T")


class Draws(Protocol):
    def integer(self, lo: int, hi: int) -> int: ...
    def boolean(self) -> bool: ...
    def choice(self, options: Sequence[T]) -> T: ...
    def integers(self, lo: int, hi: int, min_size: int, max_size: int) -> list[int]: ...
    def choices(self, options: Sequence[T], min_size: int, max_size: int) -> list[T]: ...
    def distinct(self, options: Sequence[T], min_size: int, max_size: int) -> list[T]: ...


class SeededDraws:
    """Choices from ``random.Random(seed)`` alone: an integer is one end of its range a quarter
    of the time (the smallest or largest size, the whole prompt cut from an earlier one, the
    latest arrival), uniform otherwise; everything else uniform. Measured on the mutants that
    need a prefix held on a full host tier or a resumable state, the ends found them in about
    half the workloads uniform draws took."""

    __slots__ = ("rng",)

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def integer(self, lo: int, hi: int) -> int:
        x = self.rng.random()
        if hi - lo > 1 and x < 0.25:  # the ends of a range are where rules bind: a quarter
            return lo if x < 0.125 else hi
        return self.rng.randint(lo, hi)

    def boolean(self) -> bool:
        return self.rng.random() < 0.5

    def choice(self, options: Sequence[T]) -> T:
        return options[self.rng.randrange(len(options))]

    def integers(self, lo: int, hi: int, min_size: int, max_size: int) -> list[int]:
        r = self.rng.randint
        return [r(lo, hi) for _ in range(r(min_size, max_size))]

    def choices(self, options: Sequence[T], min_size: int, max_size: int) -> list[T]:
        n = self.rng.randint(min_size, max_size)
        return [options[self.rng.randrange(len(options))] for _ in range(n)]

    def distinct(self, options: Sequence[T], min_size: int, max_size: int) -> list[T]:
        """Up to ``max_size`` of ``options`` (each at most once), in a drawn order."""
        n = self.rng.randint(min(min_size, len(options)), min(max_size, len(options)))
        return self.rng.sample(list(options), n)


class HypothesisDraws:
    """The same choices drawn by Hypothesis (inside a ``@st.composite``), which can shrink them."""

    __slots__ = ("draw",)

    def __init__(self, draw: Callable[[st.SearchStrategy[Any]], Any]) -> None:
        self.draw = draw

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def boolean(self) -> bool:
        return self.draw(st.booleans())

    def choice(self, options: Sequence[T]) -> T:
        return self.draw(st.sampled_from(options))

    def integers(self, lo: int, hi: int, min_size: int, max_size: int) -> list[int]:
        return self.draw(st.lists(st.integers(lo, hi), min_size=min_size, max_size=max_size))

    def choices(self, options: Sequence[T], min_size: int, max_size: int) -> list[T]:
        return self.draw(st.lists(st.sampled_from(options), min_size=min_size,
                                  max_size=max_size))

    def distinct(self, options: Sequence[T], min_size: int, max_size: int) -> list[T]:
        idx = self.draw(st.lists(st.integers(0, len(options) - 1), unique=True,
                                 min_size=min(min_size, len(options)),
                                 max_size=min(max_size, len(options))))
        return [options[i] for i in idx]
