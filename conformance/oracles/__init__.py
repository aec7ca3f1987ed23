"""All oracles, each citing the behaviours it checks (see ``kvconf spec audit``)."""

from kvconf.conformance.oracles.accounting import CounterOracle, RestOracle, TransferOracle
from kvconf.conformance.oracles.base import Ctx, Oracle, Violation
from kvconf.conformance.oracles.block_pool import BlockPoolOracle
from kvconf.conformance.oracles.content import ContentOracle
from kvconf.conformance.oracles.determinism import DeterminismOracle
from kvconf.conformance.oracles.events import EventOracle
from kvconf.conformance.oracles.eviction import EvictionOracle, PageEvictionOracle
from kvconf.conformance.oracles.faults import FaultOracle
from kvconf.conformance.oracles.hit_rate import HitRateOracle
from kvconf.conformance.oracles.hybrid import HybridOracle
from kvconf.conformance.oracles.l3 import L3Oracle
from kvconf.conformance.oracles.mamba import MambaContentOracle, MambaOwnershipOracle
from kvconf.conformance.oracles.matching import MatchOracle
from kvconf.conformance.oracles.memory import PageHashOracle, PinnedContentOracle
from kvconf.conformance.oracles.ownership import OwnershipOracle
from kvconf.conformance.oracles.pinned import PinnedHostOracle
from kvconf.conformance.oracles.pinning import PinOracle
from kvconf.conformance.oracles.process import ProcessOracle, WorkerMemoryOracle
from kvconf.conformance.oracles.reset import ResetOracle
from kvconf.conformance.oracles.retention import MambaRetentionOracle, RetentionOracle
from kvconf.conformance.oracles.scheduler import (
    HybridReuseOracle,
    LivenessOracle,
    PlanOracle,
    RequestStateOracle,
    ReuseOracle,
    RuntimeEventOracle,
    SchedContentOracle,
    SchedEventOracle,
)
from kvconf.conformance.oracles.unload import UnloadOracle
from kvconf.conformance.oracles.window import WindowConfigOracle

# Oracles the driver runs on every step, in this order.
STEP_ORACLES: tuple[type[Oracle], ...] = (
    ContentOracle,
    MatchOracle,
    RetentionOracle,
    PinOracle,
    OwnershipOracle,
    EvictionOracle,
    PageEvictionOracle,
    ResetOracle,  # before the events: a reset's own rule names what its events lack
    EventOracle,
    BlockPoolOracle,
    FaultOracle,
    UnloadOracle,
    PinnedContentOracle,
    PageHashOracle,
    TransferOracle,
    CounterOracle,
    HitRateOracle,
    RestOracle,
)
# The oracles that judge the KV memory alone: what ``kvconf gpu --memory-only`` runs, to show a
# defect is seen on the tensors themselves.
MEMORY_ORACLES: tuple[type[Oracle], ...] = (ContentOracle, PinnedContentOracle, PageHashOracle)
# Oracles of the scheduler-level driver (conformance.sched_driver).
SCHED_ORACLES: tuple[type[Oracle], ...] = (
    PlanOracle, RequestStateOracle, ReuseOracle, HybridReuseOracle, RuntimeEventOracle,
    LivenessOracle, SchedContentOracle, SchedEventOracle, L3Oracle, MambaContentOracle,
    MambaOwnershipOracle, MambaRetentionOracle, TransferOracle, CounterOracle, RestOracle,
)
ALL_ORACLES: tuple[type[Oracle], ...] = tuple(dict.fromkeys((
    *STEP_ORACLES, *SCHED_ORACLES, DeterminismOracle, WindowConfigOracle, PinnedHostOracle,
    ProcessOracle, WorkerMemoryOracle, HybridOracle)))

__all__ = ["ALL_ORACLES", "MEMORY_ORACLES", "STEP_ORACLES", "Ctx", "Oracle", "Violation"]
