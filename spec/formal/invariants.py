"""The inductive invariants, each citing the behaviours it proves (and the lemmas they need).

Each invariant is a quantifier-free formula over one state. They are proved together: every
one holds initially, and the conjunction of all of them before any action implies each of them
after it. The support lemmas (domains, transfer paths, request holdings) are what makes the
safety rules inductive; they are proved the same way, so nothing is assumed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import z3

from kvconf.reference.requests import HOLDS
from kvconf.reference.requests import State as ReqState
from kvconf.spec.formal.actions import COMPUTES, IN_FLIGHT, Model, member, sel
from kvconf.spec.formal.state import (
    FREE,
    NONE,
    REQ_STATES,
    StateVars,
    caller,
    request_code,
    transfer_code,
)

# The rule that prefix reuse takes a Mamba state only at exactly the reused depth (D162-4).
MAMBA_BEHAVIOURS: tuple[str, ...] = ("MAMBA-3", "MAMBA-4")


@dataclass(frozen=True)
class Invariant:
    name: str
    behaviours: tuple[str, ...]
    doc: str
    formula: Callable[[Model, StateVars], z3.BoolRef]


def _in(e, lo: int, hi: int) -> z3.BoolRef:
    return z3.And(e >= lo, e < hi)


def _count(bools) -> z3.ArithRef:
    return z3.Sum([z3.If(b, 1, 0) for b in bools]) if bools else z3.IntVal(0)


def domains(m: Model, s: StateVars) -> z3.BoolRef:
    P = m.scope
    top = caller(P) + 1
    cs = [_in(o, FREE, top) for o in s.odev + s.ohost]
    for x in range(P.n):
        cs += [z3.Implies(s.dev[x], _in(s.dpg[x], 0, P.device_pages)),
               z3.Implies(z3.Not(s.dev[x]), s.dpg[x] == NONE),
               z3.Implies(s.host[x], _in(s.hpg[x], 0, P.host_pages)),
               z3.Implies(z3.Not(s.host[x]), s.hpg[x] == NONE),
               _in(s.pend[x], NONE, P.transfers),
               z3.Implies(s.pend[x] == NONE, s.tpg[x] == NONE)]
        for t in range(P.transfers):
            cs.append(z3.Implies(s.pend[x] == t, z3.If(
                s.twb[t], _in(s.tpg[x], 0, P.host_pages), _in(s.tpg[x], 0, P.device_pages))))
    for lslot in range(P.locks):
        cs += [z3.If(s.lk[lslot], _in(s.lpos[lslot], 0, P.n), s.lpos[lslot] == NONE)]
    for t in range(P.transfers):
        cs += [z3.If(s.tact[t], _in(s.ttgt[t], 0, P.n), s.ttgt[t] == NONE),
               _in(s.tanc[t], NONE, P.n), z3.Implies(z3.Not(s.tact[t]), s.tanc[t] == NONE)]
    for r in range(P.requests):
        cs += [_in(s.rst[r], 0, len(REQ_STATES)), _in(s.rpos[r], NONE, P.n),
               _in(s.rhpos[r], NONE, P.n), z3.Or(s.rmk[r] == 0, s.rmk[r] == 1, s.rmk[r] == 2),
               z3.If(s.rpage[r], _in(s.rpg[r], 0, P.device_pages), s.rpg[r] == NONE)]
    return z3.And(cs)


def ownership(m: Model, s: StateVars) -> z3.BoolRef:
    """Every page has exactly one owner, and the owner and the holder agree (POOL-1)."""
    P = m.scope
    cs = []
    for dev, present, pg, owners in ((True, s.dev, s.dpg, s.odev), (False, s.host, s.hpg,
                                                                    s.ohost)):
        for x in range(P.n):
            cs.append(z3.Implies(present[x], sel(owners, pg[x]) == x))
        for p, o in enumerate(owners):
            for x in range(P.n):
                cs.append(z3.Implies(o == x, z3.And(present[x], pg[x] == p)))
            for t in range(P.transfers):
                mine = z3.Or([z3.And(s.pend[y] == t, s.tpg[y] == p) for y in range(P.n)])
                wb_ok = s.twb[t] if not dev else z3.Not(s.twb[t])
                cs.append(z3.Implies(o == transfer_code(P, t), z3.And(s.tact[t], wb_ok, mine)))
    for y in range(P.n):
        for t in range(P.transfers):
            code = transfer_code(P, t)
            cs.append(z3.Implies(s.pend[y] == t, z3.And(s.tact[t], z3.If(
                s.twb[t], sel(s.ohost, s.tpg[y]) == code, sel(s.odev, s.tpg[y]) == code))))
        for z in range(y + 1, P.n):
            cs.append(z3.Implies(z3.And(s.pend[y] != NONE, s.pend[y] == s.pend[z]),
                                 s.tpg[y] != s.tpg[z]))
    for r in range(P.requests):
        code = request_code(P, r)
        cs.append(z3.Implies(s.rpage[r], sel(s.odev, s.rpg[r]) == code))
        cs += [z3.Implies(o == code, z3.And(s.rpage[r], s.rpg[r] == p))
               for p, o in enumerate(s.odev)]
        cs += [o != code for o in s.ohost]
    return z3.And(cs)


def conservation(m: Model, s: StateVars) -> z3.BoolRef:
    """Free counts equal the free pages, and no page is left with the caller (POOL-4)."""
    leak = caller(m.scope)
    return z3.And(s.free_d == _count([o == FREE for o in s.odev]),
                  s.free_h == _count([o == FREE for o in s.ohost]),
                  *[o != leak for o in s.odev + s.ohost])


def _holders(m: Model, s: StateVars, x: int, dev: bool) -> z3.ArithRef:
    P = m.scope
    below = P.below(x)
    hs = [z3.And(s.lk[k], s.ldev[k] == dev, member(s.lpos[k], below)) for k in range(P.locks)]
    for t in range(P.transfers):
        src = s.twb[t] if dev else z3.Not(s.twb[t])
        hs.append(z3.And(s.tact[t], src, member(s.ttgt[t], below)))  # the copied path
        hs.append(z3.And(s.tact[t], z3.Not(src), member(s.tanc[t], below)))  # the anchor
    for r in range(P.requests):
        held, at = (s.rpin[r], s.rpos[r]) if dev else (s.rhpin[r], s.rhpos[r])
        hs.append(z3.And(held, member(at, below)))
    return _count(hs)


def refcounts(m: Model, s: StateVars) -> z3.BoolRef:
    """A reference count equals the locks held on the node or below it, and is never negative
    (PIN-1, PIN-3)."""
    cs = []
    for x in range(m.scope.n):
        cs += [s.dref[x] == _holders(m, s, x, True), s.href[x] == _holders(m, s, x, False),
               s.dref[x] >= 0, s.href[x] >= 0]
    return z3.And(cs)


def pinned_present(m: Model, s: StateVars) -> z3.BoolRef:
    """A pinned node keeps its pages on the pinned tier (PIN-2)."""
    return z3.And([z3.And(z3.Implies(s.dref[x] > 0, s.dev[x]),
                          z3.Implies(s.href[x] > 0, s.host[x])) for x in range(m.scope.n)])


def closure(m: Model, s: StateVars) -> z3.BoolRef:
    """Presence on a tier is closed under ancestors (HOST-1)."""
    P = m.scope
    cs = []
    for x in range(P.n):
        p = P.parent(x)
        if p != NONE:
            cs += [z3.Implies(s.dev[x], s.dev[p]), z3.Implies(s.host[x], s.host[p])]
    return z3.And(cs)


def transfer_paths(m: Model, s: StateVars) -> z3.BoolRef:
    """A transfer in flight copies exactly the path below its anchor, which stays on the
    destination tier, into positions not yet there for a writeback (HOST-2, HOST-3)."""
    P = m.scope
    cs = []
    for t in range(P.transfers):
        for x in range(P.n):
            path = P.path(x)
            on = z3.And(s.tact[t], s.ttgt[t] == x)
            cs.append(z3.Implies(on, member(s.tanc[t], [NONE] + path[:-1])))
            for y in path:
                cs.append(z3.Implies(on, (s.pend[y] == t) == z3.Not(
                    member(s.tanc[t], P.below(y)))))
            cs.append(z3.Implies(on, z3.If(s.twb[t], s.dev[x], s.host[x])))
            for a in path[:-1]:
                cs.append(z3.Implies(z3.And(on, s.tanc[t] == a),
                                     z3.If(s.twb[t], s.host[a], s.dev[a])))
        for y in range(P.n):
            cs.append(z3.Implies(s.pend[y] == t, z3.And(
                s.tact[t], member(s.ttgt[t], P.below(y)),
                z3.Implies(s.twb[t], z3.Not(s.host[y])))))
    return z3.And(cs)


def no_forward_in_flight(m: Model, s: StateVars) -> z3.BoolRef:
    """No forward is planned for a request whose own data is in flight (PLAN-5): a request
    with a copy in flight is only in a state the table enters by starting that copy, or
    Finished (aborted meanwhile), and never in a state a forward is planned from."""
    cs = []
    fin = REQ_STATES.index(ReqState.FINISHED)
    for r in range(m.scope.requests):
        st, fl = s.rst[r], s.rfl[r]
        cs.append(z3.Implies(fl, z3.And([st != REQ_STATES.index(c) for c in COMPUTES])))
        cs.append(z3.Implies(fl, z3.Or([st == REQ_STATES.index(c) for c in IN_FLIGHT]
                                       + [st == fin])))
        cs += [z3.Implies(st == REQ_STATES.index(c), fl) for c in IN_FLIGHT]
    return z3.And(cs)


def request_holds(m: Model, s: StateVars) -> z3.BoolRef:
    """A request holds exactly what the table lists for its state (REQ-3)."""
    cs = []
    for r in range(m.scope.requests):
        for i, st in enumerate(REQ_STATES):
            h = HOLDS[st]
            cs.append(z3.Implies(s.rst[r] == i, z3.And(
                s.rpin[r] == ("pin" in h), s.rhpin[r] == ("host_pin" in h),
                s.rpage[r] == ("pages" in h))))
        cs += [z3.Implies(z3.Not(s.rpin[r]), z3.And(s.rpos[r] == NONE, s.rmk[r] == 0)),
               z3.Implies(z3.Not(s.rhpin[r]), s.rhpos[r] == NONE)]
    return z3.And(cs)


def namespaces(m: Model, s: StateVars) -> z3.BoolRef:
    """Cached KV is served only in its own namespace, and a request pins only nodes of its own
    (NS-1, NS-3)."""
    P = m.scope
    cs = [z3.Implies(z3.Or(s.dev[x], s.host[x]), s.cont[x] == P.ns(x)) for x in range(P.n)]
    for r in range(P.requests):
        mine = [NONE] + P.in_ns(r % P.namespaces)
        cs += [member(s.rpos[r], mine), member(s.rhpos[r], mine)]
    return z3.And(cs)


def mamba_depth(m: Model, s: StateVars) -> z3.BoolRef:
    """A request that reuses a cached prefix with its Mamba state took a state of exactly the
    reused depth; only a recovery after retraction may take another (D162-4)."""
    cs = []
    for r in range(m.scope.requests):
        cs.append(z3.Implies(s.rmk[r] == 1, z3.And(
            s.rpin[r], s.rpos[r] != NONE, s.rmd[r] == m.depth_of(s.rpos[r]))))
    return z3.And(cs)


INVARIANTS: tuple[Invariant, ...] = (
    Invariant("state-domains", ("REQ-1", "POOL-1"),
              "every field in range; request states are the table's", domains),
    Invariant("page-ownership-exclusive", ("POOL-1", "HOST-2", "HOST-3", "REQ-3"),
              "one owner per page, agreeing with its holder", ownership),
    Invariant("pages-conserved", ("POOL-4", "TREE-5"),
              "free counts match, nothing left with the caller", conservation),
    Invariant("refcount-equals-pins", ("PIN-1", "PIN-3"),
              "counts equal the locks held at or below, never negative", refcounts),
    Invariant("pinned-never-evicted", ("PIN-2", "EVICT-1"),
              "a pinned node keeps its pages on that tier", pinned_present),
    Invariant("tier-closed-under-ancestors", ("HOST-1",),
              "a node on a tier has its parent on that tier", closure),
    Invariant("transfer-paths", ("HOST-2", "HOST-3"),
              "a copy in flight covers its path below a pinned anchor", transfer_paths),
    Invariant("no-forward-on-data-in-flight", ("PLAN-5", "REQ-4"),
              "no forward state while the request's copy is in flight", no_forward_in_flight),
    Invariant("request-holds-per-state", ("REQ-3",),
              "a request holds what the table lists", request_holds),
    Invariant("namespace-isolation", ("NS-1", "NS-3"),
              "KV lives and is pinned only in its own namespace", namespaces),
    Invariant("mamba-reuse-exact-depth", MAMBA_BEHAVIOURS,
              "prefix reuse takes a Mamba state of exactly the reused depth", mamba_depth),
)


def all_hold(m: Model, s: StateVars) -> z3.BoolRef:
    return z3.And([inv.formula(m, s) for inv in INVARIANTS])
