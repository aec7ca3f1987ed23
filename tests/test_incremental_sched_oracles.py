"""At the scheduler level, the oracles that skip what they judged already (``Oracle.incremental``:
HOST-10's transfers and POOL-6's counts against an unchanged snapshot, the request states and
EVENT-6's device tier against the state of the last snapshot that held, the L3 tree checks) give
the very verdicts of the full checks: seeded swarm workloads are played twice, incremental and
full, against the reference and against every scheduler mutant, and both plays must end the same
way (passed, or the same rule broken with the same message). The L3 tree checks are played on
the L3 fuzz case's workloads too, against the reference and every L3 mutant."""

from __future__ import annotations

import random
from functools import partial
from types import SimpleNamespace

import pytest

from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter as R
from kvconf.conformance.mutants.mamba import PLANTED_MAMBA
from kvconf.conformance.mutants.scheduler import L3_PLANTED, PLANTED_SCHED
from kvconf.conformance.mutants.window import PLANTED_WINDOW
from kvconf.conformance.oracles import Oracle, Violation
from kvconf.conformance.oracles.scheduler import PlanOracle, RequestStateOracle, _one_user_each
from kvconf.conformance.oracles.tree_view import TreeView
from kvconf.conformance.running.runner import L3_FUZZ, MAMBA_FUZZ
from kvconf.conformance.scheduler.generator import play_sched, seeded_workload
from kvconf.conformance.scheduler.l3_runtime import L3Runtime, _host_blocks
from kvconf.conformance.scheduler.trace import SchedConfig
from kvconf.reference.plan import ForwardRow, Plan

MUTANTS = {**PLANTED_SCHED, **PLANTED_MAMBA, **PLANTED_WINDOW}
SEEDS = range(10)


def _verdict(factory, seed: int, incremental: bool, monkeypatch: pytest.MonkeyPatch,
             config=None) -> tuple:
    monkeypatch.setattr(Oracle, "incremental", incremental)
    trace = seeded_workload(seed, config, R.features)
    try:
        driver = play_sched(factory, trace)
    except Violation as v:
        return (v.oracle, v.behaviours, v.message)
    return ("passed", driver.log)


def _same_both_ways(factory, monkeypatch, config=None, seeds=SEEDS) -> list[tuple]:
    """Each seed's workload (swarm, or of ``config``) played incremental and full: the same."""
    outcomes = []
    for seed in seeds:
        full = _verdict(factory, seed, False, monkeypatch, config)
        fast = _verdict(factory, seed, True, monkeypatch, config)
        assert fast == full, seed
        outcomes.append(full)
    return outcomes


def test_incremental_sched_oracles_judge_the_reference_as_the_full_ones(monkeypatch):
    assert all(o[0] == "passed" for o in _same_both_ways(R, monkeypatch))


def test_incremental_sched_oracles_judge_every_scheduler_mutant_as_the_full_ones(monkeypatch):
    found = 0
    for name in sorted(MUTANTS):
        outcomes = _same_both_ways(partial(R, scheduler_cls=MUTANTS[name]), monkeypatch)
        found += any(o[0] != "passed" for o in outcomes)
    assert found >= len(MUTANTS) // 2, "the workloads reach too few mutants to compare verdicts"


# The L3 tree checks (``L3Oracle.tree``, ``L3Runtime.check_tree``) on the L3 fuzz case's
# workloads, which the swarm reaches less often.
def test_incremental_l3_checks_judge_the_reference_as_the_full_ones(monkeypatch):
    outcomes = _same_both_ways(R, monkeypatch, L3_FUZZ, range(8))
    assert all(o[0] == "passed" for o in outcomes)


def test_incremental_l3_checks_judge_every_l3_mutant_as_the_full_ones(monkeypatch):
    found = sum(
        any(o[0] != "passed" for o in _same_both_ways(
            partial(R, scheduler_cls=PLANTED_SCHED[n]), monkeypatch, L3_FUZZ, range(8)))
        for n in sorted(L3_PLANTED))
    assert found >= len(L3_PLANTED) // 2, "the workloads reach too few L3 mutants"


