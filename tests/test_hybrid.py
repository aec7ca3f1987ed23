"""The hybrid cache level: the reference passes, each planted defect is caught by the rule it
breaks, the legal variant passes, and the oracle's own checks fail where they must."""

from __future__ import annotations

import pytest

from kvconf.conformance.adapters.reference_hybrid import ReferenceHybridAdapter
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.hybrid import GroupHit, HybridConfig, HybridHit
from kvconf.conformance.errors import KitError
from kvconf.conformance.hybrid.cases import fuzz_config
from kvconf.conformance.hybrid.driver import play_hybrid
from kvconf.conformance.hybrid.generator import WalkStats, search, shrink, walk
from kvconf.conformance.hybrid.scenarios import HYBRID_SCENARIOS
from kvconf.conformance.hybrid.trace import (
    AdmitStep,
    DecodeStep,
    ExtendStep,
    FinishStep,
    HitStep,
    HybridTrace,
)
from kvconf.conformance.mutants.hybrid import PLANTED_HYBRID
from kvconf.conformance.variants.hybrid import DecodeStatesAtInterval, KeepsWindowPages
from kvconf.conformance.violation import Violation


def _factory(cls=None):
    if cls is None:
        return ReferenceHybridAdapter
    return lambda config: ReferenceHybridAdapter(config, cache_cls=cls)


def _caught(factory) -> Violation | None:
    """The first violation any hybrid scenario or 40 fuzz walks find, at page sizes 1 and 2."""
    for p in (1, 2):
        for sc in HYBRID_SCENARIOS:
            try:
                play_hybrid(factory, sc.trace(p))
            except Violation as v:
                return v
        for pages in (40, 14):
            try:
                search(factory, fuzz_config(p, pages), lambda k: k, 30, 40, None, WalkStats())
            except Violation as v:
                return v
    return None


@pytest.mark.behaviours("WIN-6", "WIN-3", "WIN-4", "MAMBA-1", "MAMBA-3", "MAMBA-8", "POOL-2",
                        "POOL-5", "TREE-1", "TREE-2")
def test_reference_passes_every_hybrid_case():
    assert _caught(_factory()) is None


@pytest.mark.behaviours("WIN-4")
def test_keeping_window_pages_is_legal_and_differs():
    assert _caught(_factory(KeepsWindowPages)) is None
    trace = HYBRID_SCENARIOS[0].trace(1)
    assert play_hybrid(_factory(KeepsWindowPages), trace) != play_hybrid(_factory(), trace)


# mutant -> the rules that may catch it first (its docstring's head names them)
EXPECTED = {
    "ReleasesInsideWindow": {"WIN-4"},
    "WindowHitOnLastPage": {"WIN-3"},
    "HitIgnoresMamba": {"WIN-6", "MAMBA-3"},
    "CachesWorkingSlot": {"MAMBA-3", "MAMBA-1", "MAMBA-8"},
    "CombinedStopsShort": {"WIN-6"},
    "ReleaseLeaks": {"POOL-5"},
}


@pytest.mark.behaviours("WIN-3", "WIN-4", "WIN-6", "MAMBA-1", "MAMBA-3", "POOL-5")
@pytest.mark.parametrize("name", sorted(PLANTED_HYBRID))
def test_each_hybrid_mutant_is_caught_by_its_rule(name):
    v = _caught(_factory(PLANTED_HYBRID[name]))
    assert v is not None, f"{name} survived"
    assert set(v.behaviours) & EXPECTED[name], (name, v)


class _Short(ReferenceHybridAdapter):
    """Reports every group's hit but a combined hit of 0."""

    def hit(self, namespace, tokens):
        got = super().hit(namespace, tokens)
        return HybridHit(got.groups, 0)


class _Deep(ReferenceHybridAdapter):
    """Claims the Mamba group serves as far as full attention, with the state it has."""

    def hit(self, namespace, tokens):
        got = super().hit(namespace, tokens)
        full, *rest = got.groups
        groups = [full, *(GroupHit(full.length, g.pages, g.state) if i == len(rest) - 1 else g
                          for i, g in enumerate(rest))]
        return HybridHit(tuple(groups), got.length)


A = [1, 2, 3, 4, 5, 6, 7, 8]


def _trace(*steps) -> HybridTrace:
    return HybridTrace(config=HybridConfig(page_size=1, window=3), steps=list(steps))


COMPUTE_A = (AdmitStep(rid="r1", tokens=A), ExtendStep(rid="r1", upto=4),
             ExtendStep(rid="r1", upto=8), FinishStep(rid="r1"))


