"""All oracles, each citing the behaviours it checks (see ``kvconf spec audit``)."""

from conformance.oracles.base import Ctx, Oracle, Violation
from conformance.oracles.content import ContentOracle
from conformance.oracles.determinism import DeterminismOracle
from conformance.oracles.events import EventOracle
from conformance.oracles.eviction import EvictionOracle, PageEvictionOracle
from conformance.oracles.faults import FaultOracle
from conformance.oracles.l3 import L3Oracle
from conformance.oracles.mamba import MambaContentOracle, MambaOwnershipOracle
from conformance.oracles.matching import MatchOracle
from conformance.oracles.memory import PageHashOracle, PinnedContentOracle
from conformance.oracles.ownership import OwnershipOracle
from conformance.oracles.pinned import PinnedHostOracle
from conformance.oracles.pinning import PinOracle
from conformance.oracles.process import ProcessOracle
from conformance.oracles.scheduler import (
    LivenessOracle,
    PlanOracle,
    RequestStateOracle,
    ReuseOracle,
    RuntimeEventOracle,
    SchedContentOracle,
    SchedEventOracle,
)
from conformance.oracles.unload import UnloadOracle
from conformance.oracles.window import WindowConfigOracle

# Oracles the driver runs on every step, in this order.
STEP_ORACLES: tuple[type[Oracle], ...] = (
    ContentOracle,
    MatchOracle,
    PinOracle,
    OwnershipOracle,
    EvictionOracle,
    PageEvictionOracle,
    EventOracle,
    FaultOracle,
    UnloadOracle,
    PinnedContentOracle,
    PageHashOracle,
)
# The oracles that judge the KV memory alone: what ``kvconf gpu --memory-only`` runs, to show a
# defect is seen on the tensors themselves.
MEMORY_ORACLES: tuple[type[Oracle], ...] = (ContentOracle, PinnedContentOracle, PageHashOracle)
# Oracles of the scheduler-level driver (conformance.sched_driver).
SCHED_ORACLES: tuple[type[Oracle], ...] = (
    PlanOracle, RequestStateOracle, ReuseOracle, RuntimeEventOracle, LivenessOracle,
    SchedContentOracle, SchedEventOracle, L3Oracle, MambaContentOracle, MambaOwnershipOracle,
)
ALL_ORACLES: tuple[type[Oracle], ...] = (*STEP_ORACLES, *SCHED_ORACLES, DeterminismOracle,
                                         WindowConfigOracle, PinnedHostOracle, ProcessOracle)

__all__ = ["ALL_ORACLES", "MEMORY_ORACLES", "STEP_ORACLES", "Ctx", "Oracle", "Violation"]
