"""SGLang's ``RadixCache`` (``sglang.srt.mem_cache.radix_cache``) at the cache level.

The tree stores one KV slot index per token; the adapter owns the slot pool as SGLang's
allocator would, in whole pages (page ``g`` is slots ``g*p .. g*p+p-1``), and plays the part of
SGLang's own caller where the tree leaves work to it: ``RadixCache.insert`` does not free the
caller's duplicate slots, ``RadixCache._insert_cache`` does (it frees the row's slots between the
protected prefix and the returned prefix length), so the adapter frees exactly those.

Namespaces are SGLang's: a LoRA ``extra_key`` registered with the event recorder's name table
(``sglang-radix``) or a ``cache_salt`` (``sglang-radix-salt``); both are part of the child key,
so namespaces never share nodes. There is no host tier (HiCache is another class) and no lock
handle: ``dec_lock_ref(node)`` names a node, so the kit can only demand a rejection when that
node's count is zero (PIN-3). Access times are SGLang's wall clock; ``tick`` is ignored.
Node objects are mapped to adapter-local integers in the order first seen, so no object identity
reaches what the kit compares.

The tree is plain Python, so the adapter offers a white-box ``snapshot`` read from it: each node's
key, slots (as pages), ``lock_ref``, creation counter (``TreeNode.id``, the sequence number) and
published event hashes (the recorder's own), and its ``last_access_time`` as a rank among the
nodes', which keeps the order SGLang evicts by without a wall-clock value. SGLang keeps one root
for every namespace (the namespace is part of the child key); the snapshot gives each namespace a
root of its own, as the kit's model has, with that namespace's children under it. The free pages
are the allocator's; a page neither free nor in the tree is the caller's. SGLang keeps no list
of locks, only counts, so the locks listed are the ones the adapter passed on and did not
release: the reference counts they imply are checked against SGLang's ``lock_ref`` (PIN-1).
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Sequence
from importlib import import_module, metadata
from types import SimpleNamespace
from typing import Any

from kvconf.conformance.adapters import stand_ins
from kvconf.conformance.adapters.device_only import DeviceOnly
from kvconf.conformance.adapters.peer_events import MASK64, to_kit_events
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.protocol import Inserted, Match
from kvconf.conformance.errors import EngineUnavailable
from kvconf.reference.kv_events import KVEvent
from kvconf.reference.snapshot import CacheSnapshot, LockView, NodeView, PoolView
from kvconf.reference.tiers import Tier

SOURCE = "https://github.com/sgl-project/sglang/blob/v{version}/python/sglang/srt/mem_cache/{file}"


def sglang_modules() -> SimpleNamespace:
    """The SGLang modules the cache adapters call, or EngineUnavailable saying why not."""
    stand_ins.install()
    try:
        mc = "sglang.srt.mem_cache."
        return SimpleNamespace(
            radix=import_module(mc + "radix_cache"),
            base=import_module(mc + "base_prefix_cache"),
            events=import_module(mc + "events"),
            utils=import_module(mc + "utils"),
            kv_events=import_module("sglang.srt.disaggregation.kv_events"),
            version=metadata.version("sglang"),
        )
    except Exception as e:  # an ImportError, or an import chain that fails on this machine
        raise EngineUnavailable(
            f"sglang cannot be imported ({type(e).__name__}: {e}); install it with "
            ".ci/install-peers.sh"
        ) from None


class PagePool:
    """The slot allocator SGLang's tree frees into, handing out whole pages, lowest id first."""

    device = "cpu"

    def __init__(self, pages: int, page_size: int) -> None:
        self.page_size = page_size
        self.free_pages = list(range(pages))
        heapq.heapify(self.free_pages)

    def alloc(self, n: int) -> list[int] | None:
        if n > len(self.free_pages):
            return None
        return [heapq.heappop(self.free_pages) for _ in range(n)]

    def release(self, pages: Sequence[int]) -> None:
        for g in pages:
            heapq.heappush(self.free_pages, int(g))

    def free_segment(self, indices: Any, start_pos: int = 0) -> None:
        """SGLang's allocator call: free these slots (whole pages)."""
        self.release(slots_to_pages(indices, self.page_size))


