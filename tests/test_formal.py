"""The formal model (spec/formal): proofs at a small scope, non-vacuity, planted defects whose
counterexamples replay through the kit as failures on the matching mutant and passes on the
reference. The default scope is proved by ``kvconf prove`` in CI."""

from __future__ import annotations

import json
from functools import partial

import pytest
from planted import PLANTED
from planted_formal import (
    ModelEvictsPinned,
    ModelLeaksDuplicates,
    ModelMambaAnyDepth,
    ModelSharedNamespaces,
)
from typer.testing import CliRunner

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.cli import app
from kvconf.conformance.mutants.cache import EvictsPinned, LeaksDuplicates
from kvconf.conformance.oracles import Violation
from kvconf.conformance.running.runner import play
from kvconf.conformance.trace import dump_trace, load_trace
from kvconf.reference import PrefixCache
from kvconf.reference.prefix_cache import CacheConfig
from kvconf.spec.formal.actions import Model
from kvconf.spec.formal.agreement import Checker, Slots, Unrepresentable, abstract, agree
from kvconf.spec.formal.invariants import INVARIANTS
from kvconf.spec.formal.prove import COUNTEREXAMPLE, PROVED, bmc, induction, reachable
from kvconf.spec.formal.scope import DEFAULT_SCOPE, Scope, parse_scope
from kvconf.spec.formal.to_trace import to_trace

INV = {i.name: i for i in INVARIANTS}
CACHE_SCOPE = Scope(namespaces=1, requests=0)
TINY = Scope(namespaces=2, tokens=1, depth=1, device_pages=1, host_pages=1, requests=1)


@pytest.mark.behaviours("POOL-1", "POOL-4", "PIN-1", "PIN-2", "PIN-3", "HOST-1", "HOST-2",
                        "HOST-3", "PLAN-5", "REQ-1", "REQ-3", "REQ-4", "NS-1", "NS-3", "MAMBA-3",
                        "MAMBA-4")
def test_every_invariant_is_inductive_at_a_tiny_scope():
    res = induction(Model(TINY))
    assert {n: r.status for n, r in res.items()} == {i.name: PROVED for i in INVARIANTS}


@pytest.mark.behaviours("REQ-1")
def test_every_request_state_and_action_is_reachable():
    reached, missed = reachable(Model(TINY), 9)
    assert not missed, missed
    assert "state WritingBack" in reached and "req Retracting --Abort--> Finished" in reached


PAIRS = [
    (ModelEvictsPinned, "EvictsPinned", "pinned-never-evicted", CACHE_SCOPE),
    (ModelLeaksDuplicates, "LeaksDuplicates", "pages-conserved", CACHE_SCOPE),
    (ModelSharedNamespaces, "SharedNamespaces", "namespace-isolation",
     Scope(namespaces=2, requests=0)),
]


@pytest.mark.behaviours("PIN-2", "POOL-4", "NS-1")
@pytest.mark.parametrize(("model", "mutant", "inv", "scope"), PAIRS,
                         ids=[p[1] for p in PAIRS])
def test_planted_model_defect_gives_a_trace_the_matching_mutant_fails(model, mutant, inv, scope,
                                                                      tmp_path):
    res = induction(model(scope))
    assert res[inv].status == COUNTEREXAMPLE and res[inv].cti
    run = bmc(model(scope), 6, INV[inv], cache_only=True, faithful=True)
    assert run is not None
    path = tmp_path / "cex.json"
    path.write_text(dump_trace(to_trace(scope, run.actions, run.states[-1])))
    trace = load_trace(path)  # what `kvconf replay` reads: in range, valid
    with pytest.raises(Violation):
        play(partial(ReferenceCacheAdapter, cache_cls=PLANTED[mutant]), trace)
    play(ReferenceCacheAdapter, trace)
    assert Model(scope) and bmc(Model(scope), len(run.actions), INV[inv]) is None


@pytest.mark.behaviours("MAMBA-3", "MAMBA-4")
def test_mamba_reuse_at_another_depth_is_found():
    two = Scope(namespaces=1, tokens=1, depth=1, device_pages=2, host_pages=0, locks=0,
                transfers=0, requests=2)
    run = bmc(ModelMambaAnyDepth(two), 5, INV["mamba-reuse-exact-depth"])
    assert run is not None and any(a.kind == "req" for a in run.actions)


def test_scope_parsing_names_the_bad_key():
    assert parse_scope("depth=3,requests=0").depth == 3
    with pytest.raises(ValueError, match="widgets: unknown key"):
        parse_scope("widgets=2")
    with pytest.raises(ValueError, match="expected key=integer"):
        parse_scope("depth=x")


