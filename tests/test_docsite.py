"""The documentation site: generated from the registry and the reference, built strictly."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from kvconf.conformance.errors import KitError
from kvconf.conformance.reporting import docsite
from kvconf.spec.registry import load_registry


@pytest.fixture(scope="module")
def site_src(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("site") / "src"
    docsite.generate(src, [])
    return src


def test_every_behaviour_has_an_anchor_and_every_defect_links_its_seed(site_src: Path):
    reg = load_registry()
    anchors = {m for p in (site_src / "spec").glob("*.md")
               for m in re.findall(r"\{ #([A-Z][A-Z0-9]*-\d+) \}", p.read_text())}
    assert anchors == set(reg.behaviours)
    catalog = (site_src / "catalog.md").read_text()
    for d in reg.catalog.values():
        assert f"{{ #{d.id} }}" in catalog
        assert f"[{d.seed}](seeds.md#seed-{d.seed})" in catalog
    seeds = (site_src / "seeds.md").read_text()
    assert all(f"{{ #seed-{d.seed} }}" in seeds for d in reg.catalog.values())


def test_a_behaviour_block_lists_what_holds_it(site_src: Path):
    pinning = (site_src / "spec" / "pinning.md").read_text()
    block = pinning[pinning.index("### PIN-2"):pinning.index("### PIN-3")]
    assert "MUST NOT" in block and "[D381-2](../catalog.md#D381-2)" in block
    assert "`pinning`" in block and "`pinned-content`" in block  # its oracles
    assert "test_" in block and "`EvictsPinned`" in block  # its tests and mutants
    assert "`pinned-never-evicted`" in block  # its proof obligation


def test_the_diagrams_are_drawn_from_the_reference(site_src: Path):
    from kvconf.reference.requests import TRANSITIONS

    svg = (site_src / "diagrams" / "request-fsm.svg").read_text()
    assert svg.count("<title>") == sum(len(t) for t in TRANSITIONS.values())
    life = (site_src / "page-lifecycle.md").read_text()
    for row in ("| free (device) | alloc | caller (device) |",
                "| caller (device) | insert | node (device) |",
                "| caller (device) | insert | free (device) |",  # a duplicate page returned
                "| node (device) | evict | free (device) |",
                "| free (host) | start_writeback | transfer (host) |",
                "| transfer (host) | finish_transfer (failed) | free (host) |"):
        assert row in life, row
    assert '"kvconf-trace/1"' in (site_src / "formats.md").read_text()


def test_the_site_builds_strictly_and_a_broken_link_fails_it(tmp_path: Path, monkeypatch):
    pytest.importorskip("mkdocs")
    site = docsite.build_site(tmp_path / "site", [], strict=True)
    assert (site / "spec" / "pinning" / "index.html").read_text().count('id="PIN-') == 3
    docs = tmp_path / "docs"
    shutil.copytree(docsite.DOCS_DIR, docs)
    (docs / "index.md").write_text((docs / "index.md").read_text() + "\n[gone](nowhere.md)\n")
    monkeypatch.setattr(docsite, "DOCS_DIR", docs)
    with pytest.raises(KitError, match="does not build"):
        docsite.build_site(tmp_path / "broken", [], strict=True)
