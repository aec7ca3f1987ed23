"""The bundled reference engine at the scheduler level (plans and events)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kvconf.conformance import __version__
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.errors import EngineRejected
from kvconf.conformance.scheduler.trace import SchedConfig
from kvconf.reference.errors import CacheError
from kvconf.reference.kv_events import block_hash
from kvconf.reference.plan import Plan, RequestSpec, RuntimeEvent
from kvconf.reference.scheduler import Scheduler, SchedulerConfig, SchedulerError, SchedulerSnapshot


class ReferenceSchedulerAdapter:
    name = "reference"
    version = __version__
    features = frozenset({
        Feature.SNAPSHOT, Feature.HOST_TIER, Feature.NAMESPACES, Feature.KV_EVENTS,
        Feature.SLIDING_WINDOW, Feature.L3_STORE,
        Feature.ADAPTER_CAP, Feature.MODEL_CONFIG, Feature.MAMBA, Feature.COUNTERS,
    })

    def __init__(self, config: SchedConfig, scheduler_cls: type[Scheduler] = Scheduler) -> None:
        self.page_size = config.page_size
        self.sched = scheduler_cls(SchedulerConfig(**config.model_dump()))
        self.sched_cls = scheduler_cls
        self._hashed: object = None  # the cache whose hash function ``_hash`` is
        self._hash = block_hash

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except SchedulerError as e:
            raise EngineRejected(e.code, e.message) from None
        except CacheError as e:
            raise EngineRejected(e.code, e.message) from None

    # Every call maps the reference's errors in ``_call``: a finding's signature names the
    # frame that raised EngineRejected.
    def submit(self, specs: Sequence[RequestSpec]) -> None:
        self._call(self.sched.submit, list(specs))

    def next_plan(self) -> Plan:
        return self._call(self.sched.next_plan)

    def advance(self, events: Sequence[RuntimeEvent]) -> None:
        self._call(self.sched.advance, list(events))

    def model_window(self, model_config: Mapping[str, Any]) -> int:
        """The sliding window this scheduler reads from a model config (WIN-1)."""
        return self._call(self.sched_cls.model_window, model_config)

    def drain_events(self):
        return self.sched.drain_events()

    def block_hash(self, parent: int | None, namespace: int, tokens: Sequence[int]) -> int:
        """The hash its events carry (EVENT-4): the reference's, or its cache's own where the
        cache class names one."""
        cache = self.sched.cache
        if cache is not self._hashed:  # the function read once per cache object
            self._hashed, self._hash = cache, getattr(cache, "block_hash", block_hash)
        return self._hash(parent, namespace, tokens)

    def transitions(self) -> list[tuple[str, str]]:
        """(state, event) pairs taken so far: transition coverage for the report."""
        return [(a.value, e.value) for _rid, a, e, _b in self.sched.transitions]

    def snapshot(self) -> SchedulerSnapshot:
        return self.sched.snapshot()

    def counters(self) -> dict[str, int]:
        """The reference's own counts (POOL-6): its cache's pages and free request slots."""
        return self.sched.counters()