def test_prove_cli_bad_input_is_one_line_and_exit_2(tmp_path):
    r = CliRunner().invoke(app, ["prove", "--scope", "depth=x", "--report",
                                 str(tmp_path / "p.json")])
    assert r.exit_code == 2 and "--scope" in r.output


def test_prove_cli_writes_a_report(tmp_path):
    report = tmp_path / "p.json"
    r = CliRunner().invoke(app, ["prove", "--scope", "namespaces=1,depth=1,device_pages=1,"
                                 "host_pages=1,requests=0", "--depth", "4",
                                 "--report", str(report)])
    doc = json.loads(report.read_text())
    assert r.exit_code == (0 if doc["ok"] else 1)
    assert {o["status"] for o in doc["obligations"]} <= {"proved", "unknown"}
    assert all(o["status"] == "proved" for o in doc["obligations"]
               if o["obligation"] != "non-vacuity-reachability")
    assert doc["obligations"][-1]["obligation"] == "agreement"


@pytest.fixture(scope="module")
def checker() -> Checker:
    return Checker(Model(DEFAULT_SCOPE))


@pytest.mark.behaviours("PIN-1", "PIN-2", "TREE-4", "TREE-5", "HOST-2", "HOST-4")
def test_reference_traces_are_paths_of_the_model(checker):
    out = agree(DEFAULT_SCOPE, 50, checker=checker)
    assert out.disagreement is None, out.disagreement.describe()
    assert out.traces == 50 and out.steps == 50 * 24
    for kind in ("insert", "lock", "unlock", "evict", "writeback", "ack", "insert declined",
                 "evict declined", "unlock declined", "writeback declined"):
        assert out.counts[kind] > 0, kind


@pytest.mark.behaviours("PIN-2", "TREE-5", "POOL-4")
@pytest.mark.parametrize(("mutant", "kind"), [(EvictsPinned, "evict"),
                                               (LeaksDuplicates, "insert")],
                         ids=["EvictsPinned", "LeaksDuplicates"])
def test_a_mutant_of_the_reference_disagrees_with_the_model(mutant, kind, checker, tmp_path):
    out = agree(DEFAULT_SCOPE, 50, cache_cls=mutant, checker=checker)
    d = out.disagreement
    assert d is not None and d.what.startswith(kind), d and d.describe()
    path = tmp_path / "agreement.json"
    path.write_text(dump_trace(d.trace))
    with pytest.raises(Violation):  # the kit's oracles see the same step go wrong
        play(partial(ReferenceCacheAdapter, cache_cls=mutant), load_trace(path))
    play(ReferenceCacheAdapter, load_trace(path))


FOUND_BY_AGREEMENT = [
    ("CopiesToWrongPages", "writeback"), ("EvictionDropsHostCopy", "evict"),
    ("IgnoresFailedAck", "ack"), ("LoadbackVisibleEarly", "loadback"),
    ("MatchOnePageLong", "match"), ("SharedNamespaces", "insert"), ("SplitDropsPins", "match"),
    ("UnbalancedUnlockAccepted", "unlock"), ("WritebackParentUnpinned", "writeback"),
]


@pytest.mark.behaviours("HOST-3", "EVICT-5", "HOST-4", "TREE-1", "NS-1", "TREE-4", "PIN-3",
                        "HOST-2")
@pytest.mark.parametrize(("mutant", "kind"), FOUND_BY_AGREEMENT,
                         ids=[m for m, _k in FOUND_BY_AGREEMENT])
def test_agreement_finds_the_step_a_cache_mutant_breaks(mutant, kind, checker):
    d = agree(DEFAULT_SCOPE, 50, cache_cls=PLANTED[mutant], checker=checker).disagreement
    assert d is not None and d.what.startswith(kind), d and d.describe()


def test_the_abstraction_refuses_a_prefix_outside_the_scope():
    cache = PrefixCache(CacheConfig(page_size=1, device_pages=2, host_pages=1))
    cache.insert(0, [1, 1], cache.alloc(2) or [])
    with pytest.raises(Unrepresentable, match="outside the scope"):
        abstract(TINY, cache.snapshot(), Slots())  # TINY has depth 1


def test_prove_reports_a_disagreement_with_its_trace(tmp_path):
    from kvconf.spec.formal.report import _agreement

    r = _agreement(ModelLeaksDuplicates(DEFAULT_SCOPE), 20, tmp_path)
    assert r.status == COUNTEREXAMPLE and r.trace and "insert" in r.detail
    load_trace(tmp_path / "traces" / "prove-agreement.json")
