"""vLLM's scheduler with its CPU offloading connector as the host tier (``vllm-offload``), and
the two declared engine properties it needs: loadbacks that land plans before their request's
row (HOST-13) and writebacks flushed before their source is reused (HOST-14). The allowances
are tested on the reference's legal variants (declared they pass, undeclared they fail, and a
variant that breaks what the allowance still asks is caught); the vLLM tests run where vLLM is
installed (.ci/install-peers.sh) and are skipped otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm_support import VARIANTS, needs_vllm, scenario

from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import ALLOWANCES, Feature
from kvconf.conformance.oracles import Violation
from kvconf.conformance.reporting.expectations import compare, load_expectations
from kvconf.conformance.running.profiles import PROFILES, parse_budget
from kvconf.conformance.running.runner import run_suite
from kvconf.conformance.scheduler.generator import play_sched
from kvconf.conformance.scheduler.trace import Arrival, SchedConfig, SchedTrace
from kvconf.conformance.variants import _adapter
from kvconf.conformance.variants.scheduler import DefersLoadedRows, FlushesWritebacks

ROOT = Path(__file__).resolve().parent.parent
def reloaded() -> SchedTrace:
    """a's prompt is stored on host as it is computed; c pushes it off the four device pages;
    b shares a's first four tokens and finds them on host only."""
    return SchedTrace(config=SchedConfig(device_pages=4, host_pages=8, max_tokens=8), arrivals=[
        Arrival(at=0, rid="a", tokens=[1, 2, 3, 4, 5]),
        Arrival(at=3, rid="c", tokens=[7, 7, 7, 7, 7]),
        Arrival(at=6, rid="b", tokens=[1, 2, 3, 4, 6])])


def preempted() -> SchedTrace:
    """a's decode needs a block and preempts b, whose store is still in flight (acknowledged a
    plan later): b's blocks go back to the pool at once."""
    return SchedTrace(
        config=SchedConfig(device_pages=5, host_pages=8, max_tokens=3, max_batch=2,
                           max_slots=2),
        arrivals=[Arrival(at=0, rid="a", tokens=[1, 2, 3], new_tokens=6),
                  Arrival(at=1, rid="b", tokens=[4, 5, 6, 7, 8, 9])],
        acks=["later"])


def plans(factory, trace: SchedTrace) -> list:
    """Every plan ``factory`` gives for ``trace`` (its first play)."""
    seen: list = []
    first: list = []  # the engine of the first play (the replays make engines of their own)

    class Spy(factory):
        def next_plan(self):
            plan = super().next_plan()
            if not first:
                first.append(self)
            if first[0] is self:
                seen.append(plan)
            return plan

    Spy.level = getattr(factory, "level", "scheduler")
    play_sched(Spy, trace)
    return seen


# ----------------------------------------------------------------------------- allowances
@pytest.mark.behaviours("HOST-13", "PLAN-5", "HOST-8")
def test_a_deferred_loadback_is_legal_only_when_declared() -> None:
    v = VARIANTS["DefersLoadedRows"]
    trace = scenario("sched-retract-and-recover")
    seen = plans(v.factory(), trace)
    alone = [(p.step, op.rid) for p in seen for op in p.loadbacks
             if op.pairs and op.rid not in {r.rid for r in p.rows}]
    assert alone  # a loadback listed without its request's row
    with pytest.raises(Violation) as e:
        play_sched(v.factory(with_features=False), trace)
    assert "PLAN-5" in e.value.behaviours, e.value


class _PlansBeforeAck(DefersLoadedRows):
    """Hands the held row out at the next plan, acknowledged or not."""

    def next_plan(self):
        self._waits = {}
        return super().next_plan()


@pytest.mark.behaviours("HOST-13")
def test_a_row_planned_before_its_loadback_is_acknowledged_is_caught() -> None:
    trace = scenario("sched-retract-and-recover").model_copy(update={"acks": ["later"]})
    play_sched(VARIANTS["DefersLoadedRows"].factory(), trace)  # acknowledged later: waits
    with pytest.raises(Violation) as e:
        play_sched(_adapter("scheduler", _PlansBeforeAck, DefersLoadedRows.features), trace)
    assert e.value.behaviours == ("HOST-13",), e.value


@pytest.mark.behaviours("HOST-14", "HOST-2")
def test_a_flushed_writeback_is_legal_only_when_declared() -> None:
    v = VARIANTS["FlushesWritebacks"]
    trace = scenario("sched-abort-everywhere")
    seen = plans(v.factory(), trace)
    assert any(p.flush for p in seen)
    with pytest.raises(Violation) as e:
        play_sched(v.factory(with_features=False), trace)
    assert e.value.behaviours == ("HOST-2",), e.value


class _FlushesUnknown(FlushesWritebacks):
    def next_plan(self):
        plan = super().next_plan()
        return plan if not plan.flush else type(plan)(
            plan.step, plan.rows, plan.loadbacks, plan.writebacks, plan.l3, plan.zero,
            plan.zero_states, flush=(*plan.flush, 10**6))


