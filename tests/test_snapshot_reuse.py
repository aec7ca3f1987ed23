"""The reference's snapshot reuses what did not change (``PrefixCache.snapshot``): every
snapshot it hands out must equal, field by field, the one built from nothing at the same
moment, on many seeded walks of every shape the walk draws (splits, evictions, unloads)."""

from __future__ import annotations

import pytest

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.cache.generator import TraceHolder, play_walk
from kvconf.conformance.engine.config import EngineConfig
from kvconf.reference import PrefixCache
from kvconf.reference.snapshot import CacheSnapshot

CONFIGS = (EngineConfig(), EngineConfig(device_pages=8, host_pages=6), EngineConfig(page_size=1))


def scratch(cache: PrefixCache) -> CacheSnapshot:
    """The snapshot of ``cache`` built from nothing: no view, order or part of an earlier one."""
    fresh = PrefixCache.__new__(PrefixCache)
    vars(fresh).update(vars(cache))
    fresh._views, fresh._last, fresh._order, fresh._held = {}, None, [], None
    fresh._lock_made, fresh._transfer_made = {}, {}
    return fresh.snapshot()


class Checked(PrefixCache):
    """A reference whose every snapshot is compared with the one built from nothing."""

    taken = 0

    def snapshot(self) -> CacheSnapshot:
        snap = super().snapshot()
        assert snap == scratch(self)
        Checked.taken += 1
        return snap


@pytest.mark.parametrize("config", CONFIGS, ids=("default", "tight", "page1"))
def test_every_snapshot_equals_the_one_built_from_nothing(config):
    holder = TraceHolder()
    before = Checked.taken
    for seed in range(30):
        play_walk(lambda c: ReferenceCacheAdapter(c, cache_cls=Checked), config, holder, seed, 40)
    assert Checked.taken - before > 30 * 40  # about a snapshot a step, and the drain's