# The fast paths of single checks, against their full checks on inputs built to break them.
def _rows(rng: random.Random, pages: int, page_size: int, window: int, window_table: bool):
    """A forward of a few rows over a small pool: tables often share pages, rows start
    anywhere inside their tables (as PLAN-10 leaves them)."""
    rows = []
    for k in range(rng.randint(1, 4)):
        table = tuple(rng.randrange(pages) for _ in range(rng.randint(1, 5)))
        n = rng.randint(1, len(table) * page_size)
        start = rng.randrange(n)
        wtable = (tuple(rng.randrange(pages) for _ in table) if window_table else ())
        rows.append(ForwardRow(f"r{k % 3}" if rng.random() < 0.2 else f"r{k}", "prefill", 0,
                               start, (1,) * (n - start), 0, table, (), k, False,
                               window_table=wtable))
    return tuple(rows)


@pytest.mark.parametrize("window,window_table", [(0, False), (3, False), (3, True)])
def test_own_pages_fast_path_passes_only_what_the_full_check_passes(monkeypatch, window,
                                                                      window_table):
    """``_one_user_each`` lets ``PlanOracle.own_pages`` return before its checks: on random
    forwards whose tables share pages, every forward it passes, the full check passes too,
    and both ways give the same verdict (each way is reached many times)."""
    rng = random.Random(23)
    passed = failed = 0
    for _ in range(3000):
        p = rng.choice((1, 2, 4))
        rows = _rows(rng, rng.randint(2, 12), p, window, window_table)
        plan = Plan(7, rows, (), ())
        verdicts = []
        for incremental in (False, True):
            monkeypatch.setattr(Oracle, "incremental", incremental)
            try:
                PlanOracle().own_pages(plan, p, window, window_table)
                verdicts.append(None)
            except Violation as v:
                verdicts.append((v.behaviours, v.message))
        assert verdicts[0] == verdicts[1], rows
        if _one_user_each(rows, p, window, window_table):
            assert verdicts[0] is None, rows
            passed += 1
        failed += verdicts[0] is not None
    assert passed > 300 and failed > 300


# Tight pools (retractions, evictions, slots run out), a sliding window and Mamba state slots,
# where the swarm goes less often: every skip both ways against the reference and every mutant.
@pytest.mark.parametrize("config", [
    SchedConfig(device_pages=10, host_pages=8, max_tokens=6, max_batch=3, max_slots=4),
    SchedConfig(sliding_window=3),
    MAMBA_FUZZ,
], ids=["tight", "window", "mamba"])
def test_incremental_sched_oracles_judge_tight_window_and_mamba_workloads_as_the_full_ones(
        monkeypatch, config):
    assert all(o[0] == "passed" for o in _same_both_ways(R, monkeypatch, config, range(6)))
    found = sum(any(o[0] != "passed" for o in _same_both_ways(
        partial(R, scheduler_cls=MUTANTS[n]), monkeypatch, config, range(6)))
        for n in sorted(MUTANTS))
    assert found >= 5, "the workloads reach too few mutants to compare verdicts"


def test_fetched_blocks_read_the_host_pages_tree_view_blocks_show(monkeypatch):
    """``L3Runtime._check_fetched`` reads each block's host page from ``_host_blocks``: on
    every snapshot it checks in the L3 fuzz case's workloads, the same keys, in the same
    order, with the host page ``TreeView.blocks()`` gives."""
    real = L3Runtime._check_fetched
    seen = []

    def check(self, snap):
        want = {k: b.host for k, b in TreeView(snap.cache).blocks().items()}
        got = _host_blocks(TreeView(snap.cache))
        assert list(got.items()) == list(want.items())
        seen.append(len(got))
        return real(self, snap)

    monkeypatch.setattr(L3Runtime, "_check_fetched", check)
    for seed in range(8):
        play_sched(R, seeded_workload(seed, L3_FUZZ, R.features))
    assert len(seen) > 50 and max(seen) > 4


