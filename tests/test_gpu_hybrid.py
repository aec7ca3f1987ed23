"""The hybrid level on the GPU harness's torch pools: every page and state slot the driver writes
lands in a tensor and every check reads it back from there, the outcome is the dict memory's, and
the planted defects that serve a wrong page or a stale state die on the tensors too.

Runs on CPU everywhere and on CUDA too where a GPU is present (``DEVICES``).
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from typer.testing import CliRunner

from kvconf.conformance.adapters.reference_hybrid import ReferenceHybridAdapter
from kvconf.conformance.cli import app
from kvconf.conformance.engine.hybrid import HybridConfig
from kvconf.conformance.hybrid.cases import fuzz_config
from kvconf.conformance.hybrid.driver import HybridDriver, play_hybrid
from kvconf.conformance.hybrid.generator import WalkStats, search
from kvconf.conformance.hybrid.memory import HybridMemory, dict_store, store_of
from kvconf.conformance.hybrid.scenarios import HYBRID_SCENARIOS
from kvconf.conformance.hybrid.trace import AdmitStep, ExtendStep
from kvconf.conformance.mutants.hybrid import PLANTED_HYBRID
from kvconf.conformance.runtime.memory import TORN
from kvconf.conformance.violation import Violation
from kvconf.gpu_harness.hybrid import TensorHybridStore, tensor_hybrid
from kvconf.gpu_harness.memory import tensor_memory
from kvconf.reference.hybrid_types import Group

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


class SwapsTablePages(ReferenceHybridAdapter):
    """Serves a wrong page: an admission's full-attention table has its first two pages
    swapped, every count and length still right (only the content shows it)."""

    def admit(self, rid, namespace, tokens):
        adm = super().admit(rid, namespace, tokens)
        full = adm.tables[0]
        if len(full) < 2:
            return adm
        return replace(adm, tables=((full[1], full[0], *full[2:]), *adm.tables[1:]))


class ResumesFromStaleState(ReferenceHybridAdapter):
    """Serves a stale state: a chunk names as its source the slot the previous chunk of any
    request left its state in (an older depth, or another prefix's), whenever they differ."""

    last: int | None = None

    def extend(self, rid, upto):
        ext = super().extend(rid, upto)
        if ext is None or not ext.room:
            return ext
        last, self.last = self.last, ext.state_slot
        if ext.state_source is not None and last is not None and last != ext.state_source:
            return replace(ext, state_source=last)
        return ext


WRONG_CONTENT = {"SwapsTablePages": (SwapsTablePages, "TREE-2"),
                 "ResumesFromStaleState": (ResumesFromStaleState, "MAMBA-1")}


def _factory(cls=None):
    if cls is None:
        return ReferenceHybridAdapter
    return lambda config: ReferenceHybridAdapter(config, cache_cls=cls)


def _first(factory, store) -> Violation | None:
    """The first violation the scenarios or 20 fuzz walks per pool find, at page sizes 1, 2."""
    for p in (1, 2):
        for sc in HYBRID_SCENARIOS:
            try:
                play_hybrid(factory, sc.trace(p), store=store)
            except Violation as v:
                return v
        for pages in (40, 14):
            try:
                search(factory, fuzz_config(p, pages), lambda k: k, 30, 20, None, WalkStats(),
                       store)
            except Violation as v:
                return v
    return None


def test_a_gpu_run_plays_the_hybrid_level_on_torch_pools():
    assert store_of(tensor_memory()) is not dict_store
    engine = ReferenceHybridAdapter(HybridConfig(page_size=2, pages=8, state_slots=4))
    driver = HybridDriver(engine, store=store_of(tensor_memory()))
    store = driver.mem.store
    assert isinstance(store, TensorHybridStore)
    driver.step(0, AdmitStep(rid="r1", tokens=[1, 2, 3, 4, 5]))
    driver.step(1, ExtendStep(rid="r1", upto=4))
    kv, states = store.pools["kv"], store.pools["state"]
    # Both attention tables' pages are rows of one KV tensor, the state a row of the Mamba pool.
    assert len(kv.row) == 4 and len(states.row) >= 1  # the working slot (and checkpoints)
    want = driver.mem.tags(0, [1, 2, 3, 4, 5])
    table = driver.live["r1"].tables[0]
    words = kv.pool.views[0]
    for pos in range(4):
        row = kv.row[table[pos // 2]]
        assert set(words[row, pos % 2].tolist()) == {_word(want[pos])}
    slot = states.row[driver.live["r1"].state]
    state = driver.mem.state_tag(0, [1, 2, 3, 4, 5], 4)
    for view in states.pool.views:  # the conv and the SSM state
        assert set(view[slot].flatten().tolist()) == {_word(state)}


def _word(tag: int) -> int:
    return tag - (1 << 64) if tag >= 1 << 63 else tag


@pytest.mark.parametrize("device", DEVICES)
def test_a_state_written_in_part_reads_torn(device):
    """A state whose conv half is stale while its SSM half is new reads back TORN: only the
    tensors have two halves to disagree."""
    store = tensor_hybrid(device=device)(2, (Group("full", 0, "kv"), Group("mamba", 0, "state")),
                                         {"kv": 4, "state": 2})
    mem = HybridMemory(2, store)
    mem.write_state("state", 7, 0, [1, 2, 3, 4], 2)
    assert mem.state("state", 7) == mem.state_tag(0, [1, 2, 3, 4], 2)
    rows = store.pools["state"]
    _conv, ssm = rows.pool.views
    ssm[rows.row[7]] = 12345
    assert mem.state("state", 7) == TORN
    assert mem.describe(TORN) == "a torn value (its words disagree)"


@pytest.mark.parametrize("device", DEVICES)
def test_ids_past_the_declared_pool_get_rows_of_their_own(device):
    """The harness never judges how an engine numbers its pages: an id outside the declared size
    grows the pool, and every id keeps its own content."""
    store = tensor_hybrid(device=device)(1, (Group("full", 0, "kv"),), {"kv": 2})
    mem = HybridMemory(1, store)
    mem.write_kv("kv", [1000, 5, -3], [0, 0, 0], [11, 12, 13])
    assert mem.kv_tags("kv", [5, 1000, -3, 7], [0, 0, 0, 0]) == [12, 11, 13, None]


@pytest.mark.behaviours("WIN-6", "WIN-3", "WIN-4", "MAMBA-1", "MAMBA-3", "MAMBA-8", "POOL-2",
                        "POOL-5", "TREE-1", "TREE-2")
@pytest.mark.parametrize("device", DEVICES)
def test_reference_passes_on_torch_pools(device):
    assert _first(_factory(), tensor_hybrid(device=device)) is None


@pytest.mark.parametrize("name", sorted(PLANTED_HYBRID))
def test_each_hybrid_mutant_dies_on_torch_pools_as_on_the_dict(name):
    """The same finding, rule and message, on either memory: what the tensors hold is what the
    dict holds."""
    on_dict = _first(_factory(PLANTED_HYBRID[name]), dict_store)
    on_torch = _first(_factory(PLANTED_HYBRID[name]), tensor_hybrid())
    assert on_dict is not None and on_torch is not None
    assert (on_torch.behaviours, on_torch.message, on_torch.step) == (
        on_dict.behaviours, on_dict.message, on_dict.step)


@pytest.mark.behaviours("TREE-2", "MAMBA-1")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(WRONG_CONTENT))
def test_a_wrong_page_or_a_stale_state_is_read_back_from_the_tensors(name, device):
    """Defects visible only in what a page or a slot holds die by what the tensors hold."""
    cls, rule = WRONG_CONTENT[name]
    got = _first(cls, tensor_hybrid(device=device))
    assert got is not None and got.behaviours == (rule,)
    assert " holds " in got.message and "not the" in got.message
    assert got.message == _first(cls, dict_store).message


def test_kvconf_gpu_plays_the_hybrid_cases(tmp_path):
    out = tmp_path / "gpu.json"
    res = CliRunner().invoke(app, ["gpu", "--device", "cpu", "--engine", "reference",
                                   "--profile", "ci", "--quiet", "--jobs", "0",
                                   "--case", "hybrid-shared-prefix", "--case", "fuzz-hybrid",
                                   "--report", str(out)])
    assert res.exit_code == 0, res.output
    results = {r["case"]: r for r in json.loads(out.read_text())["results"]}
    assert {r["status"] for r in results.values()} == {"PASS"}
    assert all("shadow memory" not in r["message"] for r in results.values())
