"""The engine calls of one scheduler-level play, in order, and their replay on a fresh engine.

DET-1 asks that the same workload from the same initial state gives the same outcome. The
driver's decisions (when to abort, which illegal event to probe with, when the workload is at
rest) read the engine's snapshots, so a second play with the driver would pay every snapshot and
every oracle again. Instead the first play records what it handed the engine (submits,
``next_plan``, advances, probes and whether each was rejected, event drains) and the plans it got
back; the replay hands a fresh engine the same calls, looks at nothing else, and compares each
plan and each probe's answer with the first play's. For an engine that answers alike both times,
the driver would have decided alike too: the replay then makes exactly the calls a second driver
would make. The first difference is reported at the plan it shows in, as a second driver would
have reported it. The snapshots, counters and transitions the oracles read are not replayed: they
judge the engine, they are not its input.
"""

from __future__ import annotations

from typing import Any

from kvconf.conformance.errors import EngineRejected
from kvconf.conformance.faults import DOCUMENTED, call_legal, raised
from kvconf.conformance.oracles.determinism import DeterminismOracle
from kvconf.conformance.running import flight
from kvconf.reference.plan import Plan


def plan_record(step: int, plan: Plan) -> tuple:
    """What DET-1 compares of a plan: its rows (request, kind, start, input length, reuse, page
    table) and its copies (loadbacks, writebacks and L3 transfers, with their pages, and the
    writebacks it flushes, HOST-14)."""
    return ("plan", step, [(r.rid, r.kind, r.start, len(r.input_tokens), r.reused, r.page_table)
                           for r in plan.rows],
            [(c.kind, c.pairs) for c in plan.loadbacks + plan.writebacks]
            + [(o.kind, o.rid, o.start, o.pages, o.keys) for o in plan.l3]
            + ([("flush", plan.flush)] if plan.flush else []))


# Entries of a tape: ("submit", specs), ("plan", record), ("advance", events),
# ("probe", events, answer) with answer "rejected" or "accepted", ("drain",).
Tape = list[tuple[Any, ...]]


def replay(engine, tape: Tape) -> None:
    """Hand ``engine`` (fresh, of the first play's configuration) the tape's calls in order;
    raise DET-1 at the first plan or probe answer that differs from the first play's."""
    oracle = DeterminismOracle()
    plans = 0  # the plan's index in the driver's log (its entries before the end are plans)
    for entry in tape:
        kind = entry[0]
        if kind == "plan":
            flight.beat()
            want = entry[1]
            got = plan_record(want[1], call_legal("next_plan", engine.next_plan))
            if got != want:  # the oracle only where they differ: it raises then
                oracle.compare([want], [got], offset=plans)
            plans += 1
        elif kind == "submit":
            call_legal("submit", engine.submit, entry[1])
        elif kind == "advance":
            call_legal("advance", engine.advance, entry[1])
        elif kind == "drain":
            list(engine.drain_events())
        else:  # a probe: an event the engine must reject (or, where declared, may ignore)
            events, answer = entry[1], entry[2]
            try:
                engine.advance(events)
                now = "accepted"
            except EngineRejected:
                now = "rejected"
            except Exception as e:
                raise raised(str(events), e, DOCUMENTED) from e
            if now != answer:
                v = oracle.fail("DET-1", f"after {plans} plans, the probe {events} was {answer} in "
                                f"the first run and {now} in the second")
                v.step = plans
                raise v
