"""vLLM's v1 scheduler at the scheduler level, and the four declared engine properties it needs
from the kit: same-forward reuse (PLAN-13), preempting a prefilling request (REQ-7), having
no unmixed mode (PLAN-3) and reading a model config through its config class (WIN-5). The
allowances are tested on the reference's legal variants (an engine that declares one passes,
the same engine without the declaration fails); the vLLM tests run where vLLM is installed
(.ci/install-peers.sh) and are skipped otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm_support import VARIANTS, needs_vllm, scenario

from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.errors import EngineRejected
from kvconf.conformance.mutants.scheduler import ReusesPinnedPage
from kvconf.conformance.mutants.window import WindowFromTopLevelOnly
from kvconf.conformance.oracles import Violation
from kvconf.conformance.reporting.expectations import compare, load_expectations
from kvconf.conformance.running.profiles import PROFILES, parse_budget
from kvconf.conformance.running.runner import run_suite
from kvconf.conformance.scheduler.generator import play_sched
from kvconf.conformance.scheduler.scenarios import SCHED_SCENARIOS
from kvconf.conformance.scheduler.trace import Arrival, SchedConfig, SchedTrace
from kvconf.conformance.scheduler.window_cases import check_model_windows
from kvconf.reference.plan import Abort, ExtendResult, WritebackDone

ROOT = Path(__file__).resolve().parent.parent
def twins() -> SchedTrace:
    """Two requests with one five-token prompt, arriving together."""
    prompt = [3, 1, 4, 1, 5]
    return SchedTrace(config=SchedConfig(), arrivals=[
        Arrival(at=0, rid="a", tokens=prompt), Arrival(at=0, rid="b", tokens=prompt)])


# ----------------------------------------------------------------------------- allowances
@pytest.mark.behaviours("PLAN-13", "PLAN-12", "REQ-3")
def test_same_forward_reuse_is_legal_only_when_declared() -> None:
    """A prompt published when its last chunk is planned is reused by a request admitted later
    in the same plan: on a runtime that writes each layer's KV before reading it that holds
    (declared), on one that reads first it is E-22 (not declared)."""
    v = VARIANTS["PublishesWhenPlanned"]
    trace = twins()
    driver = play_sched(v.factory(), trace)
    first = [r for e in driver.log if e[0] == "plan" for r in e[2]][:2]
    assert [r[4] for r in first] == [0, 4]  # b reuses the pages a computes in that forward
    with pytest.raises(Violation) as e:
        play_sched(v.factory(with_features=False), trace)
    assert "PLAN-12" in e.value.behaviours, e.value


@pytest.mark.behaviours("WIN-5", "WIN-1")
def test_config_class_window_is_legal_only_when_declared() -> None:
    """A config read through its class (the text config's window over the top level's, a switch
    on with no size taking the class's default) passes every sample declared, and fails WIN-1
    undeclared: the first disagreeing levels it reads instead of refusing."""
    v = VARIANTS["ReadsByConfigClass"]
    eng = v.factory()(SchedConfig())
    assert eng.model_window({"sliding_window": 4, "text_config": {"sliding_window": 8}}) == 8
    assert eng.model_window({"text_config": {"use_sliding_window": True}}) == 4096
    assert check_model_windows(eng) > 0
    with pytest.raises(Violation) as e:
        check_model_windows(v.factory(with_features=False)(SchedConfig()))
    assert e.value.behaviours == ("WIN-1",) and "levels-disagree" in str(e.value), e.value


def _declaring(model_window) -> object:
    """The reference declaring config_class_window, its reading replaced by ``model_window``."""
    cls = type("Declares", (ReferenceSchedulerAdapter,), {
        "features": ReferenceSchedulerAdapter.features | {Feature.CONFIG_CLASS_WINDOW},
        "model_window": lambda self, cfg: model_window(cfg)})
    return cls(SchedConfig())


@pytest.mark.behaviours("WIN-5", "WIN-1")
def test_config_class_window_still_reads_the_text_config() -> None:
    """Declaring WIN-5 does not excuse a reader of the top level alone (D381-6), nor a switch on
    read as no window."""
    with pytest.raises(Violation) as e:
        check_model_windows(_declaring(WindowFromTopLevelOnly.model_window))
    assert "nested-text-config" in str(e.value) and "WIN-5" in e.value.behaviours, e.value
    variant = VARIANTS["ReadsByConfigClass"].cls.model_window
    with pytest.raises(Violation, match="switch-without-size"):
        check_model_windows(_declaring(lambda cfg: 0 if "text_config" in cfg and
                                       cfg["text_config"].get("use_sliding_window")
                                       else variant(cfg)))


@pytest.mark.behaviours("PLAN-13", "REQ-3", "TREE-2")
def test_same_forward_reuse_still_catches_a_page_two_requests_hold() -> None:
    """Declaring PLAN-13 lets a row read what its forward computes, nothing more: a page handed
    to a request while another still holds it is caught as before."""
    cls = type("DeclaresAndReusesPinned", (ReferenceSchedulerAdapter,), {
        "features": ReferenceSchedulerAdapter.features | {Feature.SAME_FORWARD_REUSE},
        "__init__": lambda self, c: ReferenceSchedulerAdapter.__init__(self, c,
                                                                       ReusesPinnedPage)})
    caught = []
    for sc in SCHED_SCENARIOS:
        if sc.needs <= cls.features:
            try:
                play_sched(cls, sc.trace)
            except Violation as v:
                caught.append(v)
    assert caught and all(set(v.behaviours) & {"REQ-3", "TREE-2", "PIN-2"} for v in caught)


@pytest.mark.behaviours("REQ-7", "REQ-1")
def test_preempting_a_prefilling_request_is_legal_only_when_declared() -> None:
    """A request decodes while another prefills in chunks on a device too small for both: the
    variant pushes the prefilling one off (Prefilling to Retracted) and recovers it; without
    the declaration the same transition is outside the table."""
    v = VARIANTS["PreemptsPrefilling"]
    trace = SchedTrace(
        config=SchedConfig(device_pages=4, host_pages=0, max_tokens=2, max_batch=2,
                           max_slots=2),
        arrivals=[Arrival(at=0, rid="a", tokens=[1, 2, 3], new_tokens=6),
                  Arrival(at=1, rid="b", tokens=[4, 5, 6, 7, 8, 9])])
    driver = play_sched(v.factory(), trace)
    assert ("Prefilling", "retract_no_copy") in driver.exercised
    with pytest.raises(Violation) as e:
        play_sched(v.factory(with_features=False), trace)
    assert {"REQ-1", "REQ-7"} <= set(e.value.behaviours), e.value


@pytest.mark.behaviours("PLAN-3")
def test_an_engine_without_an_unmixed_mode_is_judged_mixed_when_it_says_so() -> None:
    v = VARIANTS["MixesEveryBatch"]
    trace = scenario("sched-no-mixed-batches")
    driver = play_sched(v.factory(), trace)
    assert any(d.startswith("PLAN-3 (unmixed batches) not judged") for d in driver.unjudged)
    assert any({"prefill", "decode"} <= {r[1] for r in e[2]} for e in driver.log
               if e[0] == "plan")  # it did mix
    with pytest.raises(Violation) as e:
        play_sched(v.factory(with_features=False), trace)
    assert "PLAN-3" in e.value.behaviours


# ----------------------------------------------------------------------------- vLLM
def _vllm():
    from kvconf.conformance.adapters.vllm_scheduler import VLLMSchedulerAdapter

    return VLLMSchedulerAdapter


def _without(*features: Feature):
    cls = _vllm()
    return type("Without", (cls,), {"features": cls.features - set(features)})


def _rows(driver) -> list[list[tuple]]:
    return [[(r[0], r[1], r[2], r[3], r[4], r[5]) for r in e[2]] for e in driver.log
            if e[0] == "plan"]


@needs_vllm
@pytest.mark.behaviours("EVENT-1")
def test_vllm_announces_one_block_twice_when_two_requests_compute_it() -> None:
    """Finding 1 at the scheduler level: two requests with the same two-token prompt in one
    plan each compute the block (a hit never covers the last token), and vLLM caches both
    copies, announcing the same hash twice (BlockPool.cache_full_blocks)."""
    trace = SchedTrace(config=SchedConfig(), arrivals=[
        Arrival(at=0, rid="a", tokens=[0, 0]), Arrival(at=0, rid="b", tokens=[0, 0])])
    with pytest.raises(Violation) as e:
        play_sched(_vllm(), trace)
    assert list(e.value.behaviours) == ["EVENT-1"], e.value
    play_sched(_without(Feature.KV_EVENTS), trace)  # nothing else is wrong with the run


@needs_vllm
@pytest.mark.behaviours("PLAN-13", "PLAN-12")
def test_vllm_reuses_blocks_its_forward_computes() -> None:
    """Two requests with one five-token prompt, one plan: vLLM caches the first one's blocks
    when it schedules them, and admits the second on them in the same forward (PLAN-13); the
    kit judges that by the declaration, and fails it without."""
    trace = twins()
    driver = play_sched(_without(Feature.KV_EVENTS), trace)
    first = _rows(driver)[0]
    (a,), (b,) = ([r for r in first if r[0] == rid] for rid in "ab")
    assert b[4] == 4 and b[5][:2] == a[5][:2]  # b reuses the two blocks a computes now
    with pytest.raises(Violation) as e:
        play_sched(_without(Feature.KV_EVENTS, Feature.SAME_FORWARD_REUSE), trace)
    assert "PLAN-12" in e.value.behaviours


@needs_vllm
@pytest.mark.behaviours("REQ-7", "PLAN-6")
def test_vllm_preempts_a_prefilling_request_and_recomputes_it() -> None:
    """A decode that needs a block preempts the last running request, here one between prefill
    chunks (Scheduler.schedule: self.running[-1]); it is admitted again from its prefix hit."""
    trace = SchedTrace(
        config=SchedConfig(device_pages=5, host_pages=0, max_tokens=3, max_batch=2,
                           max_slots=2),
        arrivals=[Arrival(at=0, rid="a", tokens=[1, 2, 3], new_tokens=6),
                  Arrival(at=1, rid="b", tokens=[4, 5, 6, 7, 8, 9])])
    driver = play_sched(_vllm(), trace)
    assert ("Prefilling", "retract_no_copy") in driver.engine.transitions()
    b = [r for rows in _rows(driver) for r in rows if r[0] == "b"]
    assert [r[1] for r in b] == ["prefill"] * len(b)
    assert any(r[4] > 0 for r in b[1:])  # recovered through its own cached blocks


@needs_vllm
@pytest.mark.behaviours("REQ-2", "REQ-6")
def test_vllm_refuses_a_token_no_row_sampled_and_ignores_unknown_ids() -> None:
    """A chunk that does not reach the end of the prompt samples nothing: a token for it has no
    place in vLLM's ModelRunnerOutput and is refused, changing nothing; an Abort of an unknown
    id is skipped by finish_requests (REQ-6); there are no copies to acknowledge."""
    from kvconf.reference.plan import RequestSpec

    eng = _vllm()(SchedConfig(max_tokens=4))
    eng.submit([RequestSpec("a", (1, 2, 3, 4, 5))])
    (row,) = eng.next_plan().rows
    assert (row.start, len(row.input_tokens), row.samples) == (0, 4, False)
    for bad in (ExtendResult("a", 0), WritebackDone(7)):
        with pytest.raises(EngineRejected):
            eng.advance([bad])
    eng.advance([Abort("nobody")])
    eng.advance([])
    (row,) = eng.next_plan().rows
    assert (row.start, len(row.input_tokens), row.samples) == (4, 1, True)
    eng.advance([ExtendResult("a", 2)])
    eng.next_plan()
    assert list(eng.sched.requests["a"].all_token_ids) == [1, 2, 3, 4, 5, 2]


@needs_vllm
def test_vllm_scheduler_meets_its_expectations() -> None:
    # as .ci/peers runs it (--profile ci, its own budget), which the expectation file states
    report = run_suite("vllm-scheduler", EngineConfig(), seed_value=0, profile=PROFILES["ci"],
                       budget=parse_budget(None, PROFILES["ci"]), report_path=None)
    path = ROOT / "conformance" / "adapters" / "expectations" / "vllm-scheduler.toml"
    verdicts = compare(report, load_expectations(path), path)
    assert not verdicts["regression"] and not verdicts["improvement"], verdicts
    assert "scheduler" in report.run_info.features


def _rows_played(name: str) -> tuple:
    """The scenario ``name`` played on vLLM's scheduler (KV events set aside), and every row of
    every plan it gave."""
    seen: list = []

    class Spy(_without(Feature.KV_EVENTS)):
        def next_plan(self):
            plan = super().next_plan()
            seen.extend(plan.rows)
            return plan

    trace = scenario(name)
    play_sched(Spy, trace)
    return trace, seen


@needs_vllm
@pytest.mark.behaviours("WIN-3", "WIN-4", "PLAN-8", "TREE-2")
def test_vllm_window_group_is_the_rows_window_table() -> None:
    """With a window the model is hybrid: each row carries the sliding-window group's block
    table, vLLM's null block where it freed blocks behind the window, and a later request that
    shares the prefix reads its window through blocks the first one freed but kept cached."""
    trace, seen = _rows_played("sched-sliding-window")
    w, p = trace.config.sliding_window, trace.config.page_size
    assert all(len(r.window_table) == len(r.page_table) for r in seen)
    behind = [r for r in seen if 0 in r.window_table[: max(0, r.start - w + 1) // p]]
    assert behind  # freed behind the window: null block in the window table
    reuse = [r for r in seen if r.kind == "prefill" and r.reused]
    assert reuse and all(0 not in r.window_table[(r.reused - w + 1) // p: r.reused // p]
                         for r in reuse)


@needs_vllm
@pytest.mark.behaviours("WIN-1", "WIN-5")
def test_vllm_reads_a_models_window_through_its_config_class() -> None:
    """vLLM's reading of a model config (ModelConfig.get_sliding_window over get_hf_text_config):
    the nested text config alone where there is one, the config class's default for a size left
    unsaid (WIN-5, declared). Both model-config samples pass declared and fail WIN-1 undeclared."""
    eng = _vllm()(SchedConfig())
    assert Feature.CONFIG_CLASS_WINDOW in eng.features
    assert eng.model_window({"sliding_window": 4}) == 4
    assert eng.model_window({"text_config": {"sliding_window": 3}}) == 3
    assert eng.model_window({"use_sliding_window": False, "sliding_window": 4096}) == 0
    assert eng.model_window({"sliding_window": 0}) == 0
    assert eng.model_window({"hidden_size": 64}) == 0
    assert eng.model_window({"sliding_window": 4, "text_config": {"sliding_window": 8}}) == 8
    assert eng.model_window({"text_config": {"use_sliding_window": True}}) == 4096  # Qwen2-VL's
    assert eng.model_window({"sliding_window": 4, "text_config": {}}) == 0  # Ministral 3's
    with pytest.raises(EngineRejected):
        eng.model_window([("sliding_window", 4)])
    assert check_model_windows(eng) > 0
    eng.features = eng.features - {Feature.CONFIG_CLASS_WINDOW}
    with pytest.raises(Violation) as e:
        check_model_windows(eng)
    assert e.value.behaviours == ("WIN-1",), e.value


@needs_vllm
@pytest.mark.behaviours("MAMBA-1", "MAMBA-3", "MAMBA-6")
def test_vllm_mamba_group_is_the_rows_state_blocks() -> None:
    """With Mamba the model has a MambaSpec group in "align" mode: a row leaves its state in the
    block of its last position and reads it from the block before its first (the cached
    state's block, copied on write, where it resumes from a hit). The content oracle holds the
    mapping to it: reading a resumed row's state from its working block instead fails MAMBA-1."""
    trace, seen = _rows_played("sched-mamba-reuse")
    p = trace.config.page_size
    hits = [r for r in seen if r.kind == "prefill" and r.reused]
    assert hits and all(r.mamba_src > 0 and r.mamba_src != r.mamba for r in hits)
    assert all(r.mamba > 0 for r in seen)  # never the null block (PLAN-10)
    assert all(r.start % p == 0 for r in seen if r.kind == "prefill" and r.start)

    class NoSource(_without(Feature.KV_EVENTS)):
        def _state_blocks(self, table, start, end):
            return super()._state_blocks(table, start, end)[0], -1

    with pytest.raises(Violation) as e:
        play_sched(NoSource, trace)
    assert "MAMBA-1" in e.value.behaviours


@needs_vllm
@pytest.mark.behaviours("EVENT-1", "MAMBA-3")
def test_vllm_computes_a_prefix_without_its_state_again_and_announces_it_twice() -> None:
    """A prefix whose KV is cached but whose Mamba state is not is computed again (the hybrid
    hit is the shortest group's, MAMBA-3 owes no more), and vLLM caches the recomputed blocks
    beside the cached ones, announcing their hashes a second time (BlockPool.cache_full_blocks).
    """
    trace = scenario("sched-mamba-retract")
    with pytest.raises(Violation) as e:
        play_sched(_vllm(), trace)
    assert list(e.value.behaviours) == ["EVENT-1"], e.value
    play_sched(_without(Feature.KV_EVENTS), trace)  # nothing else is wrong with the run


@pytest.mark.parametrize("case", ["fuzz-cache", "fuzz-cache-tight", "fuzz-cache-page1"])
def test_the_cache_fuzz_entries_name_findings_not_the_whole_case(case: str) -> None:
    """The cache fuzz cases of vllm-scheduler.toml are listed by the signature of each finding:
    the committed run is as expected whichever of its findings comes first, and a finding of
    another signature beside the known ones is a regression (a whole-case entry would hide
    it)."""
    from kvconf.conformance.reporting.report import load_report

    path = ROOT / "conformance" / "adapters" / "expectations" / "vllm-scheduler.toml"
    exp = load_expectations(path)
    assert case in exp.signatures() and case not in exp.by_case()
    report = load_report(ROOT / "docs" / "peers" / "vllm-scheduler" / "report.json")
    (i,) = [n for n, r in enumerate(report.results) if r.case == case]
    for order in (1, -1):
        judged = report.model_copy(deep=True)
        judged.results[i].findings = judged.results[i].findings[::order]
        assert case in compare(judged, exp, path)["expected"]
    judged = report.model_copy(deep=True)
    stray = judged.results[i].findings[0].model_copy(update={"signature": "faults/PIN-2/lock"})
    judged.results[i].findings.append(stray)
    assert case in compare(judged, exp, path)["regression"]
