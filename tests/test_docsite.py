"""The documentation site: generated from the registry and the reference, built strictly."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from kvconf.conformance.errors import KitError
from kvconf.conformance.reporting import docsite
from kvconf.conformance.reporting.site import fsm_svg
from kvconf.conformance.reporting.site.autolink import link_text
from kvconf.conformance.reporting.site.chapters import reading_order
from kvconf.conformance.reporting.site.diagrams import page_lifecycle, request_edges
from kvconf.conformance.reporting.site.drawing import drawn_edges
from kvconf.conformance.reporting.site.links import broken_links
from kvconf.conformance.reporting.site.search import card_boosts
from kvconf.spec.registry import load_registry


@pytest.fixture(scope="module")
def site_src(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("site") / "src"
    docsite.generate(src, [])
    return src


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    pytest.importorskip("mkdocs")
    return docsite.build_site(tmp_path_factory.mktemp("built") / "site", [], strict=True)


def _card(src: Path, chapter: str, bid: str) -> str:
    text = (src / "spec" / chapter).read_text()
    start = text.index(f"### {bid} ")
    return text[start:text.index("</div>", start)]


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


def test_a_card_says_how_to_check_an_engine_against_the_rule(site_src: Path):
    card = _card(site_src, "pinning.md", "PIN-2")
    assert '<span class="kv-level kv-must-not">MUST NOT</span> { #PIN-2 }' in card
    statement = load_registry().behaviours["PIN-2"].statement
    assert f"{statement}\n{{ .kv-statement }}" in card  # the statement, styled to stand out
    assert "[D381-2](../catalog.md#D381-2)" in card
    # Check your engine: the cases citing it, with the features each needs, and the command.
    assert "| `loadback-keeps-host-source` | `cache`, `host_tier` |" in card
    assert "kvconf run --engine <yours> --case split-keeps-pins" in card
    # The internals, folded: oracles, tests, mutants and the proof obligation.
    folded = card[card.index('??? note "What holds it'):]
    assert "`pinning`" in folded and "`pinned-content`" in folded
    assert "test_" in folded and "`EvictsPinned`" in folded and "`pinned-never-evicted`" in folded


def test_a_card_links_a_known_engines_failure_to_its_write_up(site_src: Path):
    card = _card(site_src, "pinning.md", "PIN-3")
    # vLLM accepts a second release of a lock (docs/peers.md, its Finding 2).
    assert re.search(r'kv-fail">vllm</span> \(`fuzz-cache`, `fuzz-cache-page1`, '
                     r"`fuzz-cache-tight`, \.\.\.; "
                     r"\[why\]\(\.\./peers\.md"
                     r"#vllm-unlock\)\)",
                     card), card
    # The committed reference report records what its checks judged (kvconf-report/5): PIN-3
    # ran and held, so the card passes it there.
    assert 'kv-pass">reference</span>' in card
    assert "): reference" not in card  # in no "not judged" or other line
    # SGLang's unified cache crashes on that unlock (FAULT-2): PIN-3 itself is undecided there.
    # With HiCache the fuzz cases meet the accepted double release first (the loadback's own pin
    # holds the count), written up with the unified cache's unlock.
    assert "- undecided (its cases failed on another rule first): sglang-unified\n" in card
    assert re.search(r'kv-fail">sglang-hicache</span> \(`fuzz-cache`, `fuzz-cache-tight`; '
                     r"\[why\]\(\.\./peers\.md#sglang-unified-unlock\)\)", card), card
    assert ("- not supported (the cases need features the engine does not declare): "
            "sglang-hybrid; tokenspeed ") in card


def test_a_cards_write_ups_are_the_ones_the_results_section_gives(site_src: Path):
    """The cards and the results section share one mapping from a finding to its write-up
    (docs/peers/writeups.toml): each engine a card lists as failing links exactly the write-ups
    of its findings that break the rule, nothing guessed from a guide's headings."""
    from kvconf.conformance.reporting import results_runs as rr

    res = rr.gather([])
    want: dict[tuple[str, str], set[str]] = {}  # (rule, run) -> "page#anchor"
    for run in res.runs:
        for x in run.report.results:
            if x.status not in rr.BAD:
                continue
            found = x.findings or [None]
            for f, (_sig, reason, _trace) in zip(found, rr.findings_of(x), strict=True):
                w = rr.writeup_for(run.report.run_info.engine, reason, res.writeups)
                rules = f.behaviours if f is not None and f.behaviours else x.behaviours
                for b in x.behaviours:
                    links = want.setdefault((b, run.key), set())
                    if w is not None and b in rules:
                        links.add(f"{w.page}#{w.anchor}")
    got: dict[tuple[str, str], set[str]] = {}
    for page in (site_src / "spec").glob("*.md"):
        for card in re.split(r"^### ", page.read_text(), flags=re.M)[1:]:
            bid = card.split()[0]
            for label, rest in re.findall(r'kv-fail">([^<]+)</span> \((.*?)(?=; <span|$)',
                                          card, re.M):
                got[(bid, label)] = set(re.findall(r"\]\(\.\./([^)]+)\)", rest))
    assert got, "no card lists a failing engine"
    assert got == want
    assert got[("PIN-3", "vllm")] == {"peers.md#vllm-unlock"}


