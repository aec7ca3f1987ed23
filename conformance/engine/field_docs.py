"""What a field of an engine's answer means, read from the protocol's own docstrings.

A failure that compares a field (``cached_len is 12, the trace expects 0``) tells an author what
the kit wants only if it says what the field is. The meaning is defined once, where the field is
declared (``kvconf.conformance.engine.protocol``, the reference's hybrid types): this module
reads it from there rather than keeping a copy that could drift. A field's documentation is the
first that exists of: the text its ``Annotated`` metadata carries (a ``Doc("...")`` or a str),
the dataclass field's ``metadata["doc"]``, the string literal after the
field (an attribute docstring), the comment that ends the field's line, and a ``name: text``
line in the class's docstring; a method's is its docstring. Only the first sentence is used.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import re
import textwrap
import tokenize
import typing
from functools import cache


def _first_sentence(text: str) -> str:
    flat = " ".join(text.replace("``", "").split())
    m = re.match(r"(.+?\.)(\s|$)", flat)
    return (m.group(1) if m else flat).rstrip(".")


def _class_ast(owner: type) -> tuple[ast.ClassDef, list[str]] | None:
    try:
        src = textwrap.dedent(inspect.getsource(owner))
    except (OSError, TypeError):
        return None  # no source (a frozen or compiled build): no meaning, never an error
    tree = ast.parse(src)
    node = tree.body[0] if tree.body else None
    return (node, src.splitlines()) if isinstance(node, ast.ClassDef) else None


def _comment(line: str) -> str | None:
    try:
        for tok in tokenize.generate_tokens(io.StringIO(line).readline):
            if tok.type == tokenize.COMMENT:
                return tok.string.lstrip("#").strip() or None
    except (tokenize.TokenError, IndentationError):
        return None
    return None


def _annotated(owner: type, name: str) -> str | None:
    """The text an ``Annotated[type, Doc("...")]`` annotation gives ``name``: a metadata item
    that is a str or has a str ``text``."""
    try:
        hints = typing.get_type_hints(owner, include_extras=True)
    except Exception:  # a name the annotations use that does not resolve here: no meaning
        return None
    for item in getattr(hints.get(name), "__metadata__", ()):
        text = item if isinstance(item, str) else getattr(item, "text", None)
        if isinstance(text, str) and text:
            return text
    return None


@cache
def attribute_doc(owner: type, name: str) -> str | None:
    """The first sentence of what ``owner`` documents for its field or method ``name``."""
    annotated = _annotated(owner, name)
    if annotated:
        return _first_sentence(annotated)
    if dataclasses.is_dataclass(owner):
        for f in dataclasses.fields(owner):
            if f.name == name and f.metadata.get("doc"):
                return _first_sentence(str(f.metadata["doc"]))
    member = inspect.getattr_static(owner, name, None)
    if callable(member) and getattr(member, "__doc__", None):
        return _first_sentence(member.__doc__)
    parsed = _class_ast(owner)
    if parsed is not None:
        cls, lines = parsed
        for i, node in enumerate(cls.body):
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and node.target.id == name):
                continue
            after = cls.body[i + 1] if i + 1 < len(cls.body) else None
            if (isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                return _first_sentence(after.value.value)
            comment = _comment(lines[node.end_lineno - 1].strip())
            if comment:
                return _first_sentence(comment)
    m = re.search(rf"^\s*{re.escape(name)}(?: \([^)]*\))?: (.+(?:\n\s{{2,}}\S.*)*)",
                  inspect.getdoc(owner) or "", re.MULTILINE)
    return _first_sentence(m.group(1)) if m else None


def _cache_fields() -> dict[str, tuple[type, str, str]]:
    """The cache driver's compared fields: (where the engine answers it, the member that
    documents it, how the kit reads the answer; empty when the field is the member itself)."""
    from kvconf.conformance.engine.protocol import CacheEngine, Inserted, Match

    return {
        "device_len": (Match, "device_len", ""),
        "host_len": (Match, "host_len", ""),
        "cached_len": (Inserted, "cached_len", ""),
        "evicted": (CacheEngine, "evict", "what evict returned"),
        "started": (CacheEngine, "start_writeback",
                    "whether start_writeback or start_loadback returned a copy, not None"),
        "rejected": (CacheEngine, "unlock", "whether unlock refused"),
        "cleared": (CacheEngine, "reset", "what reset returned: True cleared, False refused"),
    }


def _hybrid_fields() -> dict[str, tuple[type, str, str]]:
    from kvconf.reference.hybrid_types import GroupHit, HybridHit

    group = "the length the hit's {} group serves"
    return {
        "length": (HybridHit, "length", ""),
        "full": (GroupHit, "length", group.format("full-attention")),
        "window": (GroupHit, "length", group.format("sliding-window")),
        "mamba": (GroupHit, "length", group.format("Mamba")),
    }


@cache
def meaning(field: str, level: str = "cache") -> str | None:
    """``cached_len: <its docstring's first sentence>``; None when nothing documents it."""
    table = _hybrid_fields() if level == "hybrid" else _cache_fields()
    if field not in table:
        return None
    owner, member, how = table[field]
    doc = attribute_doc(owner, member)
    if how:
        return f"{field}: {how}" + (f" ({member}: {doc})" if doc else "")
    return f"{field}: {doc}" if doc else None


def compared(field: str, got: object, want: object, level: str = "cache") -> str:
    """A got-vs-expected message that says what the field means, where its owner says it:
    ``cached_len is 12, the trace expects 0; cached_len: tokens already cached ...``."""
    text = f"{field} is {got!r}, the trace expects {want!r}"
    what = meaning(field, level)
    return f"{text}; {what}" if what else text
