"""Agreement with the reference: random reference traces replayed step by step in the model.

The proofs are about the model; this check ties the model to the cache we ship. A seeded random
trace is played on ``reference.PrefixCache`` (or a mutant of it) at page size 1 and the default
scope's pools, and after every step the reference's snapshot before and after is mapped by
:func:`abstract` to model state values. z3 must then find the step in the model:

- an accepted step maps to one action instance ``k`` (an eviction of a node of several pages to
  one eviction per page, deepest first) and ``Model.instance(pre, post, c, k)`` must hold for
  some choices ``c`` (which free page: the model allows any, the reference takes one of them);
- a step the reference declines or rejects must leave the snapshot unchanged and have its
  instance(s) disabled in the model (the guard false in the pre-state);
- a match without a lock must change nothing the model sees (splits are invisible, TREE-4).

A state :func:`abstract` cannot represent (a prefix outside the scope, more locks or transfers
than slots, an owner the snapshot does not explain) is a disagreement too. The abstraction leaves
out what the model does not have: access times, hashes, events, L3 keys, the content namespace
and Mamba depth of positions nobody holds (left free), and request state (the request slots stay
in their initial state: the driver issues cache operations only).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import z3

from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.trace import (
    AckStep,
    EvictStep,
    InsertStep,
    LoadbackStep,
    MatchStep,
    Trace,
    UnlockStep,
    WritebackStep,
)
from kvconf.reference import PrefixCache, Tier
from kvconf.reference.errors import CacheError
from kvconf.reference.prefix_cache import CacheConfig
from kvconf.reference.requests import State as ReqState
from kvconf.reference.snapshot import CacheSnapshot, NodeView
from kvconf.spec.formal.actions import Action, Model
from kvconf.spec.formal.scope import Scope
from kvconf.spec.formal.state import (
    FIELDS,
    FREE,
    NONE,
    REQ_STATES,
    StateVars,
    caller,
    transfer_code,
)

STEPS_PER_TRACE = 24


class Unrepresentable(ValueError):
    """A reference state the model's scope has no state for."""


@dataclass
class Slots:
    """The driver's numbering of the caller's locks and the transfers in flight: the model has
    fixed slots, the reference has handles and op ids."""

    locks: dict[int, int] = field(default_factory=dict)  # handle -> lock slot
    transfers: dict[int, int] = field(default_factory=dict)  # op id -> transfer slot

    def free_lock(self, scope: Scope) -> int | None:
        return next((i for i in range(scope.locks) if i not in self.locks.values()), None)

    def free_transfer(self, scope: Scope) -> int | None:
        return next((i for i in range(scope.transfers) if i not in self.transfers.values()), None)


# ---------------------------------------------------------------------- the abstraction
def node_positions(scope: Scope, snap: CacheSnapshot, node: NodeView) -> list[int]:
    """The positions of a node's pages, top first (page size 1: one position per token)."""
    full = snap.full_tokens(node.id)
    out = []
    for end in range(node.start + 1, node.start + len(node.key) + 1):
        key = (node.namespace, tuple(full[:end]))
        if key not in scope.positions:
            raise Unrepresentable(f"node {node.id}: prefix {key} is outside the scope")
        out.append(scope.positions.index(key))
    return out


def deepest(scope: Scope, snap: CacheSnapshot, node_id: int) -> int:
    """A node's deepest position (the one a lock or transfer on it names in the model);
    NONE for a root."""
    node = snap.node_map().get(node_id)
    if node is None:
        raise Unrepresentable(f"node {node_id} is held (locked or copied) but not in the tree")
    return NONE if node.parent is None else node_positions(scope, snap, node)[-1]


def _initial(scope: Scope) -> dict[str, Any]:
    """Every field at its initial value (the fields the reference never moves keep these)."""
    out: dict[str, Any] = {}
    for name, (kind, count) in FIELDS.items():
        k = scope.n if count == "n" else (getattr(scope, count) if count else None)
        init: Any = False if kind == "bool" else NONE
        if name in ("free_d", "free_h", "dref", "href", "rmk"):
            init = 0
        if name == "rst":
            init = REQ_STATES.index(ReqState.SUBMITTED)
        out[name] = init if k is None else [init] * k
    return out


