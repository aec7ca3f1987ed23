"""The engine protocols: what an adapter must offer the kit, at the cache level and at the
scheduler level.

Every attribute, method and answer field is defined here once, in its docstring or its
``Doc``: the adapter contract that ``kvconf check-engine`` and the start of every run check
(``conformance/engine/contract.py``) and that docs/api.md's protocol reference is generated
from (``kvconf docs protocol``). A method marked ``needs`` is called only on an engine that
declares one of those features; one marked ``optional`` only where the engine has it.

Page ids, node handles and lock handles are the engine's own values; the kit never interprets
node or lock handles, it only hands them back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Protocol, TypeVar, get_args, runtime_checkable

from kvconf.conformance.engine.features import Feature
from kvconf.reference.kv_events import KVEvent
from kvconf.reference.plan import Plan, RequestSpec, RuntimeEvent
from kvconf.reference.snapshot import CacheSnapshot
from kvconf.reference.tiers import Tier

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Doc:
    """The definition of an attribute or an answer's field (its ``Annotated`` metadata)."""

    text: str


def documented(hint: Any) -> tuple[Any, str]:
    """An annotation's plain type and its ``Doc`` text ("" and the hint as it is when it
    carries none): what the contract check and the generated reference both read."""
    doc = next((m.text for m in getattr(hint, "__metadata__", ()) if isinstance(m, Doc)), "")
    return (get_args(hint)[0] if doc else hint), doc


def needs(*features: Feature) -> Callable[[F], F]:
    """Marks a protocol method the kit calls only on an engine that declares one of
    ``features``; such an engine must have it, any other may leave it out."""
    def mark(fn: F) -> F:
        fn.__kvconf_needs__ = frozenset(features)  # type: ignore[attr-defined]
        return fn
    return mark


def optional(fn: F) -> F:
    """Marks a protocol method an engine may leave out whatever it declares: the kit calls it
    only where the engine has it."""
    fn.__kvconf_needs__ = None  # type: ignore[attr-defined]
    return fn


@dataclass(frozen=True, slots=True)
class Match:
    """What ``match`` returns: the longest cached whole-page prefix of the query on each tier
    (TREE-1), its pages, and the node handles to lock it by."""

    device_len: Annotated[int, Doc(
        "tokens of the query served from device pages: a multiple of ``page_size``, 0 when "
        "nothing is cached")]
    host_len: Annotated[int, Doc(
        "the same on the host tier, counted from the root on its own (a page on both tiers "
        "counts on each); 0 with no host tier")]
    device_pages: Annotated[tuple[int, ...], Doc(
        "the device page of each of the first ``device_len // page_size`` pages, in order")]
    host_pages: Annotated[tuple[int, ...], Doc(
        "the host page of each of the first ``host_len // page_size`` pages, in order; empty "
        "with no host tier")]
    device_node: Annotated[Any, Doc(
        "the engine's handle of the node that ends the device prefix; the kit passes it to "
        "``lock(node, Tier.DEVICE)``, after an empty match too (then it names the root, or any "
        "value the engine's ``lock`` takes as pinning nothing)")]
    host_node: Annotated[Any, Doc(
        "the same for the host prefix, passed to ``lock(node, Tier.HOST)``; with no host tier, "
        "any value the engine's ``lock`` takes as pinning nothing (its root, say)")]


@dataclass(frozen=True, slots=True)
class Inserted:
    """What ``insert`` returns: how much of the prefix the tree held before this insert, and
    which of the caller's pages went back to the free list because the tree already held them
    (TREE-5)."""

    cached_len: Annotated[int, Doc(
        "tokens of the inserted prefix that were already cached on device before this insert "
        "(a multiple of ``page_size``; 0 for a prefix new to the cache), as SGLang's "
        "``insert`` returns it; not the length cached after the insert")]
    freed: Annotated[tuple[int, ...], Doc(
        "the caller's pages the engine returned to its free list because the tree held those "
        "pages' tokens in pages of its own (TREE-5); a page of ``pages`` that is the tree's own "
        "page at its place (one a match handed out) is not freed")]