def _ns3_case(rng: random.Random):
    """A request view holding shared pages and perhaps a lock, over a pool whose owners name
    nodes (some of another namespace, some missing from the node list, now and then a name
    that holds no node id), and the lock map."""
    nodes = tuple(SimpleNamespace(id=i, namespace=rng.choice((0, 0, 0, 1)))
                  for i in rng.sample(range(12), rng.randint(0, 8)))
    cache = SimpleNamespace(nodes=nodes, node_map=lambda: {n.id: n for n in nodes})
    owners = tuple(rng.choice(("node:bad", "node:x:1")) if rng.random() < 0.02
                   else f"node:{rng.randrange(14)}" for _ in range(10))
    shared = rng.randint(0, 4)
    lock = rng.choice((None, 1, 2, 3))
    locked = {h: rng.randrange(14) for h in rng.sample((1, 2, 3), rng.randint(0, 3))}
    v = SimpleNamespace(rid="a", state="Decoding", namespace=rng.choice((0, 1)), lock=lock,
                        shared=shared, pages=tuple(rng.sample(range(10), shared)))
    return v, cache, owners, locked


def test_own_namespace_fast_path_passes_only_what_the_full_check_passes(monkeypatch):
    """``_in_own_namespace`` lets NS-3 pass without ``_own_namespace``, from each owner name's
    node namespace read once per node list: on random views, pools and node lists, reused
    over several checks each (so the memo is read), every request it passes the full check
    passes, and it passes most that do (each way is reached many times)."""
    monkeypatch.setattr(Oracle, "incremental", True)
    rng = random.Random(31)
    oracle = RequestStateOracle()
    passed = failed = 0
    for _ in range(600):
        v, cache, owners, locked = _ns3_case(rng)
        for _again in range(4):  # the same node list: the memo of the last check is read
            v2, _c, owners2, locked2 = _ns3_case(rng)
            for view, own, lk in ((v, owners, locked), (v2, owners2, locked2)):
                try:
                    oracle._own_namespace(view, oracle._node_map(cache), own, lk)
                    full = None
                except Violation as e:
                    full = e.behaviours
                except ValueError:
                    full = "raised"
                fast = oracle._in_own_namespace(view, cache, own, lk)
                if fast:
                    assert full is None, (view, own, lk)
                    passed += 1
                failed += full is not None
    assert passed > 1000 and failed > 300


@pytest.mark.parametrize("window,window_table", [(0, False), (3, False), (3, True)])
def test_one_row_forward_is_decided_as_the_page_walk_decides(window, window_table):
    """A forward of one row skips ``_one_user_each``'s walk over its pages: on single rows
    that start anywhere (below zero too) with tables of any length (shorter than the row
    too), its answer is the walk's, which a second row on a page of its own leaves as it is."""
    rng = random.Random(41)
    answers = set()
    for _ in range(3000):
        p = rng.choice((1, 2, 4))
        table = tuple(rng.randrange(8) for _ in range(rng.randint(0, 5)))
        wtable = tuple(rng.randrange(8) for _ in range(rng.randint(0, 5))) if window_table \
            else ()
        n = rng.randint(1, 12)
        row = ForwardRow("a", "prefill", 0, rng.randint(-3, 10), (1,) * n, 0, table, (), 0,
                         False, window_table=wtable)
        alone = ForwardRow("b", "prefill", 0, 0, (1,), 0, (10**6,), (), 1, False,
                           window_table=(10**6 + 1,) if window_table else ())
        one = _one_user_each((row,), p, window, window_table)
        assert one == _one_user_each((row, alone), p, window, window_table), row
        answers.add(one)
    assert answers == {True, False}
