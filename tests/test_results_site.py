"""The results: ``kvconf report``'s standalone pages and the documentation site's results
section (every committed run, failures first, every failure linked to its trace and write-up)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from kvconf.conformance.mutants.kill import KillInfo, KillMatrix, MutantResult
from kvconf.conformance.reporting import results_site, trace_page
from kvconf.conformance.reporting.compliance import Inputs, build
from kvconf.conformance.reporting.report import CaseResult, Report, RunInfo, Status
from kvconf.conformance.reporting.results_runs import findings_of

PEERS = results_site.DOCS_DIR / "peers"


def _kills() -> KillMatrix:
    info = KillInfo(kvconf="x", seed=0, profile="ci", budget="1", started="2026-01-01")
    return KillMatrix(run_info=info, mutants=[
        MutantResult(id="Caught", level="cache", catalog=["E-6"], killed=True, case="c",
                     oracle="match", behaviours=["TREE-4"], seconds=0.5),
        MutantResult(id="NeedsCuda", level="memory", catalog=["D162-7"], killed=False,
                     seconds=0.0, skipped="needs a CUDA device (kvconf gpu)"),
        MutantResult(id="Survivor", level="cache", catalog=["E-6"], killed=False,
                     seconds=2.0, message="alive: no case failed")])


def _report(engine: str = "reference", version: str = "x", **statuses: Status) -> Report:
    info = RunInfo(engine=engine, version=version, kvconf="x", features=[], config={},
                   seed=0, profile="ci", budget="1", started="2026-01-01")
    return Report(run_info=info, results=[
        CaseResult(case=c, status=s, behaviours=["PIN-2"], duration_s=0.0)
        for c, s in statuses.items()])


def test_kvconf_report_shows_a_skipped_mutant_as_skipped_with_its_reason(tmp_path: Path):
    inputs = Inputs(kills=[(tmp_path / "k.json", _kills())])
    md_path, html_path = build(inputs, tmp_path / "out")
    md, html = md_path.read_text(), html_path.read_text()
    assert "| NeedsCuda | D162-7 | skipped | needs a CUDA device (kvconf gpu) |  |" in md
    assert "| Survivor | E-6 | ALIVE | alive: no case failed | 2.00 |" in md
    assert "| NO |" not in md and "NO" not in md.split("| mutant |")[1].replace("NOT", "")
    assert "alive: Survivor; skipped, not run here: NeedsCuda (needs a CUDA device" in md
    assert "killed 1 of the 2 run (of 3)" in md
    # alive first, then skipped, then killed; the bar chart draws only the mutants run
    assert md.index("| Survivor") < md.index("| NeedsCuda") < md.index("| Caught")
    assert "<td class='skipped'>skipped</td><td>needs a CUDA device" in html
    chart = html[html.index("<svg"):html.index("</svg>")]
    assert "NeedsCuda" not in chart and "Survivor" in chart


def test_transition_coverage_counts_the_taken_and_lists_the_never_taken(tmp_path: Path):
    from kvconf.reference.requests import TRANSITIONS

    r = _report(a=Status.PASS)
    r.run_info.coverage = {"legal": {"missed": ["Draining --Abort-->"]},
                           "illegal": {"tried": 1, "total": 2}}
    md = build(Inputs(runs=[(tmp_path / "r.json", r)]), tmp_path / "out")[0].read_text()
    section = md[md.index("## Request state machine"):]
    total = len(TRANSITIONS)  # coverage is kept per (state, event) pair
    assert f"reference took {total - 1} of {total} (state, event) pairs" in section
    assert "Never taken (1):" in section
    assert re.findall(r"^- (.+)$", section, re.M) == ["Draining --Abort--> Finished"]
    # the site's coverage page: the same count, the never-taken pair first
    src = tmp_path / "src"
    (src / "results").mkdir(parents=True)
    res = results_site.Results(runs=[results_site.Run("ref", tmp_path / "r.json", r, "kvconf",
                                                      "reference", "reference x", False)])
    results_site.render_coverage(res, src)
    page = (src / "results" / "coverage.md").read_text()
    assert f"(State, event) pairs taken: **{total - 1} of {total}**; never taken: 1." in page
    rows = re.findall(r"^\| (\w+) \| (\w+) \| .* \| (yes|\*\*never taken\*\*) \|$", page, re.M)
    assert rows[0] == ("Draining", "Abort", "**never taken**")
    assert all(t == "yes" for *_x, t in rows[1:]) and len(rows) == total


def test_kvconf_report_puts_the_failing_rules_first(tmp_path: Path):
    r = _report(a=Status.PASS)
    r.results.append(CaseResult(case="b", status=Status.FAIL, behaviours=["TREE-2"],
                                duration_s=0.0))
    md = build(Inputs(runs=[(tmp_path / "r.json", r)]), tmp_path / "out")[0].read_text()
    rows = re.findall(r"^\| ([A-Z0-9]+-\d+) \| ", md, re.M)
    assert rows[0] == "TREE-2" and "PIN-2" in rows[1:]


def test_kvconf_report_keeps_its_html_columns_narrow(tmp_path: Path):
    r = _report(a=Status.NOT_SUPPORTED)
    r.results.append(CaseResult(case="b", status=Status.FAIL, behaviours=["TREE-2"],
                                duration_s=0.0))
    html = build(Inputs(runs=[(tmp_path / "r.json", r)]), tmp_path / "out")[1].read_text()
    assert re.search(r"<td class='NOT_SUPPORTED' title='[^']*'>n/s</td>", html)
    assert "<th class='col'>reference</th>" in html  # rotated by the page's style


# ---------------------------------------------------------------------------- the site


def _site(folder: Path, inputs: list[Path]) -> Path:
    """The results section rendered from ``inputs`` (reports, kill matrices) into a new
    ``src`` folder under ``folder``; returns that folder."""
    src = folder / "src"
    src.mkdir()
    results_site.render(src, inputs)
    return src


def _site_of(tmp_path: Path, report) -> Path:
    """The results section of one report (written to ``tmp_path``) beside the committed runs."""
    p = tmp_path / "r.json"
    p.write_text(report.model_dump_json())
    return _site(tmp_path, [p])


@pytest.fixture(scope="module")
def site_src(tmp_path_factory) -> Path:
    return _site(tmp_path_factory.mktemp("results"), [])


def test_every_committed_run_is_a_column(site_src: Path):
    committed = sorted(p.parent.name for p in PEERS.glob("*/report.json"))
    assert {"reference", "sglang-radix", "vllm", "tokenspeed-main-radix",
            "tokenspeed-main-now"} <= set(committed)
    page = (site_src / "results.md").read_text()
    res = results_site.gather([])
    assert sorted(r.key for r in res.runs) == committed
    for run in res.runs:  # every column has a header and a row in the runs table
        assert f"<span>{run.short}</span>" in page
        assert f"| {run.name} | `{run.report.run_info.engine}` |" in page
    # one column per TokenSpeed revision, grouped under one header
    ts = [r for r in res.runs if r.family == "TokenSpeed"]
    assert len(ts) == sum(1 for c in committed if c.startswith("tokenspeed-"))
    assert f"<th class='fam' colspan='{len(ts)}'>TokenSpeed</th>" in page


def test_rules_with_failures_come_first(site_src: Path):
    page = (site_src / "results.md").read_text()
    table = page[page.index("<tbody>"):page.index("</tbody>")]
    rows = re.findall(r"<tr><td class='rule'>.*?</tr>", table)
    failing = [bool(re.search(r"<td class='(FAIL|CRASH)", r)) for r in rows]
    assert failing[0]
    assert failing == sorted(failing, reverse=True)  # no failing row after a passing one


def test_every_failing_cell_links_its_trace_page_and_write_up(site_src: Path):
    page = (site_src / "results.md").read_text()
    cells = re.findall(r"<td class='(FAIL|CRASH|ERROR|TIMEOUT)'[^>]*>(.*?)</td>", page)
    assert len(cells) > 20
    # A failure of a case that plays no trace (a model config read wrongly: WIN-1) links only
    # its write-up; every other failing cell links its trace too.
    res = results_site.gather([])
    traceless = {w.anchor for run in res.runs for x in run.report.results
                 if x.status in results_site.BAD and not x.trace
                 and not any(f.trace for f in x.findings or ())
                 and (w := results_site.writeup_of(res, run, x)) is not None}
    for _st, body in cells:
        links = re.findall(r"href='([^']+)'", body)
        if len(links) == 1:  # the write-up alone
            assert links[0].split("#")[-1] in traceless, body
            links = [None, *links]
        assert len(links) == 2, body  # the trace, the write-up
        trace, why = links
        if trace is not None:
            assert trace.startswith("traces/") and trace.endswith("/")
            assert (site_src / "results" / (trace.rstrip("/") + ".md")).is_file(), trace
        doc, anchor = why.split("#")
        assert doc in ("../peers/", "../tokenspeed/")
        assert f"{{ #{anchor} }}" in (results_site.DOCS_DIR / (doc[3:-1] + ".md")).read_text()


def test_every_committed_failure_is_written_up():
    res = results_site.gather([])
    for run in res.runs:
        for x in run.report.results:
            if x.status in results_site.BAD:
                assert results_site.writeup_of(res, run, x), (run.key, x.case, x.known)
                for sig, reason, _trace in findings_of(x):  # each finding, as the pages list it
                    w = results_site.writeup_for(run.report.run_info.engine, reason,
                                                 res.writeups)
                    assert w, (run.key, x.case, sig, x.known)


def test_the_findings_page_lists_each_engine_with_its_findings(site_src: Path):
    page = (site_src / "results" / "findings.md").read_text()
    assert "## TokenSpeed main-radix { #tokenspeed-main-radix }" in page
    sec = page[page.index("{ #tokenspeed-main-radix }"):page.index("{ #tokenspeed-pr162 }")]
    assert "[E-2: an Abort while the request's writeback is in flight is refused]" \
           "(../tokenspeed.md#ts-e-2)" in sec
    assert "[FAULT-2](../spec/" in sec
    assert "[sched-abort-everywhere](traces/tokenspeed-main-radix/sched-abort-everywhere.md)" \
        in sec
    ref = page[page.index("{ #reference }"):]
    assert ref.split("##")[0].rstrip().endswith("No failures.")


def test_a_trace_page_shows_the_steps_and_offers_the_json(site_src: Path):
    folder = site_src / "results" / "traces" / "vllm"
    page = (folder / "unbalanced-unlock-rejected.md").read_text()
    assert (folder / "unbalanced-unlock-rejected.json").is_file()
    assert "[Download the trace (JSON)](unbalanced-unlock-rejected.json)" in page
    # each step with what the trace expects and what the reference answers; the failing one
    assert "| **3** | **unlock** | of step 1 | expects rejected; reference: rejects it; " \
        "**the run failed here** |" in page
    assert "| 1 | match | ns 0, `1 1 2 2 3 3 4 4 5 5 6 6` (12), lock device | reference: " \
        "matches 12 tokens on device, 0 on host |" in page
    assert "(../../../peers.md#vllm-unlock)" in page
    assert "kvconf replay docs/peers/vllm/traces/unbalanced-unlock-rejected.json " \
           "--engine vllm" in page
    sched = (site_src / "results" / "traces" / "tokenspeed-main-radix"
             / "sched-failed-writebacks.md").read_text()
    assert "| before plan 4 | submit | request `b`, namespace 0, prompt " in sched
    assert "Writebacks are acknowledged, in order and then cycled: #1 fail." in sched
    plans = sched[sched.index("## What the reference plans for it"):]
    assert "| 0 | `a` prefill positions 0-8 |  |" in plans
    assert "| 4 | `b` prefill position 8 (reuses 8) |  |" in plans
    assert "kvconf-at-rest" not in plans and "does not play it" not in sched


def test_a_trace_that_is_no_trace_is_refused_by_name():
    from kvconf.conformance.errors import KitError

    with pytest.raises(KitError, match=r"x\.json: not a kvconf-trace/1 trace"):
        trace_page.render({"format": "other"}, failed_step=None, source="x.json")


def test_the_kill_matrix_page_shows_skipped_mutants_as_skipped(tmp_path: Path):
    k = tmp_path / "mutants.json"
    k.write_text(_kills().model_dump_json())
    src = _site(tmp_path, [k])
    page = (src / "results" / "kill-matrix.md").read_text()
    assert "| `NeedsCuda` | memory | [D162-7](../catalog.md#D162-7) | skipped |  | " \
           "needs a CUDA device (kvconf gpu) |" in page
    assert "| `Survivor` | cache | [E-6](../catalog.md#E-6) | **ALIVE** | 2.00 |" in page
    assert "| `Caught` | cache | [E-6](../catalog.md#E-6) | killed | 0.50 | c [match] TREE-4 |" \
        in page
    assert page.index("`Survivor`") < page.index("`NeedsCuda`") < page.index("`Caught`")
    assert "**Killed 1 of the 2 run** (of 3)" in page
    assert "PageableHostPool" not in page  # the committed kill matrix gave way to the given one


def test_a_given_report_replaces_the_committed_column_of_its_engine(tmp_path: Path):
    fresh = _report(version="0.1.0", a=Status.PASS)
    committed_ref = json.loads((PEERS / "reference" / "report.json").read_text())
    fresh.run_info.version = committed_ref["run_info"]["version"]
    other = _report(engine="example-engine", version="1", a=Status.PASS)
    paths = []
    for name, r in (("fresh", fresh), ("other", other)):
        p = tmp_path / f"{name}.json"
        p.write_text(r.model_dump_json())
        paths.append(p)
    res = results_site.gather(paths)
    refs = [r for r in res.runs if r.report.run_info.engine == "reference"]
    assert len(refs) == 1 and refs[0].path == paths[0] and refs[0].key == "reference"
    assert res.runs[1] is refs[0]  # in the committed one's place, after the reader's own
    # the reader's own engine (a column no committed run has) comes first, marked as theirs
    assert res.runs[0].key == "example-engine-1" and not res.runs[0].committed
    assert res.runs[0].own and not refs[0].own and not res.runs[-1].own


def test_the_built_site_links_every_failure_to_a_rendered_trace(tmp_path: Path):
    pytest.importorskip("mkdocs")
    from kvconf.conformance.reporting import docsite

    site = docsite.build_site(tmp_path / "site", [], strict=True)
    page = site / "results" / "index.html"
    html = page.read_text()
    hrefs = re.findall(r"<td class='?\"?(?:FAIL|CRASH)[^>]*>(.*?)</td>", html)
    assert hrefs
    for body in hrefs:
        for h in re.findall(r"href=['\"]([^'\"]+)['\"]", body):
            target = (page.parent / h.split("#")[0]).resolve()
            assert (target / "index.html").is_file(), h
            if "#" in h:
                assert f'id="{h.split("#")[1]}"' in (target / "index.html").read_text(), h
    trace = site / "results" / "traces" / "vllm" / "unbalanced-unlock-rejected"
    assert (trace / "index.html").is_file()
    assert (site / "results" / "traces" / "vllm" / "unbalanced-unlock-rejected.json").is_file()
    shutil.rmtree(site)


def test_every_reason_in_the_expectation_files_has_a_write_up():
    """A fresh run (CI's .ci/tokenspeed, .ci/peers) carries the expectation files' reasons: each
    must lead to the section of the guides that explains it, and that section must exist."""
    import tomllib

    writeups = results_site.load_writeups(results_site.DOCS_DIR / results_site.WRITEUPS)
    files = sorted(Path(results_site.DOCS_DIR.parent, "conformance", "adapters",
                        "expectations").glob("*.toml"))
    assert files
    for f in files:
        data = tomllib.loads(f.read_text())
        for k in data.get("known", []):
            hits = [w for w in writeups
                    if data["engine"] in w.engines and k["reason"].startswith(w.reason)]
            assert hits, (f.name, k["case"], k["reason"][:80])
    for w in writeups:
        assert f"{{ #{w.anchor} }}" in (results_site.DOCS_DIR / w.page).read_text(), w.anchor


def test_a_failure_no_expectation_file_explains_shows_as_not_written_up(tmp_path: Path):
    shutil.copy(PEERS / "vllm" / "traces" / "unbalanced-unlock-rejected.json",
                tmp_path / "t.json")
    r = _report(engine="my-engine", version="2.0", a=Status.PASS)
    r.results.append(CaseResult(case="unbalanced-unlock-rejected", status=Status.FAIL,
                                behaviours=["PIN-3"], duration_s=0.0, step=3, oracle="faults",
                                message="a second unlock was accepted", trace="t.json"))
    src = _site_of(tmp_path, r)
    findings = (src / "results" / "findings.md").read_text()
    sec = findings[findings.index("{ #my-engine-2-0 }"):]
    assert "| **not written up**: a second unlock was accepted | [PIN-3](../spec/" in sec
    assert "[unbalanced-unlock-rejected](traces/my-engine-2-0/t.md)" in sec
    page = (src / "results" / "traces" / "my-engine-2-0" / "t.md").read_text()
    assert "Not in the engine's expectation file: a new finding." in page
    assert f"kvconf replay {tmp_path}/t.json --engine my-engine" in page
    matrix = (src / "results.md").read_text()
    cell = re.findall(r"<td class='FAIL mine'[^>]*><a href='traces/my-engine-2-0/t/'>FAIL</a>"
                      r"</td>", matrix)
    assert len(cell) == 1  # the trace, and no write-up to link


def test_the_committed_kill_matrix_shows_its_cuda_mutant_skipped(site_src: Path):
    page = (site_src / "results" / "kill-matrix.md").read_text()
    k = KillMatrix.model_validate_json((PEERS / "reference" / "mutants.json").read_text())
    for m in k.mutants:
        row = next(line for line in page.splitlines() if line.startswith(f"| `{m.id}` |"))
        want = "skipped" if m.skipped else ("killed" if m.killed else "**ALIVE**")
        assert f"| {want} |" in row, row
    assert any(m.skipped for m in k.mutants)  # the runtime-side one, without CUDA


def test_a_fuzz_case_with_several_findings_links_each_to_its_own_write_up(tmp_path: Path):
    """A report of today's kit lists a fuzz case's findings by signature, and its ``known``
    gives each finding's reason after its signature (an expectation file by signatures)."""
    from kvconf.conformance.reporting.report import Finding

    ts = PEERS / "tokenspeed-main-radix" / "traces"
    for name in ("fuzz-scheduler.json", "sched-mid-flight-reuse.json"):
        shutil.copy(ts / name, tmp_path / name)
    e2, d381 = ("faults/FAULT-2+REQ-4/workload/EngineRejected@engine_call",
                "reuse/PLAN-7/workload")
    r = _report(engine="tokenspeed", version="0.1.0 (main-radix)", a=Status.PASS)
    r.results.append(CaseResult(
        case="fuzz-scheduler", status=Status.FAIL, behaviours=["FAULT-2", "REQ-4"],
        duration_s=0.0, message="advance rejected a legal call", trace="fuzz-scheduler.json",
        known=f"{e2}: E-2: an Abort while the request's writeback is in flight is refused "
              f"(https://example.org/a); {d381}: D381-1: a prompt is published only at finish; "
              "so it is prefilled again (https://example.org/b)",
        findings=[Finding(signature=e2, behaviours=["FAULT-2"], trace="fuzz-scheduler.json"),
                  Finding(signature=d381, behaviours=["PLAN-7"],
                          trace="sched-mid-flight-reuse.json")]))
    src = _site_of(tmp_path, r)
    findings = (src / "results" / "findings.md").read_text()
    sec = findings[findings.index("{ #tokenspeed-main-radix }"):]
    sec = sec[:sec.index("\n## ")] if "\n## " in sec else sec
    assert "(../tokenspeed.md#ts-e-2)" in sec and "(../tokenspeed.md#ts-d381-1)" in sec
    assert "[fuzz-scheduler](traces/tokenspeed-main-radix/sched-mid-flight-reuse.md)" in sec
    assert "not written up" not in sec
    second = (src / "results" / "traces" / "tokenspeed-main-radix"
              / "sched-mid-flight-reuse.md").read_text()
    assert f"Finding `{d381}`." in second
    assert "**Why** (the engine's expectation file): D381-1: a prompt is published only at " \
           "finish; so it is prefilled again" in second
    assert "(../../../tokenspeed.md#ts-d381-1)" in second
    matrix = (src / "results.md").read_text()
    assert "href='../tokenspeed/#ts-e-2'" in matrix  # the case's first finding


def test_a_not_supported_cell_says_why(tmp_path: Path):
    """A cell no case could judge carries, in its tooltip, the reason its first case gives:
    the engine's own ``lacks`` where it declares one."""
    reason = "engine lacks host_tier; host_tier: offloading is a connector, not the cache"
    run = _report(engine="lacking", version="1")
    run.results = [CaseResult(case="writeback-demote-loadback", status=Status.NOT_SUPPORTED,
                              behaviours=["HOST-1"], message=reason, duration_s=0.0)]
    path = tmp_path / "lacking" / "report.json"
    path.parent.mkdir()
    path.write_text(run.model_dump_json())
    (tmp_path / "site").mkdir()
    page = (_site(tmp_path / "site", [path]) / "results.md").read_text()
    assert f"<td class='NOT_SUPPORTED mine' title='writeback-demote-loadback: {reason} | " \
        in page


# ---------------------------------------------------------------------------- per-rule verdicts


def _row(html: str, bid: str) -> str:
    """A rule's row of an HTML matrix."""
    return re.search(rf"<tr><td[^>]*>(?:<a [^>]*>|<abbr [^>]*>){bid}</.*?</tr>", html).group(0)


def test_kvconf_report_passes_only_the_rules_a_case_judged(tmp_path: Path):
    """An engine that declares no host tier: its passing fuzz case cites host and event rules
    but judged only some. The compliance page passes those alone; the rest are not judged (or
    NOT_SUPPORTED, where a case that needs the host tier cites them), never PASS."""
    import judged_report as jr

    r = jr.no_host_tier_report()
    md_path, html_path = build(Inputs(runs=[(tmp_path / "r.json", r)]), tmp_path / "out")
    md, html = md_path.read_text(), html_path.read_text()
    cell = dict(re.findall(r"^\| ([A-Z0-9]+-\d+) \| [A-Z ]+ \| ([^|]+) \|$", md, re.M))
    assert {b for b, v in cell.items() if v == "PASS"} == set(jr.JUDGED)
    assert cell[jr.HELD_IN_FAILURE] == "not judged"  # judged by a failing case alone
    assert all(cell[b] == "not judged" for b in (*jr.CITED_ONLY, jr.UNCITED))
    assert cell[jr.LACKING] == "NOT_SUPPORTED" and cell[jr.BROKEN] == "FAIL"
    assert "| 2 pass, 1 FAIL, 1 n/s," in md and "not judged |" in md  # the run's tally
    row = _row(html, "EVENT-1")
    assert "<td class='NOT_JUDGED' title='not judged: its cases (fuzz-cache) ran, but no " \
           "check of it did for the features the engine declares; fuzz-cache: PASS'>n/j</td>" \
           in row
    assert "class='PASS'" in _row(html, "PIN-2") and "class='PASS'" not in row
    assert "predates" not in md
    # the NOT_SUPPORTED cases, by the features the engine lacks for them
    assert "- **dict-cache**: host_tier (1: writeback-demote-loadback)" in md


def test_a_report_older_than_format_5_passes_no_rule_and_says_why(tmp_path: Path):
    import judged_report as jr

    old = jr.no_host_tier_report()
    old.format = "kvconf-report/4"
    for x in old.results:
        x.judged = None
    md = build(Inputs(runs=[(tmp_path / "r.json", old)]), tmp_path / "out")[0].read_text()
    cell = dict(re.findall(r"^\| ([A-Z0-9]+-\d+) \| [A-Z ]+ \| ([^|]+) \|$", md, re.M))
    assert "PASS" not in cell.values() and cell[jr.BROKEN] == "FAIL"
    assert "Not judged in dict-cache: this report predates kvconf-report/5" in md


def test_the_site_passes_only_the_rules_a_case_judged_and_shows_the_readers_engine_first(
        tmp_path: Path):
    import judged_report as jr

    src = _site_of(tmp_path, jr.no_host_tier_report())
    page = (src / "results.md").read_text()
    # the reader's own engine is the first column, under "yours", marked
    first = re.search(r"<th class='rule' rowspan='2'>rule</th><th class='fam( mine)?' "
                      r"colspan='1'>([^<]+)</th>", page)
    assert first.groups() == (" mine", "yours")
    assert re.search(r"<tr><th class='rev mine' title='dict-cache 1.0'><span>dict-cache</span>",
                     page)

    def mine(bid: str) -> str:
        row = _row(page, bid)
        return re.search(r"</td><td class='([A-Z_]+) mine'", row).group(1)

    assert {b: mine(b) for b in jr.JUDGED} == dict.fromkeys(jr.JUDGED, "PASS")
    assert mine(jr.HELD_IN_FAILURE) == "NOT_JUDGED"  # judged by a failing case alone
    assert [mine(b) for b in (*jr.CITED_ONLY, jr.UNCITED)] == ["NOT_JUDGED"] * 3
    assert mine(jr.LACKING) == "NOT_SUPPORTED" and mine(jr.BROKEN) == "FAIL"
    # the committed peer runs predate kvconf-report/5: they pass nothing, and the page names
    # them and says why; the reference's run records what it judged, so it passes rules
    legend = re.search(r"n/j in ([^:]+): this report predates kvconf-report/5", page)
    assert legend and "TokenSpeed pr381" in legend.group(1)
    assert "reference" not in legend.group(1) and "SGLang" not in legend.group(1)
    assert re.search(r"<td class='PASS'", page)
    assert "; yours, given to this build) | no expectation file | PASS 1, FAIL 1, " \
           "NOT_SUPPORTED 1 | 2 pass, 1 FAIL, 1 n/s," in page
    # the findings page groups the NOT_SUPPORTED cases by the feature they need
    findings = (src / "results" / "findings.md").read_text()
    sec = findings[findings.index("{ #dict-cache-1-0 }"):]
    assert "| `host_tier` | 1: `writeback-demote-loadback` |" in sec


def test_a_not_supported_case_is_grouped_by_the_features_it_lacks():
    from kvconf.conformance.reporting.verdicts import missing_feature

    def ns(message: str) -> CaseResult:
        return CaseResult(case="c", status=Status.NOT_SUPPORTED, behaviours=[],
                          duration_s=0.0, message=message)

    assert missing_feature(ns("engine lacks host_tier")) == "host_tier"
    assert missing_feature(ns("engine lacks l3_store, scheduler; l3_store: no store")) == \
        "l3_store, scheduler"
    assert missing_feature(ns("engine declares mixed_only, which makes what the case checks "
                              "moot")) == "declares mixed_only (moot)"
    assert missing_feature(ns("the scheduler level could not start")) == \
        "the scheduler level could not start"
