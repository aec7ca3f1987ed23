"""Hand-written cache-level cases: each a short trace aimed at named behaviours.

The fuzz cases find what nobody thought of; these pin down the rules a reader of the spec checks
first, each with explicit expectations, so a failure points straight at one rule.

A match whose extent matters (what a lock pins, which prefix an access refreshes) ends its query
with a page the tree does not hold (token 42): the match is then the same for an engine that
never covers a query's last token (TREE-7) as for one that does.

Each scenario declares, as ``requires``, the least pool its steps are written for: the most
pages it holds at once on each tier (a token is a page of the run's page size, so the count is
the same at every page size). Under a smaller config its expected results would judge the pool,
not its rule, so the runner reports it NOT_APPLICABLE before it runs (``tests/test_not_applicable``
checks that each minimum is the least at which the reference passes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvconf.conformance.engine.config import EngineConfig, Requires
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.trace import (
    AckStep,
    EvictStep,
    Expect,
    ExtendStep,
    InsertStep,
    LoadbackStep,
    MatchStep,
    ResetStep,
    Step,
    TickStep,
    Trace,
    UnloadStep,
    UnlockStep,
    WritebackStep,
)
from kvconf.reference.tiers import Tier

D, H = Tier.DEVICE, Tier.HOST


@dataclass(frozen=True)
class Scenario:
    name: str
    behaviours: tuple[str, ...]
    needs: frozenset[Feature]
    steps: tuple[Step, ...]
    doc: str
    clock: str = "per_step"
    requires: Requires = field(default_factory=Requires)  # the least config its steps need
    # Features that make what the scenario checks moot (NOT_SUPPORTED for an engine declaring one)
    excluded_by: frozenset[Feature] = frozenset()
    # The steps widened to each page size asked for (``trace``): the kill matrix plays every
    # scenario once per mutant. Steps are values nobody changes (a shrink copies what it cuts).
    scaled: dict[int, tuple[Step, ...]] = field(default_factory=dict, compare=False, repr=False)

    def trace(self, config: EngineConfig) -> Trace:
        """The scenario at page size ``config.page_size``: every token becomes a page of it."""
        p = config.page_size
        steps = self.scaled.get(p)
        if steps is None:
            steps = self.scaled[p] = tuple(_scale(s, p) for s in self.steps)
        return Trace(name=self.name, behaviours=list(self.behaviours), config=config,
                     steps=list(steps), clock=self.clock)


def _scale(step: Step, p: int) -> Step:
    """Scenarios are written at page size 1; widen every token into a page of ``p`` tokens.
    A copy with the widened fields replaced (no second validation of a valid step: the kill
    matrix widens every scenario it plays); a step with nothing to widen is itself."""
    update: dict = {}
    if "tokens" in type(step).model_fields:
        update["tokens"] = [t for t in step.tokens for _ in range(p)]
    exp = step.expect
    if exp is not None:
        lengths = {k: getattr(exp, k) * p for k in ("device_len", "host_len", "cached_len")
                   if getattr(exp, k) is not None}
        if lengths:
            update["expect"] = exp.model_copy(update=lengths)
    return step.model_copy(update=update) if update else step


def E(**kw) -> Expect:
    return Expect(**kw)


A = [1, 2, 3, 4, 5, 6]
B = [7, 8, 9]

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "match-longest-whole-pages",
        ("TREE-1", "TREE-3", "TREE-5"),
        frozenset(),
        (
            InsertStep(tokens=A),
            MatchStep(tokens=A[:4] + [42], expect=E(device_len=4, host_len=0)),
            MatchStep(tokens=[42], expect=E(device_len=0)),
            MatchStep(tokens=A + [7, 7], expect=E(device_len=6)),
        ),
        "A match returns the longest cached whole-page prefix, never more than the query.",
        requires=Requires(device_pages=6),  # A's 6 pages
    ),
    Scenario(
        "cached-until-evicted",
        ("EVICT-7", "TREE-5"),
        frozenset(),
        (
            InsertStep(tokens=A),
            MatchStep(tokens=A + [42], lock=D, expect=E(device_len=6)),
            TickStep(),
            UnlockStep(step=1),
            MatchStep(tokens=A + [42], expect=E(device_len=6, behaviours=["EVICT-7"])),
            EvictStep(pages=100, expect=E(evicted=6)),
            MatchStep(tokens=A + [42], expect=E(device_len=0)),
        ),
        "A prefix stays cached, locked or not, until an eviction frees it: releasing its last "
        "lock drops nothing.",
        requires=Requires(device_pages=6),  # A's 6 pages
    ),
    Scenario(
        "split-keeps-pins",
        ("TREE-4", "TREE-6", "PIN-1", "PIN-2"),
        frozenset(),
        (
            InsertStep(tokens=A),
            MatchStep(tokens=A + [42], lock=D, expect=E(device_len=6)),
            MatchStep(tokens=A[:3] + [9, 9, 9], expect=E(device_len=3)),
            EvictStep(pages=100, expect=E(evicted=0, behaviours=["PIN-2", "TREE-4"])),
            MatchStep(tokens=A, expect=E(device_len=6, behaviours=["PIN-2"])),
            UnlockStep(step=1),
            EvictStep(pages=100, expect=E(evicted=6, behaviours=["PIN-1"])),
        ),
        "A split of a locked node keeps both halves pinned; nothing pinned is evicted.",
        requires=Requires(device_pages=6),  # A's 6 pages
    ),
    Scenario(
        "duplicate-insert-frees-caller-pages",
        ("TREE-5", "POOL-4"),
        frozenset(),
        (
            InsertStep(tokens=A, expect=E(cached_len=0)),
            InsertStep(tokens=A, expect=E(cached_len=6)),
            InsertStep(tokens=A[:3] + B, expect=E(cached_len=3)),
            ExtendStep(tokens=A + B, expect=E(device_len=6, cached_len=6)),
        ),
        "Pages the tree already holds are not taken twice; the caller's copies go back free.",
        requires=Requires(device_pages=12),  # A in the tree, and the caller's copy of A
    ),
    Scenario(
        "lru-victim-order",
        ("EVICT-1", "EVICT-2", "EVICT-3", "EVICT-4", "EVICT-6", "DET-1"),
        frozenset(),
        (
            InsertStep(tokens=[1, 2]),
            InsertStep(tokens=[3, 4]),
            InsertStep(tokens=[5, 6]),
            MatchStep(tokens=[1, 2, 42], expect=E(device_len=2)),
            EvictStep(pages=2, expect=E(evicted=2, behaviours=["EVICT-4", "EVICT-6"])),
            MatchStep(tokens=[3, 4], expect=E(device_len=0, behaviours=["EVICT-2"])),
            MatchStep(tokens=[1, 2], expect=E(device_len=2, behaviours=["EVICT-2"])),
            InsertStep(tokens=[1, 2, 7]),
            EvictStep(pages=2, expect=E(evicted=2, behaviours=["EVICT-4", "EVICT-6"])),
            MatchStep(tokens=[1, 2, 7],
                      expect=E(device_len=3, behaviours=["EVICT-1", "EVICT-2"])),
        ),
        "The least recently used unpinned leaf goes first; a parent waits for its children.",
        # [1, 2] and [5, 6] cached while the caller holds its 3 pages of [1, 2, 7]
        requires=Requires(device_pages=7),
    ),
    Scenario(
        "eviction-frees-whole-victims",
        ("EVICT-4", "EVICT-6"),
        frozenset(),
        (
            InsertStep(tokens=[1, 2, 3]),
            EvictStep(pages=1, expect=E(evicted=3)),
        ),
        "A victim gives up all its pages, so one eviction can free more than asked; an engine "
        "that evicts page by page frees exactly what is asked.",
        requires=Requires(device_pages=3),  # one 3-page victim
    ),
    Scenario(
        "equal-times-oldest-node-first",
        ("EVICT-3", "EVICT-4", "EVICT-6", "DET-1"),
        frozenset(),
        (
            TickStep(),
            InsertStep(tokens=[1, 2]),
            InsertStep(tokens=[3, 4]),
            InsertStep(tokens=[5, 6]),
            TickStep(),
            EvictStep(pages=2, expect=E(evicted=2, behaviours=["EVICT-4", "EVICT-6"])),
            MatchStep(tokens=[1, 2], expect=E(device_len=0, behaviours=["EVICT-3"])),
            TickStep(),
            MatchStep(tokens=[5, 6, 42], expect=E(device_len=2)),
            MatchStep(tokens=[3, 4, 42], expect=E(device_len=2)),
            TickStep(),
            EvictStep(pages=2, expect=E(evicted=2, behaviours=["EVICT-4", "EVICT-6"])),
            MatchStep(tokens=[3, 4], expect=E(device_len=0, behaviours=["EVICT-3"])),
            MatchStep(tokens=[5, 6], expect=E(device_len=2, behaviours=["EVICT-3"])),
        ),
        "Leaves used in one scheduling step are evicted oldest node first, whatever the order "
        "of use within the step (D248-1).",
        clock="explicit",
        requires=Requires(device_pages=6),  # three 2-page prompts
    ),
    Scenario(
        "pinned-never-evicted",
        ("PIN-1", "PIN-2", "EVICT-1", "EVICT-4"),
        frozenset(),
        (
            InsertStep(tokens=A),
            InsertStep(tokens=B),
            MatchStep(tokens=A + [42], lock=D),
            EvictStep(pages=100, expect=E(evicted=3, behaviours=["PIN-2", "EVICT-1"])),
            MatchStep(tokens=A, expect=E(device_len=6)),
            MatchStep(tokens=[], lock=D, expect=E(device_len=0)),
            MatchStep(tokens=[], lock=H, expect=E(host_len=0)),
            UnlockStep(step=5),
            UnlockStep(step=6),
            UnlockStep(step=2),
            EvictStep(pages=100, expect=E(evicted=6, behaviours=["PIN-1", "EVICT-4"])),
        ),
        "Locked paths survive eviction; a namespace root can be locked on both tiers.",
        requires=Requires(device_pages=9),  # A and B
    ),
    Scenario(
        "unbalanced-unlock-rejected",
        ("PIN-3", "FAULT-1"),
        frozenset(),
        (
            InsertStep(tokens=A),
            MatchStep(tokens=A, lock=D),
            UnlockStep(step=1, expect=E(rejected=False)),
            UnlockStep(step=1, expect=E(rejected=True)),
            EvictStep(pages=100, expect=E(evicted=6)),
        ),
        "A second unlock of one lock is refused and changes nothing; with no other lock on the "
        "node its count is zero, so an engine that unlocks by node must refuse it too.",
        requires=Requires(device_pages=6),  # A's 6 pages
    ),
    Scenario(
        "writeback-demote-loadback",
        ("HOST-1", "HOST-2", "HOST-3", "EVICT-5", "TREE-2"),
        frozenset({Feature.HOST_TIER}),
        (
            InsertStep(tokens=A),
            MatchStep(tokens=A + [42], lock=D),
            WritebackStep(step=1, ack="later", expect=E(started=True)),
            EvictStep(pages=100, expect=E(evicted=0)),
            AckStep(step=2),
            UnlockStep(step=1),
            EvictStep(pages=100, expect=E(evicted=6)),
            MatchStep(tokens=A + [42], lock=H, expect=E(device_len=0, host_len=6)),
            LoadbackStep(step=7, ack="later", expect=E(started=True)),
            # Served now, its pages must hold A's KV (TREE-2): they cannot before the copy lands,
            # unless every reader is ordered after the copy (HOST-11), judged when it lands.
            MatchStep(tokens=A, expect=E(host_len=6)),
            AckStep(step=8),
            MatchStep(tokens=A, expect=E(device_len=6, host_len=6)),
            UnlockStep(step=7),
        ),
        "Device pages go to host and come back; nothing is read before its copy lands.",
        requires=Requires(device_pages=6, host_pages=6),  # A on each tier
    ),
    Scenario(
        "writeback-keeps-host-parent",
        ("HOST-1", "HOST-2", "PIN-1"),
        frozenset({Feature.HOST_TIER}),
        (
            InsertStep(tokens=[1, 2]),
            InsertStep(tokens=[1, 2, 3, 4]),
            MatchStep(tokens=[1, 2, 42], lock=D),
            WritebackStep(step=2, expect=E(started=True)),
            UnlockStep(step=2),
            MatchStep(tokens=[1, 2, 3, 4, 42], lock=D, expect=E(device_len=4, host_len=2)),
            WritebackStep(step=5, ack="later", expect=E(started=True)),
            UnlockStep(step=5),
            EvictStep(tier=H, pages=100, expect=E(evicted=0)),
            AckStep(step=6),
            MatchStep(tokens=[1, 2, 3, 4], expect=E(device_len=4, host_len=4)),
        ),
        "A writeback in flight keeps the host copy of the prefix it hangs from (found by fuzzing).",
        requires=Requires(device_pages=4, host_pages=4),  # a 4-page prompt on each tier
    ),
    Scenario(
        "loadback-keeps-host-source",
        ("HOST-3", "PIN-2", "PIN-1"),
        frozenset({Feature.HOST_TIER}),
        (
            InsertStep(tokens=[1, 2, 3, 4]),
            MatchStep(tokens=[1, 2, 3, 4, 42], lock=D),
            WritebackStep(step=1, expect=E(started=True)),
            UnlockStep(step=1),
            EvictStep(tier=D, pages=100),
            MatchStep(tokens=[1, 2, 3, 4, 42], lock=H, expect=E(device_len=0, host_len=4)),
            LoadbackStep(step=5, ack="later", expect=E(started=True)),
            UnlockStep(step=5),
            EvictStep(tier=H, pages=100, expect=E(evicted=0)),
            AckStep(step=6),
            MatchStep(tokens=[1, 2, 3, 4], expect=E(device_len=4, host_len=4)),
        ),
        "A loadback in flight keeps its host source pinned after the caller's own lock on it "
        "is released (E-21): a host eviction before the ack frees nothing.",
        requires=Requires(device_pages=4, host_pages=4),  # a 4-page prompt on each tier
    ),
    Scenario(
        "failed-writeback-is-not-success",
        ("HOST-4",),
        frozenset({Feature.HOST_TIER}),
        (
            InsertStep(tokens=A),
            MatchStep(tokens=A, lock=D),
            WritebackStep(step=1, success=False, expect=E(started=True)),
            MatchStep(tokens=A, expect=E(host_len=0)),
            WritebackStep(step=1, expect=E(started=True)),
            MatchStep(tokens=A, expect=E(host_len=6)),
            UnlockStep(step=1),
        ),
        "A writeback acknowledged with success = false leaves no host copy behind (E-1).",
        requires=Requires(device_pages=6, host_pages=6),  # A on each tier
    ),
    Scenario(
        "writeback-refreshes-host-lru",
        ("HOST-6", "EVICT-2"),
        frozenset({Feature.HOST_TIER}),
        (
            InsertStep(tokens=A),
            InsertStep(tokens=B),
            MatchStep(tokens=A + [42], lock=D),
            MatchStep(tokens=B + [42], lock=D),
            WritebackStep(step=2, ack="later", expect=E(started=True)),
            WritebackStep(step=3, expect=E(started=True)),
            AckStep(step=4),
            UnlockStep(step=2),
            UnlockStep(step=3),
            EvictStep(tier=H, pages=3, expect=E(evicted=3)),
            MatchStep(tokens=A, expect=E(host_len=6)),
            MatchStep(tokens=B, expect=E(host_len=0)),
        ),
        "The node whose writeback completed last is the last host victim (D243-2).",
        requires=Requires(device_pages=9, host_pages=9),  # A and B on each tier
        # An inclusive host tier evicts no host copy of a node still on device, and orders the
        # rest by the node's last use (HOST-12): what this checks is moot there.
        excluded_by=frozenset({Feature.INCLUSIVE_HOST_TIER}),
    ),
    Scenario(
        "host-eviction-beside-device-copies",
        ("EVICT-2", "HOST-12"),
        frozenset({Feature.HOST_TIER}),
        (
            InsertStep(tokens=A),
            MatchStep(tokens=A + [42], lock=D),
            WritebackStep(step=1, expect=E(started=True)),
            UnlockStep(step=1),
            EvictStep(tier=H, pages=100),
            MatchStep(tokens=A, expect=E(device_len=6)),
        ),
        "A host eviction while the written-back prefix is still on device: the host LRU leaf "
        "goes, or, for an inclusive host tier (HOST-12), only host copies of nodes off the device "
        "do; the eviction oracle derives the victims either way.",
        requires=Requires(device_pages=6, host_pages=6),  # A on each tier
    ),
    Scenario(
        "namespace-isolation",
        ("NS-1", "EVENT-5", "TREE-2"),
        frozenset({Feature.NAMESPACES}),
        (
            InsertStep(ns=0, tokens=A),
            MatchStep(ns=1, tokens=A, expect=E(device_len=0)),
            ExtendStep(ns=1, tokens=A, expect=E(device_len=0, cached_len=0)),
            MatchStep(ns=0, tokens=A, expect=E(device_len=6)),
            MatchStep(ns=1, tokens=A, expect=E(device_len=6)),
        ),
        "The same tokens under two namespaces never share pages or hashes; each reuses its own.",
        requires=Requires(device_pages=12),  # A under two namespaces
    ),
    Scenario(
        "unload-adapter",
        ("NS-2", "PIN-2", "EVENT-2", "EVENT-6"),
        frozenset({Feature.NAMESPACES, Feature.UNLOAD}),
        (
            InsertStep(ns=1, tokens=A),
            InsertStep(ns=1, tokens=A[:2] + B),
            InsertStep(ns=0, tokens=A),
            MatchStep(ns=1, tokens=A, lock=D, expect=E(device_len=6)),
            UnloadStep(ns=1),
            MatchStep(ns=1, tokens=A, expect=E(device_len=0)),
            MatchStep(ns=0, tokens=A, expect=E(device_len=6)),
            EvictStep(pages=100, expect=E(evicted=6)),
            UnlockStep(step=3),
            EvictStep(pages=100, expect=E(evicted=0)),
            InsertStep(ns=1, tokens=A, expect=E(cached_len=0)),
        ),
        "Unloading an adapter frees what nobody holds at once and the rest when released (D268-4).",
        # A and a branch of it under namespace 1 while A is cached under namespace 0
        requires=Requires(device_pages=15),
    ),
    Scenario(
        "reload-adapter-while-held",
        ("NS-2", "TREE-4", "PIN-2"),
        frozenset({Feature.NAMESPACES, Feature.UNLOAD}),
        (
            InsertStep(ns=1, tokens=A),
            MatchStep(ns=1, tokens=A[:2], lock=D, expect=E(device_len=2)),
            MatchStep(ns=1, tokens=A, lock=D, expect=E(device_len=6)),
            UnloadStep(ns=1),
            InsertStep(ns=1, tokens=A, expect=E(cached_len=0)),
            MatchStep(ns=1, tokens=A[:2], lock=D, expect=E(device_len=2)),
            UnlockStep(step=1),
            UnlockStep(step=2),
            MatchStep(ns=1, tokens=A, expect=E(device_len=6)),
        ),
        "An adapter reloaded while requests still hold its old blocks caches the same prefix "
        "anew; a match that splits the new blocks leaves the old ones as they were.",
        requires=Requires(device_pages=12),  # the old blocks held while A is cached anew
    ),
    Scenario(
        "events-follow-the-device-tier",
        ("EVENT-1", "EVENT-2", "EVENT-3", "EVENT-4", "EVENT-6"),
        frozenset({Feature.KV_EVENTS}),
        (
            InsertStep(tokens=A[:3]),
            InsertStep(tokens=A),
            MatchStep(tokens=A[:2] + B),
            EvictStep(pages=3, expect=E(evicted=3)),
            InsertStep(tokens=A, expect=E(cached_len=3)),
            EvictStep(pages=100, expect=E(evicted=6)),
            InsertStep(tokens=A, expect=E(cached_len=0)),
        ),
        "Stored once, removed only when stored, parents first, hashes recomputable.",
        requires=Requires(device_pages=9),  # A[:3] in the tree and the caller's 6 pages of A
    ),
    Scenario(
        "reset-waits-then-clears",
        ("EVICT-8", "EVICT-9"),
        frozenset({Feature.RESET}),
        (
            InsertStep(tokens=A),
            InsertStep(ns=1, tokens=B),
            MatchStep(tokens=A[:3] + [42], lock=D, expect=E(device_len=3)),
            ResetStep(expect=E(cleared=False)),
            MatchStep(tokens=A, expect=E(device_len=6)),
            MatchStep(ns=1, tokens=B, expect=E(device_len=3)),
            UnlockStep(step=2),
            ResetStep(expect=E(cleared=True)),
            MatchStep(tokens=A, expect=E(device_len=0, host_len=0)),
            MatchStep(ns=1, tokens=B, expect=E(device_len=0)),
            InsertStep(tokens=A, expect=E(cached_len=0)),
            MatchStep(tokens=A, expect=E(device_len=6)),
        ),
        "A reset is refused while a lock holds a page and changes nothing; with nothing in use "
        "it empties every namespace, and the cache fills again from empty.",
        requires=Requires(device_pages=9),  # A and B cached at once
    ),
    Scenario(
        "reset-waits-for-copies",
        ("EVICT-8", "EVICT-9"),
        frozenset({Feature.RESET, Feature.HOST_TIER}),
        (
            InsertStep(tokens=A),
            MatchStep(tokens=A, lock=D, expect=E(device_len=6)),
            WritebackStep(step=1, ack="later"),
            UnlockStep(step=1),
            ResetStep(expect=E(cleared=False)),
            AckStep(step=2),
            MatchStep(tokens=A, expect=E(device_len=6, host_len=6)),
            ResetStep(expect=E(cleared=True)),
            MatchStep(tokens=A, expect=E(device_len=0, host_len=0)),
        ),
        "A copy in flight holds the cache: a reset waits for its acknowledgement, then empties "
        "both tiers.",
        requires=Requires(device_pages=6, host_pages=6),  # A on each tier
    ),
    Scenario(
        "reset-announces-cleared",
        ("EVENT-9", "EVENT-1", "EVENT-6"),
        frozenset({Feature.RESET, Feature.KV_EVENTS}),
        (
            InsertStep(tokens=A),
            MatchStep(tokens=A[:2] + [42], lock=D, expect=E(device_len=2)),
            ResetStep(expect=E(cleared=False)),
            UnlockStep(step=1),
            ResetStep(expect=E(cleared=True)),
            InsertStep(tokens=A, expect=E(cached_len=0)),
        ),
        "A reset that clears publishes AllBlocksCleared, so the same blocks may be stored again; "
        "a refused one publishes nothing.",
        requires=Requires(device_pages=6),  # A's 6 pages
    ),
)
