"""The GPU harness: torch pools behave as the kit's shadow memory does, and the kit's traces,
played on them, catch planted defects on the tensors themselves.

Runs on CPU everywhere and on CUDA too where a GPU is present (``DEVICES``).
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from planted import PLANTED
from planted_sched import PLANTED_SCHED
from typer.testing import CliRunner

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter
from kvconf.conformance.cache.generator import TraceHolder
from kvconf.conformance.cache.scenarios import SCENARIOS
from kvconf.conformance.cli import app
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.errors import KitError
from kvconf.conformance.oracles import MEMORY_ORACLES, Violation
from kvconf.conformance.running.profiles import Budget
from kvconf.conformance.running.runner import play, run_fuzz
from kvconf.conformance.runtime.memory import POISON, TORN, ShadowMemory
from kvconf.conformance.scheduler.generator import play_sched
from kvconf.conformance.scheduler.scenarios import SCHED_SCENARIOS
from kvconf.gpu_harness.copies import GATHER_ABOVE, SMALL_PAGE, runs
from kvconf.gpu_harness.device import resolve_device
from kvconf.gpu_harness.layout import KVLayout, MambaLayout
from kvconf.gpu_harness.mamba import MambaMemory
from kvconf.gpu_harness.memory import TensorMemory, tensor_memory
from kvconf.reference.tiers import Tier

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
D, H = Tier.DEVICE, Tier.HOST
MEMORY_NAMES = {o.name for o in MEMORY_ORACLES}


# ------------------------------------------------------------------ the memory itself
_tag = st.integers(1, (1 << 64) - 5)  # a content tag (0 and the reserved values excluded)


@st.composite
def memory_ops(draw):
    """Writes, reads and copies over a 4-page device pool and a 3-page host pool of 2 slots,
    with copies left in flight while their sources are written."""
    ops = []
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["write", "write_pages", "read", "read_pages", "start",
                                     "finish"]))
        tier = draw(st.sampled_from([D, H]))
        n = 4 if tier is D else 3
        if kind in ("write", "read"):
            k = draw(st.integers(0, 3))
            cells = [(draw(st.integers(0, n - 1)), draw(st.integers(0, 1))) for _ in range(k)]
            ops.append((kind, tier, cells, [draw(_tag) for _ in cells]))
        elif kind in ("write_pages", "read_pages"):
            pages = draw(st.lists(st.integers(0, n - 1), max_size=3))
            ops.append((kind, tier, pages, [draw(_tag) for _ in pages]))
        elif kind == "start":
            k = draw(st.integers(0, 3))
            src = draw(st.lists(st.integers(0, n - 1), min_size=k, max_size=k))
            m = 3 if tier is D else 4
            dst = draw(st.lists(st.integers(0, m - 1), min_size=k, max_size=k, unique=True))
            ops.append((kind, tier, list(zip(src, dst, strict=True)), None))
        else:
            ops.append((kind, draw(st.integers(0, 7)), draw(st.booleans()), None))
    return ops


def apply(mem, ops) -> list:
    out: list = []
    inflight: list = []
    for kind, a, b, c in ops:
        if kind == "write":
            mem.write(a, [p for p, _s in b], [s for _p, s in b], c)
        elif kind == "read":
            out.append(mem.read(a, [p for p, _s in b], [s for _p, s in b]))
        elif kind == "write_pages":
            mem.write_pages(a, b, c)
        elif kind == "read_pages":
            out.append(mem.read_pages(a, b))
        elif kind == "start":
            inflight.append(mem.start_copy(a, H if a is D else D, b))
        elif inflight:
            out.append(mem.finish_copy(inflight.pop(a % len(inflight)), b))
    for handle in inflight:
        out.append(mem.finish_copy(handle, True))
    for tier, n in ((D, 4), (H, 3)):
        out.append(mem.read(tier, [p for p in range(n) for _ in (0, 1)], [0, 1] * n))
    return out


@pytest.mark.behaviours("TREE-2")
@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=60, deadline=None)
@given(ops=memory_ops())
def test_tensor_memory_behaves_as_the_shadow_memory(device, ops):
    shadow = ShadowMemory(2, {D: 4, H: 3})
    tensors = TensorMemory(2, 4, 3, KVLayout(1, 1, 4), device)
    assert apply(tensors, ops) == apply(shadow, ops)


@pytest.mark.parametrize("device", DEVICES)
def test_a_copy_lands_whole_pages_and_poisons_until_then(device):
    mem = TensorMemory(4, 8, 6, KVLayout(), device)
    mem.write_pages(D, [1, 2], [5, (1 << 64) - 6])
    assert mem.read_pages(D, [0, 1, 2]) == [None, 5, (1 << 64) - 6]
    h = mem.start_copy(D, H, [(2, 0), (1, 3)])
    assert mem.read_pages(H, [0, 3]) == [POISON, POISON]
    assert mem.finish_copy(h, True) == []
    assert mem.read_pages(H, [0, 3]) == [(1 << 64) - 6, 5]
    with pytest.raises(ValueError):
        mem.finish_copy(h, True)


@pytest.mark.parametrize("device", DEVICES)
def test_scattered_copies_take_the_gather_path_and_agree_with_the_shadow(device):
    """Many runs of pages go through one gather, transfer and scatter (GATHER_ABOVE); the
    outcome, races and failures included, is the shadow memory's."""
    src = [9, 2, 14, 5, 11, 0, 7]
    dst = [1, 12, 4, 15, 8, 3, 10]
    assert len(runs(list(zip(src, dst, strict=True)))) > GATHER_ABOVE
    assert KVLayout().page_bytes(2) < SMALL_PAGE
    ops = [("write_pages", D, list(range(16)), [100 + i for i in range(16)]),
           ("write_pages", H, list(range(16)), [200 + i for i in range(16)])]
    for a in (D, H):
        ops += [("start", a, list(zip(src, dst, strict=True)), None),
                ("write", a, [(2, 0)], [7]),  # a source page written in flight
                ("read_pages", H if a is D else D, dst, None),
                ("finish", 0, True, None),
                ("start", a, list(zip(dst, src, strict=True)), None),
                ("finish", 0, False, None)]
    shadow = ShadowMemory(2, {D: 16, H: 16})
    tensors = TensorMemory(2, 16, 16, KVLayout(), device)
    got = apply16(tensors, ops)
    assert got == apply16(shadow, ops)
    assert POISON in got[0] and got[1] == [2]  # in flight, then the raced source