@dataclass(frozen=True, slots=True)
class CopyOp:
    """A writeback or loadback the engine asks the runtime to perform (HOST-2, HOST-3)."""

    op_id: Annotated[Any, Doc(
        "the engine's name for the copy; the kit hands it back to ``finish_transfer``")]
    kind: Annotated[str, Doc('``"writeback"`` (device to host) or ``"loadback"`` (host to '
                             "device)")]
    pairs: Annotated[tuple[tuple[int, int], ...], Doc(
        "the pages to copy, (source page, destination page) each, in the order of the prefix")]


@runtime_checkable
class CacheEngine(Protocol):
    """The prefix-cache level: the calls a scheduler makes on its cache (docs/engine-guide.md).

    A factory of one is called with an ``EngineConfig``. It need not declare ``cache`` in
    ``features``: the level of the factory that built it is added."""

    name: Annotated[str, Doc(
        "a str naming the engine in reports and messages, e.g. ``'my-engine'``")]
    version: Annotated[str, Doc(
        "a str naming the engine's version, e.g. ``'1.2.0'`` (the report's "
        "``run_info.version``)")]
    features: Annotated[frozenset[Feature], Doc(
        "a frozenset of ``kvconf.Feature`` (not of str): the capabilities and allowances the "
        "engine declares; a case that needs one it lacks is NOT_SUPPORTED")]
    page_size: Annotated[int, Doc(
        "an int, the tokens per page: the ``page_size`` of the config the factory was called "
        "with")]

    def tick(self) -> None:
        """A new scheduling step begins: access times advance (EVICT-2, EVICT-3); an engine on
        wall time may ignore it."""

    def alloc(self, n: int) -> list[int] | None:
        """``n`` free device pages for the caller, all of them or ``None`` (nothing taken) when
        the free list is short; never evicts by itself (POOL-2, POOL-4)."""

    def free(self, pages: Sequence[int]) -> None:
        """The caller's pages go back to the free list (pages it holds, never cached ones)."""

    def match(self, namespace: int, tokens: Sequence[int]) -> Match:
        """The longest cached whole-page prefix of ``tokens`` in ``namespace`` on each tier;
        changes nothing but recency (TREE-1..TREE-6). A query with no cached page is an empty
        match, not an error."""

    def insert(self, namespace: int, tokens: Sequence[int], pages: Sequence[int]) -> Inserted:
        """Publish ``tokens`` (whole pages) held in the caller's ``pages``, one per page: the
        tree takes the pages it lacks and gives back the ones it held already (TREE-5)."""

    def lock(self, node: Any, tier: Tier) -> Any:
        """Pin ``node`` and its ancestors on ``tier`` against eviction (PIN-1); returns a lock
        handle (any value; ``None`` too). ``node`` is a ``Match``'s ``device_node`` or
        ``host_node``, an empty match's included."""

    def unlock(self, handle: Any) -> None:
        """Release exactly one lock: the one ``handle`` names (with ``lock_handles``), or one
        lock of the node ``lock`` was given (PIN-2); a second release of the same lock raises
        ``EngineRejected`` (PIN-3)."""

    def evict(self, tier: Tier, num_pages: int) -> int:
        """Free at least ``num_pages`` pages of ``tier`` from unpinned least recently used
        leaves, or every candidate there is; returns the pages freed (EVICT-1..EVICT-5). With
        no host tier, ``Tier.HOST`` has nothing to free: return 0."""

    @needs(Feature.HOST_TIER)
    def start_writeback(self, node: Any) -> CopyOp | None:
        """Plan a copy of ``node``'s device pages to host (HOST-2), or decline with ``None``."""

    @needs(Feature.HOST_TIER)
    def start_loadback(self, node: Any) -> CopyOp | None:
        """Plan a copy of ``node``'s host pages back to device (HOST-3), or decline with
        ``None``."""

    @needs(Feature.HOST_TIER)
    def finish_transfer(self, op_id: Any, success: bool) -> None:
        """The copy ``op_id`` landed (``success``) or failed (HOST-4, HOST-6)."""

    @needs(Feature.KV_EVENTS)
    def drain_events(self) -> list[KVEvent]:
        """The KV events published since the last drain, in order (EVENT-1..EVENT-6)."""

    @needs(Feature.KV_EVENTS, Feature.SNAPSHOT)
    def block_hash(self, parent: int | None, namespace: int, tokens: Sequence[int]) -> int:
        """The engine's hash of a block of ``tokens`` under its ``parent`` block's hash (None:
        the first block) in ``namespace`` (EVENT-4, EVENT-5); ``kvconf.block_hash`` for an
        engine with none of its own."""

    @needs(Feature.SNAPSHOT, Feature.BLOCK_SNAPSHOT)
    def snapshot(self) -> CacheSnapshot | None:
        """The white-box view the ownership and order oracles read after every call: a
        ``CacheSnapshot`` (``snapshot``) or a hash-keyed cache's ``BlockSnapshot``
        (``block_snapshot``, POOL-7)."""

    @needs(Feature.UNLOAD)
    def unload(self, namespace: int) -> int:
        """Unload a namespace's adapter: its cached pages go; returns the pages freed now."""

    @needs(Feature.RESET)
    def reset(self) -> bool:
        """Drop the whole cache (vLLM's ``reset_prefix_cache``, SGLang's ``flush_cache``): with
        nothing in use (no lock over a page held, no transfer in flight, no page held by the
        caller) every cached page of every tier and namespace goes back to its free list and
        ``True`` is returned (EVICT-9), with ``AllBlocksCleared`` published (EVENT-9);
        otherwise ``False``, changing nothing (EVICT-8)."""

    @needs(Feature.COUNTERS)
    def counters(self) -> Mapping[str, int]:
        """The engine's own counts by name (POOL-6): ``available_<tier>``, ``cached_<tier>``,
        ``evictable_<tier>``, and its hit statistics since it was built, ``query_tokens`` (the
        tokens of every query matched) and ``hit_tokens`` (the device tokens those matches
        served, POOL-8), leaving out the ones it does not keep."""