def test_no_empty_rows(site_src: Path):
    for page in [*site_src.glob("spec/*.md"), *(site_src / n for n in ("catalog.md", "seeds.md",
                                                                       "rules.md"))]:
        assert "none yet" not in page.read_text(), page


def test_the_rule_index_lists_every_rule_in_reading_order(site_src: Path):
    reg = load_registry()
    rules = (site_src / "rules.md").read_text()
    ids = re.findall(r"^\| \[([A-Z][A-Z0-9]*-\d+)\]\(spec/", rules, re.M)
    assert sorted(ids) == sorted(reg.behaviours)
    assert ids[0] == "POOL-1"  # pools come first in the index, eviction fourth
    order = reading_order(docsite.SPEC_DIR / "chapters")
    chapters = [reg.chapters[reg.behaviours[i].chapter].name for i in ids]
    assert chapters == sorted(chapters, key=order.index)
    assert re.search(r"\| \[PIN-3\]\(spec/pinning.md#PIN-3\) \| .*MUST.* \| .*vllm", rules)


def test_chapters_follow_the_index_not_the_file_names():
    order = reading_order(docsite.SPEC_DIR / "chapters")
    assert order[:4] == ["pools.md", "radix_tree.md", "pinning.md", "eviction.md"]
    assert order[-1] == "formal.md"  # not listed (it states no rule): after the listed ones
    spec = next(e["Spec"] for e in docsite.nav(order) if "Spec" in e)
    assert [next(iter(e.values())) for e in spec][:4] == [
        "spec/index.md", "rules.md", "spec/pools.md", "spec/radix_tree.md"]


def test_the_state_machine_drawing_is_the_table(site_src: Path):
    svg = (site_src / "diagrams" / "request-fsm.svg").read_text()
    assert drawn_edges(svg) == set(request_edges())
    assert len(request_edges()) == 32  # 30 pairs, two with two targets
    # Every self-loop carries its event's name as a label beside it.
    for a, ev, b in request_edges():
        if a == b:
            group = re.search(rf'data-from="{a}" data-event="{ev}" data-to="{b}">.*?</g>', svg)
            assert group and f">{ev}</text>" in group.group(0), (a, ev)


def test_a_drawing_that_disagrees_with_the_table_is_caught():
    edges = request_edges()
    holds = {s: () for e in edges for s in (e[0], e[2])}
    dropped = fsm_svg.state_machine_svg(edges[1:], holds, [], "Submitted", "Finished")
    assert drawn_edges(dropped) == set(edges[1:]) != set(edges)
    with pytest.raises(KitError, match="no place for state 'Parked'"):
        fsm_svg.state_machine_svg([*edges, ("Decoding", "park", "Parked")], holds, [],
                                  "Submitted", "Finished")


def test_page_ownership_is_drawn_as_observed(site_src: Path):
    observed = page_lifecycle()
    svg = (site_src / "diagrams" / "page-lifecycle.svg").read_text()
    assert drawn_edges(svg) == set(observed)
    life = (site_src / "page-lifecycle.md").read_text()
    for row in ("| free (device) | alloc | caller (device) |",
                "| caller (device) | insert | node (device) |",
                "| caller (device) | insert | free (device) |",  # a duplicate page returned
                "| node (device) | evict | free (device) |",
                "| free (host) | start_writeback | transfer (host) |",
                "| transfer (host) | finish_transfer (failed) | free (host) |"):
        assert row in life, row