def apply16(mem, ops) -> list:
    out = apply(mem, ops)[:-2]
    out.append(mem.read_pages(D, list(range(16))) + mem.read_pages(H, list(range(16))))
    return out


@pytest.mark.behaviours("DET-1")
@pytest.mark.parametrize("device", DEVICES)
def test_a_batch_that_writes_one_slot_twice_keeps_the_last_tag(device):
    """A page table that names one page twice makes a forward write a slot twice; CUDA keeps
    an arbitrary one of repeated scatter indices, the harness the last, as the shadow does."""
    mem = TensorMemory(2, 4, 0, KVLayout(), device)
    for _ in range(20):
        mem.write(D, [1, 2, 1, 1], [0, 0, 0, 1], [5, 6, 7, 8])
        mem.write_pages(D, [3, 3, 0], [9, 10, 11])
        assert mem.read(D, [1, 1, 2], [0, 1, 0]) == [7, 8, 6]
        assert mem.read_pages(D, [3, 0]) == [10, 11]


@pytest.mark.parametrize("device", DEVICES)
def test_a_source_written_while_its_copy_is_in_flight_poisons_the_destination(device):
    mem = TensorMemory(2, 4, 4, KVLayout(), device)
    mem.write_pages(H, [0, 1], [7, 8])
    h = mem.start_copy(H, D, [(0, 2), (1, 3)])
    mem.write(H, [1], [0], [9])
    assert mem.finish_copy(h, True) == [1]
    assert mem.read_pages(D, [2, 3]) == [7, POISON]


