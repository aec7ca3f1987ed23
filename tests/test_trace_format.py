"""The trace file format: a lossless round trip, and one-line errors that name the place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.cache.scenarios import SCENARIOS
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.errors import KitError
from kvconf.conformance.running.runner import play
from kvconf.conformance.trace import (
    AckStep,
    EvictStep,
    Expect,
    ExtendStep,
    InsertStep,
    LoadbackStep,
    MatchStep,
    TickStep,
    Trace,
    UnlockStep,
    WritebackStep,
    dump_trace,
    load_trace,
    trace_schema,
)
from kvconf.reference.tiers import Tier


def every_kind_of_step() -> Trace:
    return Trace(
        name="all-steps",
        behaviours=["HOST-2", "PIN-3"],
        clock="explicit",
        config=EngineConfig(page_size=2, device_pages=16, host_pages=8),
        steps=[
            InsertStep(tokens=[1, 2, 3, 4], expect=Expect(cached_len=0)),  # 0
            MatchStep(ns=0, tokens=[1, 2, 3, 4, 5], lock=Tier.DEVICE),  # 1
            WritebackStep(step=1, ack="later"),  # 2
            TickStep(),  # 3
            AckStep(step=2, success=True),  # 4
            UnlockStep(step=1),  # 5
            EvictStep(tier=Tier.DEVICE, pages=2, expect=Expect(evicted=4)),  # 6
            MatchStep(ns=0, tokens=[1, 2, 3, 4], lock=Tier.HOST),  # 7
            LoadbackStep(step=7, success=False),  # 8
            ExtendStep(ns=3, tokens=[9, 9]),  # 9
            UnlockStep(step=7),  # 10
            UnlockStep(step=7, expect=Expect(rejected=True)),  # 11
        ],
    )


def write(tmp_path: Path, text: str, name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def load_error(path: Path) -> str:
    with pytest.raises(KitError) as e:
        load_trace(path)
    msg = str(e.value)
    assert "\n" not in msg, "a kit error is one line"
    assert msg.startswith(str(path)), msg
    return msg


def step_line(text: str, index: int) -> int:
    """1-based line of ``steps[index]`` in a file written by dump_trace."""
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.strip() == '"steps": [') + 1
    return first + index + 1


def edit_step(text: str, index: int, old: str, new: str) -> str:
    lines = text.splitlines()
    k = step_line(text, index) - 1
    assert old in lines[k], (old, lines[k])
    lines[k] = lines[k].replace(old, new)
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ round trip
def test_round_trip_keeps_every_field(tmp_path):
    trace = every_kind_of_step()
    text = dump_trace(trace)
    assert load_trace(write(tmp_path, text)) == trace
    assert len(text.splitlines()) == len(trace.steps) + 10  # one line per step
    for i, step in enumerate(trace.steps):
        line = text.splitlines()[step_line(text, i) - 1]
        assert json.loads(line.rstrip(","))["op"] == step.op
    assert dump_trace(load_trace(write(tmp_path, text, "again.json"))) == text


@pytest.mark.parametrize("page_size", [1, 2, 3])
def test_every_scenario_round_trips(tmp_path, page_size):
    for sc in SCENARIOS:
        trace = sc.trace(EngineConfig(page_size=page_size))
        assert load_trace(write(tmp_path, dump_trace(trace), f"{sc.name}.json")) == trace


@pytest.mark.behaviours("DET-1")
def test_a_saved_trace_replays_to_the_same_outcome(tmp_path):
    """What the runner saves is what it ran: the loaded trace plays to the identical log."""
    for sc in SCENARIOS:
        trace = sc.trace(EngineConfig(page_size=2))
        loaded = load_trace(write(tmp_path, dump_trace(trace), f"{sc.name}.json"))
        assert play(ReferenceCacheAdapter, loaded) == play(ReferenceCacheAdapter, trace)


def test_schema_describes_the_steps():
    schema = trace_schema()
    text = json.dumps(schema)
    for op in ("match", "insert", "extend", "unlock", "evict", "writeback", "loadback", "ack",
               "tick"):
        assert f'"{op}"' in text
    assert schema["type"] == "object" and "steps" in schema["properties"]


# ------------------------------------------------------------------------------ bad files
def test_malformed_json_names_the_line(tmp_path):
    text = dump_trace(every_kind_of_step())
    bad = edit_step(text, 3, '{"op":"tick"},', '{"op":"tick"}')  # a missing comma
    path = write(tmp_path, bad)
    msg = load_error(path)
    assert msg.startswith(f"{path}:{step_line(text, 4)}:")
    assert "invalid JSON" in msg


def test_a_missing_file_is_a_kit_error(tmp_path):
    msg = load_error(tmp_path / "nope.json")
    assert "cannot read trace" in msg


@pytest.mark.parametrize(
    ("index", "old", "new", "where"),
    [
        (6, '"pages":2', '"pages":2,"tokenz":[1]', "steps[6].tokenz"),
        (6, '"pages":2', '"pages":"many"', "steps[6].pages"),
        (6, '"pages":2', '"pages":-1', "steps[6].pages"),
        (3, '"op":"tick"', '"op":"fly"', "steps[3]"),
        (1, '"lock":"device"', '"lock":"disk"', "steps[1].lock"),
        (0, '"tokens":[1,2,3,4]', '"tokens":[1,-2,3,4]', "steps[0].tokens[1]"),
        (2, '"ack":"later"', '"ack":"someday"', "steps[2].ack"),
    ],
    ids=["unknown-field", "wrong-type", "negative-count", "unknown-op", "unknown-tier",
         "negative-token", "unknown-ack"],
)
def test_a_bad_field_names_file_line_and_field(tmp_path, index, old, new, where):
    text = dump_trace(every_kind_of_step())
    path = write(tmp_path, edit_step(text, index, old, new))
    msg = load_error(path)
    assert msg.startswith(f"{path}:{step_line(text, index)}: {where}"), msg


@pytest.mark.parametrize(
    ("index", "old", "new", "words"),
    [
        (5, '"step":1', '"step":9', "steps[5].step: 9 is not an earlier step"),
        (5, '"step":1', '"step":5', "steps[5].step: 5 is not an earlier step"),
        (5, '"step":1', '"step":0', "steps[5].step: step 0 is not a locking match"),
        (8, '"step":7', '"step":1', "steps[8].step: step 1 does not lock the host tier"),
        (4, '"step":2', '"step":3', "steps[4].step: step 3 is not a transfer acknowledged later"),
    ],
    ids=["later-step", "itself", "not-a-lock", "wrong-tier", "ack-of-nothing"],
)
def test_a_bad_reference_names_file_and_step(tmp_path, index, old, new, words):
    path = write(tmp_path, edit_step(dump_trace(every_kind_of_step()), index, old, new))
    msg = load_error(path)
    assert words in msg, msg


def test_tokens_that_are_not_whole_pages_are_named(tmp_path):
    text = dump_trace(every_kind_of_step())
    path = write(tmp_path, edit_step(text, 9, '"tokens":[9,9]', '"tokens":[9,9,9]'))
    msg = load_error(path)
    assert "steps[9].tokens: 3 tokens is not a whole number of pages of 2" in msg
    # A query may end inside a page; only inserted tokens must be whole pages.
    ok = edit_step(text, 1, '"tokens":[1,2,3,4,5]', '"tokens":[1,2,3]')
    load_trace(write(tmp_path, ok, "ok.json"))


def test_a_bad_header_is_named(tmp_path):
    text = dump_trace(every_kind_of_step())
    msg = load_error(write(tmp_path, text.replace("kvconf-trace/1", "kvconf-trace/9")))
    assert ": format: " in msg
    msg = load_error(write(tmp_path, text.replace('"page_size": 2', '"page_size": 0')))
    assert ": config.page_size: " in msg
    msg = load_error(write(tmp_path, text.replace('"clock": "explicit"', '"clock": "wall"')))
    assert ": clock: " in msg
    msg = load_error(write(tmp_path, "[1, 2]\n"))
    assert "a trace is a JSON object" in msg


def test_an_expectation_names_behaviours_of_its_case():
    """A step's expectation may narrow what its mismatch breaks; those IDs exist and are among
    the case's own, so the compliance matrix never blames a rule the case does not claim."""
    from kvconf.spec.registry import load_registry

    known = set(load_registry().behaviours)
    named = 0
    for sc in SCENARIOS:
        for step in sc.steps:
            ids = step.expect.behaviours if step.expect is not None else None
            if ids:
                named += 1
                assert set(ids) <= known and set(ids) <= set(sc.behaviours), (sc.name, ids)
    assert named >= 10


def test_a_mismatch_blames_the_behaviours_its_expectation_names():
    from kvconf.conformance.engine.features import Feature
    from kvconf.conformance.oracles.base import Violation

    class WrongVictim(ReferenceCacheAdapter):
        """Frees nothing when asked for a few pages, and offers no snapshot, so the expectation
        is what catches it."""

        features = ReferenceCacheAdapter.features - {Feature.SNAPSHOT}

        def evict(self, tier, num_pages):
            return 0 if num_pages < 100 else super().evict(tier, num_pages)

    trace = next(s for s in SCENARIOS if s.name == "lru-victim-order").trace(EngineConfig())
    with pytest.raises(Violation) as e:
        play(WrongVictim, trace)
    assert e.value.behaviours == ("EVICT-4", "EVICT-6")
