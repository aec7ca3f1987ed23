"""The transition relation: cache actions and the request state machine, as z3 formulas.

Each *action instance* is a guard and a set of updates over one state ``s`` and a vector of
choice constants ``c`` (which free page, which position a request pins); a step picks one
instance by its index ``act``, and every field no instance of that index updates keeps its value.

Cache actions follow ``reference/prefix_cache.py`` at page size 1 (one position per page):
insert (the kit allocates a page per token page and the duplicates go back, TREE-5), lock and
unlock (PIN-1), evict a leaf (EVICT-1, PIN-2), writeback and loadback start (HOST-2, HOST-3) and
their acknowledgement, successful or failed (HOST-4). Request actions are generated from
``kvconf.reference.requests.TRANSITIONS`` and ``HOLDS`` (data, not a copy): entering a state that holds
a pin takes one, leaving it releases it, and so on.

:class:`Model` keeps the rules that defects break as overridable hooks, so tests can plant a
catalog defect in the model and watch the proof fail.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import z3

from kvconf.reference.requests import HOLDS, TRANSITIONS, Event
from kvconf.reference.requests import State as ReqState
from kvconf.spec.formal.scope import Scope
from kvconf.spec.formal.state import (
    FREE,
    NONE,
    REQ_STATES,
    StateVars,
    caller,
    request_code,
    transfer_code,
)

CHOICES_MIN = 6
FORWARD_EVENTS = (Event.CHUNK, Event.LAST_CHUNK, Event.DECODE)
PUBLISH_EVENTS = (Event.FINISH, Event.RETRACT, Event.RETRACT_NO_COPY)
# States a forward may be planned from, read off the table (PLAN-5 forbids them while in flight).
COMPUTES = frozenset(s for (s, e) in TRANSITIONS if e in FORWARD_EVENTS)
# States entered by starting a copy of the request's own data, read off the table.
IN_FLIGHT = frozenset(d for (s, e), ts in TRANSITIONS.items()
                      if e in (Event.RETRACT, Event.WRITEBACK) for d in ts
                      if d is not ReqState.FINISHED)
CACHE_KINDS = ("insert", "lock", "unlock", "evict", "writeback", "loadback", "ack")


@dataclass(frozen=True)
class Action:
    """One action instance: its kind and the parameters a trace step needs."""

    kind: str
    params: tuple

    def label(self, scope: Scope) -> str:
        p = self.params
        if self.kind == "insert":
            return f"insert ns {p[0]} tokens {list(p[1])}"
        if self.kind in ("lock", "unlock"):
            return f"{self.kind} l{p[0]} {scope.label(p[1])} on {'device' if p[2] else 'host'}"
        if self.kind == "evict":
            return f"evict {scope.label(p[0])} from {'device' if p[1] else 'host'}"
        if self.kind in ("writeback", "loadback"):
            return f"{self.kind} t{p[0]} of {scope.label(p[2])} (lock l{p[1]})"
        if self.kind == "ack":
            kind = "writeback" if p[3] else "loadback"
            return f"ack t{p[0]} ({kind} of {scope.label(p[2])}) success={p[1]}"
        if self.kind == "req":
            return f"request r{p[0]}: {p[1]} --{p[2]}--> {p[3]}"
        return f"{self.kind} r{p[0]}"

    @property
    def cache_level(self) -> bool:
        return self.kind in CACHE_KINDS

    def coverage_key(self) -> str:
        """What reachability must show: each table entry, each cache action by tier/outcome."""
        p = self.params
        if self.kind == "req":
            return f"req {p[1]} --{p[2]}--> {p[3]}"
        if self.kind in ("lock", "unlock"):
            return f"{self.kind} {'device' if p[2] else 'host'}"
        if self.kind == "evict":
            return f"evict {'device' if p[1] else 'host'}"
        if self.kind == "ack":
            return f"ack {'writeback' if p[3] else 'loadback'} success={p[1]}"
        return self.kind


def sel(xs: Sequence[Any], e: Any, default: Any = FREE) -> Any:
    """``xs[e]`` for a symbolic index ``e`` (``default`` out of range)."""
    out = default
    for i, x in enumerate(xs):
        out = z3.If(e == i, x, out)
    return out


def member(e: Any, xs: Sequence[int]) -> z3.BoolRef:
    return z3.Or([e == x for x in xs]) if xs else z3.BoolVal(False)


class Upd:
    """Updates of one instance, composed in order (a later update sees the earlier ones)."""

    def __init__(self, s: StateVars) -> None:
        self.s = s
        self.u: dict[tuple[str, int | None], Any] = {}

    def get(self, name: str, i: int | None = None) -> Any:
        return self.u.get((name, i), self.s.var((name, i)))

    def set(self, name: str, i: int | None, e: Any) -> None:
        self.u[(name, i)] = e

    def inc(self, name: str, i: int | None, d: Any) -> None:
        self.u[(name, i)] = self.get(name, i) + d

    def own(self, field: str, page: Any, code: Any) -> None:
        for p in range(len(self.s.f[field])):
            self.set(field, p, z3.If(page == p, code, self.get(field, p)))


def _count(bools: Sequence[Any]) -> Any:
    return z3.Sum([z3.If(b, 1, 0) for b in bools]) if bools else z3.IntVal(0)


class Model:
    """The correct model. Subclasses override a hook to plant one defect."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.nchoices = max(CHOICES_MIN, scope.depth)
        self._actions: list[Action] | None = None

    # ------------------------------------------------------------------ hooks (planted defects)
    def insert_target(self, ns: int, tokens: tuple[int, ...]) -> int:
        """The position an insert in ``ns`` lands at (NS-1: its own namespace)."""
        return self.scope.index(ns, tokens)

    def duplicate_owner(self) -> int:
        """Who gets a duplicate caller page at insert (TREE-5: the free list)."""
        return FREE

    def evict_respects_pins(self) -> bool:
        """PIN-2 / EVICT-1: only unpinned leaves are candidates."""
        return True

    def writeback_pins_anchor(self) -> bool:
        """HOST-2: a writeback pins the host copy of the path's parent until it lands."""
        return True

    def mamba_exact(self) -> bool:
        """Prefix reuse takes a Mamba state only at exactly the reused depth."""
        return True

    # ------------------------------------------------------------------ structure
    def init(self, s: StateVars) -> z3.BoolRef:
        P = self.scope
        cs = [s.free_d == P.device_pages, s.free_h == P.host_pages]
        for x in range(P.n):
            cs += [z3.Not(s.dev[x]), z3.Not(s.host[x]), s.dpg[x] == NONE, s.hpg[x] == NONE,
                   s.dref[x] == 0, s.href[x] == 0, s.pend[x] == NONE, s.tpg[x] == NONE,
                   s.cont[x] == NONE, s.mdep[x] == NONE]
        cs += [o == FREE for o in s.odev + s.ohost]
        for lslot in range(P.locks):
            cs += [z3.Not(s.lk[lslot]), s.lpos[lslot] == NONE, z3.Not(s.ldev[lslot])]
        for t in range(P.transfers):
            cs += [z3.Not(s.tact[t]), z3.Not(s.twb[t]), s.ttgt[t] == NONE, s.tanc[t] == NONE]
        sub = REQ_STATES.index(ReqState.SUBMITTED)
        for r in range(P.requests):
            cs += [s.rst[r] == sub, z3.Not(s.rpin[r]), s.rpos[r] == NONE, z3.Not(s.rhpin[r]),
                   s.rhpos[r] == NONE, z3.Not(s.rpage[r]), s.rpg[r] == NONE,
                   z3.Not(s.rfl[r]), s.rmk[r] == 0, s.rmd[r] == NONE]
        return z3.And(cs)

    def actions(self) -> list[Action]:
        """Every action instance, in a fixed order (the meaning of ``act``)."""
        if self._actions is None:
            self._actions = [a for a, _g, _u in self._instances(None, None)]
        return self._actions

    def choices(self, tag: str) -> list[Any]:
        return [z3.Int(f"{tag}.c{i}") for i in range(self.nchoices)]

    def step(self, s: StateVars, s2: StateVars, c: Sequence[Any], act: Any,
             allowed: Sequence[int] | None = None) -> z3.BoolRef:
        """``s --act--> s2`` for some instance (restricted to ``allowed`` indices if given)."""
        insts = self._instances(s, c)
        idx = list(range(len(insts))) if allowed is None else list(allowed)
        cs = [member(act, idx)]
        chains: dict[tuple[str, int | None], Any] = {}
        for k in idx:
            _a, g, u = insts[k]
            cs.append(z3.Implies(act == k, g))
            for key, e in u.u.items():
                chains[key] = z3.If(act == k, e, chains.get(key, s.var(key)))
        for key in s.fields():
            cs.append(s2.var(key) == chains.get(key, s.var(key)))
        return z3.And(cs)

    def instance(self, s: StateVars, s2: StateVars, c: Sequence[Any], k: int) -> z3.BoolRef:
        """``s --k--> s2`` for one fixed instance ``k`` (the agreement check)."""
        return self.instances(s, s2, c)[k]

    def instances(self, s: StateVars, s2: StateVars, c: Sequence[Any]) -> list[z3.BoolRef]:
        """``s --k--> s2`` for every instance ``k``, built at once (the agreement check asks
        for many instances between the same two states; building them one by one would build
        every instance each time)."""
        return [z3.And([g] + [s2.var(key) == u.u.get(key, s.var(key)) for key in s.fields()])
                for _a, g, u in self._instances(s, c)]

    # ------------------------------------------------------------------ the instances
    def _instances(self, s: StateVars | None, c: Sequence[Any] | None) -> list:
        """(Action, guard, Upd) for every instance; with ``s`` None only the actions."""
        P = self.scope
        out: list = []

        def add(action: Action, build) -> None:
            if s is None:
                out.append((action, None, None))
            else:
                u = Upd(s)
                g = build(u)
                out.append((action, z3.And(g) if isinstance(g, list) else g, u))

        for ns in range(P.namespaces):
            for x in P.in_ns(ns):
                toks = P.tokens_of(x)
                add(Action("insert", (ns, toks)), lambda u, ns=ns, toks=toks:
                    self._insert(u, c, ns, toks))
        for lslot in range(P.locks):
            for x in range(P.n):
                for dev in (True, False):
                    add(Action("lock", (lslot, x, dev)),
                        lambda u, lslot=lslot, x=x, dev=dev: self._lock(u, lslot, x, dev))
                    add(Action("unlock", (lslot, x, dev)),
                        lambda u, lslot=lslot, x=x, dev=dev: self._unlock(u, lslot, x, dev))
        for x in range(P.n):
            for dev in (True, False):
                add(Action("evict", (x, dev)), lambda u, x=x, dev=dev: self._evict(u, x, dev))
        for t in range(P.transfers):
            for lslot in range(P.locks):
                for x in range(P.n):
                    for wb in (True, False):
                        kind = "writeback" if wb else "loadback"
                        add(Action(kind, (t, lslot, x)),
                            lambda u, t=t, lslot=lslot, x=x, wb=wb:
                            self._start(u, c, t, lslot, x, wb))
            for ok in (True, False):
                for x in range(P.n):
                    for wb in (True, False):
                        add(Action("ack", (t, ok, x, wb)),
                            lambda u, t=t, ok=ok, x=x, wb=wb: self._ack(u, t, ok, x, wb))
        for r in range(P.requests):
            for (src, ev), targets in TRANSITIONS.items():
                for dst in targets:
                    add(Action("req", (r, src.value, ev.value, dst.value)),
                        lambda u, r=r, src=src, ev=ev, dst=dst:
                        self._request(u, c, r, src, ev, dst))
            add(Action("req-ack", (r,)), lambda u, r=r: self._late_ack(u, r))
            add(Action("req-new", (r,)), lambda u, r=r: self._recycle(u, r))
        return out

    # ------------------------------------------------------------------ helpers
    def _tier(self, dev: bool) -> tuple[str, str, str, str, str, int]:
        """Field names (present, page, ref, owners, free) and pool size of a tier."""
        P = self.scope
        return (("dev", "dpg", "dref", "odev", "free_d", P.device_pages) if dev
                else ("host", "hpg", "href", "ohost", "free_h", P.host_pages))

    def _pin(self, u: Upd, at: Any, dev: bool, d: int, among: Sequence[int]) -> None:
        """Reference counts of every position on the path to ``at`` (symbolic) change by d."""
        ref = "dref" if dev else "href"
        for y in among:
            u.inc(ref, y, z3.If(member(at, self.scope.below(y)), d, 0))

    def _pick(self, u: Upd, c: Sequence[Any], idx: list[tuple[int, Any]], dev: bool) -> list:
        """Guards: choice ``c[i]`` is a distinct free page of the tier wherever ``cond`` holds."""
        _p, _pg, _r, owners, _f, size = self._tier(dev)
        cs = []
        for i, cond in idx:
            cs.append(z3.Implies(cond, z3.And(c[i] >= 0, c[i] < size,
                                              sel(u.s.f[owners], c[i]) == FREE)))
        for a in range(len(idx)):
            for b in range(a + 1, len(idx)):
                cs.append(z3.Implies(z3.And(idx[a][1], idx[b][1]), c[idx[a][0]] != c[idx[b][0]]))
        return cs

    def depth_of(self, e: Any) -> Any:
        out: Any = z3.IntVal(0)
        for x in range(self.scope.n):
            out = z3.If(e == x, self.scope.depth_of(x), out)
        return out

    # ------------------------------------------------------------------ cache actions
    def _insert(self, u: Upd, c, ns: int, toks: tuple[int, ...]) -> list:
        P, s = self.scope, u.s
        x = self.insert_target(ns, toks)
        path = P.path(x)
        new = [z3.Not(s.dev[y]) for y in path]
        g = [s.free_d >= len(path)]
        g += self._pick(u, c, [(i, z3.BoolVal(True)) for i in range(len(path))], True)
        dup = self.duplicate_owner()
        for i, y in enumerate(path):
            u.set("dev", y, z3.BoolVal(True))
            u.set("dpg", y, z3.If(new[i], c[i], s.dpg[y]))
            u.set("cont", y, z3.If(new[i], ns, s.cont[y]))
            u.set("mdep", y, z3.If(new[i], P.depth_of(y), s.mdep[y]))
            u.own("odev", c[i], z3.If(new[i], y, dup))
        returned = _count([z3.Not(b) for b in new]) if dup == FREE else 0
        u.set("free_d", None, s.free_d - len(path) + returned)
        return g

    def _lock(self, u: Upd, lslot: int, x: int, dev: bool) -> list:
        s = u.s
        present = s.dev[x] if dev else s.host[x]
        u.set("lk", lslot, z3.BoolVal(True))
        u.set("lpos", lslot, z3.IntVal(x))
        u.set("ldev", lslot, z3.BoolVal(dev))
        self._pin(u, z3.IntVal(x), dev, 1, self.scope.path(x))
        return [z3.Not(s.lk[lslot]), present]

    def _unlock(self, u: Upd, lslot: int, x: int, dev: bool) -> list:
        s = u.s
        u.set("lk", lslot, z3.BoolVal(False))
        u.set("lpos", lslot, z3.IntVal(NONE))
        u.set("ldev", lslot, z3.BoolVal(False))
        self._pin(u, z3.IntVal(x), dev, -1, self.scope.path(x))
        return [s.lk[lslot], s.lpos[lslot] == x, s.ldev[lslot] == dev]

    def evictable(self, s: StateVars, x: int, dev: bool) -> z3.BoolRef:
        present, _pg, ref, _o, _f, _n = self._tier(dev)
        g = [s.f[present][x]] + [z3.Not(s.f[present][y]) for y in self.scope.children(x)]
        if self.evict_respects_pins():
            g.append(s.f[ref][x] == 0)
        return z3.And(g)

    def _evict(self, u: Upd, x: int, dev: bool) -> z3.BoolRef:
        s = u.s
        present, pg, _ref, owners, free, _n = self._tier(dev)
        u.set(present, x, z3.BoolVal(False))
        u.own(owners, s.f[pg][x], FREE)
        u.set(pg, x, z3.IntVal(NONE))
        u.inc(free, None, 1)
        return self.evictable(s, x, dev)

    def _start(self, u: Upd, c, t: int, lslot: int, x: int, wb: bool) -> list:
        """Writeback (wb) or loadback of the path down to the locked position ``x``."""
        P, s = self.scope, u.s
        src, dst = self._tier(wb), self._tier(not wb)
        path = P.path(x)
        missing = [z3.Not(s.f[dst[0]][y]) for y in path]
        g = [z3.Not(s.tact[t]), s.lk[lslot], s.ldev[lslot] == wb, s.lpos[lslot] == x,
             s.f[src[0]][x], z3.Or(missing), s.f[dst[4]] >= _count(missing)]
        g += [z3.Implies(m, s.pend[y] == NONE) for m, y in zip(missing, path, strict=True)]
        g += self._pick(u, c, list(enumerate(missing)), not wb)
        if dst[5] == 0:
            g.append(z3.BoolVal(False))
        code = transfer_code(P, t)
        for i, y in enumerate(path):
            u.set("pend", y, z3.If(missing[i], t, s.pend[y]))
            u.set("tpg", y, z3.If(missing[i], c[i], s.tpg[y]))
            u.own(dst[3], z3.If(missing[i], c[i], NONE), code)
        u.inc(dst[4], None, -_count(missing))
        anchor: Any = z3.IntVal(NONE)
        for y in path:
            anchor = z3.If(s.f[dst[0]][y], y, anchor)
        u.set("tact", t, z3.BoolVal(True))
        u.set("twb", t, z3.BoolVal(wb))
        u.set("ttgt", t, z3.IntVal(x))
        u.set("tanc", t, anchor)
        self._pin(u, z3.IntVal(x), wb, 1, path)  # the source path, on the source tier
        if not wb or self.writeback_pins_anchor():
            self._pin(u, anchor, not wb, 1, path)  # the anchor, on the destination tier
        return g

    def _ack(self, u: Upd, t: int, ok: bool, x: int, wb: bool) -> list:
        P, s = self.scope, u.s
        dst = self._tier(not wb)
        present, pg, _ref, owners, free, _n = dst
        path = P.path(x)
        returned = []
        for y in path:
            mine = s.pend[y] == t
            u.set("pend", y, z3.If(mine, NONE, s.pend[y]))
            u.set("tpg", y, z3.If(mine, NONE, s.tpg[y]))
            if ok:
                fill = z3.And(mine, z3.Not(s.f[present][y]))
                u.set(present, y, z3.Or(s.f[present][y], fill))
                u.set(pg, y, z3.If(fill, s.tpg[y], s.f[pg][y]))
                u.own(owners, z3.If(mine, s.tpg[y], NONE), z3.If(fill, y, FREE))
                returned.append(z3.And(mine, s.f[present][y]))
            else:
                u.own(owners, z3.If(mine, s.tpg[y], NONE), FREE)
                returned.append(mine)
        u.inc(free, None, _count(returned))
        u.set("tact", t, z3.BoolVal(False))
        u.set("ttgt", t, z3.IntVal(NONE))
        u.set("tanc", t, z3.IntVal(NONE))
        self._pin(u, z3.IntVal(x), wb, -1, path)
        if not wb or self.writeback_pins_anchor():
            self._pin(u, s.tanc[t], not wb, -1, path)
        return [s.tact[t], s.twb[t] == wb, s.ttgt[t] == x]

    # ------------------------------------------------------------------ request actions
    def _request(self, u: Upd, c, r: int, src: ReqState, ev: Event, dst: ReqState) -> list:
        P, s = self.scope, u.s
        ns = r % P.namespaces
        mine = P.in_ns(ns)
        hs, hd = HOLDS[src], HOLDS[dst]
        g = [s.rst[r] == REQ_STATES.index(src)]
        u.set("rst", r, z3.IntVal(REQ_STATES.index(dst)))
        if "pages" in hs and "pages" not in hd:  # published below its pin, or freed
            g += self._release_page(u, c, r, ns, ev)
        if "pin" in hs and "pin" not in hd:
            self._pin(u, s.rpos[r], True, -1, mine)
            u.set("rpin", r, z3.BoolVal(False))
            u.set("rpos", r, z3.IntVal(NONE))
            u.set("rmk", r, z3.IntVal(0))
            u.set("rmd", r, z3.IntVal(NONE))
        if "host_pin" in hs and "host_pin" not in hd:
            self._pin(u, s.rhpos[r], False, -1, mine)
            u.set("rhpin", r, z3.BoolVal(False))
            u.set("rhpos", r, z3.IntVal(NONE))
        if "pin" in hd and "pin" not in hs:  # its cached prefix: a device node of its own ns
            at = c[0]
            g.append(z3.Or(at == NONE, z3.Or([z3.And(at == y, s.dev[y]) for y in mine])))
            self._pin(u, at, True, 1, mine)
            u.set("rpin", r, z3.BoolVal(True))
            u.set("rpos", r, at)
            md = sel(s.mdep, at, NONE)
            g += [z3.Or(c[3] == 0, c[3] == 1), z3.Implies(c[3] == 1, z3.And(at != NONE, md >= 0))]
            recovery = src is ReqState.RETRACTED  # D162-4: recovery may use another depth
            if self.mamba_exact() and not recovery:
                g.append(z3.Implies(c[3] == 1, md == self.depth_of(at)))
            u.set("rmk", r, z3.If(c[3] == 1, 2 if recovery else 1, 0))
            u.set("rmd", r, z3.If(c[3] == 1, md, NONE))
        if "host_pin" in hd and "host_pin" not in hs:
            at = c[1]
            g.append(z3.Or(at == NONE, z3.Or([z3.And(at == y, s.host[y]) for y in mine])))
            self._pin(u, at, False, 1, mine)
            u.set("rhpin", r, z3.BoolVal(True))
            u.set("rhpos", r, at)
        if "pages" in hd and "pages" not in hs:  # its own page for what it computes
            g += [s.free_d >= 1, c[2] >= 0, c[2] < P.device_pages, sel(s.odev, c[2]) == FREE]
            u.own("odev", c[2], request_code(P, r))
            u.inc("free_d", None, -1)
            u.set("rpage", r, z3.BoolVal(True))
            u.set("rpg", r, c[2])
        if dst in IN_FLIGHT and src not in IN_FLIGHT:
            u.set("rfl", r, z3.BoolVal(True))
        if ev is Event.WRITEBACK_DONE:
            u.set("rfl", r, z3.BoolVal(False))
        return g

    def _release_page(self, u: Upd, c, r: int, ns: int, ev: Event) -> list:
        """At finish or retraction the page is inserted below the request's pin, in its own
        namespace (FIN-1, PLAN-6, NS-3), a duplicate freed; at abort it is freed."""
        P, s = self.scope, u.s
        g = []
        placed: Any = z3.IntVal(FREE)
        if ev in PUBLISH_EVENTS:
            at = c[4]
            under = [y for y in P.in_ns(ns)]
            g.append(z3.Or(at == NONE, z3.Or([z3.And(at == y, s.rpos[r] == P.parent(y))
                                              for y in under])))
            if ev is not Event.FINISH:  # a retracted request's checkpoint: any depth
                g += [c[5] >= 0, c[5] <= P.depth]
            for y in under:
                put = z3.And(at == y, z3.Not(s.dev[y]))
                u.set("dev", y, z3.Or(s.dev[y], put))
                u.set("dpg", y, z3.If(put, s.rpg[r], s.dpg[y]))
                u.set("cont", y, z3.If(put, ns, s.cont[y]))
                depth = P.depth_of(y) if ev is Event.FINISH else c[5]
                u.set("mdep", y, z3.If(put, depth, s.mdep[y]))
                placed = z3.If(put, y, placed)
        u.own("odev", s.rpg[r], placed)
        u.inc("free_d", None, z3.If(placed == FREE, 1, 0))
        u.set("rpage", r, z3.BoolVal(False))
        u.set("rpg", r, z3.IntVal(NONE))
        return g

    def _late_ack(self, u: Upd, r: int) -> list:
        """The copy of an aborted request lands after its abort (REQ-4)."""
        s = u.s
        u.set("rfl", r, z3.BoolVal(False))
        return [s.rst[r] == REQ_STATES.index(ReqState.FINISHED), s.rfl[r]]

    def _recycle(self, u: Upd, r: int) -> list:
        """A finished request's slot takes a new request (so the model never deadlocks)."""
        s = u.s
        u.set("rst", r, z3.IntVal(REQ_STATES.index(ReqState.SUBMITTED)))
        return [s.rst[r] == REQ_STATES.index(ReqState.FINISHED), z3.Not(s.rfl[r])]


def caller_code(scope: Scope) -> int:
    return caller(scope)