@pytest.mark.parametrize("device", DEVICES)
def test_a_page_with_one_layer_moved_reads_torn(device):
    mem = TensorMemory(2, 4, 4, KVLayout(layers=2), device)
    mem.write_pages(D, [0, 1], [11, 12])
    kv = mem.pools[D].tensors[0]  # pages x slots x layers x K/V x heads x head_dim
    kv[1, :, 1] = kv[0, :, 1]  # layer 1 of page 0 copied over page 1's: half a copy
    assert mem.read_pages(D, [0, 1]) == [11, TORN]
    assert mem.read(D, [1, 1], [0, 1]) == [TORN, TORN]


@pytest.mark.behaviours("POOL-2")
def test_a_page_outside_the_pool_is_a_pool_violation():
    mem = TensorMemory(2, 4, 0, KVLayout(), "cpu")
    with pytest.raises(Violation) as e:
        mem.write_pages(D, [4], [1])
    assert e.value.behaviours == ("POOL-2",) and "outside the pool of 4" in e.value.message
    with pytest.raises(Violation):
        mem.start_copy(D, H, [(0, 0)])


def test_layouts_reject_shapes_a_tag_cannot_fill():
    with pytest.raises(KitError, match="multiple of 8"):
        KVLayout(layers=1, heads=1, head_dim=1, dtype=torch.float16)
    with pytest.raises(KitError, match="at least 1"):
        KVLayout(layers=0)
    with pytest.raises(KitError, match="conv_kernel"):
        MambaLayout(conv_kernel=1)
    assert KVLayout().slot_bytes == 2 * 2 * 2 * 8 * 2


@pytest.mark.parametrize("device", DEVICES)
def test_mamba_states_carry_their_depth_tag_through_copies(device):
    mem = MambaMemory(4, 3, MambaLayout(), device)
    mem.write_states(D, [0, 1], [21, 22])
    h = mem.start_copy(D, H, [(0, 2), (1, 0)])
    assert mem.read_states(H, [2, 0]) == [POISON, POISON]
    mem.finish_copy(h, True)
    assert mem.read_states(H, [0, 1, 2]) == [22, None, 21]
    conv, _ssm = mem.pools[D].tensors
    conv[1] = conv[0]  # the conv state restored from another depth, the SSM state not
    assert mem.read_states(D, [1]) == [TORN]


def test_device_names_are_checked():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(KitError, match="expected auto, cpu or cuda"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(KitError, match="no CUDA device"):
            resolve_device("cuda")


# ------------------------------------------------------------------ defects seen on tensors
def _cache_caught(cls, device: str, oracle: str) -> list[Violation]:
    """What the scenarios, then a short fuzz, show of ``cls`` with the memory oracles alone;
    stops at the first violation ``oracle`` reports."""
    factory = partial(ReferenceCacheAdapter, cache_cls=cls)
    memory = tensor_memory(KVLayout(), device)
    found: list[Violation] = []
    for sc in SCENARIOS:
        try:
            play(factory, sc.trace(EngineConfig(page_size=2)), memory=memory,
                 oracles=MEMORY_ORACLES, determinism=False)
        except Violation as v:
            found.append(v)
            if v.oracle == oracle:
                return found
        except KitError:  # the engine left this scenario's script; the next may show it
            continue
    for config, seed_value in ((EngineConfig(device_pages=8, host_pages=6), 0),
                               (EngineConfig(), 1), (EngineConfig(device_pages=8), 2)):
        try:
            run_fuzz(factory, config, TraceHolder(), Budget(examples=150), 30, seed_value,
                     memory, MEMORY_ORACLES)
        except Violation as v:
            found.append(v)
            if v.oracle == oracle:
                return found
    return found


# planted defect -> (the memory oracle that must see it, behaviour it reports)
ON_TENSORS = {
    "EvictsPinned": ("pinned-content", "PIN-2"),  # reuse while pinned
    "CopiesToWrongPages": ("content", "TREE-2"),  # copy to the wrong destination
    "SharedNamespaces": ("content", "NS-1"),  # cross-namespace hit
    "HashWithoutNamespace": ("page-hashes", "EVENT-4"),  # a hash not of the page's KV
    "LoadbackVisibleEarly": ("page-hashes", "TREE-2"),  # pages in the tree before their copy
}


@pytest.mark.behaviours("PIN-2", "TREE-2", "NS-1", "EVENT-4")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(ON_TENSORS))
def test_cache_defects_are_caught_on_the_tensors(name, device):
    oracle, behaviour = ON_TENSORS[name]
    found = _cache_caught(PLANTED[name], device, oracle)
    assert found and found[-1].oracle == oracle, f"{name}: {oracle} never saw it: {found}"
    assert behaviour in found[-1].behaviours, found[-1]