def abstract(scope: Scope, snap: CacheSnapshot, slots: Slots) -> dict[str, Any]:
    """The model state values of a reference snapshot (fields given None are left free)."""
    if snap.page_size != 1:
        raise Unrepresentable(f"page size {snap.page_size}: the model has one position per page")
    v = _initial(scope)
    v["cont"] = [None] * scope.n
    v["mdep"] = [None] * scope.n  # the cache level keeps no Mamba state
    owner_of: dict[tuple[Tier, int, int], int] = {}  # (tier, node, page) -> position
    dst_of = _destinations(snap)
    for node in snap.nodes:
        if node.parent is None:
            continue
        for i, x in enumerate(node_positions(scope, snap, node)):
            _position(v, scope, slots, node, i, x, dst_of, owner_of)
    for tier, (owners, free) in ((Tier.DEVICE, ("odev", "free_d")),
                                 (Tier.HOST, ("ohost", "free_h"))):
        pool = snap.pools.get(tier)
        size = scope.device_pages if tier is Tier.DEVICE else scope.host_pages
        if (pool.size if pool else 0) != size:
            raise Unrepresentable(f"{tier} pool of {pool.size if pool else 0} pages, scope {size}")
        if pool is not None:
            v[owners] = [_owner(scope, slots, tier, p, o, owner_of)
                         for p, o in enumerate(pool.owners)]
            v[free] = len(pool.free)
    _locks(v, scope, snap, slots)
    _transfers(v, scope, snap, slots)
    return v


def _destinations(snap: CacheSnapshot) -> dict[int, dict[int, int]]:
    return {t.op_id: dict(t.pairs) for t in snap.transfers}


def _position(v: dict[str, Any], scope: Scope, slots: Slots, node: NodeView, i: int, x: int,
              dst_of: dict[int, dict[int, int]], owner_of: dict) -> None:
    for tier, (present, pg, ref) in ((Tier.DEVICE, ("dev", "dpg", "dref")),
                                     (Tier.HOST, ("host", "hpg", "href"))):
        pages = node.pages(tier)
        v[ref][x] = node.ref(tier)
        if pages is not None:
            v[present][x], v[pg][x] = True, pages[i]
            owner_of[(tier, node.id, pages[i])] = x
    if node.device is not None or node.host is not None:
        v["cont"][x] = node.namespace  # the reference files a node's pages under its own ns
    if node.pending is not None:
        if node.pending not in slots.transfers:
            raise Unrepresentable(f"node {node.id}: pending op {node.pending} has no slot")
        src = node.device if node.device is not None else node.host
        v["pend"][x] = slots.transfers[node.pending]
        v["tpg"][x] = dst_of.get(node.pending, {}).get(src[i] if src else -1, NONE)


def _owner(scope: Scope, slots: Slots, tier: Tier, page: int, owner: str,
           owner_of: dict) -> int:
    if owner == "free":
        return FREE
    if owner == "caller":
        return caller(scope)  # held by the caller after a step: a leak the model never makes
    kind, _, ident = owner.partition(":")
    if kind == "node" and (tier, int(ident), page) in owner_of:
        return owner_of[(tier, int(ident), page)]
    if kind == "transfer" and int(ident) in slots.transfers:
        return transfer_code(scope, slots.transfers[int(ident)])
    raise Unrepresentable(f"{tier} page {page}: owner {owner!r} holds no such page")


def _locks(v: dict[str, Any], scope: Scope, snap: CacheSnapshot, slots: Slots) -> None:
    for lk in snap.locks:
        if lk.internal:
            continue  # a transfer's pins: counted in the reference counts, as in the model
        if lk.handle not in slots.locks:
            raise Unrepresentable(f"lock {lk.handle} has no slot")
        slot = slots.locks[lk.handle]
        v["lk"][slot], v["ldev"][slot] = True, lk.tier is Tier.DEVICE
        v["lpos"][slot] = deepest(scope, snap, lk.node)


