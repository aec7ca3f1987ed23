"""Units of work: a case's budget cut into slices that any worker, on any machine, can run.

A hand-written case is one unit. A fuzz case with a budget of examples is cut into units of about
``UNIT_EXAMPLES`` examples, each with a seed derived from the run's seed and its index, so the
cut depends on the budget alone: one worker or eight, one machine or a CI matrix of shards, the
same units run with the same seeds. The case's result is its units' results in index order up to
the first that ended in ERROR or TIMEOUT (spec chapter faults, "Statuses of a run"): a unit past
that one is never part of it, whichever finished first. A FAIL or a CRASH does not end it: each is
a finding (a crash's signature names how the process ended), and the case's findings are every
unit's, one per signature (``kvconf.conformance.running.findings``).
A budget in seconds is cut into one unit per worker of the whole campaign (``--jobs`` times the
shard count), each with its share of the seconds; such a run is bounded by time, so its results
depend on the machine anyway.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kvconf.conformance.errors import KitError
from kvconf.conformance.reporting.report import BAD, CaseResult, Coverage, Status, UnitResult
from kvconf.conformance.running.profiles import Budget

UNIT_EXAMPLES = 25  # examples per unit of a fuzz case with a budget of examples


@dataclass(frozen=True, slots=True)
class Unit:
    case: str
    index: int
    of: int
    budget: Budget  # this unit's share: examples, or seconds

    @property
    def label(self) -> str:
        return self.case if self.of == 1 else f"{self.case}[{self.index + 1}/{self.of}]"


@dataclass(frozen=True, slots=True)
class EngineUnit(Unit):
    """A unit of one of several engines sharing a pool (the kill matrix: a mutant each; the
    variant matrix: a variant each). ``engine`` is its engine's name in the campaign: the key of
    its worker spec and the name of its report folder."""

    engine: str = ""


def for_engine(engine: str, units: Iterable[Unit]) -> list[EngineUnit]:
    """``units`` as units of ``engine``: same cases, indices and budgets."""
    return [EngineUnit(u.case, u.index, u.of, u.budget, engine) for u in units]


def place(units: Sequence[Unit], unit: Unit) -> int:
    """Where ``unit`` (the same case and index) stands in ``units``: the order a verdict reads
    its units in, whichever worker finished first."""
    return next(i for i, u in enumerate(units) if u.case == unit.case and u.index == unit.index)


@dataclass(frozen=True, slots=True)
class Shard:
    """The ``index``-th (1-based) of ``count`` slices of a run's work."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str | None) -> Shard | None:
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise KitError(f"--shard {text!r}: expected i/N with 1 <= i <= N (the i-th of N slices)")
    return Shard(int(m.group(1)), int(m.group(2)))


def split(case: str, fuzz: bool, budget: Budget, streams: int) -> list[Unit]:
    """The units of one case. ``streams`` is the campaign's worker count (time budgets only)."""
    if not fuzz:
        return [Unit(case, 0, 1, budget)]
    if budget.examples is not None:
        n = max(1, math.ceil(budget.examples / UNIT_EXAMPLES))
        base, extra = divmod(budget.examples, n)
        return [Unit(case, k, n, Budget(examples=base + (k < extra))) for k in range(n)]
    n = max(1, streams)
    return [Unit(case, k, n, Budget(seconds=(budget.seconds or 0) / n)) for k in range(n)]


def plan(cases: Iterable[tuple[str, bool]], budget: Budget, streams: int,
         shard: Shard | None = None) -> list[Unit]:
    """Every unit of ``cases`` (name, fuzz) in suite order; with a shard, every N-th of them,
    so the slices are disjoint, cover the run, and each gets a share of every long case."""
    units = [u for name, fuzz in cases for u in split(name, fuzz, budget, streams)]
    if shard is None:
        return units
    return [u for j, u in enumerate(units) if j % shard.count == shard.index - 1]


def failed(status: Status) -> bool:
    """A unit that did not pass (the statuses that fail a run)."""
    return status in BAD