SCHED_ON_TENSORS = {
    "ReusesPinnedPage": "TREE-2",  # a running request's page handed to another: reuse while pinned
    "LoadbackAfterForward": "TREE-2",  # the forward reads pages whose loadback comes later
    "RetractsIntoBaseModel": "NS-1",  # a retracted adapter's KV served to the base model
    "ComputesInBaseModel": "NS-3",  # later chunks computed under the base model
    "ContinuesInBaseModel": "NS-1",  # mid-flight publishes into the base model's tree
    "PublishesBeforeForward": "PLAN-12",  # reuses pages its own forward is still computing
}


@pytest.mark.behaviours("TREE-2", "NS-1", "NS-3", "PLAN-5", "PLAN-12")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(SCHED_ON_TENSORS))
def test_scheduler_defects_are_caught_on_the_tensors(name, device):
    factory = partial(ReferenceSchedulerAdapter, scheduler_cls=PLANTED_SCHED[name])
    memory = tensor_memory(KVLayout(), device)
    found = []
    for sc in SCHED_SCENARIOS:
        try:
            play_sched(factory, sc.trace, determinism=False, memory=memory, memory_only=True)
        except Violation as v:
            found.append(v)
    assert found, f"{name}: no workload shows it in the memory on {device}"
    assert any(v.oracle == "content" and SCHED_ON_TENSORS[name] in v.behaviours
               for v in found), found


@pytest.mark.parametrize("device", DEVICES)
def test_clean_reference_passes_every_scenario_on_the_tensors(device):
    memory = tensor_memory(KVLayout(dtype=torch.bfloat16), device)
    factory = partial(ReferenceCacheAdapter)
    for sc in SCENARIOS:
        play(factory, sc.trace(EngineConfig(page_size=2)), memory=memory)
    for sc in SCHED_SCENARIOS:
        play_sched(ReferenceSchedulerAdapter, sc.trace, memory=memory)


# ------------------------------------------------------------------ the command
def test_kvconf_gpu_writes_the_run_report_format(tmp_path: Path):
    report = tmp_path / "gpu.json"
    res = CliRunner().invoke(app, [
        "gpu", "--device", "cpu", "--engine", "reference", "--profile", "ci", "--quiet",
        "--case", "pinned-never-evicted", "--case", "sched-retract-and-recover",
        "--case", "fuzz-cache-tight", "--budget", "10", "--report", str(report),
    ])
    assert res.exit_code == 0, res.output
    data = json.loads(report.read_text())
    assert data["format"] == "kvconf-report/5"
    assert [r["status"] for r in data["results"]] == ["PASS"] * 3
    mem = data["run_info"]["memory"]
    assert mem["backend"] == "torch" and mem["device"] == "cpu" and mem["dtype"] == "float16"


