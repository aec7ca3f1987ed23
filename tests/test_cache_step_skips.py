"""What the cache driver and its oracles leave out of a step is what could not fail there.

An oracle that declares ``after_acks_only`` is not called after a step that acknowledged no
copy: on seeded walks against the reference and every cache mutant, each such call made anyway
(``Oracle.incremental`` off calls every oracle every step) raises nothing and changes nothing
of the oracle's own records. The match oracle's one walk for both tiers' TREE-1 lengths gives
``TreeView.longest`` of each tier on every query the walks make. The content tags a walk asks
for again are remembered, and are the tags computed afresh.
"""

from __future__ import annotations

import contextlib
import copy
import random
from functools import partial

import pytest

from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.cache.generator import TraceHolder, play_walk
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.mutants.cache import PLANTED
from kvconf.conformance.oracles import STEP_ORACLES, Oracle, Violation
from kvconf.conformance.oracles import matching as matching_module
from kvconf.conformance.oracles.tree_view import TreeView
from kvconf.conformance.runtime import content as content_module
from kvconf.reference.tiers import Tier

CONFIGS = (EngineConfig(), EngineConfig(device_pages=8, host_pages=6), EngineConfig(page_size=1))
QUIET = [o for o in STEP_ORACLES if o.after_acks_only]
FACTORIES = [ReferenceCacheAdapter,
             *(partial(ReferenceCacheAdapter, cache_cls=PLANTED[n]) for n in sorted(PLANTED))]


def test_some_oracles_are_left_out_of_steps_without_an_ack() -> None:
    assert QUIET and len(QUIET) < len(STEP_ORACLES)


@pytest.mark.parametrize("factory", FACTORIES, ids=lambda f: getattr(
    f, "keywords", {}).get("cache_cls", f).__name__)
def test_a_quiet_oracle_does_nothing_after_a_step_without_an_ack(factory, monkeypatch) -> None:
    calls = {"quiet": 0, "acked": 0}
    for cls in QUIET:
        real = cls.after_step

        def watched(self, ctx, real=real) -> None:
            if ctx.acks:
                calls["acked"] += 1
                return real(self, ctx)
            before = copy.deepcopy(vars(self))
            real(self, ctx)  # a Violation here fails the test: it was a check left out
            assert vars(self) == before, (type(self).__name__, ctx.index, ctx.op)
            calls["quiet"] += 1
            return None

        monkeypatch.setattr(cls, "after_step", watched)
    monkeypatch.setattr(Oracle, "incremental", False)  # every oracle called every step
    for config in CONFIGS:
        for seed in range(4):
            with contextlib.suppress(Violation):  # a mutant's finding ends its walk
                play_walk(factory, config, TraceHolder(), seed, 40, determinism=False)
    assert calls["quiet"] > 100 and calls["acked"] > 0


def test_one_walk_gives_each_tiers_longest_match(monkeypatch) -> None:
    seen = {"queries": 0, "host": 0}
    real = matching_module._longest

    def both(view: TreeView, ns: int, tokens) -> tuple[int, int]:
        got = real(view, ns, tokens)
        want = (view.longest(ns, tokens, Tier.DEVICE), view.longest(ns, tokens, Tier.HOST))
        assert got == want, (ns, tokens, got, want)
        seen["queries"] += 1
        seen["host"] += got[1] > 0
        return got

    monkeypatch.setattr(matching_module, "_longest", both)
    for factory in FACTORIES[:4]:
        for config in CONFIGS:
            for seed in range(6):
                with contextlib.suppress(Violation):
                    play_walk(factory, config, TraceHolder(), seed, 40, determinism=False)
    assert seen["queries"] > 200 and seen["host"] > 0


def test_remembered_page_tags_are_the_tags_computed_afresh(monkeypatch) -> None:
    monkeypatch.setattr(content_module, "_MEMO", {})
    monkeypatch.setattr(content_module, "_MEMO_SIZE", 50)  # emptied many times over
    rng = random.Random(3)
    for _ in range(2000):
        p = rng.choice((1, 2, 4))
        tokens = [rng.randrange(3) for _ in range(rng.randrange(13))]
        ns = rng.randrange(3)
        got = content_module.page_tags(ns, tokens, p)
        assert got == content_module._page_tags(ns, tokens, p), (ns, tokens, p)
        got.append(0)  # the caller's own list: what is remembered stays as it was
        assert content_module.page_tags(ns, tokens, p) == content_module._page_tags(ns, tokens, p)
    assert len(content_module._MEMO) <= 50
