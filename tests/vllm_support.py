"""What the vLLM tests share: whether vLLM is installed, the skip mark for tests that need it,
the legal variants by name and the scheduler scenarios' traces by name."""

import importlib.util

import pytest

from kvconf.conformance.scheduler.scenarios import SCHED_SCENARIOS
from kvconf.conformance.scheduler.trace import SchedTrace
from kvconf.conformance.variants import all_variants

HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="vllm is not installed "
                                "(.ci/install-peers.sh)")
VARIANTS = {v.name: v for v in all_variants()}


def scenario(name: str) -> SchedTrace:
    return next(sc.trace for sc in SCHED_SCENARIOS if sc.name == name)
