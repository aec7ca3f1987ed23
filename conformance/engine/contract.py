"""The adapter contract, checked before any case runs: every attribute and method a level's
protocol asks of an engine, given what it declares.

The contract is read from the protocols themselves (``conformance/engine/protocol.py``,
``conformance/engine/hybrid.py``): their annotated attributes, and their methods with the
``needs`` / ``optional`` marks. ``kvconf check-engine`` prints every problem, one line each;
``open_engine`` (the start of every run, of ``kvconf replay`` and of the pytest plugin) stops
with the same lines, where otherwise a missing ``version`` would end the run with a worker's
traceback and a missing ``start_writeback`` a case with ``'NoneType' object is not callable``.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, get_origin, get_type_hints

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.hybrid import HybridEngine
from kvconf.conformance.engine.protocol import CacheEngine, SchedulerEngine, documented
from kvconf.conformance.errors import KitError

PROTOCOLS: dict[Feature, type] = {Feature.CACHE: CacheEngine, Feature.SCHEDULER: SchedulerEngine,
                                  Feature.HYBRID: HybridEngine}


@dataclass(frozen=True, slots=True)
class Attribute:
    """An attribute the protocol asks for: its name, its type, and what it means."""

    name: str
    type: Any
    doc: str


@dataclass(frozen=True, slots=True)
class Method:
    """A method of the protocol: its parameters, the features that make the kit call it
    (empty: always; None: whenever the engine has it) and what it does."""

    name: str
    params: tuple[str, ...]
    signature: str
    needs: frozenset[Feature] | None
    doc: str


def attributes(protocol: type) -> list[Attribute]:
    """The protocol's attributes in declaration order (its own annotations)."""
    hints = get_type_hints(protocol, include_extras=True)
    return [Attribute(n, *documented(hints[n])) for n in inspect.get_annotations(protocol)]


def methods(protocol: type) -> list[Method]:
    """The protocol's methods in declaration order."""
    out = []
    for name, fn in protocol.__dict__.items():
        if name.startswith("_") or not inspect.isfunction(fn):
            continue
        sig = inspect.signature(fn)
        params = tuple(p for p in sig.parameters if p != "self")
        shown = str(sig).replace("(self, ", "(").replace("(self)", "()").replace("'", "")
        out.append(Method(name, params, f"{name}{shown}",
                          getattr(fn, "__kvconf_needs__", frozenset()),
                          inspect.cleandoc(fn.__doc__ or "")))
    return out


def _first(doc: str) -> str:
    """A definition's first sentence, on one line (for a problem's parenthesis)."""
    text = " ".join(doc.split()).replace("``", "")
    at = 0
    while (cut := text.find(". ", at)) >= 0 and text[:cut].endswith(("e.g", "i.e")):
        at = cut + 2
    return (text if cut < 0 else text[:cut]).rstrip(".")


def _a(noun: str) -> str:
    return ("an " if noun[:1] in "aeiou" else "a ") + noun


def _type_name(t: Any) -> str:
    origin = get_origin(t)
    if origin is not None:
        return getattr(origin, "__name__", str(origin))
    return getattr(t, "__name__", str(t))


def _attribute_problem(engine: Any, a: Attribute, config: Any) -> str | None:
    if not hasattr(engine, a.name):
        return f"{a.name}: missing ({_first(a.doc)})"
    value = getattr(engine, a.name)
    if a.name == "features":
        return _features_problem(value)
    want = get_origin(a.type) or a.type
    if want is Any:
        return None
    if want is Mapping:
        ok = isinstance(value, Mapping)
    elif want is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, want)
    if not ok:
        return (f"{a.name}: {value!r:.60} is {_a(type(value).__name__)}, expected "
                f"{_type_name(a.type)} ({_first(a.doc)})")
    if a.name in ("name", "version") and not value.strip():
        return f"{a.name}: empty ({_first(a.doc)})"
    if a.name == "page_size":
        want_size = getattr(config, "page_size", None)
        if value < 1:
            return f"page_size: {value}, expected a positive int"
        if want_size is not None and value != want_size:
            return (f"page_size: {value}, but the engine was built with page_size "
                    f"{want_size} ({_first(a.doc)})")
    return None


def _features_problem(value: Any) -> str | None:
    if not isinstance(value, (set, frozenset)):
        return (f"features: {value!r:.60} is {_a(type(value).__name__)}, expected a frozenset "
                "of kvconf.Feature")
    for f in sorted(value, key=str):
        if not isinstance(f, Feature):
            hint = ""
            if isinstance(f, str) and f in Feature._value2member_map_:
                hint = f" (write Feature.{Feature(f).name})"
            return f"features: {f!r} is {_a(type(f).__name__)}, not a kvconf.Feature{hint}"
    return None


def _arity_problem(fn: Any, m: Method) -> str | None:
    """Whether ``fn`` takes the arguments the kit passes, positionally."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or an extension's method: not inspectable
        return None
    try:
        sig.bind(*m.params)
    except TypeError:
        taken = [p for p in sig.parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        return (f"{m.name}: takes {len(taken)} argument{'s' * (len(taken) != 1)}, the kit "
                f"passes {len(m.params)} ({m.signature})")
    return None


def problems(engine: Any, level: Feature, config: Any = None) -> list[str]:
    """Every way ``engine``, built by a factory of ``level`` with ``config``, breaks that
    level's contract, one line each, in the protocol's order (empty: it meets it)."""
    protocol = PROTOCOLS[level]
    out = [p for a in attributes(protocol)
           if (p := _attribute_problem(engine, a, config)) is not None]
    declared = getattr(engine, "features", frozenset())
    if not isinstance(declared, (set, frozenset)):
        declared = frozenset()
    for m in methods(protocol):
        fn = getattr(engine, m.name, None)
        if m.needs is None:  # optional: judged only where present
            if fn is not None and not callable(fn):
                out.append(f"{m.name}: {fn!r:.40} is not callable ({m.signature})")
            elif fn is not None and (p := _arity_problem(fn, m)) is not None:
                out.append(p)
            continue
        if m.needs and not (m.needs & declared):
            continue  # never called on this engine
        why = (f", needed with {' or '.join(sorted(f.value for f in m.needs))}"
               if m.needs else "")
        if fn is None:
            out.append(f"{m.name}: missing{why} ({m.signature}: {_first(m.doc)})")
        elif not callable(fn):
            out.append(f"{m.name}: {fn!r:.40} is not callable{why} ({m.signature})")
        elif (p := _arity_problem(fn, m)) is not None:
            out.append(p)
    return out


def lines(engine_name: str, found: list[str]) -> Iterator[str]:
    """The problems as printed: each names the engine first."""
    for p in found:
        yield f"{engine_name}: {p}"


def require(engine_name: str, engine: Any, level: Feature, config: Any = None) -> None:
    """Stop with every problem of ``engine``, one line each (a ``KitError``: bad input, exit
    code 2), before anything is played on it."""
    found = problems(engine, level, config)
    if found:
        raise KitError("\n".join(lines(engine_name, found)))
