"""SGLang's ``UnifiedRadixCache`` (``sglang.srt.mem_cache.unified_radix_cache``) at the cache level.

``UnifiedRadixCache`` is SGLang's default prefix cache: one radix tree whose nodes carry one
value per *component* (FULL attention KV, and for hybrid models SWA KV and Mamba state), driven
by a ``TreeCore``. The adapter builds it the way SGLang's own unit-test fixture
(``sglang.test.kits.unified_radix_cache.fixtures.build_fixture``) does, on CPU: a global
``ServerArgs``, a real ``MHATokenToKVPool`` and a real SGLang allocator (the paged one when
``page_size > 1``), a ``ReqToTokenPool``, and ``CacheInitParams`` with the FULL component only.
It skips that fixture's test-only tree inspector, whose Rust variant needs the crate's sources.

Tree core. SGLang selects the Rust ``TreeCore`` by default
(``SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=rust``) and falls back to its equivalent pure-Python
core where the Rust one is not supported; the adapter asks for the Rust core, so it runs what a
server runs, and lets SGLang's own fallback policy (``resolve_tree_core_backend``) pick the
Python core where the bundled extension cannot be used. The core in use is part of ``version``
(``0.5.23 (rust TreeCore)``). The two cores number nodes differently; hashes and events are the
same.

Pages. The allocator is SGLang's: page ``g`` is slots ``g*p .. g*p+p-1`` and page 0 is SGLang's
reserved padding page, so device page ids run from 1 to ``device_pages`` (``page_ids``).
``alloc`` and ``free`` are the allocator's own ``alloc`` and ``free``. Unlike ``RadixCache``,
``UnifiedRadixCache.insert`` frees the caller's duplicate slots itself (``FreeDeviceKV`` actions
applied to the allocator), from the point SGLang's caller names: ``prev_prefix_len``, the
length of the row that came from the tree (``req.kv.cache_protected_len``), is the leading run
of the caller's pages that are the tree's own at those places (``_protected``). The adapter does
not compute the duplicates: it reports as ``freed`` the pages that joined the allocator's free
list during the insert, so the kit judges what the engine really did.

Nodes and locks. Match results carry integer ``NodeId`` values; the adapter still maps them to its
own integers in first-seen order, so no engine numbering reaches what the kit compares.
``lock`` is ``UnifiedRadixCache.lock(node)``, which returns a ``TreeLock`` holding the acquire's
receipt (``DecLockRefParams``); ``unlock`` hands that same ``TreeLock`` back to
``UnifiedRadixCache.unlock``. The receipt is not a lock handle in the kit's sense, so
``lock_handles`` is not declared: it is a value naming the anchor node and, per component, the
segment boundary the acquire reached (FULL records none), two locks of one node get equal
receipts, and the engine keeps no table of live locks. A second release of one lock while
another lock of the node is held is a valid-looking release of the other (its count goes from 2
to 0 and the node can be evicted under the remaining lock); what the engine can tell is a count
at zero, where both cores refuse by crashing (``FULL segment release hit lock_ref=0``: an
``AssertionError`` in the Python core, a Rust panic surfacing as ``RuntimeError`` that poisons the
Rust core's state for every later call). Nothing of that is caught or translated here: a crash
is a crash to the kit (FAULT-2).

Namespaces are a LoRA ``extra_key`` registered with the event recorder's name table, as in
``sglang-radix``: the extra key is part of every child key under the one shared root, and the
published hashes are the same SHA-256 chain, namespaced by the LoRA's seed
(``_kv_event_from_tagged`` in ``rust_tree_core/adapter.py``), so ``block_hash`` and the event
translation are ``SGLangRadixAdapter``'s. Access times come from a logical counter that advances
on every match and insert (``get_and_increase_time_counter``), not from the kit's step clock, so
``tick`` is ignored. No host tier (HiCache needs its host pools and transfer controller), no
snapshot (the Rust core exposes no tree walk), no unload.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import import_module
from types import SimpleNamespace
from typing import Any

from kvconf.conformance.adapters.sglang_radix import SGLangRadixAdapter, sglang_modules
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.protocol import Inserted, Match
from kvconf.conformance.errors import EngineUnavailable
from kvconf.reference.tiers import Tier

TREE_CORE = "rust"  # SGLang's default; its own fallback policy may answer "python"


def unified_modules() -> SimpleNamespace:
    """The SGLang modules the unified adapter calls, or EngineUnavailable saying why not."""
    sg = sglang_modules()
    try:
        mc = "sglang.srt.mem_cache."
        sg.unified = import_module(mc + "unified_radix_cache")
        sg.params = import_module(mc + "cache_init_params")
        sg.pools = import_module(mc + "memory_pool")
        sg.allocator = import_module(mc + "allocator")
        sg.paged = import_module(mc + "allocator.paged")
        sg.component = import_module(mc + "unified_cache.component_type")
        sg.registry = import_module(mc + "unified_cache.tree_core_registry")
        sg.server_args = import_module("sglang.srt.server_args")
    except Exception as e:
        raise EngineUnavailable(
            f"sglang's UnifiedRadixCache cannot be imported ({type(e).__name__}: {e})"
        ) from None
    return sg


class SGLangUnifiedAdapter(SGLangRadixAdapter):
    name = "sglang-unified"
    engine_label = "sglang UnifiedRadixCache"
    namespace_part = "extra_key"
    features = frozenset({Feature.NAMESPACES, Feature.KV_EVENTS})
    lacks = {  # why, each in the NOT_SUPPORTED cases' reason (docs/peers.md)
        Feature.HOST_TIER: "the host tier is HiRadixCache, judged as the engine sglang-hicache",
        Feature.UNLOAD: "unloading a LoRA adapter (LoRAManager.unload_lora_adapter) does not "
                        "touch the radix cache: its nodes stay until evicted",
        Feature.SCHEDULER: "SGLang's scheduler is not driven by the kit; only its radix cache",
    }
    tree_core_request = TREE_CORE  # the TreeCore backend asked of SGLang's fallback policy

    def __init__(self, config: EngineConfig) -> None:
        import torch

        sg = unified_modules()
        self.sg = sg
        self.page_size = p = config.page_size
        self.page_ids = (config.device_pages + 1, 0)  # page 0 is SGLang's padding page
        size = config.device_pages * p
        args = sg.server_args.ServerArgs(model_path="dummy", page_size=p)
        sg.server_args.set_global_server_args_for_scheduler(args)
        kv = sg.pools.MHATokenToKVPool(
            size=size, page_size=p, dtype=torch.bfloat16, head_num=1, head_dim=8, layer_num=1,
            device="cpu", enable_memory_saver=False,
        )
        if p > 1:
            self.allocator = sg.paged.PagedTokenToKVPoolAllocator(
                size=size, page_size=p, dtype=torch.bfloat16, device="cpu", kvcache=kv,
                need_sort=False,
            )
        else:
            self.allocator = sg.allocator.TokenToKVPoolAllocator(
                size=size, dtype=torch.bfloat16, device="cpu", kvcache=kv, need_sort=False,
            )
        self.names = sg.events.KvEventLoraNames()
        params = sg.params.CacheInitParams(
            disable=False,
            req_to_token_pool=sg.pools.ReqToTokenPool(
                size=1, max_context_len=size + p, device="cpu", enable_memory_saver=False),
            token_to_kv_pool_allocator=self.allocator,
            page_size=p,
            tree_components=(sg.component.ComponentType.FULL,),
            enable_kv_cache_events=True,
            kv_event_lora_names=self.names,
            tree_core_backend=self.tree_core_request,
        )
        self.params = params
        self.server_args = args
        try:
            self.cache = sg.unified.UnifiedRadixCache(params=params)
        except Exception as e:  # the Rust core's extension failing to load, say
            raise EngineUnavailable(
                f"sglang's UnifiedRadixCache cannot be built ({type(e).__name__}: {e})"
            ) from None
        self.tree_core = self.cache._tree_core_backend
        self.version = f"{sg.version} ({self.tree_core} TreeCore)"
        self.cache.take_events()  # the AllBlocksCleared of its construction
        self._nodes: list[int] = []  # handle -> NodeId
        self._handles: dict[int, int] = {}  # NodeId -> handle
        self._locks: list[Any] = []  # lock handle -> TreeLock
        self._digests: dict[int, str] = {}
        self._ns_of: dict[str, int] = {}

    # ----------------------------------------------------------------- mapping
    def _handle(self, node: int) -> int:
        h = self._handles.get(node)
        if h is None:
            h = self._handles[node] = len(self._nodes)
            self._nodes.append(node)
        return h

    def _pages_to(self, node: int, n_tokens: int, namespace: int = 0) -> tuple[int, ...]:
        if n_tokens == 0:
            return ()
        root = self.cache.root_node_handle(self._part(namespace))
        slots = self.cache.tree_core.collect_full_device_indices(node, root)[:n_tokens]
        return tuple(int(s) // self.page_size for s in slots.tolist()[:: self.page_size])

    def _free_pages(self) -> set[int]:
        """The allocator's free list, as page ids (the token allocator's ids are pages when
        ``page_size`` is 1)."""
        return {int(g) for g in self.allocator.get_all_free_pages().tolist()}

    def _slots(self, pages: Sequence[int]) -> Any:
        import torch

        p = self.page_size
        return torch.tensor([g * p + j for g in pages for j in range(p)], dtype=torch.int64)

    def _protected(self, namespace: int, key: Any, pages: Sequence[int]) -> int:
        """SGLang's caller tells the insert how much of its row came from the tree
        (``prev_prefix_len = req.kv.cache_protected_len``): the engine frees the caller's slots
        past it where the tree already has KV, and none before it. Here that is the leading run
        of the caller's pages that are the very pages the tree holds at those places, read with
        the core's side-effect-free ``match_full_device_prefix`` (no access time, no split)."""
        n, node, _ = self.cache.tree_core.match_full_device_prefix(key)
        held = self._pages_to(node, int(n), namespace)
        run = 0
        for mine, tree in zip(pages, held, strict=False):
            if mine != tree:
                break
            run += 1
        return run * self.page_size

    # ----------------------------------------------------------------- protocol
    def tick(self) -> None:
        """The engine's access times come from its own per-operation counter."""

    def alloc(self, n: int) -> list[int] | None:
        slots = self.allocator.alloc(n * self.page_size)
        if slots is None:
            return None
        return [int(s) // self.page_size for s in slots.tolist()[:: self.page_size]]

    def free(self, pages: Sequence[int]) -> None:
        if pages:
            self.allocator.free(self._slots(pages))

    def match(self, namespace: int, tokens: Sequence[int]) -> Match:
        params = self.sg.base.MatchPrefixParams(key=self._key(namespace, tokens))
        m = self.cache.match_prefix(params)
        n = int(m.device_prefix_len)
        root = self._handle(self.cache.root_node_handle(self._part(namespace)))
        return Match(n, 0, self._pages_to(m.last_device_node, n, namespace), (),
                     self._handle(m.last_device_node), root)

    def insert(self, namespace: int, tokens: Sequence[int], pages: Sequence[int]) -> Inserted:
        key = self._key(namespace, tokens)
        params = self.sg.base.InsertParams(key=key, value=self._slots(pages),
                                           prev_prefix_len=self._protected(namespace, key, pages))
        before = self._free_pages()
        r = self.cache.insert(params)
        # What the engine handed back to the allocator during the insert, whichever of the
        # allocator's free paths it took (free, free_segment, free_page_ids).
        dup = sorted(self._free_pages() - before)
        return Inserted(int(r.prefix_len), tuple(dup))

    def lock(self, node: int, tier: Tier) -> int:
        """A lock on the host tier can only be of the root (no host tier): the engine's lock
        of the root takes no count and returns a receipt anchored there, as on device."""
        self._locks.append(self.cache.lock(self._nodes[node]))
        return len(self._locks) - 1

    def unlock(self, handle: int) -> None:
        """The ``TreeLock`` the lock returned goes back to the engine, every time: the adapter
        keeps no state that could refuse an unlock on the engine's behalf."""
        self.cache.unlock(self._locks[handle])

    def evict(self, tier: Tier, num_pages: int) -> int:
        if tier is Tier.HOST:
            return 0
        r = self.cache.evict(self.sg.base.EvictParams(num_tokens=num_pages * self.page_size))
        return int(r.num_tokens_evicted) // self.page_size