@runtime_checkable
class SchedulerEngine(Protocol):
    """The scheduler level: requests in, plans out, the runtime's events back (spec chapters
    requests and plans). A factory of one has ``level = "scheduler"`` and takes a
    ``SchedConfig``."""

    name: Annotated[str, Doc("as the cache level's")]
    version: Annotated[str, Doc("as the cache level's")]
    features: Annotated[frozenset[Feature], Doc("as the cache level's")]
    page_size: Annotated[int, Doc("an int, the tokens per page: the ``SchedConfig``'s "
                                  "``page_size``")]

    def submit(self, specs: Sequence[RequestSpec]) -> None:
        """New requests from the runtime, in arrival order."""

    def next_plan(self) -> Plan:
        """The next forward: rows, copies and L3 transfers (spec chapter plans)."""

    def advance(self, events: Sequence[RuntimeEvent]) -> None:
        """The runtime's events since the last plan; one naming nothing legal raises
        ``EngineRejected`` (REQ-2)."""

    @needs(Feature.KV_EVENTS)
    def drain_events(self) -> list[KVEvent]:
        """As the cache level's."""

    @optional
    def block_hash(self, parent: int | None, namespace: int, tokens: Sequence[int]) -> int:
        """As the cache level's; without it the events are read with ``kvconf.block_hash``."""

    @needs(Feature.SNAPSHOT)
    def snapshot(self) -> Any:
        """A ``SchedulerSnapshot``: requests, pools and tree, read after every call."""

    @needs(Feature.MODEL_CONFIG)
    def model_window(self, model_config: Mapping[str, Any]) -> int:
        """The sliding window a model's config states, 0 for none (WIN-1)."""

    @needs(Feature.COUNTERS)
    def counters(self) -> Mapping[str, int]:
        """As the cache level's, with ``free_slots``."""


def match_scope(engine: CacheEngine, tokens: Sequence[int]) -> Sequence[int]:
    """The part of a query a match of ``engine`` may cover: all of it, or all but the last token
    for an engine that declares ``match_leaves_last`` (TREE-7)."""
    if Feature.MATCH_LEAVES_LAST in engine.features:
        return tokens[:-1]
    return tokens
