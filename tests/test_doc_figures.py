"""The guides' figures of results are the committed reports' (conformance/reporting/site/
figures.py): never typed by hand, never stale, and a changed report changes the built page."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvconf.conformance.errors import KitError
from kvconf.conformance.reporting.site import figures
from kvconf.conformance.reporting.site.figures import render, render_guides, runs_reader

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
GUIDES = sorted(DOCS.glob("*.md")) + [ROOT / "README.md"]


@pytest.mark.parametrize("page", GUIDES, ids=lambda p: p.name)
def test_no_case_count_is_typed_by_hand(page):
    typed = figures.typed_by_hand(page.read_text(encoding="utf-8"))
    assert not typed, (f"{page.name} types case counts by hand: {typed}; mark them "
                       "<!-- figures:counts RUN -->...<!-- /figures --> (figures.py)")


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_every_marked_figure_is_the_committed_reports(page):
    text = page.read_text(encoding="utf-8")
    assert render(text, runs_reader(DOCS / "peers"), page.name) == text, (
        f"{page.name}: a figure disagrees with its report; run "
        "`python -m kvconf.conformance.reporting.site.figures docs`")


def test_the_peer_tables_are_generated():
    assert "<!-- figures:table reference sglang-radix" in (DOCS / "peers.md").read_text()
    assert "<!-- figures:table tokenspeed-main-radix" in (DOCS / "tokenspeed.md").read_text()


def _copy(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    return docs


def test_a_changed_report_changes_the_figure(tmp_path):
    docs = _copy(tmp_path)
    path = docs / "peers" / "vllm" / "report.json"
    data = json.loads(path.read_text())
    n = {s: sum(r["status"] == s for r in data["results"])
         for s in ("PASS", "FAIL", "NOT_SUPPORTED")}
    bad = next(r for r in data["results"] if r["status"] == "FAIL")
    bad["status"], bad["behaviours"] = "PASS", []  # one FAIL fixed
    path.write_text(json.dumps(data))
    assert docs / "peers.md" in render_guides(docs, docs / "peers")
    page = (docs / "peers.md").read_text()
    ok, fail, ns = n["PASS"] + 1, n["FAIL"] - 1, n["NOT_SUPPORTED"]
    assert (f"<!-- figures:counts vllm -->{ok} PASS, {fail} FAIL, {ns} NOT_SUPPORTED"
            "<!-- /figures -->") in page
    assert f"| `vllm` | `vllm` | 0.33.0 | {ok} | {fail} | {ns} |" in page


def test_the_docs_build_writes_the_figures_afresh(tmp_path, monkeypatch):
    from kvconf.conformance.reporting import docsite

    docs = _copy(tmp_path)
    path = docs / "peers" / "sglang-radix" / "report.json"
    data = json.loads(path.read_text())
    n = {s: sum(r["status"] == s for r in data["results"])
         for s in ("PASS", "FAIL", "NOT_SUPPORTED")}
    for r in data["results"]:
        if r["status"] == "FAIL":
            r["status"] = "CRASH"
            r["signal"] = "SIGSEGV"
    path.write_text(json.dumps(data))
    monkeypatch.setattr(docsite, "DOCS_DIR", docs)
    docsite.generate(tmp_path / "src", [])
    page = (tmp_path / "src" / "peers.md").read_text()
    assert (f"<!-- figures:counts sglang-radix -->{n['PASS']} PASS, 0 FAIL, {n['FAIL']} CRASH, "
            f"{n['NOT_SUPPORTED']} NOT_SUPPORTED") in page
    assert f"CRASH SIGSEGV (x{n['FAIL']})" in page


def test_a_figure_of_a_run_not_committed_names_it():
    with pytest.raises(KitError, match="no committed report for the figure of run 'nope'"):
        render("<!-- figures:counts nope -->1 PASS<!-- /figures -->",
               runs_reader(DOCS / "peers"), "x.md")
    with pytest.raises(KitError, match=r"x\.md: figures:chart vllm: unknown figure"):
        render("<!-- figures:chart vllm --><!-- /figures -->", runs_reader(DOCS / "peers"), "x.md")
