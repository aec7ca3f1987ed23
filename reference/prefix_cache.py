"""The reference prefix cache: the facade over pools, tree, pins, eviction and transfers.

It is the executable form of spec chapters POOL, TREE, PIN, EVICT, HOST and EVENT. Every
rejected call raises :class:`CacheError` and leaves the cache exactly as it was (FAULT-1).
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

from kvconf.reference.clock import LogicalClock
from kvconf.reference.errors import CacheError
from kvconf.reference.eviction import VictimIndex, is_candidate
from kvconf.reference.host_tier import Transfer, missing_path
from kvconf.reference.kv_events import EventKind, KVEvent, chain_hashes
from kvconf.reference.l3 import L3Transfer, rolling_keys, seed_key
from kvconf.reference.pages import CALLER, PagePool, node_owner, transfer_owner
from kvconf.reference.pins import Lock, LockTable
from kvconf.reference.radix_tree import TOKEN, Node, Step, common_pages, first_page, walk
from kvconf.reference.snapshot import (
    CacheSnapshot,
    L3View,
    LockView,
    NodeView,
    TransferView,
)
from kvconf.reference.tiers import DEVICE, HOST, Tier, as_tier

_TOP_BYTE = 7 if sys.byteorder == "little" else 0  # where an array("Q") word keeps its top byte
# The kinds of event a cache operation emits, read as module constants (see ``tiers``).
STORED, REMOVED = EventKind.STORED, EventKind.REMOVED
# Each tier's counter names (POOL-6), spelled once.
_COUNTERS = {tier: tuple(f"{kind}_{tier.value}" for kind in ("available", "cached", "evictable"))
             for tier in Tier}


@dataclass(slots=True, frozen=True)
class CacheConfig:
    page_size: int = 1
    device_pages: int = 64
    host_pages: int = 0
    enable_events: bool = True
    l3: bool = False  # nodes carry L3 rolling keys; prefetch and backup transfers (L3-1..)

    def __post_init__(self) -> None:
        if self.page_size < 1:
            raise CacheError("bad_config", f"page_size must be >= 1, got {self.page_size}")
        for name in ("device_pages", "host_pages"):
            if getattr(self, name) < 0:
                raise CacheError("bad_config", f"{name} must be >= 0, got {getattr(self, name)}")


# The results of ``match`` and ``insert`` are not frozen: one is made per call, and a frozen
# slotted dataclass pays one ``object.__setattr__`` per field when made (as ``plan.ForwardRow``).
# Nothing changes one once made; they compare and hash by value.
@dataclass(slots=True, unsafe_hash=True)
class MatchResult:
    """Longest cached prefix of a query on each tier (TREE-1, TREE-3).

    Lengths are in tokens and always whole pages; ``*_node`` is the deepest node of that match
    (the namespace root when nothing matched), a handle for :meth:`PrefixCache.lock`.
    """

    namespace: int
    device_len: int
    host_len: int
    device_pages: tuple[int, ...]
    host_pages: tuple[int, ...]
    device_node: int
    host_node: int


@dataclass(slots=True, unsafe_hash=True)  # not frozen: see MatchResult
class InsertResult:
    cached_len: int  # tokens already on device before the insert (their caller pages were freed)
    new_len: int  # tokens whose caller pages the tree took over
    freed: tuple[int, ...]  # duplicate caller pages returned to the free list (TREE-5)
    # What a match of the same tokens now returns on device: the node holding the last page
    # (the namespace root for no tokens) and the tree's pages for them, in order.
    node: int = 0
    device_pages: tuple[int, ...] = ()


class PrefixCache:
    """Deterministic paged radix prefix cache with a device and a host tier."""

    def __init__(self, config: CacheConfig | None = None) -> None:
        self.config = config or CacheConfig()
        self.page_size = self.config.page_size
        self.pools = {
            Tier.DEVICE: PagePool(Tier.DEVICE, self.config.device_pages),
            Tier.HOST: PagePool(Tier.HOST, self.config.host_pages),
        }
        self.clock = LogicalClock()
        self._seq = 0
        self._next_id = 0
        self._next_op = 0
        self._nodes: dict[int, Node] = {}
        self._roots: dict[int, Node] = {}
        self._locks = LockTable(self._pin_changed)
        # Pages of each tier held by nodes that a lock pins there, kept as pins and pages come
        # and go: the evictable count is the cached count less these (POOL-6).
        self._pinned = {Tier.DEVICE: 0, Tier.HOST: 0}
        self._transfers: dict[int, Transfer] = {}
        self._events: list[KVEvent] = []
        self._victims = VictimIndex()
        self._ghosts: list[Node] = []  # roots of unloaded namespaces' trees still pinned (NS-2)
        # Hit statistics since the cache was built (POOL-8): every match's query tokens and the
        # device tokens it served; a reset keeps them.
        self.query_tokens = 0
        self.hit_tokens = 0
        self._l3: dict[int, L3Transfer] = {}  # prefetches and backups in flight
        self._forget_views()

    def _forget_views(self) -> None:
        """What ``snapshot`` keeps of the last one, to reuse what did not change: nothing."""
        self._last: CacheSnapshot | None = None  # the last snapshot, whose equal parts are reused
        # The last snapshot's nodes in its order, each with its key's token offset, the fields
        # its view was made from (``_FIELDS`` and L3 keys) and that view, reused while the
        # fields stay; and the ids of those nodes.
        self._order: list[tuple[Node, int, tuple, NodeView]] = []
        self._ids: set[int] = set()
        self._held: tuple[dict[int, Lock], tuple[LockView, ...]] | None = None
        self._lock_made: dict[int, tuple[Lock, LockView]] = {}  # each held lock's view
        self._transfer_made: dict[int, TransferView] = {}  # each copy in flight's view

    # ----------------------------------------------------------------- pages for the caller
    def alloc(self, n: int, tier: Tier = Tier.DEVICE) -> list[int] | None:
        """``n`` free pages for the caller, or None when the pool has fewer (POOL-2)."""
        tier = as_tier(tier)
        return self.pools[tier].alloc(n, CALLER)

    def free(self, pages: Sequence[int], tier: Tier = Tier.DEVICE) -> None:
        """Return caller-owned pages; a page the caller does not own is rejected (POOL-4)."""
        tier = as_tier(tier)
        self.pools[tier].release(list(pages), CALLER)

    def tick(self) -> int:
        """Advance the logical clock: the caller's next scheduling step begins (EVICT-2)."""
        return self.clock.tick()

    def available(self, tier: Tier = Tier.DEVICE) -> int:
        tier = as_tier(tier)
        return self.pools[tier].free_count

    def evictable(self, tier: Tier = Tier.DEVICE) -> int:
        """Cached pages of ``tier`` that no lock pins: what evicting the tier could free."""
        tier = as_tier(tier)
        return self.pools[tier].cached_count - self._pinned[tier]

    def counters(self) -> dict[str, int]:
        """The cache's own counts, kept incrementally, never by a scan (POOL-6)."""
        out: dict[str, int] = {}
        pinned = self._pinned
        for tier, pool in self.pools.items():
            available, cached, evictable = _COUNTERS[tier]
            out[available] = pool.free_count
            out[cached] = pool.cached_count
            out[evictable] = pool.cached_count - pinned[tier]  # as ``evictable`` counts them
        return out

    def _pin_changed(self, node: Node, tier: Tier, sign: int) -> None:
        """``node`` became pinned (+1) or unpinned (-1) on ``tier``. Unpinned, it may be a
        victim now: of the nodes a lock covered, only those can be (EVICT-3)."""
        pages = node.pages(tier)
        if pages:
            self._pinned[tier] += sign * len(pages)
        if sign < 0:
            self._victims.offer(node)

    def _set_pages(self, node: Node, tier: Tier, pages: Sequence[int] | None) -> None:
        """Give ``node`` its pages on ``tier`` (None: it leaves the tier), keeping the pinned
        count right when the node is pinned there."""
        if pages is not None:
            pages = tuple(pages)
        if node.ref(tier) > 0:
            self._pinned[tier] += len(pages or ()) - len(node.pages(tier) or ())
        if tier is DEVICE:
            node.device = pages
        else:
            node.host = pages

    # ----------------------------------------------------------------- tree structure
    def _new_node(
        self,
        namespace: int,
        parent: Node | None,
        key: array,
        hashes: Sequence[int],
    ) -> Node:
        self._next_id += 1
        self._seq += 1
        # id, namespace, parent, key, device, host, hashes, seq: by position, made often
        node = Node(self._next_id, namespace, parent, key, None, None, tuple(hashes), self._seq)
        self._nodes[node.id] = node
        if parent is not None:
            parent.children[first_page(key, 0, self.page_size)] = node
        return node

    def _root(self, namespace: int) -> Node:
        root = self._roots.get(namespace)
        if root is None:
            root = self._new_node(namespace, None, array(TOKEN), ())
            root.device, root.host = (), ()
            self._roots[namespace] = root
        return root

    def _split(self, node: Node, k: int) -> Node:
        """Split ``node`` after ``k`` pages; ``node`` keeps the suffix and its identity (TREE-4).

        The new upper node inherits the pins, access times and any pending transfer, so locks
        taken on ``node`` keep covering the same path and nothing observable changes.
        """
        p = self.page_size
        parent = node.parent
        assert parent is not None and 0 < k * p < len(node.key)
        del parent.children[first_page(node.key, 0, p)]
        mid = self._new_node(node.namespace, parent, node.key[: k * p], node.hashes[:k])
        mid.device_ref, mid.host_ref = node.device_ref, node.host_ref
        mid.device_access, mid.host_access = node.device_access, node.host_access
        mid.pending = node.pending
        for tier in (DEVICE, HOST):
            pages = node.pages(tier)
            if pages is None:
                continue
            upper, lower = pages[:k], pages[k:]
            self.pools[tier].move(list(upper), node_owner(node.id), node_owner(mid.id))
            self._set_pages(node, tier, lower)
            self._set_pages(mid, tier, upper)
        mid.keys, node.keys = node.keys[:k], node.keys[k:]
        node.key = node.key[k * p :]
        node.hashes = node.hashes[k:]
        node.parent = mid
        mid.children[first_page(node.key, 0, p)] = node
        return mid

    def _check_tokens(self, tokens: Sequence[int], whole_pages: bool) -> array:
        """``tokens`` as the array the tree compares and keys by, once checked (FAULT-1)."""
        if whole_pages and len(tokens) % self.page_size:
            raise CacheError(
                "bad_tokens",
                f"{len(tokens)} tokens is not a whole number of pages of {self.page_size}",
            )
        try:  # the common case at C speed: every token an int in 0..2**64-1, each word's top
            # byte below 0x80 (so below 2**63); a caller keeping its prompts in the tree's own
            # form (a ``TOKEN`` array) is not copied
            words = tokens if type(tokens) is array and tokens.typecode == TOKEN else array(
                TOKEN, tokens)
            if words.tobytes()[_TOP_BYTE::8].isascii():
                return words
        except (TypeError, OverflowError):
            pass
        for t in tokens:
            if not isinstance(t, int) or t < 0 or t >= 2**63:
                raise CacheError("bad_tokens", f"token {t!r} is not a non-negative int")
        return array(TOKEN, tokens)

    # ----------------------------------------------------------------- match / insert
    def reserve_op(self) -> int:
        """A copy id no transfer has: for copies of other cache kinds beside KV (MAMBA-2)."""
        self._next_op += 1
        return self._next_op

    def match(self, namespace: int, tokens: Sequence[int]) -> MatchResult:
        """Longest cached whole-page prefix on each tier; splits where the query diverges."""
        tokens = self._check_tokens(tokens, whole_pages=False)
        node = self._root(namespace)
        for step in walk(node, tokens, self.page_size):
            node = step.node
            if step.pages * self.page_size < len(node.key):
                node = self._split(node, step.pages)
                break
        m = self._matched(node)
        self.query_tokens += len(tokens)
        self.hit_tokens += m.device_len
        return m

    def match_node(self, node_id: int) -> MatchResult:
        """What :meth:`match` returns for the tokens of the path down to ``node_id`` (a node
        of a namespace's tree), with the same access stamps, without walking those tokens:
        for a caller that holds the node, such as a request's pinned prefix."""
        return self._matched(self._node(node_id))

    def _matched(self, node: Node) -> MatchResult:
        """The match that ends at ``node``: each tier's cached run of its path from the root,
        every node of the path stamped as just accessed (EVICT-2)."""
        now = self.clock.now
        path = node.path()
        root = path[0]
        dev_node, host_node = root, root
        device: list[int] = []
        host: list[int] = []
        for n in path[1:]:
            # A new access time makes no new candidate: the index re-files moved entries.
            n.device_access = now
            n.host_access = now
            if n.device is not None and dev_node is n.parent:
                dev_node = n
                device.extend(n.device)
            if n.host is not None and host_node is n.parent:
                host_node = n
                host.extend(n.host)
        p = self.page_size
        # namespace, device_len, host_len, device_pages, host_pages, device_node, host_node
        return MatchResult(root.namespace, len(device) * p, len(host) * p, tuple(device),
                           tuple(host), dev_node.id, host_node.id)

    def _validate_insert(self, steps: list[Step], tokens: Sequence[int],
                         pages: Sequence[int]) -> None:
        """Check every page against the insert's walk (``steps``) before anything moves, so a
        rejected insert changes nothing."""
        p = self.page_size
        if len(pages) != len(tokens) // p:
            raise CacheError(
                "bad_pages", f"{len(pages)} pages given for {len(tokens) // p} pages of tokens"
            )
        if len(set(pages)) != len(pages):
            raise CacheError("bad_pages", "the same page is given twice")
        mine: list[int] = []  # the pages that are not the tree's own page at their place
        covered = 0  # pages of the walk so far
        for step in steps:
            given = tuple(pages[covered : covered + step.pages])
            device = step.node.device
            if device is None:
                mine.extend(given)
            elif given != device[: step.pages]:  # the usual case: all of them the tree's
                mine.extend(page for page, tree in zip(given, device, strict=False) if page != tree)
            covered += step.pages
        self.pools[DEVICE].check_owned(mine + list(pages[covered:]), CALLER)

    def insert(self, namespace: int, tokens: Sequence[int], pages: Sequence[int]) -> InsertResult:
        """Publish ``tokens`` (whole pages) with the device ``pages`` that hold their KV.

        Each page is either caller-owned or the very page the tree already holds at that place.
        Caller pages at places the tree already holds on device are duplicates and go back to the
        free list (TREE-5); the rest move into the tree. New nodes become eviction candidates.
        The tree is walked once: the walk that checks the pages is the one the insert follows.
        """
        tokens = self._check_tokens(tokens, whole_pages=True)
        root = self._roots.get(namespace)
        p = self.page_size
        steps = walk(root, tokens, p) if root is not None else []
        self._validate_insert(steps, tokens, pages)
        root = self._root(namespace)  # only now: a rejected insert creates nothing (FAULT-1)
        pool = self.pools[DEVICE]
        now = self.clock.now
        node, pos = root, 0
        cached = 0
        freed: list[int] = []
        held: list[int] = []  # the tree's device pages along the walk: what a match returns
        for step in steps:  # the nodes that already hold a prefix of the tokens
            child = step.node
            if step.pages * p < len(child.key):  # the last one, where the tokens leave it
                child = self._split(child, step.pages)
            if self.config.l3:
                self._backfill_keys(child)
            span = tuple(pages[pos // p : pos // p + len(child.key) // p])
            if child.device is None:
                self._attach_device(child, span, CALLER, now)
            else:
                cached += len(child.key)
                # Given the tree's own pages (the usual case), there is no duplicate to free.
                dups = pool.held_by(span, CALLER) if span != child.device else []
                if dups:
                    pool.release(dups, CALLER)
                    freed.extend(dups)
                child.device_access = now
            child.host_access = now
            held.extend(child.device)
            node, pos = child, pos + len(child.key)
        if pos < len(tokens):  # the rest hangs below the last of them as a new node
            key = tokens[pos:]
            hashes = chain_hashes(node.last_hash(), namespace, key, p)
            child = self._new_node(namespace, node, key, hashes)
            child.keys = self._keys_below(node, key)
            child.host_access = now
            self._attach_device(child, list(pages[pos // p :]), CALLER, now)
            held.extend(pages[pos // p :])
            node = child
        # cached_len, new_len, freed, node, device_pages
        return InsertResult(cached, len(tokens) - cached, tuple(freed), node.id, tuple(held))

    def _attach_device(self, node: Node, pages: Sequence[int], src_owner: str, now: int) -> None:
        self.pools[DEVICE].move(pages, src_owner, node_owner(node.id))
        self._set_pages(node, DEVICE, pages)
        node.device_access = now
        self._victims.offer(node)
        if self._ghosts and self._detached(node):
            return  # a loadback landing for a holder of an unloaded adapter: not cached
        self._emit(
            KVEvent(  # kind, block_hashes, namespace, parent_hash, tokens, block_size
                STORED, node.hashes, node.namespace,
                node.parent.last_hash() if node.parent else None, tuple(node.key),
                self.page_size,
            )
        )

    # ----------------------------------------------------------------- L3 keys
    def _keys_below(self, parent: Node, key: Sequence[int]) -> list[bytes]:
        """L3 keys of the pages of ``key`` hung below ``parent``, seeded from the parent's last
        key (L3-1); none without an L3 store."""
        if not self.config.l3:
            return []
        return rolling_keys(self._last_key(parent), key, self.page_size)

    def _last_key(self, node: Node) -> bytes:
        """The key the pages below ``node`` chain from: the namespace seed at a root, else the
        node's last page key, recomputed first if the node lacks them (never an empty seed)."""
        if node.is_root:
            return seed_key(node.namespace)
        self._backfill_keys(node)
        return node.keys[-1]

    def _backfill_keys(self, node: Node) -> None:
        """A node that lacks its keys gets them now (D381-3)."""
        if not self.config.l3 or node.parent is None:
            return
        if len(node.keys) != len(node.key) // self.page_size:
            node.keys = rolling_keys(self._last_key(node.parent), node.key, self.page_size)

    def _depth_pages(self, node: Node) -> int:
        return sum(len(n.key) for n in node.path()) // self.page_size

    # ----------------------------------------------------------------- L3 transfers
    def start_prefetch(self, node_id: int, tokens: Sequence[int], want: int,
                       least: int) -> L3Transfer | None:
        """Fetch up to ``want`` pages of ``tokens`` (the pages right below host node
        ``node_id``, whole pages) from L3 into new host pages (L3-3).

        The host node is pinned first, and only then is host memory evicted to make room, so
        eviction never takes the match the pages will hang below (L3-4, D293-6). Fewer pages
        than ``least`` after eviction: declined (None), nothing changed but the eviction.
        """
        node = self._node(node_id)
        if node.host is None:
            raise CacheError("not_on_tier", f"node {node_id} holds no host pages to fetch below")
        self._check_tokens(tokens, whole_pages=True)
        want = min(want, len(tokens) // self.page_size)
        lock = self._locks.acquire(node, HOST, internal=True)
        pool = self.pools[HOST]
        if pool.free_count < want:
            self.evict(HOST, want - pool.free_count)
        n = min(want, pool.free_count)
        if n < max(least, 1):
            self._release_internal(lock)
            return None
        return self._new_l3("prefetch", node, [lock], n, tuple(tokens[: n * self.page_size]))

    def _new_l3(self, kind: str, node: Node, locks: list[int], n: int,
                tokens: tuple[int, ...], pages: list[int] | None = None) -> L3Transfer:
        self._next_op += 1
        op = self._next_op
        if kind == "prefetch":
            got = self.pools[HOST].alloc(n, transfer_owner(op))
            assert got is not None
            pages, keys = got, rolling_keys(self._last_key(node), tokens, self.page_size)
            start = self._depth_pages(node)
        else:
            assert pages is not None
            path = [x for x in node.path() if not x.is_root]
            for x in path:
                self._backfill_keys(x)
            keys = [k for x in path for k in x.keys][-n:]
            start = self._depth_pages(node) - n
        t = L3Transfer(op, kind, node, node.namespace, start, pages, keys, tokens, locks)
        self._l3[op] = t
        return t

    def finish_prefetch(self, op_id: int, completed: int) -> int:
        """The first ``completed`` fetched pages landed: they move into the tree's host tier
        below the host match they were fetched for, in its namespace; the rest go back to the
        free list, and no node is made without a page (L3-3). Returns the deepest host node
        that holds the fetched pages (the anchor when none landed)."""
        t = self._l3.get(op_id)
        if t is None or t.kind != "prefetch":
            raise CacheError("unknown_op", f"prefetch {op_id} is not in flight")
        if isinstance(completed, bool) or not isinstance(completed, int) \
                or not 0 <= completed <= len(t.pages):
            raise CacheError("bad_count", f"prefetch {op_id} completed {completed!r} of "
                             f"{len(t.pages)} pages")
        del self._l3[op_id]
        p, now = self.page_size, self.clock.now
        pool, owner = self.pools[HOST], transfer_owner(op_id)
        node = self._prefetch_anchor(t)
        toks, pos = array(TOKEN, t.tokens[: completed * p]), 0
        while pos < len(toks):
            child = node.children.get(first_page(toks, pos, p))
            if child is None:
                key = toks[pos:]
                child = self._new_node(node.namespace, node, key,
                                       chain_hashes(node.last_hash(), node.namespace, key, p))
                child.keys = list(t.keys[pos // p : pos // p + len(key) // p])
                pool.move(t.pages[pos // p : completed], owner, node_owner(child.id))
                self._set_pages(child, HOST, t.pages[pos // p : completed])
                child.host_access = child.device_access = now
                self._victims.offer(child)
                node, pos = child, len(toks)
                break
            k = common_pages(child.key, toks, pos, p)
            if k * p < len(child.key):
                child = self._split(child, k)
            if child.host is None:
                # Also when a writeback is filling it: that copy then lands as a duplicate.
                span = t.pages[pos // p : pos // p + len(child.key) // p]
                pool.move(span, owner, node_owner(child.id))
                self._set_pages(child, HOST, span)
            self._backfill_keys(child)
            child.host_access = now
            self._victims.offer(child)
            node, pos = child, pos + len(child.key)
        leftover = pool.held_by(t.pages, owner)
        if leftover:
            pool.release(leftover, owner)
        for handle in t.locks:
            self._release_internal(handle)
        return node.id

    def _prefetch_anchor(self, t: L3Transfer) -> Node:
        """Where fetched pages hang: below the host match they were fetched for (D293-3)."""
        return t.node

    def start_backup(self, node_id: int, n: int) -> L3Transfer | None:
        """Back up the host pages of the last ``n`` pages of the path down to ``node_id`` to L3;
        the node stays pinned on host until :meth:`finish_backup` (L3-5, D293-4)."""
        node = self._node(node_id)
        pages = [pg for x in node.path() for pg in (x.host or [])]
        if node.host is None or n < 1 or n > len(pages):
            return None
        lock = self._locks.acquire(node, HOST, internal=True)
        return self._new_l3("backup", node, [lock], n, (), pages[-n:])

    def finish_backup(self, op_id: int) -> None:
        """The backup ended (either way): its source pages may be evicted again."""
        t = self._l3.get(op_id)
        if t is None or t.kind != "backup":
            raise CacheError("unknown_op", f"backup {op_id} is not in flight")
        del self._l3[op_id]
        for handle in t.locks:
            self._release_internal(handle)

    def _release_internal(self, handle: int) -> None:
        self._locks.release(handle, internal=True)  # the nodes it unpins are offered

    def l3_transfer(self, op_id: int) -> L3Transfer | None:
        return self._l3.get(op_id)

    # ----------------------------------------------------------------- pins
    def _node(self, node_id: int) -> Node:
        node = self._nodes.get(node_id)
        if node is None:
            raise CacheError("unknown_node", f"node {node_id} is not in the tree")
        return node

    def lock(self, node_id: int, tier: Tier = Tier.DEVICE) -> int:
        """Pin a node and all its ancestors on ``tier`` (PIN-1); returns the lock handle."""
        tier = as_tier(tier)
        node = self._node(node_id)
        if node.pages(tier) is None:
            raise CacheError("not_on_tier", f"node {node_id} holds no {tier} pages to lock")
        return self._locks.acquire(node, tier)

    def unlock(self, handle: int) -> None:
        """Release a lock handle; a handle not held is rejected and changes nothing (PIN-3)."""
        self._locks.release(handle)  # the nodes it unpins are offered as victims
        if self._ghosts:
            self._sweep_ghosts()

    # ----------------------------------------------------------------- eviction
    def evict(self, tier: Tier, num_pages: int) -> int:
        """Free at least ``num_pages`` pages of ``tier`` if unpinned leaves allow; returns freed."""
        tier = as_tier(tier)
        if num_pages < 0:
            raise CacheError("bad_count", f"cannot evict {num_pages} pages")
        freed = 0
        self._victims.compact(self._nodes)
        while freed < num_pages:
            victim = self._victims.pop(tier, self._nodes)
            if victim is None:
                break
            parent = victim.parent
            freed += self._drop_tier(victim, tier)
            self._victims.offer(parent)
        return freed

    def _drop_tier(self, node: Node, tier: Tier) -> int:
        pages = node.pages(tier)
        assert pages is not None
        self.pools[tier].release(pages, node_owner(node.id))
        self._set_pages(node, tier, None)
        if tier is DEVICE and not (self._ghosts and self._detached(node)):
            self._emit(KVEvent(REMOVED, node.hashes, node.namespace, None, (), 0))
        if node.device is None and node.host is None:
            assert node.parent is not None and not node.children
            del node.parent.children[first_page(node.key, 0, self.page_size)]
            del self._nodes[node.id]
        return len(pages)

    # ----------------------------------------------------------------- adapters
    def unload(self, namespace: int) -> int:
        """Unload an adapter: its namespace starts empty at once (NS-2, D268-4).

        Unpinned cached blocks are freed now (device blocks announced as removed); pinned ones,
        and those a transfer is copying, stay reachable only by their holders, detached from the
        namespace, and are freed the moment nothing holds them. Returns the pages freed now.
        """
        root = self._roots.pop(namespace, None)
        if root is None:
            return 0
        self._ghosts.append(root)
        for node in self._subtree(root):  # nothing of it can be matched any more
            if node.device is not None and node is not root:
                self._emit(KVEvent(REMOVED, node.hashes, node.namespace,
                                   None, (), 0))
        return self._sweep_ghosts()

    # ----------------------------------------------------------------- reset
    def in_use(self) -> bool:
        """Whether anything holds part of the cache: a lock over a page (a lock of an empty
        match pins nothing), a transfer in flight, a page the caller holds, or an unloaded
        adapter's blocks still held (EVICT-8)."""
        if self._transfers or self._l3 or self._ghosts:
            return True
        if any(lock.node.parent is not None for _, lock in self._locks.items()):
            return True
        return any(CALLER in pool.owners() for pool in self.pools.values())

    def reset(self) -> bool:
        """Drop the whole cache, as vLLM's ``reset_prefix_cache`` and SGLang's ``flush_cache``
        do: refused (False, nothing changed) while anything is in use (EVICT-8); else every
        cached page of every tier and namespace goes back to its free list, one
        AllBlocksCleared is published (EVENT-9) and no BlockRemoved, and True is returned
        (EVICT-9). The namespace roots stay: a lock of an empty match still names one."""
        if self.in_use():
            return False
        for root in self._roots.values():
            for node in self._subtree(root)[1:]:
                for tier in (DEVICE, HOST):
                    pages = node.pages(tier)
                    if pages:
                        self.pools[tier].release(list(pages), node_owner(node.id))
                del self._nodes[node.id]
            root.children.clear()
        self._victims = VictimIndex()
        self._emit(KVEvent(EventKind.CLEARED, ()))
        return True

    def _detached(self, node: Node) -> bool:
        """Part of an unloaded namespace's tree: announced as removed already, never again."""
        root = node.path()[0]
        return self._roots.get(root.namespace) is not root

    def _sweep_ghosts(self) -> int:
        """Free every block of an unloaded tree that nothing pins or copies any more."""
        freed = 0
        for ghost in list(self._ghosts):
            for node in reversed(self._subtree(ghost)):  # children before their parents
                if node.pending is not None:
                    continue
                for tier in (DEVICE, HOST):
                    if node.id in self._nodes and is_candidate(node, tier):
                        parent = node.parent
                        freed += self._drop_tier(node, tier)
                        # a parent left without children on a tier may be a candidate now,
                        # and one a transfer still holds is not swept: eviction must see it
                        self._victims.offer(parent)
            if not ghost.children and ghost.device_ref == 0 and ghost.host_ref == 0:
                del self._nodes[ghost.id]
                self._ghosts.remove(ghost)
        return freed

    def _depths(self) -> dict[int, int]:
        """Each node's depth below its root, every ancestor walked once."""
        depth: dict[int, int] = {}
        for node in self._nodes.values():
            chain: list[Node] = []
            n: Node | None = node
            while n is not None and n.id not in depth:
                chain.append(n)
                n = n.parent
            d = -1 if n is None else depth[n.id]
            for x in reversed(chain):
                d += 1
                depth[x.id] = d
        return depth

    def _subtree(self, root: Node) -> list[Node]:
        out, stack = [], [root]
        while stack:
            n = stack.pop()
            out.append(n)
            # children in the order of their first pages' tokens (siblings' first pages differ,
            # so comparing whole keys compares them)
            stack.extend(sorted(n.children.values(), key=lambda c: c.key))
        return out

    # ----------------------------------------------------------------- host tier
    def start_writeback(self, node_id: int) -> Transfer | None:
        """Copy the device path down to ``node`` onto host pages (HOST-2).

        Returns None when there is nothing to copy, when part of the path is already in flight
        (HOST-5), or when the host pool has too few free pages (the caller may evict host first).
        """
        return self._start(self._node(node_id), "writeback")

    def start_loadback(self, node_id: int) -> Transfer | None:
        """Copy the host path down to ``node`` back onto new device pages (HOST-3)."""
        return self._start(self._node(node_id), "loadback")

    def _start(self, node: Node, kind: str) -> Transfer | None:
        src, dst = (DEVICE, HOST) if kind == "writeback" else (HOST, DEVICE)
        if node.pages(src) is None:
            raise CacheError("not_on_tier", f"node {node.id} holds no {src} pages to copy")
        path = missing_path(node, dst)
        if not path or any(n.pending is not None for n in path):
            return None
        src_pages = [pg for n in path for pg in n.pages(src) or []]
        self._next_op += 1
        op = self._next_op
        dst_pages = self.pools[dst].alloc(len(src_pages), transfer_owner(op))
        if dst_pages is None:
            self._next_op -= 1
            return None
        locks = [self._locks.acquire(node, src, internal=True)]
        anchor = path[0].parent
        if anchor is not None:
            # The parent's copy on the destination tier must stay until the copied pages hang
            # below it, or they would land under a node that left the tier (HOST-1, HOST-2).
            locks.append(self._locks.acquire(anchor, dst, internal=True))
        for n in path:
            n.pending = op
        t = Transfer(op, kind, node, list(zip(src_pages, dst_pages, strict=True)), locks)
        self._transfers[op] = t
        return t

    def finish_transfer(self, op_id: int, success: bool) -> Transfer:
        """Complete an in-flight transfer; on failure its destination pages are freed (HOST-4)."""
        t = self._transfers.pop(op_id, None)
        if t is None:
            raise CacheError("unknown_op", f"transfer {op_id} is not in flight")
        now = self.clock.now
        dst_of = dict(t.pairs)  # the copies not placed yet
        owner = transfer_owner(op_id)
        src = t.src_tier
        path = t.node.path()  # what follows moves pages and pins, never nodes
        for n in path:
            if n.pending != op_id:
                continue
            n.pending = None
            if not success:
                continue
            src_pages = n.pages(src) or []
            mine = [dst_of.pop(pg) for pg in src_pages]
            if t.kind == "writeback" and n.host is None:
                self.pools[HOST].move(mine, owner, node_owner(n.id))
                self._set_pages(n, HOST, mine)
                n.host_access = now  # D243-2: a just-written node is not the first host victim
            elif t.kind == "writeback":
                # A prefetch filled this part on host while the copy was in flight (L3-3).
                self.pools[HOST].release(mine, owner)
            elif n.device is None:
                self._attach_device(n, mine, owner, now)
            else:
                # The caller inserted this part on device while the copy was in flight.
                self.pools[DEVICE].release(mine, owner)
        leftover = self.pools[t.dst_tier].held_by(dst_of.values(), owner)
        if leftover:
            self.pools[t.dst_tier].release(leftover, owner)
        for handle in t.locks:
            self._locks.release(handle, internal=True)  # the nodes it unpins are offered
        for n in path:  # filled or stamped: may be a victim now
            self._victims.offer(n)
        if self._ghosts:
            self._sweep_ghosts()
        return t

    # ----------------------------------------------------------------- events and views
    def _emit(self, event: KVEvent) -> None:
        if self.config.enable_events:
            self._events.append(event)

    def drain_events(self) -> list[KVEvent]:
        out, self._events = self._events, []
        return out

    def snapshot(self) -> CacheSnapshot:
        """The white-box view. A node whose fields are as they were at the last snapshot keeps
        the view it had then, and so does each part (a pool, the node list, the locks, a
        transfer) equal to the last one: a snapshot equal to the last one is the last one. Its
        cost follows what changed, plus one short comparison per node and per part, and an
        oracle that judged the last one can tell by identity what it need not judge again."""
        last = self._last
        nodes = self._node_views()
        locks = self._lock_views_now()
        transfers = self._transfer_views_now()
        roots = {ns: r.id for ns, r in self._roots.items()}
        l3 = tuple(L3View(t.op_id, t.kind, t.node.id, t.start, tuple(t.pages))
                   for t in self._l3.values()) if self._l3 else ()
        if last is None:
            pools = {t: p.view() for t, p in self.pools.items()}
        else:
            was = last.pools
            pools = {t: p.view(was.get(t)) for t, p in self.pools.items()}
            # A part equal to the last one's is that one: equal parts of two snapshots are one
            # object, so a reader compares them by identity. (The node list and the locks are
            # the last ones already when equal: ``_node_views``, ``_lock_views_now``.)
            if pools == was:
                pools = was
            if roots == last.roots:
                roots = last.roots
            if nodes is not last.nodes and nodes == last.nodes:
                nodes = last.nodes
            if locks is not last.locks and locks == last.locks:
                locks = last.locks
            if transfers is not last.transfers and transfers == last.transfers:
                transfers = last.transfers
            if l3 is not last.l3 and l3 == last.l3:
                l3 = last.l3
            if (nodes is last.nodes and pools is was and roots is last.roots
                    and locks is last.locks and transfers is last.transfers and l3 is last.l3):
                return last
        snap = CacheSnapshot(self.page_size, pools, nodes, roots, locks, transfers, l3)
        self._last = snap
        return snap

    def _transfer_views_now(self) -> tuple[TransferView, ...]:
        """The copies in flight; each keeps its view from one snapshot to the next while it
        shows the same node and pages."""
        if not self._transfers:
            self._transfer_made = {}
            return ()
        made = self._transfer_made
        now: dict[int, TransferView] = {}
        for op, t in self._transfers.items():
            pairs = tuple(t.pairs)
            view = made.get(op)
            if (view is None or view.op_id != t.op_id or view.kind != t.kind
                    or view.node != t.node.id or view.pairs != pairs):
                view = TransferView(t.op_id, t.kind, t.node.id, pairs)
            now[op] = view
        self._transfer_made = now
        return tuple(now.values())

    def _node_views(self) -> tuple[NodeView, ...]:
        """Every node's view, parents before children; a node whose fields are as they were at
        the last snapshot keeps the view it had then, and the node list is the last one's
        when every view is. One pass along the last order while the tree's shape (its nodes,
        each one's parent and key length) is as it was; the order again when it is not."""
        if self._last is not None and len(self._order) == len(self._nodes) \
                and self._nodes.keys() == self._ids:
            out = self._views_along(self._last.nodes)
            if out is not None:
                return out
        return self._views_reordered()

    def _views_along(self, shown: tuple[NodeView, ...]) -> tuple[NodeView, ...] | None:
        """The views along the last snapshot's order, whose nodes are the tree's now:
        ``shown``, the last snapshot's node list, while every node shows the fields its view
        was made from (the usual case: one comparison a node, nothing made), else each node's
        view, made again where its fields changed. None as soon as a node shows the shape
        changed (reparented, or its key of another length: the offsets below it move)."""
        order, fields = self._order, _FIELDS
        changed = 0  # the first node whose fields changed
        for n, _start, seen, _view in order:
            if (fields(n) if not n.keys else (*fields(n), tuple(n.keys))) != seen:
                break
            changed += 1
        else:
            return shown
        nodes = self._nodes
        entries = order[:changed]
        out = [view for _n, _start, _seen, view in entries]
        for entry in order[changed:]:
            n, start, seen, view = entry
            now = fields(n) if not n.keys else (*fields(n), tuple(n.keys))
            if now != seen:
                if now[0] is not seen[0] or len(now[1]) != len(seen[1]) \
                        or nodes.get(n.id) is not n:
                    return None
                view = self._node_view(n, start, now, entry)
                entry = (n, start, now, view)
            entries.append(entry)
            out.append(view)
        self._order = entries
        return tuple(out)

    def _views_reordered(self) -> tuple[NodeView, ...]:
        """Every node's view in a new order (``_ordered``): the last one where the node's
        fields and offset are as they were, else one made now."""
        last = {entry[0].id: entry for entry in self._order}
        entries: list[tuple[Node, int, tuple, NodeView]] = []
        out: list[NodeView] = []
        fields = _FIELDS
        for n, start in self._ordered():
            now = fields(n) if not n.keys else (*fields(n), tuple(n.keys))
            old = last.get(n.id)
            if old is not None and old[2] == now and old[1] == start:
                view = old[3]
            else:
                view = self._node_view(n, start, now, old)
            entries.append((n, start, now, view))
            out.append(view)
        self._order = entries
        self._ids = set(self._nodes)
        return tuple(out)

    def _node_view(self, n: Node, start: int, seen: tuple,
                   old: tuple[Node, int, tuple, NodeView] | None) -> NodeView:
        """``n``'s view, its key at token offset ``start``, made from the fields ``seen``;
        ``old`` the node's entry in the last order, if it had one."""
        parent = n.parent
        # A node whose key is the one its last view was made from (most often only its
        # access times or pins moved) shows the same tokens: that view's tuple of them.
        key = old[3].key if old is not None and old[2][1] is seen[1] else tuple(n.key)
        return NodeView(  # by position: the fields in ``NodeView``'s order
            n.id, n.namespace, parent.id if parent is not None else None, start,
            key, n.device, n.host, n.hashes, n.device_ref, n.host_ref,
            n.device_access, n.host_access, n.seq, n.pending,
            tuple(k.hex() for k in n.keys) if n.keys else (),
        )

    def _ordered(self) -> list[tuple[Node, int]]:
        """Every node with the token offset of its key, parents before children (by depth,
        then id: a split parent gets a larger id than its child)."""
        depth = self._depths()
        order: list[tuple[Node, int]] = []
        starts: dict[int, int] = {}
        for n in sorted(self._nodes.values(), key=lambda n: (depth[n.id], n.id)):
            parent = n.parent
            start = 0 if parent is None else starts[parent.id] + len(parent.key)
            starts[n.id] = start
            order.append((n, start))
        return order

    def _lock_views_now(self) -> tuple[LockView, ...]:
        """The locks held, as the last snapshot showed them while they are the same locks (a
        lock never changes while it is held); each held lock keeps its view from one snapshot
        to the next."""
        held = self._locks.held()
        last = self._held
        if last is not None and last[0] == held:  # the same handles, each the same lock
            return last[1]
        made = self._lock_made
        now: dict[int, tuple[Lock, LockView]] = {}
        for h, lk in held.items():
            got = made.get(h)
            if got is None or got[0] is not lk or got[1].node != lk.node.id:
                got = (lk, LockView(h, lk.node.id, lk.tier, lk.internal))
            now[h] = got
        views = tuple(v for _, v in now.values())
        self._lock_made = now
        self._held = (held, views)
        return views


# What a node's view shows of it, besides its offset and L3 keys (``PrefixCache.snapshot``):
# with its L3 keys copied (a list may change in place), what the view is made from and what the
# next snapshot compares. A key is the same array object while the node keeps it (``_split``
# gives the node a new one).
_FIELDS = attrgetter("parent", "key", "device", "host", "hashes", "device_ref", "host_ref",
                     "device_access", "host_access", "pending")