@pytest.mark.behaviours("WIN-6")
def test_a_combined_hit_short_of_what_every_group_serves_fails():
    with pytest.raises(Violation) as e:
        play_hybrid(_Short, _trace(*COMPUTE_A, HitStep(tokens=A + [42])))
    assert e.value.behaviours == ("WIN-6",)


@pytest.mark.behaviours("MAMBA-3")
def test_a_group_claiming_a_state_it_does_not_hold_fails():
    with pytest.raises(Violation) as e:
        play_hybrid(_Deep, _trace(*COMPUTE_A, HitStep(tokens=A[:6] + [42, 42])))
    assert e.value.behaviours == ("MAMBA-3",)


@pytest.mark.behaviours("WIN-6")
def test_an_admission_deeper_than_the_hit_fails():
    class Greedy(ReferenceHybridAdapter):
        def hit(self, namespace, tokens):
            got = super().hit(namespace, tokens)
            return HybridHit(got.groups, max(0, got.length - 1))

    with pytest.raises(Violation) as e:
        play_hybrid(Greedy, _trace(*COMPUTE_A, AdmitStep(rid="r2", tokens=A + [42])))
    assert "WIN-6" in e.value.behaviours


@pytest.mark.behaviours("DET-1")
def test_walks_are_deterministic_and_shrink():
    a, b = WalkStats(), WalkStats()
    walk(_factory(), fuzz_config(2, 14), 7, 30, a)
    walk(_factory(), fuzz_config(2, 14), 7, 30, b)
    assert a.last == b.last and a.ops == b.ops
    factory = _factory(PLANTED_HYBRID["ReleasesInsideWindow"])
    stats = WalkStats()
    with pytest.raises(Violation) as e:
        search(factory, fuzz_config(1, 14), lambda k: k, 30, 40, None, stats)
    # Steps that break nothing, put in front of the failing walk, are shrunk away.
    padded = stats.last.model_copy(update={"steps": [HitStep(tokens=[k, 9]) for k in range(4)]
                                           + list(stats.last.steps)})
    small, v = shrink(factory, padded, e.value, 300)
    assert len(small.steps) <= len(stats.last.steps) < len(padded.steps)
    assert "WIN-4" in v.behaviours


