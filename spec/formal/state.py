"""The z3 state vector of one model state, and reading it back from a z3 model.

Every field is a per-index z3 variable (no arrays, no quantifiers), so the formulas stay
quantifier-free over the bounded scope. Owner codes of a page: ``FREE`` (-1), a position ``x``
(``0..n-1``), transfer slot ``t`` (``n + t``), request ``r`` (``n + transfers + r``) and
``caller(scope)``: pages the caller allocated and still holds after a step, a leak (POOL-4).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import z3

from kvconf.reference.requests import State as ReqState
from kvconf.spec.formal.scope import Scope

FREE = -1
NONE = -1  # no position / no transfer
REQ_STATES: tuple[ReqState, ...] = tuple(ReqState)


def transfer_code(scope: Scope, t: int) -> int:
    return scope.n + t


def request_code(scope: Scope, r: int) -> int:
    return scope.n + scope.transfers + r


def caller(scope: Scope) -> int:
    return scope.n + scope.transfers + scope.requests


# field name -> (kind, count attribute): per position, per page of a tier, per slot, scalar.
FIELDS: dict[str, tuple[str, str]] = {
    "dev": ("bool", "n"), "host": ("bool", "n"),
    "dpg": ("int", "n"), "hpg": ("int", "n"),  # the page a position holds on each tier
    "dref": ("int", "n"), "href": ("int", "n"),  # reference counts per tier (PIN-1)
    "pend": ("int", "n"), "tpg": ("int", "n"),  # transfer copying into it, and its page there
    "cont": ("int", "n"),  # the namespace whose KV its pages hold (NS-1)
    "mdep": ("int", "n"),  # depth of the Mamba state kept with it, -1 none
    "odev": ("int", "device_pages"), "ohost": ("int", "host_pages"),
    "free_d": ("int", ""), "free_h": ("int", ""),
    "lk": ("bool", "locks"), "lpos": ("int", "locks"), "ldev": ("bool", "locks"),
    "tact": ("bool", "transfers"), "twb": ("bool", "transfers"),
    "ttgt": ("int", "transfers"), "tanc": ("int", "transfers"),
    "rst": ("int", "requests"),  # index into REQ_STATES
    "rpin": ("bool", "requests"), "rpos": ("int", "requests"),
    "rhpin": ("bool", "requests"), "rhpos": ("int", "requests"),
    "rpage": ("bool", "requests"), "rpg": ("int", "requests"),
    "rfl": ("bool", "requests"),  # its own data is in flight (PLAN-5)
    "rmk": ("int", "requests"), "rmd": ("int", "requests"),  # Mamba reuse: kind, state depth
}


class StateVars:
    """One state: ``s.f[name][i]`` (or ``s.f[name]`` for scalars) are z3 constants."""

    def __init__(self, scope: Scope, tag: str) -> None:
        self.scope = scope
        self.tag = tag
        self.f: dict[str, Any] = {}
        for name, (kind, count) in FIELDS.items():
            mk = z3.Bool if kind == "bool" else z3.Int
            if not count:
                self.f[name] = mk(f"{tag}.{name}")
            else:
                k = scope.n if count == "n" else getattr(scope, count)
                self.f[name] = [mk(f"{tag}.{name}[{i}]") for i in range(k)]

    def __getattr__(self, name: str) -> Any:
        f = self.__dict__.get("f")
        if f is not None and name in f:
            return f[name]
        raise AttributeError(name)

    def fields(self) -> Iterator[tuple[str, int | None]]:
        for name, v in self.f.items():
            if isinstance(v, list):
                for i in range(len(v)):
                    yield name, i
            else:
                yield name, None

    def var(self, key: tuple[str, int | None]) -> Any:
        name, i = key
        return self.f[name] if i is None else self.f[name][i]

    def values(self, model: z3.ModelRef) -> dict[str, Any]:
        """The state as plain Python values (completion on: unconstrained fields read 0)."""
        out: dict[str, Any] = {}
        for name, v in self.f.items():
            vs = v if isinstance(v, list) else [v]
            got = [_py(model.eval(x, model_completion=True)) for x in vs]
            out[name] = got if isinstance(v, list) else got[0]
        return out

    def equals(self, values: dict[str, Any]) -> z3.BoolRef:
        """This state is ``values`` (fields given as None are left free)."""
        cs = []
        for name, v in values.items():
            if v is None:
                continue
            vs = self.f[name] if isinstance(self.f[name], list) else [self.f[name]]
            want = v if isinstance(v, list) else [v]
            for x, w in zip(vs, want, strict=True):
                if w is not None:
                    cs.append(x == w)
        return z3.And(cs)


def _py(v: z3.ExprRef) -> Any:
    if z3.is_true(v):
        return True
    if z3.is_false(v):
        return False
    return v.as_long()


def show(scope: Scope, v: dict[str, Any]) -> list[str]:
    """A readable rendering of one state, one line per part that holds anything."""
    lines = []
    for x in range(scope.n):
        parts = []
        if v["dev"][x]:
            parts.append(f"dev p{v['dpg'][x]} ref {v['dref'][x]}")
        elif v["dref"][x]:
            parts.append(f"NOT on dev, ref {v['dref'][x]}")
        if v["host"][x]:
            parts.append(f"host p{v['hpg'][x]} ref {v['href'][x]}")
        elif v["href"][x]:
            parts.append(f"NOT on host, ref {v['href'][x]}")
        if v["pend"][x] != NONE:
            parts.append(f"copy t{v['pend'][x]} into p{v['tpg'][x]}")
        if parts and (v["dev"][x] or v["host"][x]):
            parts.append(f"KV of ns {v['cont'][x]}")
        if parts:
            lines.append(f"  {scope.label(x)}: " + ", ".join(parts))
    lines.append(f"  device owners {_owners(scope, v['odev'])} free {v['free_d']}; "
                 f"host owners {_owners(scope, v['ohost'])} free {v['free_h']}")
    for lslot in range(scope.locks):
        if v["lk"][lslot]:
            tier = "device" if v["ldev"][lslot] else "host"
            lines.append(f"  lock l{lslot} on {scope.label(v['lpos'][lslot])} ({tier})")
    for t in range(scope.transfers):
        if v["tact"][t]:
            kind = "writeback" if v["twb"][t] else "loadback"
            lines.append(f"  transfer t{t}: {kind} of {scope.label(v['ttgt'][t])}, anchor "
                         f"{scope.label(v['tanc'][t])}")
    for r in range(scope.requests):
        st = REQ_STATES[v["rst"][r]].value if 0 <= v["rst"][r] < len(REQ_STATES) else "?"
        bits = [st]
        if v["rpin"][r]:
            bits.append(f"pins {scope.label(v['rpos'][r])}")
        if v["rhpin"][r]:
            bits.append(f"host-pins {scope.label(v['rhpos'][r])}")
        if v["rpage"][r]:
            bits.append(f"owns p{v['rpg'][r]}")
        if v["rfl"][r]:
            bits.append("data in flight")
        lines.append(f"  request r{r} (ns {r % scope.namespaces}): " + ", ".join(bits))
    return lines


def _owners(scope: Scope, owners: list[int]) -> str:
    def one(o: int) -> str:
        if o == FREE:
            return "free"
        if 0 <= o < scope.n:
            return scope.label(o)
        if o < scope.n + scope.transfers:
            return f"t{o - scope.n}"
        if o < caller(scope):
            return f"r{o - scope.n - scope.transfers}"
        return "caller" if o == caller(scope) else f"?{o}"

    return "[" + " ".join(one(o) for o in owners) + "]"