@pytest.mark.behaviours("HOST-14")
def test_a_flush_of_a_copy_not_in_flight_is_caught() -> None:
    with pytest.raises(Violation) as e:
        play_sched(_adapter("scheduler", _FlushesUnknown, FlushesWritebacks.features),
                   scenario("sched-abort-everywhere"))
    assert e.value.behaviours == ("HOST-14",), e.value


def test_the_allowances_are_declared_by_name() -> None:
    assert ALLOWANCES[Feature("deferred_loadback")] == "HOST-13"
    assert ALLOWANCES[Feature("flushed_writeback")] == "HOST-14"


# ----------------------------------------------------------------------------- vLLM
def _vllm(*without: Feature):
    from kvconf.conformance.adapters.vllm_offload import VLLMOffloadAdapter

    class Adapter(VLLMOffloadAdapter):
        features = VLLMOffloadAdapter.features - set(without)

    Adapter.level = "scheduler"
    return Adapter


@needs_vllm
@pytest.mark.behaviours("HOST-13", "PLAN-5", "TREE-2")
def test_vllm_loads_a_host_prefix_before_the_request_is_planned() -> None:
    """b's first four tokens are on host only: vLLM lists the load job in a plan without b
    (WAITING_FOR_REMOTE_KVS) and plans b once the load is reported, reading the loaded block.
    Without the declaration that is PLAN-5."""
    seen = plans(_vllm(Feature.KV_EVENTS), reloaded())
    (load,) = [(p.step, op) for p in seen for op in p.loadbacks]
    step, op = load
    assert op.rid == "b" and not [r for p in seen if p.step == step for r in p.rows]
    (row,) = [r for p in seen if p.step > step for r in p.rows if r.rid == "b"][:1]
    assert row.reused == 4 and {d for _s, d in op.pairs} <= set(row.page_table)
    stores = [op for p in seen for op in p.writebacks]
    assert stores and all(op.rid == "" for op in stores)  # write-through: the cache's copies
    with pytest.raises(Violation) as e:
        play_sched(_vllm(Feature.KV_EVENTS, Feature.DEFERRED_LOADBACK), reloaded())
    assert "PLAN-5" in e.value.behaviours, e.value


@needs_vllm
@pytest.mark.behaviours("HOST-14", "HOST-2", "TREE-2")
def test_vllm_flushes_a_preempted_requests_store_before_reusing_its_blocks() -> None:
    """b is preempted with its store in flight: vLLM names the store in jobs_to_flush, which
    the runtime completes before the forward; b is then loaded back from that copy. Without
    the declaration the kit holds vLLM to HOST-2."""
    seen = plans(_vllm(Feature.KV_EVENTS), preempted())
    assert any(p.flush for p in seen)
    assert any(op.rid == "b" for p in seen for op in p.loadbacks)
    with pytest.raises(Violation) as e:
        play_sched(_vllm(Feature.KV_EVENTS, Feature.FLUSHED_WRITEBACK), preempted())
    assert e.value.behaviours == ("HOST-2",), e.value


@needs_vllm
def test_vllm_offload_meets_its_expectations() -> None:
    # as .ci/peers runs it (--profile ci, its own budget), which the expectation file states
    report = run_suite("vllm-offload", EngineConfig(), seed_value=0, profile=PROFILES["ci"],
                       budget=parse_budget(None, PROFILES["ci"]), report_path=None)
    path = ROOT / "conformance" / "adapters" / "expectations" / "vllm-offload.toml"
    verdicts = compare(report, load_expectations(path), path)
    assert not verdicts["regression"] and not verdicts["improvement"], verdicts
    assert {"scheduler", "host_tier"} <= set(report.run_info.features)


@needs_vllm
@pytest.mark.behaviours("LIVE-1", "HOST-13")
def test_vllm_reloads_a_one_token_prompt_for_ever() -> None:
    """A finding (docs/peers.md, vllm-offload-one-token): at block size 1, a's first token is
    stored on host; b's one-token prompt is that block, so the connector's lookup covers the
    whole prompt. After the load, _update_waiting_for_remote_kv sets num_computed_tokens to
    num_tokens - 1 = 0 so the last token is computed again, and a waiting request with nothing
    computed is looked up afresh (Scheduler.schedule): another load, for ever."""
    trace = SchedTrace(config=SchedConfig(page_size=1, device_pages=16, host_pages=32),
                       arrivals=[Arrival(at=0, rid="a", tokens=[1, 0]),
                                 Arrival(at=2, rid="b", tokens=[1])],
                       max_plans=40)
    with pytest.raises(Violation) as e:
        play_sched(_vllm(Feature.KV_EVENTS), trace)
    assert e.value.behaviours == ("LIVE-1",), e.value
    without_host = trace.model_copy(update={"config": trace.config.model_copy(
        update={"host_pages": 0})})
    play_sched(_vllm(Feature.KV_EVENTS), without_host)  # no connector: b is served
