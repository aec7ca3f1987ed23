"""A failure comparing a field says what the field means, read from where it is declared
(conformance/engine/field_docs.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Annotated

import pytest

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.cache.scenarios import SCENARIOS
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.field_docs import attribute_doc, compared, meaning
from kvconf.conformance.engine.protocol import CacheEngine, Inserted, Match
from kvconf.conformance.oracles import Violation
from kvconf.conformance.running.runner import play


@dataclass(frozen=True)
class Doc:
    """A definition carried in ``Annotated`` metadata (as the protocol's ``Doc`` is)."""

    text: str


@dataclass
class _Styles:
    """A class documenting its fields every way the reader knows.

    in_docstring: said in the class docstring,
        over two lines. And more.
    """

    meta: int = dataclasses.field(default=0, metadata={"doc": "said in metadata. More."})
    literal: int = 0
    """said in a string after it. More."""
    commented: int = 0  # said in the comment # that ends its line. More.
    in_docstring: int = 0
    annotated: Annotated[int, Doc("said in its annotation. More.")] = 0
    bare: int = 0

    def method(self) -> None:
        """Said in the ``method``'s docstring. More."""


@pytest.mark.parametrize(("name", "doc"), [
    ("meta", "said in metadata"),
    ("literal", "said in a string after it"),
    ("commented", "said in the comment # that ends its line"),
    ("in_docstring", "said in the class docstring, over two lines"),
    ("method", "Said in the method's docstring"),
    ("annotated", "said in its annotation"),
    ("bare", None),
])
def test_every_documenting_style_is_read(name: str, doc: str | None):
    assert attribute_doc(_Styles, name) == doc


def test_every_compared_cache_field_has_its_meaning_from_the_protocol():
    for field, owner, member in [("device_len", Match, "device_len"),
                                 ("host_len", Match, "host_len"),
                                 ("cached_len", Inserted, "cached_len"),
                                 ("evicted", CacheEngine, "evict"),
                                 ("started", CacheEngine, "start_writeback"),
                                 ("rejected", CacheEngine, "unlock")]:
        doc = attribute_doc(owner, member)
        assert doc, f"{owner.__name__}.{member} documents nothing"
        assert doc in meaning(field)
    assert compared("nonesuch", 1, 2) == "nonesuch is 1, the trace expects 2"


class _NowCached(ReferenceCacheAdapter):
    """Reads ``cached_len`` as the length cached after the insert (issue 37's misreading)."""

    def insert(self, namespace, tokens, pages) -> Inserted:
        got = super().insert(namespace, tokens, pages)
        return Inserted(len(tokens) // self.page_size * self.page_size, got.freed)


@pytest.mark.behaviours("TREE-5")
def test_a_cached_len_failure_says_what_cached_len_means():
    sc = next(s for s in SCENARIOS if s.name == "duplicate-insert-frees-caller-pages")
    with pytest.raises(Violation) as e:
        play(_NowCached, sc.trace(EngineConfig()), determinism=False)
    doc = attribute_doc(Inserted, "cached_len")
    assert e.value.message == f"cached_len is 12, the trace expects 0; cached_len: {doc}"
    assert "before" in doc  # the protocol's meaning: cached before the insert
