"""``kvconf gpu``: the conformance suite with the runtime's KV memory in torch pools."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.reporting.report import CaseResult, Report
from kvconf.conformance.running.profiles import Budget, Profile
from kvconf.gpu_harness.device import describe, resolve_device
from kvconf.gpu_harness.layout import KVLayout
from kvconf.gpu_harness.memory import tensor_memory


def run_gpu(
    engine: str,
    config: EngineConfig,
    *,
    device: str = "auto",
    layout: KVLayout | None = None,
    memory_only: bool = False,
    seed_value: int = 0,
    profile: Profile,
    budget: Budget,
    report_path: Path | None,
    cases: list | None = None,
    on_start: Callable | None = None,
    on_result: Callable[[CaseResult], None] | None = None,
    **run: object,
) -> Report:
    """Run the kit's cases with every KV page a slice of a torch pool on ``device``; ``run``
    passes the worker options (jobs, shard, call_timeout, database) on to ``run_suite``."""
    from kvconf.conformance.running.runner import run_suite

    dev = resolve_device(device)
    layout = layout or KVLayout()
    info = {"backend": "torch", "torch": torch.__version__, "device": describe(dev),
            "host_pinned": dev.type == "cuda", **layout.describe()}
    return run_suite(
        engine, config, seed_value=seed_value, profile=profile, budget=budget,
        report_path=report_path, cases=cases, on_start=on_start, on_result=on_result,
        memory=tensor_memory(layout, dev), memory_only=memory_only, memory_info=info,
        memory_spec=("kvconf.gpu_harness.memory:tensor_memory", {"layout": layout, "device": str(dev)}),
        **run,
    )
