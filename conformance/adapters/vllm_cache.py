"""vLLM's ``KVCacheManager`` (``vllm.v1.core.kv_cache_manager``) at the cache level.

vLLM has no tree: its prefix cache is a map from chained block hashes to blocks, and every block
of the pool sits either in a request's block table (reference count above zero) or in one free
queue, cached or not, whose head is the next to be reused. The adapter speaks the kit's protocol
through vLLM's own calls, one request per operation:

- ``match``: ``get_computed_blocks`` for a request of the query. vLLM caps a hit at the query's
  length minus one (the last token must be computed for its logits), rounded down to a block, so
  the adapter declares ``match_leaves_last`` (TREE-1).
- ``lock``: a request that adopts the matched blocks with ``allocate_slots(req, 0, n, blocks)``,
  as a request with a full hit does; the lock handle is that request, ``unlock`` is ``free``. A
  lock of the empty prefix holds nothing and needs no request.
- ``alloc`` / ``insert``: ``allocate_slots`` split in two so the kit can fill the pages between
  the halves: ``alloc`` is ``BlockPool.get_new_blocks``, ``insert`` puts the blocks in a request's
  block table as ``allocate_new_blocks`` does, runs vLLM's ``cache_blocks``, and releases the
  request's own blocks with ``free_blocks`` in vLLM's order (tail first).
- ``evict``: vLLM evicts inside ``get_new_blocks``, dropping the hash of every cached block it
  pops from the free queue's head. The adapter makes that step explicit: ``evict(n)`` drops the
  hashes of the first ``n`` cached blocks of the free queue with ``evict_blocks``, and ``alloc``
  declines (returns None) when the blocks it would pop still hold hashes, so the driver evicts
  first. The blocks and their order are vLLM's; the driver's evict-then-alloc may take a few
  more cached blocks than one ``get_new_blocks`` would when uncached blocks sit among them.

Namespaces are vLLM's extra hash keys: a LoRA request (``vllm``; name and path enter every
block's hash) or a ``cache_salt`` (``vllm-salt``; it enters the first block's hash only). Block 0
is vLLM's null block, so page ids run from 1 (``page_ids``). There is no host tier, and recency
is the order blocks were released in; ``tick`` is ignored.

The white-box view is a hash-keyed cache's (POOL-7, ``BlockSnapshot``), read from the
``BlockPool``: every block's ``ref_cnt`` and the hashes it carries (``block_hash`` and
``cached_block_hashes_by_block``), the free queue in order (``get_all_free_blocks``), the
``cached_block_hash_to_block`` map with its blocks in the order it serves them, and the
full-attention manager's ``req_to_blocks`` (the block tables; a lock's request names its
handle). vLLM keeps only a block's hash; what a hash stands for (parent hash, namespace, tokens)
is recorded from each request's ``block_hashes``, which vLLM's block hasher computed.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import import_module, metadata
from types import SimpleNamespace
from typing import Any

from kvconf.conformance.adapters import stand_ins
from kvconf.conformance.adapters.device_only import DeviceOnly
from kvconf.conformance.adapters.peer_events import MASK64, to_kit_events
from kvconf.conformance.engine.block_snapshot import BlockSnapshot, BlockView, ChainLink, TableView
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.protocol import Inserted, Match
from kvconf.conformance.errors import EngineRejected, EngineUnavailable
from kvconf.reference.kv_events import KVEvent
from kvconf.reference.tiers import Tier

SOURCE = "https://github.com/vllm-project/vllm/blob/v{version}/vllm/v1/core/{file}"


def vllm_modules() -> SimpleNamespace:
    """The vLLM modules the adapter calls, or EngineUnavailable saying why not."""
    stand_ins.install()
    try:
        core = "vllm.v1.core."
        mods = SimpleNamespace(
            manager=import_module(core + "kv_cache_manager"),
            utils=import_module(core + "kv_cache_utils"),
            spec=import_module("vllm.v1.kv_cache_interface"),
            request=import_module("vllm.v1.request"),
            sampling=import_module("vllm.sampling_params"),
            lora=import_module("vllm.lora.request"),
            hashing=import_module("vllm.utils.hashing"),
            events=import_module("vllm.distributed.kv_events"),
            version=metadata.version("vllm"),
        )
    except Exception as e:  # an ImportError, or an import chain that fails on this machine
        raise EngineUnavailable(
            f"vllm cannot be imported ({type(e).__name__}: {e}); install it with "
            ".ci/install-peers.sh"
        ) from None
    mods.utils.init_none_hash(mods.hashing.sha256)  # the fixed-seed, reproducible NONE_HASH
    return mods


def external_hash(h: bytes) -> int:
    """vLLM's event form of a block hash (``maybe_convert_block_hash``): its last 64 bits."""
    return int.from_bytes(h, "big") & MASK64