def test_chapters_embed_their_diagrams(site_src: Path):
    assert "](../diagrams/request-fsm.svg)" in (site_src / "spec" / "requests.md").read_text()
    assert "](../diagrams/page-lifecycle.svg)" in (site_src / "spec" / "pools.md").read_text()


def test_ids_become_links_outside_code_headings_and_links():
    targets = {"PIN-2": "spec/pinning.md#PIN-2", "E-3": "catalog.md#E-3"}
    text = "\n".join(["# About PIN-2", "", "PIN-2, `PIN-2` and `kvconf --x PIN-2`; SE-3 E-3.",
                      "", "```", "PIN-2", "```", "[PIN-2](other.md#PIN-2) { #PIN-2 }", "",
                      "<div>PIN-2</div>"])
    out = link_text(text, targets).split("\n")
    assert out[0] == "# About PIN-2"
    assert out[2] == ("[PIN-2](spec/pinning.md#PIN-2), [`PIN-2`](spec/pinning.md#PIN-2) and "
                      "`kvconf --x PIN-2`; SE-3 [E-3](catalog.md#E-3).")
    assert out[5] == "PIN-2" and out[7] == "[PIN-2](other.md#PIN-2) { #PIN-2 }"
    assert out[9] == "<div>PIN-2</div>"


def test_ids_are_linked_on_every_page(site_src: Path):
    guide = (site_src / "peers.md").read_text()
    assert "[PIN-3](spec/pinning.md#PIN-3)" in guide
    chapter = (site_src / "spec" / "pools.md").read_text()
    assert "see [FAULT-1](faults.md#FAULT-1)" in chapter  # a chapter links within spec/


def test_the_formats_page_documents_fields_and_shows_example_traces(site_src: Path,
                                                                   tmp_path: Path):
    from kvconf.conformance.scheduler.trace import SchedTrace
    from kvconf.conformance.trace import load_trace

    text = (site_src / "formats.md").read_text()
    assert "| `pages` | integer | required |" in text  # EvictStep, from the schema
    assert "| `config` | [EngineConfig](#trace-engineconfig) |" in text
    blocks = re.findall(r"^```json\n(.*?)\n```", text, re.M | re.S)
    cache, sched = blocks[0], blocks[1]
    (tmp_path / "cache.json").write_text(cache)
    assert load_trace(tmp_path / "cache.json").steps  # as kvconf replay reads it
    assert SchedTrace.model_validate_json(sched).arrivals
    assert '??? note "The raw JSON Schema' in text  # folded, not 28,500 px of it


def test_a_rule_whose_number_begins_a_siblings_gets_the_larger_boost():
    boosts = card_boosts(["MAMBA-1", "MAMBA-10", "MAMBA-2", "PIN-1", "PLAN-1", "PLAN-12"])
    assert boosts == {"MAMBA-1": 8, "MAMBA-10": 2, "MAMBA-2": 4, "PIN-1": 4, "PLAN-1": 8,
                      "PLAN-12": 2}


def test_the_site_builds_strictly_with_no_network_and_cards_first_in_search(site: Path):
    assert (site / "spec" / "pinning" / "index.html").read_text().count('id="PIN-') == 3
    # Nothing is loaded from the network: no font, script, style or image from another host.
    remote = re.compile(r"<(?:link|script|img|iframe|source)\b[^>]*\b(?:href|src)=\"(?:https?:)?//")
    for page in site.rglob("*.html"):
        assert not remote.search(page.read_text()), page
    for css in site.rglob("*.css"):
        assert not re.search(r"url\(['\"]?(?:https?:)?//|@import", css.read_text()), css
    # Search: the rules' cards are boosted, so a query for an ID (cut at its hyphen by the
    # theme's query parser) finds the card whose title is that ID first.
    index = json.loads((site / "search" / "search_index.json").read_text())
    boosts = {d["location"]: d.get("boost", 1) for d in index["docs"]}
    assert boosts["spec/pinning/#PIN-2"] == 4 and boosts["spec/mamba/#MAMBA-1"] == 8
    assert boosts["spec/pinning/"] == 1 and boosts["peers/"] == 1
    pin2 = [d for d in index["docs"] if d["location"] == "spec/pinning/#PIN-2"]
    assert pin2[0]["title"].startswith("PIN-2")
    # Headings carry permalinks; code blocks a copy button.
    pinning = (site / "spec" / "pinning" / "index.html").read_text()
    assert 'class="headerlink" href="#PIN-2"' in pinning
    assert '"content.code.copy"' in pinning
    # A chapter's diagram links its full page.
    requests = (site / "spec" / "requests" / "index.html").read_text()
    assert 'the full page: <a href="../../state-machine/">request states</a>' in requests


