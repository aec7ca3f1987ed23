"""``kvconf replay --explain`` and the trace page: the engine's answers beside the reference's at
every step, the first difference and the failing step marked (conformance/reporting/explain.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvconf.conformance.adapters import engine_factory, hybrid_engine_factory
from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.cache.scenarios import SCENARIOS
from kvconf.conformance.cli import app
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.protocol import Inserted
from kvconf.conformance.hybrid.scenarios import HYBRID_SCENARIOS
from kvconf.conformance.reporting import trace_page
from kvconf.conformance.reporting.explain import explain, plain
from kvconf.conformance.running.cases import trace_text

REFERENCE = engine_factory("reference")


class NowCached(ReferenceCacheAdapter):
    """Reads ``cached_len`` as the length cached after the insert."""

    version = "now-cached-1"

    def insert(self, namespace, tokens, pages) -> Inserted:
        got = super().insert(namespace, tokens, pages)
        return Inserted(len(tokens) // self.page_size * self.page_size, got.freed)


class RefusesEvictions(ReferenceCacheAdapter):
    def evict(self, tier, num_pages):
        raise RuntimeError("no eviction here")


def now_cached(config):
    return NowCached(config)


def _trace(name: str):
    return next(s for s in SCENARIOS if s.name == name).trace(EngineConfig())


@pytest.mark.behaviours("TREE-5")
def test_every_step_shows_both_answers_and_marks_where_they_part():
    t = _trace("duplicate-insert-frees-caller-pages")
    ex = explain(t, NowCached, REFERENCE, failed_step=0)
    assert len(ex.rows) == len(t.steps) and all(r.engine is not None for r in ex.rows)
    assert ex.first_difference == 0 and not ex.engine_stopped
    assert [r.differs for r in ex.rows] == [True, False, True, True]  # past the failing step too
    assert ex.rows[0].engine["cached_len"] == 12 and ex.rows[0].reference["cached_len"] == 0
    lines = plain(ex, "now-cached")
    assert lines[0].startswith("now-cached beside the reference") and "step 0" in lines[0]
    row0 = next(ln for ln in lines if ln.startswith("0 "))
    assert "had 12 tokens cached" in row0 and "had 0 tokens cached" in row0
    assert row0.endswith("first difference, failed here")


def test_an_engine_that_raises_stops_its_column_and_says_why():
    t = _trace("pinned-never-evicted")
    ex = explain(t, RefusesEvictions, REFERENCE)
    k = next(i for i, s in enumerate(t.steps) if s.op == "evict")
    assert all(r.engine is not None for r in ex.rows[:k])
    assert all(r.engine is None for r in ex.rows[k:]) and ex.rows[k].differs
    assert ex.first_difference == k and "no eviction here" in ex.engine_stopped
    assert not ex.reference_stopped


def test_equal_engines_agree_whatever_their_page_ids():
    t = _trace("lru-victim-order")
    assert explain(t, REFERENCE, REFERENCE).first_difference is None
    sc = HYBRID_SCENARIOS[0]
    hybrid = hybrid_engine_factory("reference")
    ex = explain(sc.trace(2), hybrid, hybrid)
    assert ex.level == "hybrid" and ex.first_difference is None and not ex.engine_stopped


def test_replay_explain_prints_the_table_then_the_verdict(tmp_path: Path):
    path = tmp_path / "t.json"
    path.write_text(trace_text(_trace("duplicate-insert-frees-caller-pages")))
    r = CliRunner().invoke(app, ["replay", str(path), "--engine", f"{__name__}:now_cached",
                                 "--explain"])
    assert r.exit_code == 1, r.output
    lines = r.output.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("step "))
    assert lines[head].split()[:4] == ["step", "op", "arguments", "expects"]
    assert lines[head + 1].endswith("first difference, failed here")
    assert lines[-1].startswith("FAIL ") and "cached_len is 12" in lines[-1]


def test_the_trace_page_shows_the_engine_where_it_is_installed_at_that_version():
    t = json.loads(trace_text(_trace("duplicate-insert-frees-caller-pages")))
    engine = f"{__name__}:now_cached"
    page = "\n".join(trace_page.render(t, failed_step=0, source="t.json", engine=engine,
                                       version="now-cached-1"))
    assert f"| step | op | arguments | expects | {engine} | reference |  |" in page
    assert "| **0** | insert |" in page and "**first difference, failed here** |" in page
    other = "\n".join(trace_page.render(t, failed_step=0, source="t.json", engine=engine,
                                        version="another build"))
    assert f"| {engine} |" not in other and "reference: had 0 tokens cached" in other


def test_a_workload_sets_the_plans_side_by_side():
    """At the scheduler level the engine plans for itself: a legal variant that mixes every
    batch plans otherwise than the reference on its witness, plan by plan."""
    from kvconf.conformance.adapters import sched_engine_factory
    from kvconf.conformance.reporting.explain import explain_plans
    from kvconf.conformance.scheduler.scenarios import SCHED_SCENARIOS
    from kvconf.conformance.variants import all_variants
    from kvconf.conformance.variants.matrix import witness

    variant = next(v for v in all_variants() if v.name == "MixesEveryBatch")
    sc = next(s for s in SCHED_SCENARIOS if s.name == witness(variant))
    ex = explain_plans(sc.trace, variant.factory(), sched_engine_factory("reference"))
    assert ex.level == "scheduler" and ex.first_difference is not None
    assert not ex.engine_stopped and not ex.reference_stopped
    k = ex.first_difference
    row = next(r for r in ex.rows if r.step == k)
    assert row.engine["rows"] != row.reference["rows"]
    assert all(not r.differs for r in ex.rows if r.step < k)
    lines = plain(ex, "mixes")
    assert lines[0].startswith("mixes beside the reference, plan by plan") and \
        f"first differ at plan {k}" in lines[0]
    assert lines[2].split() == ["plan", "mixes", "reference"]


def test_replay_explain_of_a_workload(tmp_path: Path):
    from kvconf.conformance.scheduler.scenarios import SCHED_SCENARIOS

    path = tmp_path / "w.json"
    path.write_text(trace_text(SCHED_SCENARIOS[0].trace))
    r = CliRunner().invoke(app, ["replay", str(path), "--engine", "reference", "--explain"])
    assert r.exit_code == 0, r.output
    assert "plan by plan" in r.output and "they answer alike at every plan" in r.output
    assert r.output.splitlines()[-1].startswith("PASS ")
