"""The hybrid-level driver: plays a trace against a hybrid engine as the serving runtime would,
and judges every call (``conformance/oracles/hybrid.py``).

For each chunk it reads what the row reads (the full table for every earlier position, the
window table for the W - 1 before the chunk, the state it resumes from) and checks the tags,
then writes the chunk's KV into both tables and its states where the engine says. At the end it
finishes every request still running and checks that every page and slot came home (POOL-5).

A request's tokens past its prompt are computed by decode rows, one position each (spec chapter
windows, "Decode rows"). An engine with the optional ``decode(rid, token)`` is admitted on the
prompt alone and told each sampled token with the row that computes it; one without it is
admitted on the whole sequence and computes each of those tokens as a one-token chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvconf.conformance.engine.field_docs import compared
from kvconf.conformance.engine.hybrid import (
    Admitted,
    Extended,
    HybridEngine,
    HybridHit,
    Settled,
    validate_groups,
)
from kvconf.conformance.errors import KitError
from kvconf.conformance.faults import call_legal, fits, wrong_return
from kvconf.conformance.hybrid.memory import HybridMemory, StoreFactory, dict_store
from kvconf.conformance.hybrid.trace import (
    AdmitStep,
    DecodeStep,
    ExtendStep,
    FinishStep,
    HitStep,
    HybridStep,
    HybridTrace,
)
from kvconf.conformance.oracles.hybrid import HybridOracle, fail
from kvconf.conformance.running import flight, judged
from kvconf.conformance.violation import Violation

RETURNS: dict[str, tuple[type | None, ...]] = {
    "hit": (HybridHit,), "admit": (Admitted,), "extend": (Extended, None), "finish": (None,),
    "computed": (Settled, None), "decode": (Extended, None),
}


@dataclass(slots=True)
class Running:
    """What the kit knows of a running request: its whole sequence (prompt, then the output its
    decode rows compute), how far it has computed, each attention group's table (None a hole),
    the slot its Mamba state is in, and its prompt's length."""

    ns: int
    tokens: tuple[int, ...]
    computed: int
    tables: list[list[int | None]]
    state: int | None
    prompt: int