class _Aligned(ReferenceHybridAdapter):
    """Declares mamba_aligned_chunks and refuses any chunk from inside a page across its end."""

    features = ReferenceHybridAdapter.features | {Feature.MAMBA_ALIGNED_CHUNKS}

    def extend(self, rid, upto):
        start = self.cache.requests[rid].computed
        p = self.page_size
        assert not start % p or upto <= -(-start // p) * p, (rid, start, upto)
        return super().extend(rid, upto)


@pytest.mark.behaviours("MAMBA-11")
def test_aligned_chunks_engine_is_played_only_aligned_chunks():
    assert _caught(_Aligned) is None  # its assertion would be a FAULT-2 violation
    bad = _trace(AdmitStep(rid="r1", tokens=A), ExtendStep(rid="r1", upto=3),
                 ExtendStep(rid="r1", upto=6))
    bad = bad.model_copy(update={"config": HybridConfig(page_size=2, window=5)})
    with pytest.raises(KitError, match="mamba_aligned_chunks"):
        play_hybrid(_Aligned, bad)
    play_hybrid(ReferenceHybridAdapter, bad)  # undeclared: the same chunk is played


@pytest.mark.behaviours("MAMBA-11", "MAMBA-3")
def test_states_per_page_pass_declared_and_fail_undeclared():
    from kvconf.conformance.variants.hybrid import StatesPerPage

    class Declared(ReferenceHybridAdapter):
        features = ReferenceHybridAdapter.features | StatesPerPage.features

        def __init__(self, config):
            super().__init__(config, cache_cls=StatesPerPage)

    assert _caught(Declared) is None
    # Undeclared, the kit plays a chunk from inside a page across its end: the slot of the
    # page it leaves is published as that page's state, one token short.
    crossing = _trace(AdmitStep(rid="r1", tokens=A), ExtendStep(rid="r1", upto=3),
                      ExtendStep(rid="r1", upto=8), AdmitStep(rid="r2", tokens=A[:4] + [9, 9]))
    crossing = crossing.model_copy(update={"config": HybridConfig(page_size=2, window=5)})
    with pytest.raises(Violation) as e:
        play_hybrid(_factory(StatesPerPage), crossing)
    assert "MAMBA-3" in e.value.behaviours


@pytest.mark.behaviours("WIN-4")
def test_a_saved_hybrid_trace_replays(tmp_path):
    from typer.testing import CliRunner

    from kvconf.conformance.cli import app

    factory = _factory(PLANTED_HYBRID["ReleasesInsideWindow"])
    stats = WalkStats()
    with pytest.raises(Violation) as e:
        search(factory, fuzz_config(1, 14), lambda k: k, 30, 40, None, stats)
    small, _ = shrink(factory, stats.last, e.value, 300)
    path = tmp_path / "fuzz-hybrid.json"
    path.write_text(small.model_dump_json(indent=2))
    runner = CliRunner()
    ok = runner.invoke(app, ["replay", str(path), "--engine", "reference", "--in-process"])
    assert ok.exit_code == 0 and "PASS" in ok.output, ok.output
    path.write_text("{\"level\": \"hybrid\", \"steps\": [{\"op\": \"hit\"}]}")
    bad = runner.invoke(app, ["replay", str(path), "--engine", "reference"])
    assert bad.exit_code == 2 and "steps" in bad.output, bad.output


@pytest.mark.behaviours("DET-1")
def test_an_engine_that_answers_differently_on_replay_fails_determinism():
    plays = []

    class Flaky(ReferenceHybridAdapter):
        """Gives its pages out from the other end of the pool on every second build."""

        def __init__(self, config):
            super().__init__(config)
            plays.append(1)
            if len(plays) % 2 == 0:
                self.cache.kv.queue = type(self.cache.kv.queue)(
                    (i, None) for i in reversed(list(self.cache.kv.queue)))

    with pytest.raises(Violation) as e:
        play_hybrid(Flaky, _trace(*COMPUTE_A))
    assert e.value.behaviours == ("DET-1",)


def test_an_adapter_with_malformed_groups_is_a_one_line_error():
    from kvconf.conformance.engine.hybrid import Group

    class Misnamed(ReferenceHybridAdapter):
        def __init__(self, config):
            super().__init__(config)
            self.groups = (Group("window", 3), Group("full"))

    with pytest.raises(KitError, match="full first"):
        play_hybrid(Misnamed, _trace(*COMPUTE_A))


# ---------------------------------------------------------------------- publish after the forward
@pytest.mark.behaviours("WIN-4")
def test_releasing_before_publish_is_legal_and_differs():
    from kvconf.conformance.variants.hybrid import ReleasesBeforePublish

    assert _caught(_factory(ReleasesBeforePublish)) is None
    trace = HYBRID_SCENARIOS[0].trace(2)
    assert play_hybrid(_factory(ReleasesBeforePublish), trace)[5]["window"] == 8
    assert play_hybrid(_factory(), trace)[5]["window"] == 12


def _settling(change):
    """ReleasesBeforePublish whose ``computed`` also reports ``change(cache, rid)``: (group
    index, page index, page) or None."""
    from kvconf.conformance.engine.hybrid import Settled
    from kvconf.conformance.variants.hybrid import ReleasesBeforePublish

    class Bogus(ReleasesBeforePublish):
        def computed(self, rid):
            got = super().computed(rid)
            extra = change(self, rid)
            if extra is None:
                return got
            changes = [list(g) for g in (got.changes if got else ((),) * len(self.groups))]
            i, j, page = extra
            changes[i].append((j, page))
            return Settled(tuple(tuple(g) for g in changes))

    return _factory(Bogus)


def _shared(p: int = 1) -> HybridTrace:
    return next(sc for sc in HYBRID_SCENARIOS if sc.name == "hybrid-shared-prefix").trace(p)


@pytest.mark.behaviours("TREE-2")
def test_a_page_moved_onto_other_kv_is_caught():
    def move(cache, rid):
        r = cache.requests[rid]
        other = next((o for k, o in cache.requests.items() if k != rid and o.tables[0]), None)
        if other is None or not r.tables[0] or other.tables[0][-1] == r.tables[0][0]:
            return None
        return 0, 0, other.tables[0][-1]  # index 0 now read from another request's last page

    with pytest.raises(Violation) as caught:
        play_hybrid(_settling(move), _shared())
    assert caught.value.behaviours == ("TREE-2",)


@pytest.mark.behaviours("WIN-4")
def test_a_window_page_given_back_inside_the_window_is_caught():
    def inside(cache, rid):
        r = cache.requests[rid]
        j = len(r.tables[1]) - 1
        return (1, j, None) if j >= 0 and r.tables[1][j] is not None else None

    with pytest.raises(Violation) as caught:
        play_hybrid(_settling(inside), _shared())
    assert caught.value.behaviours == ("WIN-4",)


@pytest.mark.behaviours("WIN-4")
def test_a_full_page_given_back_is_caught():
    with pytest.raises(Violation) as caught:
        play_hybrid(_settling(lambda cache, rid: (0, 0, None)), _shared())
    assert caught.value.behaviours == ("WIN-4",) and "full group" in str(caught.value)


# ----------------------------------------------------------------- decode rows (WIN-7)
def _decode_trace(p: int = 1) -> HybridTrace:
    return next(sc for sc in HYBRID_SCENARIOS if sc.name == "hybrid-decode").trace(p)


class _NoDecode(ReferenceHybridAdapter):
    """The reference without ``decode``: told the whole sequence at admission."""

    decode = None  # type: ignore[assignment]

    def __init__(self, config):
        super().__init__(config)
        self.calls: list[tuple] = []

    def admit(self, rid, namespace, tokens):
        self.calls.append(("admit", rid, len(tokens)))
        return super().admit(rid, namespace, tokens)

    def extend(self, rid, upto):
        self.calls.append(("extend", rid, upto))
        return super().extend(rid, upto)


@pytest.mark.behaviours("WIN-7")
def test_decode_rows_are_told_their_token_or_played_as_one_token_chunks():
    """An engine with ``decode`` is admitted on the prompt and told each output token; one
    without it is admitted on the whole sequence and computes each as a one-token chunk."""
    trace = _trace(AdmitStep(rid="r1", tokens=A, output=[9, 9, 7]), ExtendStep(rid="r1", upto=8),
                   DecodeStep(rid="r1"), DecodeStep(rid="r1"), FinishStep(rid="r1"))
    told = []

    class Told(ReferenceHybridAdapter):
        def admit(self, rid, namespace, tokens):
            told.append(("admit", len(tokens)))
            return super().admit(rid, namespace, tokens)

        def decode(self, rid, token):
            told.append(("decode", token))
            return super().decode(rid, token)

    log = play_hybrid(Told, trace)
    assert told == [("admit", 8), ("decode", 9), ("decode", 9)] * 2  # and the DET-1 replay
    assert [o["op"] for o in log] == ["admit", "extend", "decode", "decode", "finish"]
    engines: list[_NoDecode] = []

    def factory(config):
        engines.append(_NoDecode(config))
        return engines[-1]

    play_hybrid(factory, trace)
    assert engines[0].calls == [("admit", "r1", 11), ("extend", "r1", 8), ("extend", "r1", 9),
                                ("extend", "r1", 10)]


@pytest.mark.behaviours("WIN-7")
def test_extend_stops_at_the_prompt_and_decode_waits_for_it():
    with pytest.raises(KitError, match="decode steps"):
        play_hybrid(_factory(), _trace(AdmitStep(rid="r1", tokens=A, output=[9]),
                                       ExtendStep(rid="r1", upto=9)))
    with pytest.raises(KitError, match="once the prompt is done"):
        play_hybrid(_factory(), _trace(AdmitStep(rid="r1", tokens=A, output=[9]),
                                       ExtendStep(rid="r1", upto=4), DecodeStep(rid="r1")))


class _DecodeGrabsAPage(ReferenceHybridAdapter):
    """Each decode row hands out one more full-attention page than its position needs."""

    def decode(self, rid, token):
        got = super().decode(rid, token)
        if got is None:
            return got
        (extra,) = self.cache._alloc(self.cache.kv, 1)
        self.cache.requests[rid].tables[0].append(extra)
        return type(got)((got.pages[0] + (extra,), *got.pages[1:]), got.released,
                         got.state_source, got.state_slot, got.checkpoints)


@pytest.mark.behaviours("WIN-7")
def test_a_decode_row_that_hands_out_a_page_it_does_not_need_is_caught():
    with pytest.raises(Violation) as caught:
        play_hybrid(_DecodeGrabsAPage, _decode_trace(2))
    assert caught.value.behaviours == ("WIN-7",)
    assert "needs 0" in str(caught.value) or "needs 1" in str(caught.value)


@pytest.mark.behaviours("WIN-7", "WIN-4", "MAMBA-1", "MAMBA-3")
def test_decode_states_at_an_interval_are_legal_and_differ():
    """The legal variant keeping decode states every two pages, published at finish, passes
    every hybrid case and walk, and serves the decoded sequence differently: the state it kept
    at the end of the prompt is not evicted for the decode rows' own, and a query into what was
    decoded resumes from the state at the interval, not at the page before it."""
    variant = _factory(DecodeStatesAtInterval)
    assert _caught(variant) is None
    for p in (1, 2):
        got = play_hybrid(variant, _decode_trace(p))
        ref = play_hybrid(_factory(), _decode_trace(p))
        hits = [i for i, o in enumerate(got) if o["op"] in ("hit", "admit")]
        assert [got[i] for i in hits[-2:]] == [
            {"op": "hit", "length": 8 * p, "full": 8 * p, "window": 8 * p, "mamba": 8 * p},
            {"op": "admit", "length": 8 * p, "full": 13 * p, "window": 8 * p, "mamba": 8 * p}]
        assert ref[hits[-1]]["length"] == 13 * p