def _transfers(v: dict[str, Any], scope: Scope, snap: CacheSnapshot, slots: Slots) -> None:
    nodes = snap.node_map()
    v["twb"] = [None] * scope.transfers  # the model keeps a finished transfer's kind: free
    for t in snap.transfers:
        if t.op_id not in slots.transfers:
            raise Unrepresentable(f"transfer {t.op_id} has no slot")
        slot = slots.transfers[t.op_id]
        top = nodes[t.node]
        while top.parent is not None and nodes[top.parent].pending == t.op_id:
            top = nodes[top.parent]
        v["tact"][slot], v["twb"][slot] = True, t.kind == "writeback"
        v["ttgt"][slot] = deepest(scope, snap, t.node)
        v["tanc"][slot] = NONE if top.parent is None else deepest(scope, snap, top.parent)


# ---------------------------------------------------------------------- the z3 check
class Checker:
    """Asks z3 whether a step of abstract states is a path of given instances in the model.

    The instance formulas are built once per pair of consecutive state vectors, and the
    equalities pinning a state to concrete values are built once per (field, value) and reused:
    building z3 terms, not solving, is what a concrete query costs.
    """

    def __init__(self, model: Model) -> None:
        self.model = model
        scope = model.scope
        self.index = {a: k for k, a in enumerate(model.actions())}
        self.states = [StateVars(scope, f"g{i}") for i in range(scope.depth + 1)]
        self.chain = [model.instances(self.states[i], self.states[i + 1],
                                      model.choices(f"g{i}.c")) for i in range(scope.depth)]
        self._atoms: dict[tuple[int, str, int | None, Any], z3.BoolRef] = {}
        z3.set_param("smt.random_seed", 0)
        self.solver = z3.Solver()
        self.solver.set("random_seed", 0)

    def pin(self, i: int, values: dict[str, Any]) -> list[z3.BoolRef]:
        """State ``i`` of the chain is ``values`` (None: left free)."""
        out = []
        for name, v in values.items():
            items = enumerate(v) if isinstance(v, list) else [(None, v)]
            for j, w in items:
                if w is None:
                    continue
                key = (i, name, j, w)
                atom = self._atoms.get(key)
                if atom is None:
                    atom = self._atoms[key] = self.states[i].var((name, j)) == w
                out.append(atom)
        return out

    def _sat(self, *cs: z3.BoolRef) -> bool:
        self.solver.push()
        self.solver.add(*cs)
        r = self.solver.check()
        self.solver.pop()
        if r == z3.unknown:
            raise RuntimeError("z3 gave up on a concrete agreement query")
        return r == z3.sat

    def allows(self, pre: dict, actions: list[Action], post: dict) -> bool:
        ks = [self.index[a] for a in actions]
        cs = self.pin(0, pre) + self.pin(len(ks), post)
        return self._sat(*cs, *(self.chain[i][k] for i, k in enumerate(ks)))

    def enabled(self, pre: dict, actions: list[Action]) -> Action | None:
        """One of ``actions`` the model allows from ``pre``, or None."""
        pre_pins = self.pin(0, pre)
        if not self._sat(*pre_pins, z3.Or([self.chain[0][self.index[a]] for a in actions])):
            return None
        return next(a for a in actions if self._sat(*pre_pins, self.chain[0][self.index[a]]))


# ---------------------------------------------------------------------- the driver
@dataclass
class Disagreement:
    seed: int
    step: int
    what: str
    reason: str
    trace: Trace

    def describe(self) -> str:
        return f"trace seed {self.seed}, step {self.step} ({self.what}): {self.reason}"


@dataclass
class Outcome:
    traces: int
    steps: int
    seconds: float
    disagreement: Disagreement | None = None
    counts: Counter[str] = field(default_factory=Counter)


class _Disagree(Exception):
    pass


@dataclass
class _Lock:
    step: int  # the kit step that took it
    handle: int
    node: int
    tier: Tier
    slot: int
    live: bool = True