class HybridDriver:
    def __init__(self, engine: HybridEngine, behaviours: tuple[str, ...] = (),
                 judge: bool = True, store: StoreFactory = dict_store) -> None:
        try:
            validate_groups(engine.groups)
        except ValueError as e:
            raise KitError(f"engine {engine.name}: {e}") from None
        self.engine = engine
        self.p = engine.page_size
        # Unjudged (a replay for DET-1) nothing is read, so nothing is written either.
        self.mem = HybridMemory(self.p, store(self.p, engine.groups, engine.pool_sizes)
                                if judge else None)
        self.oracle = HybridOracle(engine, self.mem)
        self.judge = judge
        self.behaviours = behaviours
        self.live: dict[str, Running] = {}
        self.log: list[dict[str, Any]] = []
        self.index = -1
        self.marks: set[str] = set()  # rules the driver's own checks judged (``judged``)

    # ----------------------------------------------------------------- plumbing
    def _call(self, name: str, fn, *args):
        got = call_legal(name, fn, *args)
        types = RETURNS.get(name, ())
        if types and not fits(got, types):
            raise wrong_return(name, f"{type(got).__name__} ({got!r:.60})",
                               "conformance/engine/hybrid.py", types)
        return got

    def _held(self, pool: str, skip: str | None = None) -> set[int]:
        """Ids of ``pool`` a live request holds (its tables, its state slot)."""
        out: set[int] = set()
        for rid, r in self.live.items():
            if rid == skip:
                continue
            for g, table in zip(self.engine.groups, r.tables, strict=True):
                if g.pool == pool:
                    out.update(x for x in table if x is not None)
            m = self._mamba()
            if m is not None and m[1].pool == pool and r.state is not None:
                out.add(r.state)
        return out

    def _mamba(self):
        return next(((i, g) for i, g in enumerate(self.engine.groups) if g.kind == "mamba"),
                    None)

    # ----------------------------------------------------------------- steps
    def run(self, trace: HybridTrace) -> list[dict[str, Any]]:
        for i, step in enumerate(trace.steps):
            self.step(i, step)
        return self.log

    def step(self, index: int, step: HybridStep) -> dict[str, Any]:
        self.index = index
        if flight.on():  # a worker: the parent holds the trace if the engine kills us here
            flight.step(step.model_dump_json(exclude_none=True))
        try:
            out = self._dispatch(step)
            if step.expect is not None and self.judge:
                self._expect(step, out)
        except Violation as v:
            if v.step is None:
                v.step = index
            raise
        self.log.append(out)
        return out

    def judged(self) -> set[str]:
        """The rules this play judged (spec chapter faults, "Verdicts of a rule"): the
        oracle's, FAULT-2 on every call, FAULT-4 on every answer, the trace's expectations;
        nothing unjudged (a replay for DET-1). Before the feature filter
        (``kvconf.conformance.running.judged``)."""
        if not self.judge or not (self.log or self.index >= 0):
            return set()
        return self.oracle.judged() | self.marks | {"FAULT-2", "FAULT-4"}

    def _expect(self, step: HybridStep, out: dict[str, Any]) -> None:
        exp = step.expect
        assert exp is not None
        self.marks.update(exp.behaviours or self.behaviours)
        for field in ("full", "window", "mamba", "length", "room"):
            want = getattr(exp, field)
            if want is not None and out.get(field) != want:
                raise Violation("expect", tuple(exp.behaviours or self.behaviours),
                                compared(field, out.get(field), want, "hybrid"))

    def _hit_row(self, hit: HybridHit) -> dict[str, Any]:
        out: dict[str, Any] = {"length": hit.length}
        for g, got in zip(self.engine.groups, hit.groups, strict=False):
            out[g.kind] = got.length
        return out

    def _dispatch(self, step: HybridStep) -> dict[str, Any]:
        if isinstance(step, HitStep):
            hit = self._call("hit", self.engine.hit, step.ns, list(step.tokens))
            if self.judge:
                self.oracle.check_hit(hit, step.ns, step.tokens)
            return {"op": "hit", **self._hit_row(hit)}
        if isinstance(step, AdmitStep):
            return self._admit(step)
        if isinstance(step, ExtendStep):
            return self._extend(step)
        if isinstance(step, DecodeStep):
            return self._decode(step)
        if isinstance(step, FinishStep):
            if step.rid not in self.live:
                raise KitError(f"steps[{self.index}].rid: {step.rid!r} is not running")
            self._call("finish", self.engine.finish, step.rid)
            del self.live[step.rid]
            return {"op": "finish"}
        raise KitError(f"steps[{self.index}].op: unknown operation {step.op!r}")

    def _admit(self, step: AdmitStep) -> dict[str, Any]:
        if step.rid in self.live:
            raise KitError(f"steps[{self.index}].rid: {step.rid!r} is already running")
        seq = [*step.tokens, *step.output]
        # An engine that takes decode rows learns the output token by token; one that does not
        # is told the whole sequence now.
        query = list(step.tokens) if self._decodes() else seq
        hit = self._call("hit", self.engine.hit, step.ns, query)
        if self.judge:
            self.oracle.check_hit(hit, step.ns, query)
        adm = self._call("admit", self.engine.admit, step.rid, step.ns, query)
        if self.judge:
            self.oracle.check_admit(adm, hit, step.ns, query)
        tables = [list(t) for t in adm.tables]
        self.live[step.rid] = Running(step.ns, tuple(seq), adm.length, tables, adm.state,
                                      len(step.tokens))
        return {"op": "admit", **self._hit_row(hit), "length": adm.length}

    def _decodes(self) -> bool:
        return callable(getattr(self.engine, "decode", None))

    def _extend(self, step: ExtendStep) -> dict[str, Any]:
        r = self.live.get(step.rid)
        if r is None:
            raise KitError(f"steps[{self.index}].rid: {step.rid!r} is not running")
        if not r.computed < step.upto <= r.prompt:
            raise KitError(f"steps[{self.index}].upto: {step.upto} is not past {r.computed} "
                           f"within the {r.prompt}-token prompt of {step.rid} (its output is "
                           "computed by decode steps)")
        s, e = r.computed, step.upto
        limit = self.oracle.chunk_end_limit(s)
        if limit is not None and e > limit:
            raise KitError(f"steps[{self.index}].upto: the engine declares mamba_aligned_chunks; "
                           f"a chunk from {s} (inside a page) may end at {limit} at most")
        ext = self._call("extend", self.engine.extend, step.rid, step.upto)
        return self._row("extend", step.rid, r, s, e, ext)

    def _decode(self, step: DecodeStep) -> dict[str, Any]:
        """A decode row: the next output token, one position, after the whole prompt."""
        r = self.live.get(step.rid)
        if r is None:
            raise KitError(f"steps[{self.index}].rid: {step.rid!r} is not running")
        s = r.computed
        if s < r.prompt or s >= len(r.tokens):
            raise KitError(f"steps[{self.index}].op: {step.rid} has computed {s} of its "
                           f"{r.prompt}-token prompt and {len(r.tokens) - r.prompt} output "
                           "tokens; a decode step computes the next output token once the "
                           "prompt is done")
        if self._decodes():
            ext = self._call("decode", self.engine.decode, step.rid, r.tokens[s])
        else:
            ext = self._call("extend", self.engine.extend, step.rid, s + 1)
        return self._row("decode", step.rid, r, s, s + 1, ext)

    def _row(self, op: str, rid: str, r: Running, s: int, e: int,
             ext: Extended | None) -> dict[str, Any]:
        """Judge and play the row computing ``s..e`` that the engine made room for."""
        if ext is None:
            return {"op": op, "room": False}
        groups = self.engine.groups
        o = self.oracle
        if self.judge:
            o.check_extend(rid, ext, e)
        # Window pages given back: holes from now on (WIN-4).
        for i, g in enumerate(groups):
            if ext.released[i]:
                if g.kind != "window":
                    raise fail("WIN-4", f"{rid}: gave back pages of its {g.kind} group")
                if self.judge:
                    o.check_released(rid, r.tables[i], ext.released[i], s, g.window)
                for page in ext.released[i]:
                    if page in r.tables[i]:
                        r.tables[i][r.tables[i].index(page)] = None
        if not ext.room:
            return {"op": op, "room": False, "released": [list(x) for x in ext.released]}
        if op == "decode" and self._decodes() and self.judge:
            o.check_decode(rid, ext, r.tables, s)
        # New pages: none a live request holds (POOL-2); a page in every table for every
        # position the row computes (WIN-3).
        need = -(-e // self.p)
        held: dict[str, set[int]] = {}
        for i, g in enumerate(groups):
            if g.kind == "mamba":
                continue
            if self.judge:
                o.check_new(rid, "page", ext.pages[i],
                            held.setdefault(g.pool, self._held(g.pool)), "POOL-2")
            r.tables[i].extend(ext.pages[i])
            if len(r.tables[i]) < need and self.judge:
                raise fail("WIN-3", f"{rid}: its {g.kind} table has {len(r.tables[i])} "
                                    f"pages, a row computing up to {e} needs {need}")
        # The row reads, then writes.
        for i, g in enumerate(groups):
            if g.kind == "mamba" or not self.judge:
                continue
            first = 0 if g.kind == "full" else max(0, s - g.window + 1)
            o.pages_hold(f"{rid} reads its {g.kind} table", g.pool, r.tables[i], r.ns,
                         r.tokens, range(first, s), "WIN-4" if g.kind == "window" else "TREE-2")
        m = self._mamba()
        if m is not None:
            mg = m[1]
            if self.judge:
                if s and ext.state_source is None:
                    raise fail("MAMBA-1", f"{rid}: a chunk from {s} names no state to "
                                          "resume from")
                if s:
                    o.state_holds(f"{rid} resumes", mg.pool, ext.state_source, r.ns,
                                  r.tokens, s, "MAMBA-1")
                if ext.state_slot is None:
                    raise fail("MAMBA-1", f"{rid}: no slot for the state of depth {e}")
                others = held.setdefault(mg.pool, self._held(mg.pool, skip=rid))
                if ext.state_slot in self._held(mg.pool, skip=rid):
                    raise fail("MAMBA-8", f"{rid}: its working slot {ext.state_slot} is "
                                          "held by another live request")
                for d, slot in ext.checkpoints:
                    if not s < d <= e:
                        raise fail("MAMBA-1", f"{rid}: a checkpoint of depth {d} in a chunk "
                                              f"computing {s}..{e}")
                    if slot in others or slot in self._held(mg.pool, skip=rid):
                        raise fail("MAMBA-8", f"{rid}: checkpoint slot {slot} is held by "
                                              "another live request")
            r.state = ext.state_slot
        if self.judge:
            self._write(r, ext, s, e)
        r.computed = e
        out = {"op": op, "room": True,
               "pages": [list(x) for x in ext.pages], "released": [list(x) for x in ext.released],
               "state": [ext.state_source, ext.state_slot, [list(c) for c in ext.checkpoints]]}
        computed = getattr(self.engine, "computed", None)  # optional: publish after the forward
        if computed is not None:
            got = self._call("computed", computed, rid)
            if got is not None:
                self._settle(rid, r, got)
                out["settled"] = [[list(c) for c in g] for g in got.changes]
        return out

    def _write(self, r: Running, ext: Extended, s: int, e: int) -> None:
        """The row's writes: the KV of positions ``s..e`` into every attention table (one
        batched write per group) and its states where the engine says."""
        tags = self.mem.tags(r.ns, r.tokens)
        m = self._mamba()
        for i, g in enumerate(self.engine.groups):
            if g.kind == "mamba":
                continue
            table = r.tables[i]
            pos = [k for k in range(s, e) if k // self.p < len(table)
                   and table[k // self.p] is not None]
            self.mem.write_kv(g.pool, [table[k // self.p] for k in pos],
                              [k % self.p for k in pos], [tags[k] for k in pos])
        if m is not None:
            for d, slot in ext.checkpoints:
                self.mem.write_state(m[1].pool, slot, r.ns, r.tokens, d)
            if ext.state_slot is not None:
                self.mem.write_state(m[1].pool, ext.state_slot, r.ns, r.tokens, e)

    def _settle(self, rid: str, r: Running, got: Settled) -> None:
        """Apply what the engine changed in ``rid``'s tables once its chunk was computed: a
        window page given back (WIN-4, from the chunk's end), or an index now read from another
        page, which must hold the same KV for every position the request will read (TREE-2)."""
        groups = self.engine.groups
        if len(got.changes) != len(groups):
            raise fail("WIN-3", f"{rid}: computed reports changes for {len(got.changes)} groups "
                                f"of {len(groups)}")
        for i, g in enumerate(groups):
            table = r.tables[i]
            for j, page in got.changes[i]:
                if g.kind == "mamba" or not 0 <= j < len(table):
                    raise fail("WIN-3", f"{rid}: computed changed index {j} of its {g.kind} "
                                        f"table, which has {len(table)} pages")
                if page is None:
                    if g.kind != "window":
                        raise fail("WIN-4", f"{rid}: gave back a page of its {g.kind} group")
                    if self.judge and table[j] is not None:
                        self.oracle.check_released(rid, table, [table[j]], r.computed, g.window)
                    table[j] = None
                    continue
                table[j] = page
                if self.judge:
                    lo, hi = j * self.p, min((j + 1) * self.p, r.computed)
                    if g.kind == "window":
                        lo = max(lo, r.computed - g.window + 1)
                    self.oracle.pages_hold(f"{rid} now reads index {j} of its {g.kind} table "
                                           f"from page {page}", g.pool, table, r.ns, r.tokens,
                                           range(lo, hi), "TREE-2" if g.kind == "full"
                                           else "WIN-4")

    # ----------------------------------------------------------------- rest
    def drain(self) -> None:
        """Finish every request still running; every page and slot must then be the engine's
        to hand out (POOL-5)."""
        self.index = len(self.log)
        try:
            for rid in list(self.live):
                self._call("finish", self.engine.finish, rid)
                del self.live[rid]
            got = dict(self._call("available", self.engine.available))
            want = dict(self.engine.pool_sizes)
            self.oracle.mark("POOL-5")
            if self.judge and got != want:
                raise fail("POOL-5", f"at rest, with every request finished, the engine can hand "
                                     f"out {got} of {want}: pages or slots leaked")
        except Violation as v:
            if v.step is None:
                v.step = self.index
            raise


def play_hybrid(factory, trace: HybridTrace, *, determinism: bool = True,
                store: StoreFactory = dict_store) -> list[dict[str, Any]]:
    """Play ``trace`` on a fresh engine with the oracle, its memory in ``store``, bring it to
    rest, then replay it on another and compare what the engine said (DET-1)."""
    flight.begin(trace)
    driver = HybridDriver(factory(trace.config), tuple(trace.behaviours), store=store)
    try:
        driver.run(trace)
        driver.drain()
    finally:  # what ran is judged, whether or not it held
        judged.record(driver.judged())
    if determinism:
        check_determinism(factory, trace, driver.log)
    return driver.log


def check_determinism(factory, trace: HybridTrace, log: list[dict[str, Any]]) -> None:
    """``trace`` played again on a fresh engine, unjudged, must say what ``log`` says (DET-1)."""
    judged.record(("DET-1",))
    flight.begin(trace)
    again = HybridDriver(factory(trace.config), judge=False)
    again.run(trace)
    if again.log != log:
        k = next((i for i, (a, b) in enumerate(zip(log, again.log, strict=False)) if a != b),
                 min(len(log), len(again.log)))
        v = Violation("determinism", ("DET-1",),
                      f"the same trace played twice differs at step {k}")
        v.step = k
        raise v