def slots_to_pages(slots: Any, page_size: int) -> list[int]:
    return [int(s) // page_size for s in list(slots)[::page_size]]


class SGLangRadixAdapter(DeviceOnly):
    engine_label = "sglang RadixCache"
    name = "sglang-radix"
    namespace_part = "extra_key"  # the RadixKey field that carries a namespace
    features = frozenset({Feature.NAMESPACES, Feature.KV_EVENTS, Feature.SNAPSHOT})
    lacks = {  # why, each in the NOT_SUPPORTED cases' reason (docs/peers.md)
        Feature.HOST_TIER: "RadixCache keeps device KV only; the host tier is HiRadixCache, "
                           "judged as the engine sglang-hicache",
        Feature.UNLOAD: "unloading a LoRA adapter (LoRAManager.unload_lora_adapter) does not "
                        "touch the radix cache: its nodes stay until evicted",
        Feature.SCHEDULER: "SGLang's scheduler is not driven by the kit; only its radix cache",
    }

    def __init__(self, config: EngineConfig) -> None:
        sg = sglang_modules()
        self.sg = sg
        self.version = sg.version
        self.page_size = p = config.page_size
        self.page_ids = (config.device_pages, 0)
        self.pool = PagePool(config.device_pages, p)
        self.names = sg.events.KvEventLoraNames()
        self.cache = sg.radix.RadixCache.create_simulated(
            mock_allocator=self.pool, page_size=p, enable_kv_cache_events=True,
            kv_event_lora_names=self.names,
        )
        self._nodes: list[Any] = []  # handle -> node
        self._handles: dict[int, int] = {}  # id(node) -> handle (nodes stay referenced)
        self._locks: list[Any] = []  # lock handle -> node
        self._live: set[int] = set()  # lock handles passed on and not released
        self._lock_nodes: list[int] = []  # lock handle -> the node handle it was taken on
        self._vroots: dict[int, int] = {}  # namespace -> the handle of its root in snapshots
        self._digests: dict[int, str] = {}  # published hash -> SHA-256 chain digest
        self._ns_of: dict[str, int] = {}  # extra key or salt -> namespace

    # ----------------------------------------------------------------- mapping
    def _part(self, ns: int) -> str | None:
        if ns == 0:
            return None
        part = f"kvconf-{self.namespace_part}-{ns}"
        if part not in self._ns_of:
            self._ns_of[part] = ns
            if self.namespace_part == "extra_key":  # a LoRA request names its adapter
                self.names.register(SimpleNamespace(lora_id=part, extra_key=part), part)
        return part

    def _key(self, ns: int, tokens: Sequence[int]) -> Any:
        from array import array

        part = self._part(ns)
        kw = {self.namespace_part: part} if part is not None else {}
        return self.sg.radix.RadixKey(array("q", tokens), **kw)

    def _handle(self, node: Any) -> int:
        h = self._handles.get(id(node))
        if h is None:
            h = self._handles[id(node)] = len(self._nodes)
            self._nodes.append(node)
        return h

    def _pages_to(self, node: Any, n_tokens: int) -> tuple[int, ...]:
        if n_tokens == 0:
            return ()
        slots = self.cache.path_device_indices(node)[:n_tokens]
        return tuple(slots_to_pages(slots.tolist(), self.page_size))

    # ----------------------------------------------------------------- protocol
    def tick(self) -> None:
        """SGLang stamps access times from the wall clock."""

    def alloc(self, n: int) -> list[int] | None:
        return self.pool.alloc(n)

    def free(self, pages: Sequence[int]) -> None:
        self.pool.release(pages)

    def match(self, namespace: int, tokens: Sequence[int]) -> Match:
        params = self.sg.base.MatchPrefixParams(key=self._key(namespace, tokens))
        m = self.cache.match_prefix(params)
        n = int(m.device_prefix_len)
        node = self._handle(m.last_device_node)
        root = self._vroot(namespace) if namespace else self._handle(self.cache.root_node)
        if m.last_device_node is self.cache.root_node:
            node = root
        return Match(n, 0, self._pages_to(m.last_device_node, n), (), node, root)

    def insert(self, namespace: int, tokens: Sequence[int], pages: Sequence[int]) -> Inserted:
        import torch

        p = self.page_size
        slots = torch.tensor([g * p + j for g in pages for j in range(p)], dtype=torch.int64)
        params = self.sg.base.InsertParams(key=self._key(namespace, tokens), value=slots)
        r = self.cache.insert(params)
        n = int(r.prefix_len)
        held = self._pages_to(r.last_device_node, n)
        # What RadixCache._insert_cache frees: the caller's slots the tree already held.
        dup = [g for g, t in zip(pages[: n // p], held, strict=True) if g != t]
        self.pool.release(dup)
        return Inserted(n, tuple(dup))

    def lock(self, node: int, tier: Tier) -> int:
        """A lock on the host tier can only be of the root (no host tier): a no-op there too."""
        target = self._nodes[node]
        self.cache.inc_lock_ref(target)
        self._locks.append(target)
        self._lock_nodes.append(node)
        self._live.add(len(self._locks) - 1)
        return len(self._locks) - 1

    def unlock(self, handle: int) -> None:
        """Every unlock goes to the engine: the adapter keeps no count that could refuse one."""
        self.cache.dec_lock_ref(self._locks[handle])
        self._live.discard(handle)

    def evict(self, tier: Tier, num_pages: int) -> int:
        if tier is Tier.HOST:
            return 0
        r = self.cache.evict(self.sg.base.EvictParams(num_tokens=num_pages * self.page_size))
        return int(r.num_tokens_evicted) // self.page_size

    def drain_events(self) -> list[KVEvent]:
        return to_kit_events(self.cache.take_events(), self.sg.kv_events, self._event_namespace)

    def _event_namespace(self, ev: Any) -> int:
        part = ev.cache_salt if self.namespace_part == "cache_salt" else ev.lora_name
        return self._ns_of.get(part, 0) if part else 0

    def block_hash(self, parent: int | None, namespace: int, tokens: Sequence[int]) -> int:
        """SGLang's published hash, recomputed: the SHA-256 chain digest of the page (from the
        parent's digest, or the namespace's seed at a root), its first 64 bits, then namespaced
        with the LoRA's seed. A parent this adapter never hashed yields no valid hash."""
        u = self.sg.utils
        part = self._part(namespace)
        if parent is not None:
            prior = self._digests.get(parent)
            if prior is None:
                return -1
        elif part is not None and self.namespace_part == "cache_salt":
            prior = hashlib.sha256(b"sglang-cache-salt-v1\0" + part.encode()).hexdigest()
        else:
            prior = None
        digest = u.get_hash_str(list(tokens), prior, page_size=len(tokens))[0]
        seed = None
        if part is not None and self.namespace_part == "extra_key":
            seed = self.sg.kv_events.kv_event_namespace_seed(extra_key=part, cache_salt=None)
        h = self.sg.kv_events.namespaced_block_hash(u.hash_str_to_int64(digest),
                                                    namespace_seed=seed) & MASK64
        self._digests.setdefault(h, digest)
        return h

    def snapshot(self) -> CacheSnapshot:
        """The tree as SGLang holds it (see the module docstring for what is read how)."""
        root = self.cache.root_node
        root_id = self._handle(root)
        p = self.page_size
        order: list[tuple[Any, int | None, int]] = []  # (node, parent handle, start)
        queue: list[tuple[Any, int | None, int]] = [(root, None, 0)]
        while queue:
            node, parent, start = queue.pop(0)
            order.append((node, parent, start))
            me = self._handle(node)
            for child in node.children.values():
                ns = self._namespace_of(child)
                up = me if node is not root or ns == 0 else self._vroot(ns)
                queue.append((child, up, start + len(child.key)))
        times = sorted({n.last_access_time for n, _, _ in order})
        rank = {t: i for i, t in enumerate(times)}
        tree_pages: dict[int, int] = {}
        nodes: list[NodeView] = []
        for ns in sorted(self._vroots):
            nodes.append(NodeView(self._vroots[ns], ns, None, 0, (), (), (), (), 0, 0, 0, 0, -1,
                                  None))
        for node, parent, start in order:
            me = self._handle(node)
            if node is root:
                nodes.append(NodeView(me, 0, None, 0, (), (), (), (), 0, 0, 0, 0, node.id, None))
                continue
            pages = tuple(slots_to_pages(node.value.tolist(), p))
            for g in pages:
                tree_pages[g] = me
            nodes.append(NodeView(
                me, self._namespace_of(node), parent, start - len(node.key),
                tuple(int(t) for t in node.key.token_ids), pages, None, self._hashes(node),
                int(node.lock_ref), 0, rank[node.last_access_time], 0, node.id, None,
            ))
        free = tuple(sorted(self.pool.free_pages))
        free_set = set(free)
        size = self.page_ids[0]
        owners = tuple(
            "free" if g in free_set else
            f"node:{tree_pages[g]}" if g in tree_pages else "caller"
            for g in range(size)
        )
        locks = tuple(LockView(h, self._lock_nodes[h], Tier.DEVICE, False)
                      for h in sorted(self._live))
        return CacheSnapshot(
            page_size=p,
            pools={Tier.DEVICE: PoolView(Tier.DEVICE, size, free, owners),
                   Tier.HOST: PoolView(Tier.HOST, 0, (), ())},
            nodes=tuple(nodes),
            roots={0: root_id, **self._vroots},
            locks=locks,
            transfers=(),
        )

    def _namespace_of(self, node: Any) -> int:
        part = getattr(node.key, self.namespace_part, None)
        return self._ns_of.get(part, 0) if part is not None else 0

    def _vroot(self, ns: int) -> int:
        """The handle standing for namespace ``ns``'s root: SGLang has one root for all, which
        is what a lock of it locks."""
        if ns not in self._vroots:
            self._nodes.append(self.cache.root_node)
            self._vroots[ns] = len(self._nodes) - 1
        return self._vroots[ns]

    def _hashes(self, node: Any) -> tuple[int, ...]:
        """The hashes SGLang publishes for the node's pages, from its own event recorder."""
        rec = self.cache.kv_events
        seed = rec._namespace_seed(node)
        kv = self.sg.kv_events
        return tuple(
            kv.namespaced_block_hash(self.sg.utils.hash_str_to_int64(v), namespace_seed=seed)
            & MASK64 for v in rec._node_event_hash_values(node)
        )


class SGLangRadixSaltAdapter(SGLangRadixAdapter):
    """The same tree with each namespace a ``cache_salt`` instead of a LoRA extra key."""

    name = "sglang-radix-salt"
    namespace_part = "cache_salt"