class VLLMAdapter(DeviceOnly):
    engine_label = "vLLM's KVCacheManager"
    name = "vllm"
    namespace_part = "lora"  # "lora" | "cache_salt": what carries a namespace
    features = frozenset({
        Feature.NAMESPACES, Feature.KV_EVENTS, Feature.LOCK_HANDLES, Feature.MATCH_LEAVES_LAST,
        Feature.PAGE_EVICTION, Feature.BLOCK_SNAPSHOT, Feature.RESET,
    })
    lacks = {  # why, each in the NOT_SUPPORTED cases' reason (docs/peers.md)
        Feature.HOST_TIER: "the KVCacheManager has one GPU block pool; CPU offloading is a KV "
                           "connector (OffloadingConnector), not the manager",
        Feature.UNLOAD: "unloading a LoRA adapter does not touch the prefix cache: its blocks "
                        "stay until evicted",
        Feature.SCHEDULER: "vLLM's v1 Scheduler is judged as the engine vllm-scheduler",
        Feature.HYBRID: "the manager with full, sliding-window and Mamba groups is judged as the "
                        "engine vllm-hybrid",
    }

    def __init__(self, config: EngineConfig) -> None:
        v = vllm_modules()
        self.v = v
        self.version = v.version
        self.page_size = p = config.page_size
        self.page_ids = (config.device_pages + 1, 0)  # block 0 is the null block
        import torch

        spec = v.spec.FullAttentionSpec(block_size=p, num_kv_heads=1, head_size=8,
                                        dtype=torch.float16)
        cfg = v.spec.KVCacheConfig(
            num_blocks=config.device_pages + 1, kv_cache_tensors=[],
            kv_cache_groups=[v.spec.KVCacheGroupSpec(["layers.0.attn"], spec)],
        )
        self.mgr = v.manager.KVCacheManager(
            cfg, max_model_len=1 << 20, scheduler_block_size=p, hash_block_size=p,
            enable_caching=True, enable_kv_cache_events=True,
        )
        self.pool = self.mgr.block_pool
        self.table = self.mgr.coordinator.single_type_managers[0]  # the full-attention group
        self.hasher = v.utils.get_request_block_hasher(p, v.hashing.sha256)
        self._requests = 0
        self._nodes: list[tuple[int, tuple[int, ...], Any]] = []  # handle -> (ns, prefix, blocks)
        self._locks: list[Any] = []  # lock handle -> vLLM request, or None for the empty prefix
        self._digests: dict[int, bytes] = {}  # published hash -> vLLM's block hash
        self._event_ns: dict[int, int] = {}  # published hash -> namespace, from stored events
        self._links: dict[int, ChainLink] = {}  # published hash -> what vLLM hashed into it
        self._handles: dict[str, int] = {}  # a lock's request id -> its lock handle
        self._keys: dict[bytes, int] = {}  # vLLM's map key -> the published hash
        self._views: dict[int, tuple] = {}  # block id -> (count, keys, its last view)

    # ----------------------------------------------------------------- mapping
    def _request(self, ns: int, tokens: Sequence[int]) -> Any:
        """A fresh vLLM request of ``tokens`` in namespace ``ns``; ids are sequential."""
        v = self.v
        self._requests += 1
        kw: dict[str, Any] = {}
        if ns and self.namespace_part == "lora":
            kw["lora_request"] = v.lora.LoRARequest(f"kvconf-lora-{ns}", ns, f"kvconf/lora/{ns}")
        elif ns:
            kw["cache_salt"] = f"kvconf-salt-{ns}"
        req = v.request.Request(
            f"kvconf-{self._requests}", list(tokens), v.sampling.SamplingParams(max_tokens=1),
            None, arrival_time=0.0, block_hasher=self.hasher, **kw,
        )
        for h in req.block_hashes:
            self._digests.setdefault(external_hash(h), h)
        return req

    def _link(self, req: Any, ns: int, tokens: Sequence[int]) -> None:
        """What each block hash of ``req`` stands for, as vLLM's hasher chained it (the view's
        ``links``): every hash the map can hold is one an insert's request was hashed to."""
        p, parent = self.page_size, None
        for i, h in enumerate(req.block_hashes):
            ext = external_hash(h)
            if ext not in self._links:
                self._links[ext] = ChainLink(parent, ns, tuple(tokens[i * p : (i + 1) * p]))
            parent = ext

    def _ns_of(self, ev: Any) -> int:
        if ev.lora_name:
            return int(ev.lora_name.rsplit("-", 1)[1])
        first = (ev.extra_keys or [None])[0]
        if first:
            salt = next((k for k in first if isinstance(k, str) and k.startswith("kvconf-salt-")),
                        None)
            if salt is not None:
                return int(salt.rsplit("-", 1)[1])
        parent = ev.parent_block_hash
        return self._event_ns.get(parent, 0) if parent is not None else 0

    # ----------------------------------------------------------------- protocol
    def tick(self) -> None:
        """vLLM's recency is the order blocks are released in; it has no clock to advance."""

    def alloc(self, n: int) -> list[int] | None:
        """``get_new_blocks(n)``, unless the blocks it would pop still hold hashes: those are
        evicted first, through ``evict``, so the kit sees every eviction."""
        if n > self.pool.get_num_free_blocks():
            return None
        head = self._free_queue()[:n]
        if any(b.block_hash is not None for b in head):
            return None
        return [b.block_id for b in self.pool.get_new_blocks(n)]

    def free(self, pages: Sequence[int]) -> None:
        self.pool.free_blocks(self.pool.blocks[g] for g in pages)

    def match(self, namespace: int, tokens: Sequence[int]) -> Match:
        if not tokens:  # vLLM refuses empty prompts at its input; the empty prefix is the root
            root = self._root(namespace)
            return Match(0, 0, (), (), root, root)
        req = self._request(namespace, tokens)
        blocks, n, _ = self.mgr.get_computed_blocks(req)
        ids = tuple(blocks.get_block_ids()[0]) if n else ()
        self._nodes.append((namespace, tuple(tokens[:n]), blocks if n else None))
        handle = len(self._nodes) - 1
        return Match(n, 0, ids, (), handle, self._root(namespace))

    def _root(self, ns: int) -> int:
        self._nodes.append((ns, (), None))
        return len(self._nodes) - 1

    def insert(self, namespace: int, tokens: Sequence[int], pages: Sequence[int]) -> Inserted:
        p = self.page_size
        if len(tokens) % p or len(pages) * p != len(tokens):
            raise EngineRejected("bad_insert", f"{len(tokens)} tokens with {len(pages)} pages")
        req = self._request(namespace, tokens)
        self._link(req, namespace, tokens)
        blocks = [self.pool.blocks[g] for g in pages]
        cached = 0
        for h in req.block_hashes:
            if self.pool.get_cached_block(h, [0]) is None:
                break
            cached += 1
        # The blocks the tree already holds at their place (an extend passes the matched ones):
        # vLLM's allocate_new_computed_blocks counts them as cached for this request.
        own = 0
        for b, h in zip(blocks, req.block_hashes, strict=False):
            if b.block_hash is None or self.pool.cached_block_hash_to_block.get_one_block(
                    self.v.utils.make_block_hash_with_group_id(h, 0)) is not b:
                break
            own += 1
        self.table.req_to_blocks[req.request_id] = list(blocks)
        self.table.num_cached_block[req.request_id] = own
        self.mgr.cache_blocks(req, len(tokens))
        held = self.mgr.pop_blocks_for_free(req)
        # The caller's blocks go back to the pool as a finished request's do, tail first; the
        # tree's own blocks stay as their holders left them.
        self.pool.free_blocks(reversed(held[own:]))
        return Inserted(cached * p, ())

    def lock(self, node: int, tier: Tier) -> int:
        ns, prefix, blocks = self._nodes[node]
        if tier is Tier.HOST or not prefix:
            self._locks.append(None)  # the empty prefix: nothing to hold
            return len(self._locks) - 1
        req = self._request(ns, prefix)
        got = self.mgr.allocate_slots(req, 0, len(prefix), blocks)
        if got is None:
            raise EngineRejected("no_space", "allocate_slots found no room to adopt the hit")
        self._locks.append(req)
        self._handles[req.request_id] = len(self._locks) - 1
        return len(self._locks) - 1

    def unlock(self, handle: int) -> None:
        """``free(request)``; every unlock goes to vLLM, which keeps no record to refuse one."""
        req = self._locks[handle]
        if req is not None:
            self.mgr.free(req)

    def evict(self, tier: Tier, num_pages: int) -> int:
        if tier is Tier.HOST:
            return 0
        victims = [b.block_id for b in self._free_queue() if b.block_hash is not None]
        for bid in victims[:num_pages]:
            self.mgr.evict_blocks({bid})  # one at a time: the order is the queue's
        return min(num_pages, len(victims))

    def reset(self) -> bool:
        """``KVCacheManager.reset_prefix_cache``: refused (False, nothing changed) while any
        block but the null block is in use, a caller's lock or a page it allocated included;
        otherwise every block's hash is dropped and AllBlocksCleared published (EVICT-8,
        EVICT-9, EVENT-9)."""
        return bool(self.mgr.reset_prefix_cache())

    def _free_queue(self) -> list[Any]:
        return self.pool.free_block_queue.get_all_free_blocks()

    def drain_events(self) -> list[KVEvent]:
        return to_kit_events(self.mgr.take_events(), self.v.events, self._event_namespace)

    def _event_namespace(self, ev: Any) -> int:
        """A stored event's namespace, remembered for the blocks chained below it (a salt names
        only the first block of a chain)."""
        ns = self._ns_of(ev)
        for h in ev.block_hashes:
            self._event_ns[h & MASK64] = ns
        return ns

    def block_hash(self, parent: int | None, namespace: int, tokens: Sequence[int]) -> int:
        """vLLM's hash recomputed with its own functions: ``hash_block_tokens`` over the
        parent's hash (``NONE_HASH`` at a root), the tokens and the extra keys of the
        namespace's requests. A parent vLLM never hashed yields no valid hash."""
        u = self.v.utils
        prior: bytes | None = None
        if parent is not None:
            prior = self._digests.get(parent)
            if prior is None:
                return -1
        req = self._request(namespace, list(tokens) * 2)
        start = 0 if parent is None else len(tokens)
        keys, _ = u.generate_block_hash_extra_keys(req, start, start + len(tokens), 0)
        h = u.hash_block_tokens(self.v.hashing.sha256, prior, list(tokens), keys)
        self._digests.setdefault(external_hash(h), h)
        return external_hash(h)

    def snapshot(self) -> BlockSnapshot:
        """The block pool as vLLM holds it (POOL-7; the module docstring says what is read).
        A block whose count and hashes did not change keeps its view object."""
        pool = self.pool
        extra = pool.cached_block_hashes_by_block
        views = self._views
        blocks = []
        for b in pool.blocks:
            keys = (b.block_hash, *sorted(extra.get(b.block_id, ())))
            seen = views.get(b.block_id)
            if seen is None or seen[0] != b.ref_cnt or seen[1] != keys:
                hashes = tuple(self._ext(k) for k in keys if k is not None)
                seen = views[b.block_id] = (b.ref_cnt, keys, BlockView(b.block_id, b.ref_cnt,
                                                                         hashes))
            blocks.append(seen[2])
        cached: dict[int, tuple[int, ...]] = {}
        for key, held in pool.cached_block_hash_to_block._cache.items():
            ids = (held.block_id,) if hasattr(held, "block_id") else tuple(held)
            cached[self._ext(key)] = ids
        links = {h: self._links[h] for h in cached if h in self._links}
        tables = tuple(
            TableView(self._handles.get(rid), tuple(b.block_id for b in held))
            for rid, held in self.table.req_to_blocks.items())
        return BlockSnapshot(
            page_size=self.page_size, blocks=tuple(blocks),
            reserved=(pool.null_block.block_id,),
            free=tuple(b.block_id for b in self._free_queue()),
            cached=cached, links=links, tables=tables)

    def _ext(self, key: bytes) -> int:
        """The published hash of a map key (a block hash with its group id), remembered."""
        h = self._keys.get(key)
        if h is None:
            h = self._keys[key] = external_hash(self.v.utils.get_block_hash(key))
        return h


class VLLMSaltAdapter(VLLMAdapter):
    """The same manager with each namespace a ``cache_salt`` instead of a LoRA adapter."""

    name = "vllm-salt"
    namespace_part = "cache_salt"
