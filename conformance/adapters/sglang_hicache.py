"""SGLang's host tier (HiCache) at the cache level: ``UnifiedRadixCache`` after ``init_hicache``.

In SGLang 0.5.23 there is no ``HiRadixCache`` class any more: the host tier is a mode of the
``UnifiedRadixCache`` (``init_hicache``), which attaches a ``HybridCacheController``
(``mem_cache/hybrid_cache/hybrid_cache_controller.py``) and a host pool group
(``pool_host/``: ``MHATokenToKVPoolHost`` for an MHA model) through
``hybrid_pool_assembler.attach_hybrid_pool_to_unified_cache``. The adapter builds the cache as
``sglang-unified`` does, then calls ``init_hicache`` the way SGLang's own unit-test mixin does
(``sglang.test.kits.unified_radix_cache.mixins._init_hicache``): write-through policy, the
cache's own write-through on hit counts switched off (``write_through_threshold = 1 << 30``) and
``load_back_threshold = 0``, so every copy is one the kit asked for. The Python ``TreeCore`` is
used (SGLang's fixture default for HiCache): the adapter reads each node's device and host
values from it.

What does not run without CUDA, and the shims (device plumbing only, never cache logic):

* Pinning the host pool: ``pool_host/common.py`` ``alloc_with_host_register`` calls
  ``_cuda_host_register`` (``torch.cuda.cudart().cudaHostRegister``, line 147 in 0.5.23) for
  every host buffer on a CUDA-less machine too (``ALLOC_MEMORY_FUNCS``' default for device
  type ``cpu``). Shim: the ``cpu`` entry allocates through the same host tensor allocator
  without registering it (nothing to pin on CPU, HOST-7).
* The copies: ``pool_host/mha.py`` binds its transfer ops (``transfer_kv_direct`` and the
  ``kernel`` backend's ops) only from ``sgl_kernel.kvcacheio`` on CUDA / ROCm, or from the XPU
  wheel (lines 60-89); on CPU the names are unbound and the first backup raises ``NameError``.
  Shim: ``transfer_kv_direct`` as the row copy it performs, ``dst[dst_indices] =
  src[src_indices]`` per layer, with ``hicache_io_backend = "direct"`` and ``hicache_mem_layout
  = "layer_first"`` (the one backend and layout that need only that op).
* Completion: the controller records a ``device_module.Event`` (``torch.cpu.Event`` here) per
  copy and the cache polls it (``_count_ready_acks``, ``writing_check`` / ``loading_check``).
  Shim: each copy's finish event is the kit's, ready once the kit acknowledges the copy, so a
  copy the kit leaves in flight is in flight for SGLang too.

The mapping: ``start_writeback(node)`` runs ``tree_core.build_backup_kv_action`` (the node's
unbacked ancestors, parent first) through ``_execute_and_commit_kv_backup`` and submits it
(``start_writing``); ``start_loadback(node)`` is ``load_back`` then ``ready_to_load_host_cache``;
``finish_transfer`` marks the copy landed and polls (``writing_check`` / ``loading_check``).
SGLang's acknowledgements carry no success flag (``HiCacheAck``): a failed copy is a failed
CUDA stream, fatal to the process, so the adapter declares ``fatal_transfer_failure`` (HOST-9)
and a failed copy is never acknowledged to SGLang. A loadback's pages join the tree when
``load_back`` queues the copy (``stream_ordered_loadback``, HOST-11) and host eviction takes
only nodes already evicted from device (``inclusive_host_tier``, HOST-12). SGLang announces
host copies too (KV events with medium ``CPU_PINNED``); the kit's events are the device
tier's, so those are left out. A
node whose backup is submitted but not acknowledged (``write_through_pending_id``) holds no host
copy yet in what ``match`` reports. Host pages are the host pool's slots divided
by the page size; the pool is sized to ``host_pages`` pages (SGLang adds one page to the size
it is given).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvconf.conformance.adapters.peer_events import to_kit_events
from kvconf.conformance.adapters.sglang_unified import SGLangUnifiedAdapter
from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.protocol import CopyOp, Match
from kvconf.conformance.errors import EngineRejected, EngineUnavailable
from kvconf.reference.tiers import Tier


class _Landing:
    """A copy's finish event, ready once the kit acknowledges the copy (the shim for
    ``device_module.Event``): ``query`` is what SGLang polls, ``synchronize`` what it waits on."""

    __slots__ = ("landed",)

    def __init__(self) -> None:
        self.landed = False

    def query(self) -> bool:
        return self.landed

    def synchronize(self) -> None:
        if not self.landed:  # waiting would never end: the kit has not let the copy land
            raise EngineRejected("copy-not-landed", "SGLang waited on a copy still in flight")

    def record(self, *args: Any) -> None:
        """Recording changes nothing: the kit decides when the copy lands."""

    def wait(self, *args: Any) -> None:
        """A stream waiting on this event orders nothing here."""

    def elapsed_time(self, other: Any) -> float:
        return 0.0


def _install_shims(sg: Any) -> None:
    """The two device-plumbing shims (see the module docstring), installed once per process."""
    from importlib import import_module

    common = import_module("sglang.srt.mem_cache.pool_host.common")
    mha = import_module("sglang.srt.mem_cache.pool_host.mha")

    def unpinned(dims, dtype, device, pin_memory, allocator,
                 registration_granularity_bytes=None):
        return allocator.allocate(dims, dtype=dtype, device=device)

    def transfer_kv_direct(src_layers, dst_layers, src_indices, dst_indices, page_size):
        for src, dst in zip(src_layers, dst_layers, strict=True):
            dst[dst_indices] = src[src_indices]

    common.ALLOC_MEMORY_FUNCS["cpu"] = unpinned
    if not hasattr(mha, "transfer_kv_direct"):
        mha.transfer_kv_direct = transfer_kv_direct


class SGLangHiCacheAdapter(SGLangUnifiedAdapter):
    name = "sglang-hicache"
    engine_label = "sglang UnifiedRadixCache + HiCache"
    # Two allowances, each confirmed in SGLang's source (docs/peers.md#sglang-hicache-loadback,
    # #sglang-hicache-host-eviction): a loadback is committed onto its node when the copy is
    # queued, its readers waiting on the load's events (HOST-11), and host eviction spares the
    # host copies of nodes still on device (HOST-12).
    features = frozenset({Feature.NAMESPACES, Feature.KV_EVENTS, Feature.HOST_TIER,
                          Feature.FATAL_TRANSFER_FAILURE, Feature.STREAM_ORDERED_LOADBACK,
                          Feature.INCLUSIVE_HOST_TIER})
    lacks = {  # why, each in the NOT_SUPPORTED cases' reason (docs/peers.md)
        Feature.UNLOAD: "unloading a LoRA adapter (LoRAManager.unload_lora_adapter) does not "
                        "touch the radix cache: its nodes stay until evicted",
        Feature.SCHEDULER: "SGLang's scheduler is not driven by the kit; only its radix cache",
    }
    tree_core_request = "python"

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        sg = self.sg
        p = self.page_size
        if config.host_pages < 2:
            raise EngineUnavailable("SGLang's host pool needs at least 2 pages")
        _install_shims(sg)
        # SGLang sizes the host pool as int(device tokens * ratio) rounded to pages, plus one
        # page: ask for host_pages - 1 pages' worth, with half a token of slack for the float.
        ratio = ((config.host_pages - 1) * p + 0.5) / (config.device_pages * p)
        args = sg.server_args.ServerArgs(
            model_path="dummy", page_size=p, hicache_ratio=ratio, hicache_size=0,
            hicache_write_policy="write_through", hicache_io_backend="direct",
            hicache_mem_layout="layer_first")
        sg.server_args.set_global_server_args_for_scheduler(args)
        try:
            self.cache.init_hicache(args, self.params)
        except Exception as e:
            raise EngineUnavailable(
                f"sglang's HiCache cannot be attached here ({type(e).__name__}: {e})") from None
        import atexit

        atexit.unregister(self.cache.shutdown)  # as SGLang's fixture does
        self.cache.write_through_threshold = 1 << 30
        self.cache.load_back_threshold = 0
        self.cc = self.cache.cache_controller
        host = self.cc.mem_pool_host.anchor_entry.host_pool
        if host.size // p != config.host_pages:
            raise EngineUnavailable(f"SGLang sized its host pool to {host.size // p} pages, "
                                    f"not {config.host_pages}")
        self.page_ids = (config.device_pages + 1, config.host_pages)
        self.version = f"{sg.version} (python TreeCore, HiCache write_through)"
        self.cache.take_events()
        self._ops: dict[int, tuple[str, list[_Landing]]] = {}
        self._next_op = 0

    # ----------------------------------------------------------------- reading the tree
    def _node(self, node_id: int) -> Any:
        return self.cache.tree_core.node_by_id(node_id)

    def _path(self, node_id: int) -> list[Any]:
        """The nodes from the root's child down to ``node_id``."""
        node = self._node(node_id)
        chain = []
        while node.parent is not None:
            chain.append(node)
            node = node.parent
        return chain[::-1]

    def _host_prefix(self, node_id: int) -> tuple[int, tuple[int, ...], int]:
        """The longest prefix of the path to ``node_id`` whose nodes hold host pages: its
        length, its host pages and its deepest node."""
        full = self.sg.component.ComponentType.FULL
        n, pages, last = 0, [], self.cache.tree_core.root_node.id
        for node in self._path(node_id):
            host = node.component_data[full].host_value
            # SGLang commits a backup's host slots when it submits the copy and marks the node
            # in flight (write_through_pending_id) until the acknowledgement: no host copy yet.
            if host is None or node.write_through_pending_id is not None:
                break
            n += len(node.key)
            pages.extend(int(s) // self.page_size for s in host.tolist()[:: self.page_size])
            last = node.id
        return n, tuple(pages), last

    # ----------------------------------------------------------------- protocol
    def match(self, namespace: int, tokens: Sequence[int]) -> Match:
        params = self.sg.base.MatchPrefixParams(key=self._key(namespace, tokens))
        m = self.cache.match_prefix(params)
        n = int(m.device_prefix_len)
        deepest = int(m.best_match_node)
        hn, hpages, hnode = self._host_prefix(deepest)
        return Match(n, hn, self._pages_to(m.last_device_node, n, namespace), hpages,
                     self._handle(m.last_device_node), self._handle(hnode))

    def lock(self, node: int, tier: Tier) -> int:
        """A host lock is SGLang's host lock (``inc_host_lock_ref``); a device lock its
        ``lock``."""
        target = self._nodes[node]
        if tier is Tier.HOST:
            r = self.cache.inc_host_lock_ref(target).to_dec_params()
            self._locks.append(("host", target, r))
        else:
            self._locks.append(("device", target, self.cache.lock(target)))
        return len(self._locks) - 1

    def unlock(self, handle: int) -> None:
        tier, target, held = self._locks[handle]
        if tier == "host":
            self.cache.dec_host_lock_ref(target, held)
        else:
            self.cache.unlock(held)

    def evict(self, tier: Tier, num_pages: int) -> int:
        if tier is Tier.HOST:
            return int(self.cache.evict_host(num_pages * self.page_size)) // self.page_size
        return super().evict(tier, num_pages)

    def _landings(self, queue: list, before: int) -> list[_Landing]:
        """Give the acknowledgements SGLang queued since ``before`` the kit's finish events."""
        out = []
        for i in range(before, len(queue)):
            landing = _Landing()
            queue[i] = queue[i]._replace(finish_event=landing)
            out.append(landing)
        return out

    def _op(self, kind: str, pairs: list[tuple[int, int]], landings: list[_Landing]) -> CopyOp:
        self._next_op += 1
        self._ops[self._next_op] = (kind, landings)
        return CopyOp(self._next_op, kind, tuple(pairs))

    def start_writeback(self, node: int) -> CopyOp | None:
        target = self._nodes[node]
        if target == self.cache.tree_core.root_node.id:
            return None  # the root holds no KV: nothing to copy (HOST-5)
        action = self.cache.tree_core.build_backup_kv_action(target)
        full = self.sg.component.ComponentType.FULL
        chain = [n for n in action.node_ids
                 if self._node(n).component_data[full].host_value is None]
        if not chain:
            return None
        free = set(self._free_host())
        before = len(self.cc.ack_write_queue)
        written = self.cache._execute_and_commit_kv_backup(action)
        self.cc.start_writing()
        landings = self._landings(self.cc.ack_write_queue, before)
        pairs = []
        for n in chain:
            data = self._node(n).component_data[full]
            if data.host_value is None:
                continue
            dev = data.value.tolist()[:: self.page_size]
            host = data.host_value.tolist()[:: self.page_size]
            pairs += [(int(d) // self.page_size, int(h) // self.page_size)
                      for d, h in zip(dev, host, strict=True)]
        if not written and not pairs:
            assert set(self._free_host()) == free
            return None
        return self._op("writeback", pairs, landings)

    def start_loadback(self, node: int) -> CopyOp | None:
        target = self._nodes[node]
        if target == self.cache.tree_core.root_node.id:
            return None
        full = self.sg.component.ComponentType.FULL
        path = self._path(target)
        missing = [n for n in path if n.component_data[full].value is None]
        before = len(self.cc.ack_load_queue)
        if not missing or not self.cache.load_back(target):
            return None
        self.cache.ready_to_load_host_cache()
        landings = self._landings(self.cc.ack_load_queue, before)
        pairs = []
        for n in missing:
            data = n.component_data[full]
            host = data.host_value.tolist()[:: self.page_size]
            dev = data.value.tolist()[:: self.page_size]
            pairs += [(int(h) // self.page_size, int(d) // self.page_size)
                      for h, d in zip(host, dev, strict=True)]
        return self._op("loadback", pairs, landings)

    def finish_transfer(self, op_id: int, success: bool) -> None:
        """A landed copy is acknowledged to SGLang, which polls its queue in order; a failed
        one never is (``fatal_transfer_failure``: SGLang has no failed-copy path)."""
        kind, landings = self._ops.pop(op_id)
        if not success:
            return
        for landing in landings:
            landing.landed = True
        if kind == "writeback":
            self.cache.writing_check()
        else:
            self.cache.loading_check()

    def drain_events(self) -> list:
        """The device tier's events: SGLang also announces host copies (medium
        ``CPU_PINNED``), which the kit's events leave out (a writeback announces nothing)."""
        gpu = self.sg.kv_events.StorageMedium.GPU
        events = [ev for ev in self.cache.take_events()
                  if getattr(ev, "medium", gpu) in (gpu, None)]
        return to_kit_events(events, self.sg.kv_events, self._event_namespace)

    def _free_host(self) -> list[int]:
        host = self.cc.mem_pool_host.anchor_entry.host_pool
        return host.free_slots.tolist()
