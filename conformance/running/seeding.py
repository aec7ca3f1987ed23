"""Seeded search: the same run seed gives the same traces in every process, worker and unit,
and the example database still replays earlier failures first. Cache-level traces are seeded
walks (``walk_search``); scheduler workloads are Hypothesis draws (``search``, ``seeded``)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import chain

from hypothesis import seed, settings
from hypothesis.errors import FlakyFailure


def stream_seed(base_seed: int, stream: int, batch: int) -> int:
    """The Hypothesis seed of one batch of one unit: a function of the run's seed alone."""
    return base_seed * 1_000_003 + batch + (stream << 32)


def search(batch: Callable[[int, object], Callable], remaining: Callable[[], int | None],
           seconds: float | None, base_seed: int, stream: int, database,
           on_finding: Callable | None, last_trace: Callable[[], object],
           interrupted: Callable[[], bool]) -> bool:
    """One unit's search, in seeded batches, for its budget: ``remaining()`` examples (None:
    until ``seconds`` pass, 25 a batch). ``batch(n, database)`` is the Hypothesis test of n
    examples. Without ``on_finding`` the first Violation is raised; with it, each failing
    example's (``last_trace()``, violation) goes there and the search goes on with the next
    seed, so one defect cannot hide the others (only the first batch replays from the example
    ``database``). Returns whether a finding went to ``on_finding``."""
    deadline = None if seconds is None else time.perf_counter() + seconds
    reported = False
    k = 0
    while True:
        left = remaining()
        n = left if left is not None else 25
        if n <= 0:
            return reported
        test = seeded(batch(n, database), stream_seed(base_seed, stream, k), database)
        found = _attempt(test, on_finding, last_trace)
        if found:
            reported, database = True, None
            if interrupted():
                return reported
        k += 1
        if deadline is None and not found:
            return reported  # the whole budget of examples ran without a failure
        if deadline is not None and time.perf_counter() >= deadline:
            return reported


def _attempt(play: Callable[[], object], on_finding: Callable | None,
             last_trace: Callable[[], object],
             on_fail: Callable[[], object] | None = None) -> bool:
    """One try of a search, the same for both kinds: False when it passed; True when it broke a
    rule and the finding went to ``on_finding`` (without one the Violation is raised, after
    ``on_fail`` either way)."""
    from kvconf.conformance.violation import Violation

    try:
        play()
    except Violation as v:
        if on_fail is not None:
            on_fail()
        if on_finding is None:
            raise
        on_finding(last_trace(), v)
        return True
    return False


WALK_KEY = b"walk-seeds"  # where a case's failing walk seeds are kept in the example database


def walk_seeds(base_seed: int, stream: int) -> Iterator[int]:
    """The walk seeds of one unit, in order: a function of the run's seed and the unit alone."""
    rng = random.Random(stream_seed(base_seed, stream, 0))
    while True:
        yield rng.getrandbits(64)


def walk_search(play_walk: Callable[[int], None], remaining: Callable[[], int | None],
                seconds: float | None, base_seed: int, stream: int, database,
                on_finding: Callable | None, last_trace: Callable[[], object],
                interrupted: Callable[[], bool]) -> bool:
    """One unit's search by seeded walks (``play_walk(seed)`` draws and plays one trace) for its
    budget: ``remaining()`` walks, or until ``seconds`` pass. The seeds the example ``database``
    keeps for the case (walks that failed before, in any run or worker that shares it) are
    played first, each counted as a walk; one that passes now is dropped from it, one that
    fails is kept. Without ``on_finding`` the first Violation is raised; with it, each failing
    walk's (``last_trace()``, violation) goes there and the search goes on with the next seed,
    so one defect cannot hide the others. Returns whether a finding went to ``on_finding``."""
    deadline = None if seconds is None else time.perf_counter() + seconds
    stored = [] if database is None else sorted(database.fetch(WALK_KEY))
    reported = False
    for k, walk in enumerate(chain((int.from_bytes(b, "big") for b in stored),
                                   walk_seeds(base_seed, stream))):
        left = remaining()
        if (left is not None and left <= 0) or (
                deadline is not None and time.perf_counter() >= deadline):
            return reported
        value = walk.to_bytes(8, "big")
        found = _attempt(lambda w=walk: play_walk(w), on_finding, last_trace,
                         None if database is None
                         else lambda v=value: database.save(WALK_KEY, v))  # replayed first
        if found:
            reported = True
            if interrupted():
                return reported
        elif k < len(stored):
            database.delete(WALK_KEY, value)  # fixed since: no longer replayed first
    return reported


def seeded(test, seed_value: int, database=None):
    """``test`` with a fixed seed, keeping its example ``database``: Hypothesis's ``@seed``
    turns the database off, and the kit wants both (failures found earlier replay first, then
    the seed decides the rest). A failure Hypothesis cannot repeat when it plays the example
    again is still the engine's: it comes out as the rule it broke, not as a fault of the
    generator (``FlakyFailure``)."""
    test = seed(seed_value)(test)
    if database is not None and hasattr(test, "_hypothesis_internal_use_settings"):
        test._hypothesis_internal_use_settings = settings(
            test._hypothesis_internal_use_settings, database=database)

    def run(*args, **kwargs):
        try:
            return test(*args, **kwargs)
        except FlakyFailure as e:
            v = _first_violation(e)
            if v is None:
                raise
            v.message += (" (played again, the example did not fail the same way: the engine "
                          "does not behave the same way twice, DET-1)")
            raise v from None

    return run


def _first_violation(group: BaseExceptionGroup):
    from kvconf.conformance.violation import Violation

    for e in group.exceptions:
        if isinstance(e, Violation):
            return e
        if isinstance(e, BaseExceptionGroup):
            found = _first_violation(e)
            if found is not None:
                return found
    return None


@contextmanager
def import_independent_draws() -> Iterator[None]:
    """Hypothesis sometimes draws "local constants" harvested from whatever modules happen to be
    imported, so one seed would give different traces under ``kvconf run``, ``pytest`` or an
    engine adapter that imports more. The kit promises same seed, same traces: for the span of a
    fuzz run the harvest is empty. Hypothesis also caches the constants each kind of draw may
    take, harvest included, across tests: a draw made outside such a span (another Hypothesis
    test in the same process, a direct call of a generator) would leave its harvest in that
    cache for the fuzz run after it, so the cache is emptied on the way in and on the way out.
    Where Hypothesis has no such hook this does nothing."""
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # pragma: no cover - a Hypothesis without the feature
        yield
        return
    real = getattr(providers, "_get_local_constants", None)
    if real is None or not hasattr(providers, "Constants"):
        yield
        return
    cache = getattr(getattr(providers, "CONSTANTS_CACHE", None), "cache", None)
    empty = providers.Constants()
    providers._get_local_constants = lambda: empty
    if cache is not None:
        cache.clear()
    try:
        yield
    finally:
        providers._get_local_constants = real
        if cache is not None:
            cache.clear()
