"""vLLM's ``KVCacheManager`` with a hybrid configuration at the hybrid cache level.

The manager is built on CPU as vLLM's own tests build it: a ``KVCacheConfig`` of three groups,
full attention (``FullAttentionSpec``), a sliding window of ``W`` tokens (``SlidingWindowSpec``)
and Mamba state in align mode (``MambaSpec(mamba_cache_mode="align")``: the state of depth d in
the block of page ceil(d / P) - 1, a block cached once its page is whole), all in one
``BlockPool``; vLLM's ``HybridKVCacheCoordinator`` reconciles them. One vLLM request per kit
request, driven through vLLM's own calls:

- ``hit``: ``find_longest_cache_hit_per_group`` for each group alone, and
  ``get_computed_blocks`` (the coordinator's fixed point) for the combined hit. vLLM caps a hit at
  the query's length minus one: the adapter declares ``match_leaves_last`` (TREE-7).
- ``admit``: ``get_computed_blocks``, then ``allocate_slots(req, 0, n, blocks)``, which adopts
  the hit as a request with a full hit does; the tables are the coordinator's block tables
  (vLLM's null block is a hole).
- ``extend``: ``allocate_slots(req, upto - computed)``, one scheduler step each
  (``new_step_starts`` first). vLLM frees the window blocks behind the window before it checks
  for room (``remove_skipped_blocks``), so a chunk without room still reports them given back
  (``room=False``). The Mamba source is the block of the chunk's start, the end state goes to
  the block of its end, as vLLM's model runner does in align mode; vLLM's scheduler never lets
  a chunk from inside a page cross its end, so the adapter declares ``mamba_aligned_chunks``
  (MAMBA-11).
- ``finish``: ``free(req)``; ``available``: the pool's free blocks (cached ones included).

Block 0 is vLLM's null block; the pool is named ``kv`` for every group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kvconf.conformance.adapters.vllm_cache import vllm_modules
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.hybrid import (
    Admitted,
    Extended,
    Group,
    GroupHit,
    HybridConfig,
    HybridHit,
)
from kvconf.conformance.errors import EngineRejected


class VLLMHybridAdapter:
    level = "hybrid"
    name = "vllm-hybrid"
    features = frozenset({Feature.HYBRID, Feature.SLIDING_WINDOW, Feature.MAMBA,
                          Feature.MATCH_LEAVES_LAST, Feature.MAMBA_ALIGNED_CHUNKS})
    lacks = {  # why, each in the NOT_SUPPORTED cases' reason (docs/peers.md)
        Feature.CACHE: "vLLM's prefix cache with one full-attention group is judged as the "
                       "engine vllm",
        Feature.SCHEDULER: "vLLM's v1 Scheduler is judged as the engine vllm-scheduler",
    }

    def __init__(self, config: HybridConfig) -> None:
        import torch

        v = vllm_modules()
        self.v = v
        self.version = v.version
        self.page_size = p = config.page_size
        S = v.spec
        specs: list[tuple[Group, Any]] = [
            (Group("full", 0, "kv"),
             S.FullAttentionSpec(block_size=p, num_kv_heads=1, head_size=8, dtype=torch.float16))]
        if config.window:
            specs.append((Group("window", config.window, "kv"),
                          S.SlidingWindowSpec(block_size=p, num_kv_heads=1, head_size=8,
                                              dtype=torch.float16,
                                              sliding_window=config.window)))
        if config.mamba:
            specs.append((Group("mamba", 0, "kv"),
                          S.MambaSpec(block_size=p, shapes=((4,),), dtypes=(torch.float16,),
                                      mamba_cache_mode="align")))
        self.groups = tuple(g for g, _ in specs)
        cfg = S.KVCacheConfig(
            num_blocks=config.pages + 1, kv_cache_tensors=[],
            kv_cache_groups=[S.KVCacheGroupSpec([f"layers.{i}.{g.kind}"], spec)
                             for i, (g, spec) in enumerate(specs)])
        self.mgr = v.manager.KVCacheManager(
            cfg, max_model_len=1 << 20, scheduler_block_size=p, hash_block_size=p,
            enable_caching=True, enable_kv_cache_events=False)
        self.coord = self.mgr.coordinator
        self.pool_sizes = {"kv": config.pages}
        self.hasher = v.utils.get_request_block_hasher(p, v.hashing.sha256)
        self._requests: dict[str, Any] = {}
        self._n = 0

    # ----------------------------------------------------------------- mapping
    def _request(self, rid: str, ns: int, tokens: Sequence[int]) -> Any:
        v = self.v
        kw: dict[str, Any] = {}
        if ns:
            kw["lora_request"] = v.lora.LoRARequest(f"kvconf-lora-{ns}", ns, f"kvconf/lora/{ns}")
        return v.request.Request(rid, list(tokens), v.sampling.SamplingParams(max_tokens=1),
                                 None, arrival_time=0.0, block_hasher=self.hasher, **kw)

    def _probe(self, ns: int, tokens: Sequence[int]) -> Any:
        self._n += 1
        return self._request(f"kvconf-probe-{self._n}", ns, tokens)

    @staticmethod
    def _ids(blocks: Sequence[Any]) -> tuple[int | None, ...]:
        return tuple(None if b.is_null else b.block_id for b in blocks)

    def _group_hit(self, g: Group, blocks: Sequence[Any], n: int) -> GroupHit:
        k = n // self.page_size
        if g.kind == "mamba":
            state = blocks[k - 1] if k and len(blocks) >= k else None
            return GroupHit(n, (), None if state is None or state.is_null else state.block_id)
        return GroupHit(n, self._ids(blocks[:k]), None)

    def _tables(self, rid: str) -> list[list[Any]]:
        return [list(bs) for bs in self.coord.get_blocks(rid)]

    def _known_tables(self, rid: str) -> list[list[Any]]:
        """The request's block tables, empty before vLLM has allocated it anything."""
        if rid not in self.coord.single_type_managers[0].req_to_blocks:
            return [[] for _ in self.groups]
        return self._tables(rid)

    # ----------------------------------------------------------------- protocol
    def hit(self, namespace: int, tokens: Sequence[int]) -> HybridHit:
        if not tokens:
            return HybridHit(tuple(GroupHit(0) for _ in self.groups), 0)
        req = self._probe(namespace, tokens)
        cap = len(tokens) - 1  # get_computed_blocks' own cap: the last token is computed
        blocks, lengths = self.coord.find_longest_cache_hit_per_group(req.block_hashes, cap)
        per = tuple(self._group_hit(g, blocks[i], lengths[i]) for i, g in enumerate(self.groups))
        _, n, _ = self.mgr.get_computed_blocks(req)
        return HybridHit(per, n)

    def admit(self, rid: str, namespace: int, tokens: Sequence[int]) -> Admitted:
        if rid in self._requests:
            raise EngineRejected("duplicate_request", f"request {rid!r} is already admitted")
        req = self._request(rid, namespace, tokens)
        blocks, n, _ = self.mgr.get_computed_blocks(req)
        if n:
            self.mgr.new_step_starts()
            if self.mgr.allocate_slots(req, 0, n, blocks) is None:
                raise EngineRejected("no_space", "allocate_slots found no room to adopt the hit")
            req.num_computed_tokens = n
        self._requests[rid] = req
        k = n // self.page_size
        tables = self._tables(rid) if n else [[] for _ in self.groups]
        out: list[tuple[int | None, ...]] = []
        state = None
        for g, table in zip(self.groups, tables, strict=True):
            if g.kind == "mamba":
                state = self._group_hit(g, table, n).state
                out.append(())
            else:
                out.append(self._ids(table[:k]))
        return Admitted(n, tuple(out), state)

    def extend(self, rid: str, upto: int) -> Extended | None:
        req = self._requests[rid]
        s, p = req.num_computed_tokens, self.page_size
        before = self._known_tables(rid)
        self.mgr.new_step_starts()
        got = self.mgr.allocate_slots(req, upto - s)
        after = self._known_tables(rid)
        released = []
        for g, old, new in zip(self.groups, before, after, strict=True):
            gone = [b.block_id for j, b in enumerate(old) if not b.is_null
                    and j < len(new) and new[j].is_null]
            released.append(tuple(gone) if g.kind == "window" else ())
        if got is None:
            if not any(released):
                return None
            return Extended(tuple(() for _ in self.groups), tuple(released), room=False)
        pages = []
        source = slot = None
        for g, old, new in zip(self.groups, before, after, strict=True):
            if g.kind == "mamba":
                if s:
                    src = old[-(-s // p) - 1]
                    source = None if src.is_null else src.block_id
                dst = new[-(-upto // p) - 1]
                slot = None if dst.is_null else dst.block_id
                pages.append(())
            else:
                pages.append(tuple(b.block_id for b in new[len(old):]))
        req.num_computed_tokens = upto
        return Extended(tuple(pages), tuple(released), source, slot)

    def finish(self, rid: str) -> None:
        req = self._requests.pop(rid)
        self.mgr.free(req)

    def available(self) -> Mapping[str, int]:
        return {"kv": self.mgr.block_pool.get_num_free_blocks()}