class Player:
    """Plays one seeded random trace on a reference cache (class ``cache_cls``), checking every
    step against the model; the steps are recorded as a kit trace for ``kvconf replay``."""

    def __init__(self, checker: Checker, seed: int,
                 cache_cls: type[PrefixCache] = PrefixCache) -> None:
        self.checker, self.scope, self.seed = checker, checker.model.scope, seed
        self.rng = random.Random(seed)
        self.cache = cache_cls(CacheConfig(page_size=1, device_pages=self.scope.device_pages,
                                           host_pages=self.scope.host_pages))
        self.slots = Slots()
        self.locks: list[_Lock] = []
        self.transfers: dict[int, tuple[int, int]] = {}  # op id -> (kit step, node)
        self.steps: list[Any] = []
        self.counts: Counter[str] = Counter()  # checked steps by model action, declined apart

    # ------------------------------------------------------------------ bookkeeping
    def trace(self) -> Trace:
        config = EngineConfig(page_size=1, device_pages=self.scope.device_pages,
                              host_pages=self.scope.host_pages)
        return Trace(name=f"agreement-{self.seed}", behaviours=[], config=config,
                     steps=list(self.steps))

    def _abs(self) -> tuple[CacheSnapshot, dict]:
        snap = self.cache.snapshot()
        try:
            return snap, abstract(self.scope, snap, self.slots)
        except Unrepresentable as e:
            raise _Disagree(f"the abstraction cannot represent the state: {e}") from e

    def _expect(self, pre: dict, actions: list[Action], post: dict) -> None:
        self.counts[actions[0].kind] += 1
        if not self.checker.allows(pre, actions, post):
            labels = "; ".join(a.label(self.scope) for a in actions) or "no action"
            raise _Disagree(f"the model does not allow {labels} between the two states")

    def _declined(self, pre: dict, actions: list[Action], post: dict) -> None:
        self.counts[f"{actions[0].kind} declined"] += 1
        if post != pre:
            raise _Disagree("a declined or rejected step changed the state")
        allowed = self.checker.enabled(pre, actions)
        if allowed is not None:
            raise _Disagree(f"the reference declines it but the model allows "
                            f"{allowed.label(self.scope)}")

    # ------------------------------------------------------------------ one trace
    def play(self, length: int = STEPS_PER_TRACE) -> Disagreement | None:
        for i in range(length):
            self.what = "?"
            try:
                self._step()
            except (_Disagree, Unrepresentable) as e:
                return Disagreement(self.seed, i, self.what, str(e), self.trace())
            except CacheError as e:  # the driver only issues legal calls outside _declined
                return Disagreement(self.seed, i, self.what, f"the reference rejects it: {e}",
                                    self.trace())
        return None

    def _step(self) -> None:
        options = ["insert", "insert", "match", "evict"]
        if self.slots.free_lock(self.scope) is not None:
            options += ["lock", "lock", "lock"]
        if any(lk.live for lk in self.locks) or self._stale_lock() is not None:
            options.append("unlock")
        if self.slots.free_transfer(self.scope) is not None and any(lk.live for lk in self.locks):
            options += ["copy", "copy"]
        if self.transfers:
            options += ["ack", "ack"]
        getattr(self, f"_{self.rng.choice(options)}")()

    def _position(self) -> tuple[int, tuple[int, ...]]:
        return self.rng.choice(self.scope.positions)

    def _insert(self) -> None:
        ns, toks = self._position()
        self.what = f"insert ns {ns} tokens {list(toks)}"
        self.steps.append(InsertStep(ns=ns, tokens=list(toks)))
        _s, pre = self._abs()
        action = Action("insert", (ns, toks))
        pages = self.cache.alloc(len(toks))
        if pages is None:
            self._declined(pre, [action], self._abs()[1])
            return
        try:
            self.cache.insert(ns, list(toks), pages)
        except CacheError as e:
            raise _Disagree(f"the reference rejects an insert of fresh pages: {e}") from e
        self._expect(pre, [action], self._abs()[1])

    def _match(self) -> None:
        ns, toks = self._position()
        self.what = f"match ns {ns} tokens {list(toks)}"
        self.steps.append(MatchStep(ns=ns, tokens=list(toks)))
        _s, pre = self._abs()
        m = self.cache.match(ns, list(toks))
        if self._abs()[1] != pre:
            raise _Disagree("a match without a lock changed what the model sees")
        self._served(pre, ns, toks, m)

    def _lock(self) -> None:
        ns, toks, tier = self._lock_target()
        self.what = f"match ns {ns} tokens {list(toks)} lock {tier}"
        _s, pre = self._abs()
        m = self.cache.match(ns, list(toks))
        node = m.device_node if tier is Tier.DEVICE else m.host_node
        snap, mid = self._abs()
        self._served(mid, ns, toks, m)
        if snap.node_map()[node].parent is None:  # nothing cached on the tier: a plain match
            self.steps.append(MatchStep(ns=ns, tokens=list(toks)))
            if mid != pre:
                raise _Disagree("a match without a lock changed what the model sees")
            return
        self.steps.append(MatchStep(ns=ns, tokens=list(toks), lock=tier))
        handle = self.cache.lock(node, tier)
        slot = self.slots.free_lock(self.scope)
        assert slot is not None
        self.slots.locks[handle] = slot
        self.locks.append(_Lock(len(self.steps) - 1, handle, node, tier, slot))
        x = deepest(self.scope, snap, node)
        self._expect(pre, [Action("lock", (slot, x, tier is Tier.DEVICE))], self._abs()[1])

    def _served(self, v: dict, ns: int, toks: tuple[int, ...], m: Any) -> None:
        """A match answers with the pages the model state holds along the path, on each tier,
        down to the first position missing there (TREE-1, TREE-2)."""
        for present, pg, got in (("dev", "dpg", m.device_pages), ("host", "hpg", m.host_pages)):
            want = []
            for y in self.scope.path(self.scope.index(ns, toks)):
                if not v[present][y]:
                    break
                want.append(v[pg][y])
            if tuple(got) != tuple(want):
                raise _Disagree(f"the match serves {present} pages {list(got)}, the model state "
                                f"holds {want}")

    def _copied(self, post: dict, x: int, t: int, wb: bool, pairs: Any) -> None:
        """A started copy hands out (source, destination) pages as the model's transfer holds
        them, in path order (HOST-3)."""
        src = "dpg" if wb else "hpg"
        want = [(post[src][y], post["tpg"][y]) for y in self.scope.path(x) if post["pend"][y] == t]
        if [tuple(p) for p in pairs] != want:
            raise _Disagree(f"the copy hands out pairs {[list(p) for p in pairs]}, the model's "
                            f"transfer copies {[list(p) for p in want]}")

    def _lock_target(self) -> tuple[int, tuple[int, ...], Tier]:
        """Mostly a random position on device; often a host-only one, which is what a loadback
        needs and what random choice alone seldom reaches."""
        snap = self.cache.snapshot()
        host_only = [(n.namespace, snap.full_tokens(n.id)) for n in snap.nodes
                     if n.parent is not None and n.host is not None and n.device is None]
        if host_only and self.rng.random() < 0.5:
            ns, toks = self.rng.choice(host_only)
            return ns, tuple(toks), Tier.HOST
        ns, toks = self._position()
        return ns, toks, self.rng.choice((Tier.DEVICE, Tier.DEVICE, Tier.HOST))

    def _stale_lock(self) -> _Lock | None:
        """A released lock whose slot nobody holds: unlocking it again must be rejected."""
        held = set(self.slots.locks.values())
        return next((lk for lk in self.locks if not lk.live and lk.slot not in held), None)

    def _unlock(self) -> None:
        live = [lk for lk in self.locks if lk.live]
        stale = self._stale_lock()
        lk = self.rng.choice(live + ([stale] if stale else []))
        self.what = f"unlock of the lock of step {lk.step}" + ("" if lk.live else " (again)")
        self.steps.append(UnlockStep(step=lk.step))
        snap, pre = self._abs()
        x = deepest(self.scope, snap, lk.node) if lk.node in snap.node_map() else 0
        action = Action("unlock", (lk.slot, x, lk.tier is Tier.DEVICE))
        try:
            self.cache.unlock(lk.handle)
        except CacheError:
            if lk.live:
                raise _Disagree("the reference rejects the unlock of a held lock") from None
            self._declined(pre, [action], self._abs()[1])
            return
        if not lk.live:
            raise _Disagree("the reference accepts an unlock of a released lock")
        lk.live = False
        del self.slots.locks[lk.handle]
        self._expect(pre, [action], self._abs()[1])

    def _evict(self) -> None:
        tier = self.rng.choice((Tier.DEVICE, Tier.DEVICE, Tier.HOST))
        self.what = f"evict one page of {tier}"
        self.steps.append(EvictStep(tier=tier, pages=1))
        dev = tier is Tier.DEVICE
        _s, pre = self._abs()
        freed = self.cache.evict(tier, 1)
        _s, post = self._abs()
        present = "dev" if dev else "host"
        if not freed:
            self._declined(pre, [Action("evict", (x, dev)) for x in range(self.scope.n)], post)
            return
        gone = [x for x in range(self.scope.n) if pre[present][x] and not post[present][x]]
        gone.sort(key=self.scope.depth_of, reverse=True)
        if not gone or len(gone) > self.scope.depth:
            raise _Disagree(f"evict freed {freed} pages, {len(gone)} positions left the tier")
        self._expect(pre, [Action("evict", (x, dev)) for x in gone], post)

    def _copy(self) -> None:
        lk = self.rng.choice([lk for lk in self.locks if lk.live])
        wb = lk.tier is Tier.DEVICE  # a device lock is written back, a host lock loaded back
        cls = WritebackStep if wb else LoadbackStep
        self.what = f"{'writeback' if wb else 'loadback'} of the lock of step {lk.step}"
        self.steps.append(cls(step=lk.step, ack="later"))
        t = self.slots.free_transfer(self.scope)
        assert t is not None
        snap, pre = self._abs()
        action = Action("writeback" if wb else "loadback",
                        (t, lk.slot, deepest(self.scope, snap, lk.node)))
        start = self.cache.start_writeback if wb else self.cache.start_loadback
        op = start(lk.node)
        if op is None:
            self._declined(pre, [action], self._abs()[1])
            return
        self.slots.transfers[op.op_id] = t
        self.transfers[op.op_id] = (len(self.steps) - 1, lk.node)
        post = self._abs()[1]
        self._expect(pre, [action], post)
        self._copied(post, action.params[2], t, wb, op.pairs)

    def _ack(self) -> None:
        op = self.rng.choice(sorted(self.transfers))
        ok = self.rng.random() < 0.7
        step, node = self.transfers.pop(op)
        self.what = f"ack of the transfer of step {step}, success={ok}"
        self.steps.append(AckStep(step=step, success=ok))
        snap, pre = self._abs()
        t = self.slots.transfers[op]
        wb = next((tv.kind == "writeback" for tv in snap.transfers if tv.op_id == op), None)
        if wb is None:
            raise _Disagree(f"transfer {op} is no longer in flight before its ack")
        action = Action("ack", (t, ok, deepest(self.scope, snap, node), wb))
        self.cache.finish_transfer(op, ok)
        del self.slots.transfers[op]
        self._expect(pre, [action], self._abs()[1])


def agree(scope: Scope, traces: int, *, seed: int = 0, length: int = STEPS_PER_TRACE,
          cache_cls: type[PrefixCache] = PrefixCache, model: Model | None = None,
          checker: Checker | None = None) -> Outcome:
    """Play ``traces`` seeded random traces (seeds ``seed..seed+traces-1``) and stop at the
    first disagreement. A ``checker`` (of the scope's model) may be shared between calls:
    building its formulas is most of a short run."""
    t0 = time.perf_counter()
    checker = checker or Checker(model or Model(scope))
    steps, counts = 0, Counter[str]()
    for i in range(traces):
        player = Player(checker, seed + i, cache_cls)
        found = player.play(length)
        steps += len(player.steps)
        counts += player.counts
        if found is not None:
            return Outcome(i + 1, steps, round(time.perf_counter() - t0, 3), found, counts)
    return Outcome(traces, steps, round(time.perf_counter() - t0, 3), None, counts)