def test_the_built_links_resolve(site: Path):
    """Every local link of every built page names a file that exists, and an anchor on it."""
    assert broken_links(site) == []
    page = site / "rules" / "index.html"
    page.write_text(page.read_text() + '<a href="../spec/pinning/#PIN-99">x</a>'
                    '<a href="../gone/">y</a><a href="https://example.org/">z</a>')
    assert broken_links(site) == ["rules/index.html: ../spec/pinning/#PIN-99",
                                  "rules/index.html: ../gone/"]


def test_a_broken_link_fails_the_build(tmp_path: Path, monkeypatch):
    pytest.importorskip("mkdocs")
    docs = tmp_path / "docs"
    shutil.copytree(docsite.DOCS_DIR, docs)
    (docs / "index.md").write_text((docs / "index.md").read_text() + "\n[gone](nowhere.md)\n")
    monkeypatch.setattr(docsite, "DOCS_DIR", docs)
    with pytest.raises(KitError, match="does not build"):
        docsite.build_site(tmp_path / "broken", [], strict=True)


def test_a_card_gives_the_readers_engine_its_verdict_first_and_never_an_unjudged_pass(
        tmp_path: Path):
    """The reports given to the build are the reader's own engine: each card gives its verdict
    first. An engine that declares no host tier passes only the rules its cases judged."""
    import judged_report as jr

    path = tmp_path / "mine.json"
    path.write_text(jr.no_host_tier_report().model_dump_json())
    src = tmp_path / "src"
    docsite.generate(src, [path])
    reg = load_registry()

    def card(bid: str) -> str:
        text = _card(src, reg.chapters[reg.behaviours[bid].chapter].name, bid)
        assert text.index("**Your engine**") < text.index("**Known engines**")
        return text[text.index("**Your engine**"):text.index("**Known engines**")]

    for bid in jr.JUDGED:
        assert 'kv-pass">dict-cache 1.0</span> passes: a check of it ran and held' in card(bid)
    # judged only by a case that failed on another rule: a failing case passes nothing
    assert "- dict-cache 1.0: undecided (its cases failed on another rule first)" in card(
        jr.HELD_IN_FAILURE)
    for bid in jr.CITED_ONLY:
        assert "- dict-cache 1.0: **not judged** (its cases (fuzz-cache) ran, but no check of " \
               "it did for the features the engine declares)" in card(bid)
    assert "- dict-cache 1.0: not supported (`writeback-demote-loadback`: engine lacks " \
           "host_tier)" in card(jr.LACKING)
    assert 'kv-fail">dict-cache 1.0</span> (`lru-victim-order`)' in card(jr.BROKEN)
    assert "**not judged** (no case of the run cites it)" in card(jr.UNCITED)
    rules = (src / "rules.md").read_text()
    assert re.search(r"\| \[PIN-2\]\(spec/.*\| <b>dict-cache 1\.0</b>: pass", rules)
    assert re.search(r"\| \[EVENT-1\]\(spec/.*\| <b>dict-cache 1\.0</b>: not judged", rules)


def test_code_blocks_wrap_and_the_results_page_is_not_capped():
    """A replay command's ``--engine ...`` is never hidden past a code block's edge, and the
    results matrix has the window's width (its columns fit 1,400 px)."""
    css = (docsite.ASSETS / "kvconf.css").read_text()
    assert re.search(r"\.md-typeset pre > code \{[^}]*white-space: pre-wrap", css)
    assert "body:has(.kv-matrix) .md-grid { max-width: none; }" in css