def ends(status: Status) -> bool:
    """A unit whose result ends its case's: ERROR or TIMEOUT (the units past it are not part
    of the case). A FAIL or a CRASH does not: its findings are kept and the later units'
    findings join them, so one defect found early (a known crash, say) cannot hide another
    found later. A TIMEOUT still ends it: it has no signature, and every unit after it could
    cost a whole deadline."""
    return status in (Status.ERROR, Status.TIMEOUT)


def union(covers: Iterable[Coverage | None]) -> Coverage | None:
    exercised: set[tuple[str, str]] = set()
    illegal: set[tuple[str, str]] = set()
    pairs: set[tuple[str, str]] = set()
    seen = False
    for c in covers:
        if c is None:
            continue
        seen = True
        exercised |= {tuple(p) for p in c.exercised}
        illegal |= {tuple(p) for p in c.illegal}
        pairs |= {tuple(p) for p in c.pairs}
    if not seen:
        return None
    return Coverage(exercised=sorted(exercised), illegal=sorted(illegal), pairs=sorted(pairs))


def judged_union(results: Iterable[CaseResult]) -> list[str] | None:
    """The rules the results judged, together (sorted); None where none of them says (a
    report older than kvconf-report/5). A shard's result judged for all the units it ran: a
    rule a unit past the case's end judged there counts too (a check of it ran)."""
    lists = [r.judged for r in {id(r): r for r in results}.values() if r.judged is not None]
    return sorted({b for js in lists for b in js}) if lists else None


def combine(results: Sequence[CaseResult], passed_message: str,
            expected: Sequence[int] | None = None) -> CaseResult:
    """A fuzz case's result from results that carry its units (one each from the workers, or
    several each from shard reports): the units in index order up to the first that ended
    the case (``ends``); the first of them that did not pass gives the case's status, message
    and trace, and the findings of all of them are merged, one per signature, in unit order.
    ``expected`` are the unit indexes this run owns (a shard owns some); a unit missing from
    them ends nothing: an interrupted run keeps a finding made after it."""
    from kvconf.conformance.running.findings import merge

    have = {u.index: (u, r) for r in results for u in (r.units or [])}
    order = list(expected) if expected is not None else sorted(have)
    taken: list[tuple[UnitResult, CaseResult]] = []
    for k in order:
        if k in have:
            taken.append(have[k])
            if ends(have[k][0].status):
                break
    units = [u for u, _ in taken]
    examples = [u.examples for u in units if u.examples is not None]
    update = {"examples": sum(examples) if examples else None, "units": units,
              "duration_s": round(sum(u.duration_s for u in units), 4),
              "coverage": union(u.coverage for u in units),
              "judged": judged_union(r for _u, r in taken)}
    bad = next(((u, r) for u, r in taken if failed(u.status)), None)
    if bad is not None:
        # A shard's result carries several units' findings: each is taken with its own unit,
        # so where units share a signature the lowest unit's finding (and trace) is kept.
        findings, dropped = merge([f for f in r.findings if f.unit in (None, u.index)]
                                  for u, r in taken)
        repeats = [r.repeats for _, r in taken if r.repeats is not None]
        if findings:
            update["findings"] = findings
            update["repeats"] = sum(repeats) + dropped
        if not examples:
            update["examples"] = bad[1].examples
        return bad[1].model_copy(update=update)
    last = taken[-1][1]
    ops: dict[str, int] = {}
    for u in units:
        for k, v in u.ops.items():
            ops[k] = ops.get(k, 0) + v
    steps = [u.steps for u in units if u.steps is not None]
    # What a unit added to the case's doc: rules its workloads could not judge, said once.
    notes = dict.fromkeys(n for _u, r in taken if r.message.startswith(passed_message + "; ")
                          for n in r.message[len(passed_message) + 2:].split("; ")
                          if n.endswith(" not judged") or " not judged:" in n)
    message = "; ".join([passed_message, *notes]) + (
        f"; ops played: {dict(sorted(ops.items()))}" if ops else "")
    return last.model_copy(update={**update, "steps": sum(steps) if steps else None,
                                   "message": message})
