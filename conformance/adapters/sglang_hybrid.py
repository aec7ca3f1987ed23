"""SGLang's ``UnifiedRadixCache`` with sliding-window and Mamba components at the hybrid level.

SGLang 0.5.23 keeps a hybrid model's caches as components of one radix tree: FULL attention KV,
SWA KV (``unified_cache/components/swa.py``) and Mamba state (``components/mamba.py``). The
adapter builds it on CPU as SGLang's unit-test fixture does
(``sglang.test.kits.unified_radix_cache.fixtures.build_fixture``): an ``SWAKVPool`` with an
``SWATokenToKVPoolAllocator`` (a full pool and a window pool of ``pages`` pages each), a
``HybridReqToTokenPool`` holding the ``MambaPool`` of ``state_slots`` slots, the Python
``TreeCore``, and the Mamba extra buffer (``mamba_radix_cache_strategy="extra_buffer"``, which
SGLang requires above page size 1). SGLang caches Mamba states only on its checkpoint grid,
``lcm(mamba_cache_chunk_size, page_size)``; the adapter sets the chunk size to the page size,
as the fixture's ``mamba_cache_chunk_size`` argument does, so a state can be kept at every page.

Every SGLang call takes a ``Req``; one kit request is one SGLang ``Req`` whose prompt is the kit's
tokens, driven through the scheduler's own steps, one request per batch:

- ``hit``: ``match_prefix`` with the admission key (the prompt less its last token:
  ``Req._compute_max_prefix_len``, so ``match_leaves_last``, TREE-7) gives the combined hit;
  each group alone is its component's own ``create_match_validator`` run along the same path.
  The match is the scheduler's own call on a waiting request: it may split a node at the end of
  the match and refresh LRU order, nothing a request holds.
- ``admit``: ``Req.init_next_round_input`` (``match_kv_cache`` with Mamba copy-on-write), then
  ``tree_cache.lock(req.last_node)`` as ``PrefillAdder`` does.
- ``extend``: ``alloc_for_extend``'s steps for a one-request batch (``ensure_mamba_capacity``,
  the request row and Mamba slots of ``HybridReqToTokenPool.alloc``, the allocator's
  ``alloc_extend``), after checking room the way the scheduler's budget does (None when there
  is none: nothing allocated), then ``ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend``
  picks the ping-pong slot the forward leaves a page-aligned state in (a checkpoint).
- ``computed``: the step's result processing, ``checkpoint_kv_cache`` (``checkpoint_into_tree``:
  window slots behind the window freed, the computed pages inserted, duplicates of cached pages
  freed and the row moved onto the cached ones, the tracked Mamba slot donated to the tree).
- ``decode``: a decode row (WIN-7) of the request's one-request running batch, as
  ``merge_batch`` leaves it: the sampled token joins ``output_ids``, then ``check_decode_mem``
  and ``prepare_for_decode`` (``maybe_evict_swa`` frees window slots behind the window before the
  row, ``alloc_for_decode``, the Mamba track mask at ``mamba_track_interval``); its
  ``computed`` is the decode result's Mamba bookkeeping (``_handle_finish_state_updated_req``),
  nothing published.
- ``finish``: ``release_kv_cache`` with ``checkpoint=True`` once the prompt is computed (the
  request finished; after decode rows the tree keeps the sequence up to the last tracked state),
  ``checkpoint=False`` before (an abort).

Decode settings scaled down as the chunk size is, so that short sequences cross them:
``mamba_track_interval`` two pages (SGLang: 256 tokens over a 64-token grid), the window
eviction interval one page (SGLang: 128 tokens).

Tables are read from SGLang's own state: the request's ``req_to_token`` row (full pages), the
allocator's ``full_to_swa_index_mapping`` (window pages; 0 a hole), ``req.kv.mamba_pool_idx``
(the working state slot). Page and slot 0 are SGLang's padding ids.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib import import_module
from types import SimpleNamespace
from typing import Any

from kvconf.conformance.adapters.sglang_radix import sglang_modules
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.hybrid import (
    Admitted,
    Extended,
    Group,
    GroupHit,
    HybridConfig,
    HybridHit,
    Settled,
)
from kvconf.conformance.errors import EngineRejected, EngineUnavailable

MAX_REQS = 16  # request rows: more than the kit ever runs at once
TRACK_PAGES = 2  # decode tracks a Mamba state every TRACK_PAGES pages (mamba_track_interval)
EVICT_PAGES = 1  # decode frees window slots once a page more has slid out of the window
# (SGLANG_SWA_EVICTION_INTERVAL, in tokens); both scaled down from SGLang's defaults (256 and
# 128 tokens) so that the kit's short sequences cross them (docs/peers.md#sglang-hybrid).


def hybrid_modules() -> SimpleNamespace:
    """The SGLang modules the hybrid adapter calls, or EngineUnavailable saying why not."""
    sg = sglang_modules()
    try:
        mc = "sglang.srt.mem_cache."
        for attr, mod in (
            ("unified", mc + "unified_radix_cache"), ("params", mc + "cache_init_params"),
            ("pools", mc + "memory_pool"), ("swa_pool", mc + "swa_memory_pool"),
            ("swa_alloc", mc + "allocator.swa"), ("allocator", mc + "allocator"),
            ("common", mc + "common"), ("allocation", mc + "allocation"),
            ("component", mc + "unified_cache.component_type"),
            ("prefix", mc + "base_prefix_cache"),
            ("radix_key", mc + "radix_cache"), ("batch", "sglang.srt.managers.schedule_batch"),
            ("sampling", "sglang.srt.sampling.sampling_params"),
            ("server_args", "sglang.srt.server_args"),
            ("mamba_utils", "sglang.srt.configs.mamba_utils"),
            ("environ", "sglang.srt.environ"),
            ("spec_info", "sglang.srt.speculative.spec_info"),
            ("results", "sglang.srt.managers.scheduler_components.batch_result_processor"),
        ):
            setattr(sg, attr, import_module(mod))
    except Exception as e:
        raise EngineUnavailable(
            f"sglang's hybrid UnifiedRadixCache cannot be imported ({type(e).__name__}: {e})"
        ) from None
    return sg


class SGLangHybridAdapter:
    level = "hybrid"
    name = "sglang-hybrid"
    features = frozenset({Feature.HYBRID, Feature.SLIDING_WINDOW, Feature.MAMBA,
                          Feature.MATCH_LEAVES_LAST, Feature.MAMBA_ALIGNED_CHUNKS})
    lacks = {  # why, each in the NOT_SUPPORTED cases' reason (docs/peers.md)
        Feature.CACHE: "SGLang's prefix caches at the cache level are judged as the engines "
                       "sglang-radix, sglang-unified and sglang-hicache",
        Feature.SCHEDULER: "SGLang's scheduler is not driven by the kit; only its radix cache",
    }

    def __init__(self, config: HybridConfig) -> None:
        import torch

        sg = hybrid_modules()
        self.sg = sg
        self.version = sg.version
        self.page_size = p = config.page_size
        CT = sg.component.ComponentType
        cts = [CT.FULL]
        groups = [Group("full", 0, "kv")]
        if config.window:
            cts.append(CT.SWA)
            groups.append(Group("window", config.window, "swa"))
        if config.mamba:
            cts.append(CT.MAMBA)
            groups.append(Group("mamba", 0, "state"))
        self.groups = tuple(groups)
        self.cts = tuple(cts)
        size = config.pages * p
        self.pool_sizes = {"kv": config.pages}
        args = sg.server_args.ServerArgs(
            model_path="dummy", page_size=p,
            mamba_radix_cache_strategy="extra_buffer" if config.mamba else "auto",
            mamba_track_interval=TRACK_PAGES * p)
        args._mamba_cache_chunk_size = p  # the checkpoint grid is then the page
        sg.server_args.set_global_server_args_for_scheduler(args)
        context = size + 4 * p
        if config.mamba:
            with sg.environ.envs.SGLANG_MAMBA_SSM_DTYPE.override("bfloat16"):
                shape = sg.mamba_utils.Mamba2StateShape.create(
                    tp_world_size=1, intermediate_size=16, n_groups=1, num_heads=1, head_dim=16,
                    state_size=4, conv_kernel=4)
                params = sg.mamba_utils.Mamba2CacheParams(shape=shape, layers=[1])
            self.pool = sg.pools.HybridReqToTokenPool(
                size=MAX_REQS, mamba_size=config.state_slots, mamba_spec_state_size=MAX_REQS,
                max_context_len=context, device="cpu", enable_memory_saver=False,
                cache_params=params, mamba_layer_ids=[1], enable_mamba_extra_buffer=True,
                speculative_num_draft_tokens=3)
            self.pool_sizes["state"] = self.pool.mamba_allocator.available_size()
        else:
            self.pool = sg.pools.ReqToTokenPool(size=MAX_REQS, max_context_len=context,
                                                device="cpu", enable_memory_saver=False)
        if config.window:
            kv = sg.swa_pool.SWAKVPool(
                size=size, size_swa=size, page_size=p, dtype=torch.bfloat16, head_num=1,
                head_dim=8, swa_attention_layer_ids=[1], full_attention_layer_ids=[0],
                device="cpu")
            self.allocator = sg.swa_alloc.SWATokenToKVPoolAllocator(
                size=size, size_swa=size, page_size=p, dtype=torch.bfloat16, device="cpu",
                kvcache=kv, need_sort=False)
            self.pool_sizes["swa"] = config.pages
        elif config.mamba:
            kv = sg.pools.HybridLinearKVPool(
                size=size, dtype=torch.bfloat16, page_size=p, head_num=1, head_dim=8,
                full_attention_layer_ids=[0], device="cpu", enable_memory_saver=False,
                mamba_pool=self.pool.mamba_pool)
            self.allocator = self._token_allocator(sg, size, kv, p)
        else:
            kv = sg.pools.MHATokenToKVPool(
                size=size, page_size=p, dtype=torch.bfloat16, head_num=1, head_dim=8,
                layer_num=1, device="cpu", enable_memory_saver=False)
            self.allocator = self._token_allocator(sg, size, kv, p)
        self.params = sg.params.CacheInitParams(
            req_to_token_pool=self.pool, token_to_kv_pool_allocator=self.allocator,
            page_size=p, disable=False,
            sliding_window_size=config.window - 1 if config.window else None,
            tree_components=self.cts, enable_mamba_extra_buffer=bool(config.mamba),
            tree_core_backend="python")
        try:
            self.cache = sg.unified.UnifiedRadixCache(params=self.params)
        except Exception as e:
            raise EngineUnavailable(
                f"sglang's hybrid UnifiedRadixCache cannot be built ({type(e).__name__}: {e})"
            ) from None
        self.model_config = SimpleNamespace(  # what a batch reads of the model
            hf_text_config=SimpleNamespace(mamba_chunk_size=p), vocab_size=64,
            is_encoder_decoder=False)
        self.batch = SimpleNamespace(  # what SGLang's per-request helpers read of a batch
            req_to_token_pool=self.pool, tree_cache=self.cache, model_config=self.model_config)
        self.results = _DecodeResults(sg, self.cache)
        self._decoding: dict[str, Any] = {}  # rid -> its running (decode) ScheduleBatch
        self._row_kind: dict[str, str] = {}  # rid -> "extend" or "decode": its last row
        self._reqs: dict[str, Any] = {}
        self._seen: dict[str, list[list[int | None]]] = {}  # the tables the kit was told
        self._n = 0

    @staticmethod
    def _token_allocator(sg, size: int, kv, p: int):
        if p > 1:
            paged = import_module("sglang.srt.mem_cache.allocator.paged")
            return paged.PagedTokenToKVPoolAllocator(
                size=size, page_size=p, dtype=kv.dtype, device="cpu", kvcache=kv,
                need_sort=False)
        return sg.allocator.TokenToKVPoolAllocator(size=size, dtype=kv.dtype, device="cpu",
                                                   kvcache=kv, need_sort=False)

    # ----------------------------------------------------------------- mapping
    def _extra_key(self, ns: int) -> str | None:
        return f"kvconf-ns-{ns}" if ns else None

    def _key(self, ns: int, tokens: Sequence[int]) -> Any:
        sg = self.sg
        return sg.radix_key.RadixKey(array("q", tokens), self._extra_key(ns),
                                     limit=max(0, len(tokens) - 1))

    def _window_page(self, full_slot: int) -> int | None:
        mapping = getattr(self.allocator, "full_to_swa_index_mapping", None)
        if mapping is None:
            return None
        swa = int(mapping[full_slot])
        return swa // self.page_size if swa else None

    def _row_tables(self, req: Any, upto: int) -> list[list[int | None]]:
        """Each attention group's pages for positions [0, upto) of the request's row."""
        p = self.page_size
        n = -(-upto // p)
        row = self.pool.req_to_token[req.kv.req_pool_idx, : n * p : p].tolist() if n else []
        out: list[list[int | None]] = []
        for g in self.groups:
            if g.kind == "full":
                out.append([int(s) // p for s in row])
            elif g.kind == "window":
                out.append([self._window_page(int(s)) for s in row])
            else:
                out.append([])
        return out

    def _walk(self, key: Any) -> list[tuple[int, Any]]:
        """The tree's nodes along ``key`` (read-only, whole nodes only): (depth, node)."""
        tc = self.cache.tree_core
        key = key.page_aligned(self.page_size)
        node = tc.root_node
        out: list[tuple[int, Any]] = []
        depth = 0
        while depth < len(key):
            child = node.children.get(key.child_key_at(depth, self.page_size))
            if child is None or child.evicted:
                break
            n = child.key.match_at(key, depth, page_size=self.page_size)
            if n < len(child.key):
                break
            depth += n
            out.append((depth, child))
            node = child
        return out

    def _group_length(self, ct: Any, path: list[tuple[int, Any]]) -> int:
        """The deepest node boundary SGLang's validator of component ``ct`` accepts alone."""
        valid = self.cache.components[ct].create_match_validator(match_device_only=True)
        best = 0
        for depth, node in path:
            if valid(node):
                best = depth
        return best

    def _hit_pages(self, ns: int, tokens: Sequence[int], n: int, g: Group,
                   path: list[tuple[int, Any]]) -> GroupHit:
        p = self.page_size
        CT = self.sg.component.ComponentType
        if g.kind == "mamba":
            node = next((nd for d, nd in path if d == n), None) if n else None
            value = None if node is None else node.component_data[CT.MAMBA].value
            return GroupHit(n, (), None if value is None else int(value.view(-1)[0]))
        full = [int(s) // p for nodes in self._path_values(path, n, CT.FULL) for s in nodes]
        if g.kind == "full":
            return GroupHit(n, tuple(full[: n // p]), None)
        first = max(0, n - g.window + 1) // p
        pages = tuple(self._window_page(full[j] * p) if j >= first else None
                      for j in range(n // p))
        return GroupHit(n, pages, None)

    def _path_values(self, path: list[tuple[int, Any]], n: int, ct: Any) -> list[list[int]]:
        """The FULL slot ids of the path's nodes down to depth ``n``, one per page."""
        out = []
        for depth, node in path:
            if depth > n:
                break
            value = node.component_data[ct].value
            out.append(value.tolist()[:: self.page_size] if value is not None else [])
        return out

    # ----------------------------------------------------------------- protocol
    def hit(self, namespace: int, tokens: Sequence[int]) -> HybridHit:
        sg = self.sg
        if not tokens:
            return HybridHit(tuple(GroupHit(0) for _ in self.groups), 0)
        key = self._key(namespace, tokens)
        got = self.cache.match_prefix(sg.prefix.MatchPrefixParams(key=key))
        path = self._walk(key)
        per = []
        for g, ct in zip(self.groups, self.cts, strict=True):
            n = (min(int(got.full_kv_hit_length), path[-1][0] if path else 0)
                 if g.kind == "full" else self._group_length(ct, path))
            per.append(self._hit_pages(namespace, tokens, n, g, path))
        return HybridHit(tuple(per), int(got.device_prefix_len))

    def admit(self, rid: str, namespace: int, tokens: Sequence[int]) -> Admitted:
        sg = self.sg
        if rid in self._reqs:
            raise EngineRejected("duplicate_request", f"request {rid!r} is already admitted")
        self._n += 1
        req = sg.batch.Req(rid=f"{rid}#{self._n}", origin_input_text="",
                           origin_input_ids=array("q", tokens),
                           sampling_params=sg.sampling.SamplingParams(temperature=0,
                                                                     max_new_tokens=1))
        req.extra_key = self._extra_key(namespace)
        req.output_ids = array("q")
        req.init_next_round_input(self.cache)  # match_kv_cache, with Mamba copy-on-write
        req.lock = self.cache.lock(req.last_node)  # PrefillAdder._commit_prefill_admission
        self._reqs[rid] = req
        n = int(req.prefix_len)
        path = self._walk(self._key(namespace, tokens))
        tables: list[tuple[int | None, ...]] = []
        for g in self.groups:
            tables.append(() if g.kind == "mamba"
                          else self._hit_pages(namespace, tokens, n, g, path).pages)
        state = req.kv.mamba_cow_src_index
        state = None if state is None or not n else int(state.view(-1)[0])
        self._seen[rid] = [list(t) for t in tables]
        return Admitted(n, tuple(tables), state)

    def _room(self, req: Any, s: int, e: int) -> bool:
        """Whether the step fits, as the scheduler's budget checks before it allocates
        (evicting cached entries to make room, as ``evict_from_tree_cache`` and
        ``ensure_mamba_capacity`` do)."""
        sg = self.sg
        p = self.page_size
        new_pages = -(-e // p) - -(-s // p)
        self.allocator.evict_to_free_tokens(self.cache, new_pages * p) if hasattr(
            self.allocator, "evict_to_free_tokens") else sg.common.evict_from_tree_cache(
            self.cache, new_pages * p)
        if hasattr(self.allocator, "new_pages_available"):
            if not self.allocator.new_pages_available(new_pages, new_pages):
                return False
        elif self.allocator.available_size() < new_pages * p:
            return False
        if "state" not in self.pool_sizes:
            return True
        need = (0 if req.kv.holds_mamba else 1)
        if req.kv.mamba_ping_pong_track_buffer is None:
            need += self.pool.mamba_initial_tracking_slots
        if e - s >= p:
            need += 1  # the slot that replaces the donated one at the checkpoint
        alloc = self.pool.mamba_allocator
        if alloc.available_size() < need:
            self.cache.evict_for_alloc(sg.prefix.EvictParams(
                num_tokens=0, mamba_num=need - alloc.available_size()))
        return alloc.available_size() >= need

    def extend(self, rid: str, upto: int) -> Extended | None:
        import torch

        sg = self.sg
        req = self._reqs[rid]
        p = self.page_size
        s = int(req.prefix_len)
        if not self._room(req, s, upto):
            return None
        before = self._seen[rid]
        self._row_kind[rid] = "extend"
        req.extend_end = upto
        req.fill_ids = req.full_untruncated_fill_ids[:upto]
        prefix = sg.allocation._prefix_kv_indices(self.batch, req)
        sg.allocation.alloc_req_slots(self.pool, [req], self.cache)
        if p == 1:
            out = sg.allocation.alloc_token_slots(self.cache, upto - s)
        else:
            last = prefix[-1:] if len(prefix) else torch.full((1,), -1, dtype=torch.int64)
            out = sg.allocation.alloc_paged_token_slots_extend(
                tree_cache=self.cache, prefix_lens=torch.tensor([s]),
                prefix_lens_cpu=torch.tensor([s]), seq_lens=torch.tensor([upto]),
                seq_lens_cpu=torch.tensor([upto]), last_loc=last, extend_num_tokens=upto - s)
        idx = req.kv.req_pool_idx
        self.pool.write((idx, slice(0, s)), prefix.to(torch.int32))
        self.pool.write((idx, slice(s, upto)), out.to(torch.int32))
        req.kv.kv_allocated_len = req.kv.kv_committed_len = upto
        source = slot = None
        checkpoints: tuple[tuple[int, int], ...] = ()
        if "state" in self.pool_sizes:
            cow = req.kv.mamba_cow_src_index
            entry = sg.batch.ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend(
                self.batch, req)
            self.batch_cow = sg.batch.ScheduleBatch._collect_deferred_mamba_cow_and_clear(
                self.batch, [req])
            if s:
                source = int(cow.view(-1)[0]) if cow is not None else int(req.kv.mamba_pool_idx)
            slot = int(req.kv.mamba_pool_idx)
            if entry.track_mask:
                track = int(req.kv.mamba_ping_pong_track_buffer[req.kv.mamba_last_track_idx])
                checkpoints = ((int(req.kv.mamba_last_track_seqlen), track),)
        after = self._row_tables(req, upto)
        pages = []
        for g, old, new in zip(self.groups, before, after, strict=True):
            pages.append(() if g.kind == "mamba" else tuple(
                x for x in new[len(old):]))
        self._seen[rid] = [old + list(new[len(old):]) for old, new in zip(before, after,
                                                                         strict=True)]
        released = tuple(() for _ in self.groups)
        return Extended(tuple(tuple(int(x) for x in pg if x is not None) for pg in pages),
                        released, source, slot, checkpoints)

    # ----------------------------------------------------------------- decode rows
    def _decode_batch(self, req: Any) -> Any:
        """The running batch the scheduler decodes ``req`` in once its prompt is computed, as
        ``merge_batch`` leaves it for one request: ``ScheduleBatch.init_new`` over the
        request, its row index and its committed length as ``seq_lens``; no speculative
        decoding, no overlap, no sampling penalties."""
        import torch

        sg = self.sg
        b = sg.batch.ScheduleBatch.init_new(
            [req], self.pool, self.allocator, self.cache, self.model_config, False,
            sg.spec_info.SpeculativeAlgorithm.NONE)
        idx = int(req.kv.req_pool_idx)
        n = int(req.kv.kv_committed_len)
        b.req_pool_indices = torch.tensor([idx], dtype=torch.int64)
        b.req_pool_indices_cpu = torch.tensor([idx], dtype=torch.int64)
        b.seq_lens = torch.tensor([n], dtype=torch.int64)
        b.seq_lens_cpu = torch.tensor([n], dtype=torch.int64)
        b.orig_seq_lens = torch.tensor([n], dtype=torch.int32)
        b.sampling_info = SimpleNamespace(
            penalizer_orchestrator=SimpleNamespace(is_required=False))
        return b

    @contextmanager
    def _decode_env(self) -> Iterator[None]:
        """``prepare_for_decode`` under the adapter's window eviction interval; without CUDA its
        one ``pin_memory()`` (the Mamba track mask's host copy) is the tensor itself, as
        ``is_pin_memory_available`` makes every other host copy there."""
        import torch

        envs = self.sg.environ.envs
        with envs.SGLANG_SWA_EVICTION_INTERVAL.override(EVICT_PAGES * self.page_size):
            if torch.cuda.is_available():
                yield
                return
            pin = torch.Tensor.pin_memory
            torch.Tensor.pin_memory = lambda t, *a, **k: t
            try:
                yield
            finally:
                torch.Tensor.pin_memory = pin

    def decode(self, rid: str, token: int) -> Extended | None:
        """The request's next decode row, as the scheduler runs it: ``token`` (sampled by the
        row before) joins ``output_ids`` as result processing appends it, then
        ``update_running_batch``'s steps on the request's one-request running batch:
        ``check_decode_mem`` (evicting cached entries for room; None when there is none, the
        token taken back) and ``prepare_for_decode``: ``maybe_evict_swa`` frees the request's
        window slots behind its window (given back before the row, judged from its start),
        ``alloc_for_decode`` a slot for the position, and the Mamba track mask names the
        ping-pong slot the forward leaves the state in where the row ends on the track
        interval (a checkpoint). The working state slot is read and written in place."""
        req = self._reqs[rid]
        s = int(req.kv.kv_committed_len)
        if s != len(req.origin_input_ids) + len(req.output_ids):
            raise EngineRejected("bad_decode", f"{rid}: a decode row before its prompt is "
                                               "computed")
        req.output_ids.append(token)
        batch = self._decoding.get(rid) or self._decode_batch(req)
        if not batch.check_decode_mem():
            req.output_ids.pop()
            return None
        self._decoding[rid] = batch
        with self._decode_env():
            batch.prepare_for_decode()
        self._row_kind[rid] = "decode"
        e = s + 1
        seen = self._seen[rid]
        now = self._row_tables(req, e)
        pages: list[tuple[int, ...]] = []
        released: list[tuple[int, ...]] = []
        for g, old, new in zip(self.groups, seen, now, strict=True):
            gone = tuple(page for j, page in enumerate(old)
                         if page is not None and g.kind == "window" and new[j] is None)
            for j, page in enumerate(old):
                if page is not None and page in gone:
                    old[j] = None
            fresh = tuple(x for x in new[len(old):] if x is not None)
            old.extend(new[len(old):])
            pages.append(() if g.kind == "mamba" else fresh)
            released.append(gone)
        source = slot = None
        checkpoints: tuple[tuple[int, int], ...] = ()
        if "state" in self.pool_sizes:
            source = slot = int(req.kv.mamba_pool_idx)
            if batch.mamba_track_mask_cpu[0]:
                checkpoints = ((e, int(batch.mamba_track_indices[0])),)
        return Extended(tuple(pages), tuple(released), source, slot, checkpoints)

    def _held_from(self, req: Any) -> int:
        """The first position of the request's window pages SGLang still holds for it: its own
        row past ``cache_protected_len``, and the tree's pages its lock covers, which are whole
        nodes up from the locked node until ``sliding_window_size`` tokens are covered
        (``SWAComponent.acquire_component_lock``)."""
        own = int(req.kv.cache_protected_len)
        lock = req.lock
        if lock is None or lock.swa_released:
            return own
        tc = self.cache.tree_core
        path = []
        cur = tc.node_by_id(lock.node)
        while cur is not tc.root_node:
            path.append(cur)
            cur = cur.parent
        start = sum(len(n.key) for n in path)
        covered = 0
        for node in path:
            if covered >= self.cache.sliding_window_size:
                break
            covered += len(node.key)
            start -= len(node.key)
        return min(own, start)

    def computed(self, rid: str) -> Settled | None:
        """The step's results: ``checkpoint_kv_cache``, then what changed in the row: pages
        moved onto the tree's copies, window slots freed, and window pages of the tree that the
        request's lock no longer covers (the tree may evict them at once)."""
        req = self._reqs[rid]
        if self._row_kind.get(rid) == "decode":
            # A decode row's results: the Mamba track bookkeeping; nothing is published.
            self.results.decode_row(self._decoding[rid], req)
            upto = int(req.kv.kv_committed_len)
        else:
            upto = int(req.extend_end)
            self.sg.common.checkpoint_kv_cache(req, self.cache)
        now = self._row_tables(req, upto)
        held_from = self._held_from(req) if "swa" in self.pool_sizes else 0
        seen = self._seen[rid]
        changes: list[tuple[tuple[int, int | None], ...]] = []
        for g, old, new in zip(self.groups, seen, now, strict=True):
            got: list[tuple[int, int | None]] = []
            if g.kind != "mamba":
                for j, page in enumerate(old):
                    if page is None:
                        continue
                    want = new[j]
                    if g.kind == "window" and (j + 1) * self.page_size <= held_from:
                        want = None
                    if want != page:
                        got.append((j, want))
                        old[j] = want
            changes.append(tuple(got))
        if not any(changes):
            return None
        return Settled(tuple(changes))

    def finish(self, rid: str) -> None:
        sg = self.sg
        req = self._reqs.pop(rid)
        self._seen.pop(rid, None)
        self._decoding.pop(rid, None)
        self._row_kind.pop(rid, None)
        if not req.kv.holds_kv:
            # Admitted, never given a row (SGLang admits and allocates in one step, the kit in
            # two): the admission's lock goes back, and the Mamba slot its copy-on-write took,
            # through release_kv_cache's path for a request that holds no row.
            self.cache.unlock(req.lock)
            req.lock = None
            req.finished_reason = sg.batch.FINISH_ABORT()
            if "state" in self.pool_sizes:
                sg.common.release_kv_cache(req, self.cache, checkpoint=False)
            return
        done = int(req.kv.kv_committed_len) >= len(req.origin_input_ids)
        req.finished_reason = (sg.batch.FINISH_LENGTH(length=0) if done
                               else sg.batch.FINISH_ABORT())
        sg.common.release_kv_cache(req, self.cache, checkpoint=done)

    def available(self) -> Mapping[str, int]:
        p = self.page_size
        out = {"kv": (self.allocator.full_available_size() if "swa" in self.pool_sizes
                      else self.allocator.available_size()) // p
                      + self.cache.full_evictable_size() // p}
        if "swa" in self.pool_sizes:
            out["swa"] = (self.allocator.swa_available_size()
                          + self.cache.swa_evictable_size()) // p
        if "state" in self.pool_sizes:
            out["state"] = (self.pool.mamba_allocator.available_size()
                            + self.cache.mamba_evictable_size())
        return out


class _DecodeResults:
    """What of the scheduler's result processing (``SchedulerBatchResultProcessor``) a decode
    row of a request that goes on decoding reaches: ``_handle_finish_state_updated_req``, whose
    Mamba part names the tracked ping-pong slot and its depth where the row ended on the track
    interval and swaps the index the next track goes to (``_mamba_prefix_cache_update``). SGLang's
    own methods, bound to this object; of the rest of the mixin only
    ``_maybe_collect_customized_info`` (what a response returns) is reached, and left out."""

    METHODS = ("_handle_finish_state_updated_req", "_mamba_prefix_cache_update",
               "_mamba_assert_committed_len_lookahead", "_mamba_check_track_boundary",
               "mamba_lazy_post_decode_at_boundary", "_mamba_lazy_spec_update")

    def __init__(self, sg: SimpleNamespace, cache: Any) -> None:
        mixin = sg.results.SchedulerBatchResultProcessor
        attrs: dict[str, Any] = {name: mixin.__dict__[name] for name in self.METHODS}
        attrs["_maybe_collect_customized_info"] = lambda self, *args: None
        self.processor = type("DecodeResultProcessor", (), attrs)()
        self.processor.tree_cache = cache

    def decode_row(self, batch: Any, req: Any) -> None:
        result = SimpleNamespace(num_correct_drafts_per_req_cpu=None)
        self.processor._handle_finish_state_updated_req(req, batch, result, 0, None)