def test_kvconf_gpu_rejects_bad_options(tmp_path: Path):
    runner = CliRunner()
    res = runner.invoke(app, ["gpu", "--device", "tpu", "--report", str(tmp_path / "r.json")])
    assert res.exit_code == 2 and "--device tpu" in res.output
    res = runner.invoke(app, ["gpu", "--dtype", "int3", "--report", str(tmp_path / "r.json")])
    assert res.exit_code == 2 and "--dtype int3" in res.output
    res = runner.invoke(app, ["gpu", "--head-dim", "1", "--heads", "1", "--layers", "1",
                              "--report", str(tmp_path / "r.json")])
    assert res.exit_code == 2 and "multiple of 8" in res.output


@pytest.mark.behaviours("HOST-7")
def test_host_pools_are_pinned_for_a_gpu_and_pageable_ones_are_caught():
    """D162-7: on CUDA the harness pins its host KV and Mamba pools; a pageable host pool
    meant for copies with a GPU is what the pinned-host oracle reports."""
    from kvconf.conformance.oracles import Violation
    from kvconf.conformance.oracles.pinned import PinnedHostOracle
    from kvconf.gpu_harness.mamba import MambaMemory
    from kvconf.gpu_harness.memory import TensorMemory, check_pinned

    for mem in (TensorMemory(2, 4, 4), MambaMemory(2, 2)):
        check_pinned(mem)  # a CPU device: nothing to pin
        host = mem.pools[Tier.HOST].tensors
        with pytest.raises(Violation) as e:  # the same pageable pool beside a GPU
            PinnedHostOracle().check(type(mem).__name__, host, "cuda")
        assert e.value.oracle == "pinned-host" and e.value.behaviours == ("HOST-7",)
    if torch.cuda.is_available():
        for mem in (TensorMemory(2, 4, 4, device="cuda"), MambaMemory(2, 2, device="cuda")):
            check_pinned(mem)
    # A pool of no pages (no host tier) takes part in no copy: nothing to pin, and torch cannot
    # page-lock an empty tensor, so a GPU run without a host tier is no HOST-7 finding.
    empty = TensorMemory(2, 4, 0).pools[Tier.HOST].tensors
    assert all(t.numel() == 0 for t in empty)
    PinnedHostOracle().check("TensorMemory", empty, "cuda")
    with pytest.raises(Violation):  # a pageable pool with pages is still caught beside it
        PinnedHostOracle().check("TensorMemory", [*empty, torch.zeros(2, 4)], "cuda")


@pytest.mark.behaviours("MAMBA-1", "MAMBA-2", "MAMBA-6")
@pytest.mark.parametrize("name", ["MambaUnitsDropped", "SharedResumeSource"])
def test_mamba_defects_are_caught_on_the_tensors(name):
    """The driver takes its Mamba state memory from the KV memory, so with the GPU harness the
    states live in MambaMemory's torch pools and the defect is seen there."""
    from planted_mamba import PLANTED_MAMBA
    from test_mamba_kit import CATCHES

    from kvconf.conformance.adapters.reference_scheduler import ReferenceSchedulerAdapter
    from kvconf.conformance.oracles import Violation
    from kvconf.conformance.scheduler.generator import play_sched
    from kvconf.conformance.scheduler.scenarios import SCHED_SCENARIOS
    from kvconf.gpu_harness.mamba import MambaMemory
    from kvconf.gpu_harness.memory import tensor_memory

    workload, oracle, behaviour = CATCHES[name]
    sc = next(s for s in SCHED_SCENARIOS if s.name == workload)
    planted = partial(ReferenceSchedulerAdapter, scheduler_cls=PLANTED_MAMBA[name])
    with pytest.raises(Violation) as e:
        play_sched(planted, sc.trace, memory=tensor_memory(), memory_only=True)
    assert e.value.oracle == oracle and behaviour in e.value.behaviours, e.value
    driver = play_sched(ReferenceSchedulerAdapter, sc.trace, memory=tensor_memory())
    assert isinstance(driver.mstates, MambaMemory)
