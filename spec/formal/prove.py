"""Proof obligations: induction per invariant, bounded model checking, reachability.

Induction is split per action instance (one small query each), so a failing proof names the
action and prints the counterexample to induction as two readable states. z3 runs with a fixed
seed; a time-out only ever makes an obligation ``unknown``, never ``proved``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import z3

from kvconf.spec.formal.actions import Action, Model
from kvconf.spec.formal.invariants import INVARIANTS, Invariant, all_hold
from kvconf.spec.formal.scope import Scope
from kvconf.spec.formal.state import StateVars, show

PROVED, COUNTEREXAMPLE, UNKNOWN = "proved", "counterexample", "unknown"


def _solver(timeout_ms: int) -> z3.Solver:
    z3.set_param("smt.random_seed", 0)
    s = z3.Then("simplify", "propagate-values", "solve-eqs", "smt").solver()
    s.set("timeout", timeout_ms)
    s.set("random_seed", 0)
    return s


@dataclass
class Result:
    obligation: str
    behaviours: tuple[str, ...]
    status: str
    seconds: float
    detail: str = ""
    trace: str | None = None
    cti: list[str] = field(default_factory=list)


@dataclass
class Run:
    """A path of the model: states and the actions between them."""

    states: list[dict]
    actions: list[Action]

    def render(self, scope: Scope) -> list[str]:
        lines = ["state 0:", *show(scope, self.states[0])]
        for i, a in enumerate(self.actions, 1):
            lines += [f"-- {a.label(scope)} -->", f"state {i}:", *show(scope, self.states[i])]
        return lines


def induction(model: Model, timeout_ms: int = 20000) -> dict[str, Result]:
    """Every invariant holds initially and is preserved by every action instance."""
    P = model.scope
    s, s2 = StateVars(P, "s"), StateVars(P, "s'")
    c = model.choices("c")
    res: dict[str, Result] = {}
    spent: dict[str, float] = {inv.name: 0.0 for inv in INVARIANTS}
    for inv in INVARIANTS:
        t0 = time.perf_counter()
        so = _solver(timeout_ms)
        so.add(model.init(s), z3.Not(inv.formula(model, s)))
        r = so.check()
        spent[inv.name] += time.perf_counter() - t0
        if r != z3.unsat:
            res[inv.name] = _fail(inv, r, "the initial state", [], 0.0)
    hold, broken = all_hold(model, s), z3.Not(all_hold(model, s2))
    unknown: dict[str, str] = {}
    share = 1.0 / len(INVARIANTS)
    for k, action in enumerate(model.actions()):
        t0 = time.perf_counter()
        so = _solver(timeout_ms)
        so.add(hold, broken, model.instance(s, s2, c, k))
        r = so.check()
        dt = time.perf_counter() - t0
        for name in spent:
            spent[name] += dt * share
        if r == z3.unknown:
            for inv in INVARIANTS:
                unknown.setdefault(inv.name, action.label(P))
            continue
        if r == z3.sat:
            mo = so.model()
            before, after = s.values(mo), s2.values(mo)
            for inv in INVARIANTS:
                if inv.name not in res and z3.is_false(mo.eval(inv.formula(model, s2),
                                                               model_completion=True)):
                    cti = ["before:", *show(P, before), f"-- {action.label(P)} -->", "after:",
                           *show(P, after)]
                    res[inv.name] = _fail(inv, r, action.label(P), cti, 0.0)
    for inv in INVARIANTS:
        secs = round(spent[inv.name], 3)
        if inv.name in res:
            res[inv.name].seconds = secs
        elif inv.name in unknown:
            res[inv.name] = Result(inv.name, inv.behaviours, UNKNOWN, secs,
                                   f"solver time-out on {unknown[inv.name]}")
        else:
            res[inv.name] = Result(inv.name, inv.behaviours, PROVED, secs,
                                   f"inductive over {len(model.actions())} actions")
    return res


def _fail(inv: Invariant, r, where: str, cti: list[str], secs: float) -> Result:
    if r == z3.unknown:
        return Result(inv.name, inv.behaviours, UNKNOWN, secs, f"solver time-out at {where}")
    return Result(inv.name, inv.behaviours, COUNTEREXAMPLE, secs,
                  f"not preserved by {where}", cti=cti)


def bmc(model: Model, depth: int, target: Invariant | None = None, *,
        cache_only: bool = False, faithful: bool = False,
        timeout_ms: int = 60000) -> Run | None:
    """The shortest path from the initial state (up to ``depth`` actions) to a state where
    ``target`` (default: any invariant) fails. ``cache_only`` keeps to the actions a cache-level
    trace can express; ``faithful`` lets an eviction pick only the single candidate of its
    tier, so any engine evicts the same node when the trace is replayed."""
    P = model.scope
    actions = model.actions()
    allowed = [k for k, a in enumerate(actions) if a.cache_level or not cache_only]
    states = [StateVars(P, "s0")]
    acts: list[z3.ArithRef] = []
    so = _solver(timeout_ms)
    so.add(model.init(states[0]))
    bad = (lambda st: z3.Not(target.formula(model, st))) if target else (
        lambda st: z3.Not(all_hold(model, st)))
    for i in range(depth + 1):
        so.push()
        so.add(bad(states[i]))
        r = so.check()
        if r == z3.sat:
            mo = so.model()
            return Run([st.values(mo) for st in states],
                       [actions[mo.eval(a).as_long()] for a in acts])
        so.pop()
        if i == depth:
            return None
        nxt, act = StateVars(P, f"s{i + 1}"), z3.Int(f"act{i}")
        so.add(model.step(states[i], nxt, model.choices(f"c{i}"), act, allowed))
        if faithful:
            so.add(_unique_victims(model, states[i], act))
        states.append(nxt)
        acts.append(act)
    return None


def _unique_victims(model: Model, s: StateVars, act) -> z3.BoolRef:
    cs = []
    for k, a in enumerate(model.actions()):
        if a.kind == "evict":
            x, dev = a.params
            others = [model.evictable(s, y, dev) for y in range(model.scope.n) if y != x]
            cs.append(z3.Implies(act == k, z3.Not(z3.Or(others)) if others else True))
    return z3.And(cs)


def reachable(model: Model, depth: int, goals: Sequence[str] | None = None,
              timeout_ms: int = 60000) -> tuple[set[str], set[str]]:
    """Which request states and action kinds (``Action.coverage_key``) some path of at most
    ``depth`` actions reaches; returns (reached, missed). Greedy: each model found marks every
    goal it shows, so a few queries cover all."""
    P = model.scope
    from kvconf.spec.formal.state import REQ_STATES

    actions = model.actions()
    keys = sorted({a.coverage_key() for a in actions})
    want = set(goals or keys + [f"state {st.value}" for st in REQ_STATES])
    states = [StateVars(P, "s0")]
    acts = []
    so = _solver(timeout_ms)
    so.add(model.init(states[0]))
    for i in range(depth):
        nxt, act = StateVars(P, f"s{i + 1}"), z3.Int(f"act{i}")
        so.add(model.step(states[i], nxt, model.choices(f"c{i}"), act))
        states.append(nxt)
        acts.append(act)

    def goal(g: str) -> z3.BoolRef:
        if g.startswith("state "):
            idx = [st.value for st in REQ_STATES].index(g[6:])
            return z3.Or([st.rst[r] == idx for st in states for r in range(P.requests)])
        ks = [k for k, a in enumerate(actions) if a.coverage_key() == g]
        return z3.Or([z3.Or([a == k for k in ks]) for a in acts])

    reached: set[str] = set()
    while want - reached:
        left = sorted(want - reached)
        so.push()
        so.add(z3.Or([goal(g) for g in left]))
        r = so.check()
        if r != z3.sat:
            so.pop()
            break
        mo = so.model()
        so.pop()
        for g in left:
            if z3.is_true(mo.eval(goal(g), model_completion=True)):
                reached.add(g)
    return reached, want - reached
