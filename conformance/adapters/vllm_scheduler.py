"""vLLM's v1 ``Scheduler`` (``vllm.v1.core.sched.scheduler``) at the scheduler level.

The scheduler is built as vLLM's own unit tests build it (``tests/v1/core/utils.py``,
``create_scheduler``): a ``VllmConfig`` from a model configuration, here a tiny ``config.json``
the adapter writes to a temporary folder (nothing is downloaded, no tokenizer is loaded), one
full-attention KV cache group of ``device_pages`` blocks plus vLLM's null block, prefix caching
and chunked prefill on. The adapter then plays vLLM's engine core and model runner around it:

- ``submit``: ``add_request`` of a ``Request`` that never stops by itself (``ignore_eos``, no stop
  tokens, ``max_tokens`` past any sequence the kit plays): the kit's runtime finishes it.
- ``next_plan``: ``update_from_output`` of the previous step, if it has not run yet, then
  ``schedule()``. Each scheduled request is a row: it computes ``num_scheduled_tokens`` tokens from
  the request's computed count before the step, into its block table
  (``kv_cache_manager.get_block_ids``, group 0). A row of a request admitted in this step (new, or
  resumed after a preemption) is a prefill that reuses its prefix-cache hit; a running request's
  row is a prefill while its sequence is not computed through and its token not yet reported, and a
  decode after. A row samples where it reaches the end of the request's tokens, as vLLM's model
  runner samples only there. ``new_block_ids_to_zero`` is the plan's pages to zero (PLAN-11).
- ``advance``: each ``ExtendResult`` is the token of its row in a ``ModelRunnerOutput`` (one list
  per scheduled request, empty where the row does not sample), handed to ``update_from_output``
  before any ``Finish``, which is ``finish_requests(.., FINISHED_STOPPED)`` (what vLLM's output
  processor does on a stop string); ``Abort`` is ``finish_requests(.., FINISHED_ABORTED)``.
  ``finish_requests`` skips ids it does not hold (REQ-6, ``ignores_unknown_events``). A token for a
  request with no sampling row in the step has no place in a ``ModelRunnerOutput`` (vLLM reads only
  the scheduled rows' entries, ``req_id_to_index``): the adapter refuses it, changing nothing.
  There are no copies: a ``WritebackDone`` names nothing vLLM holds.
- slots: vLLM's model runner keeps each running request in a row of its persistent batch; the
  adapter hands out the lowest free index when a request is admitted and takes it back when it is
  preempted or finishes.

Preemption is by recompute: ``_preempt_request`` frees the request's blocks (they stay cached,
evictable) and puts it back at the head of the waiting queue with nothing computed; it is admitted
again like a new request, through the prefix cache. No copy is made (``retract_no_copy``), and a
request still prefilling can be preempted too (``preempts_prefilling``, REQ-7). Blocks are cached
(hashed, announced) when ``allocate_slots`` schedules them, so a request admitted in the same step
reuses blocks another row of that forward computes; vLLM's runtime writes every row's KV of a layer
before any row of that layer attends (``_allow_microbatching`` in ``gpu_model_runner.py``), which
the adapter declares (``same_forward_reuse``, PLAN-13). It has no unmixed mode: every batch may mix
prefill and decode rows (``mixed_only``, PLAN-3). A model's window is read through its
architecture's transformers config class, the text config alone where there is one
(``config_class_window``, WIN-5). KV events are the manager's own
(``take_events``), read at every drain rather than once per step. There is no host tier or L3 store
without a KV connector (``vllm-offload`` adds the CPU offloading connector), and no snapshot.
With a sliding window the model is hybrid: a
full-attention group and a ``SlidingWindowSpec`` group, each with a block table of its own from one
shared pool (vLLM's hybrid allocator; the pool holds a block per group per page), so a row
carries the window group's table as its ``window_table`` (WIN-3), with vLLM's null block where the
window's blocks were freed behind it; the KV events are the full-attention group's (the window
group stores the same hashes again for its own blocks). ``model_window`` reads a model config's
window by vLLM's own steps, with the kit's config written as the ``config.json`` of an
architecture whose transformers config class carries the keys it uses (``as_architecture``):
vLLM reads the window through that class, from the text config alone. With Mamba state the
model has a ``MambaSpec`` group in vLLM's "align" cache mode, its blocks from the same pool
(``state_ids`` are the pool's block ids): block p holds the state after p + 1 pages of tokens,
so a row leaves its state in the block of its last position (its ``mamba``) and reads it from
the block before its first (its ``mamba_src`` where that is another block): the spec's mapping
of states kept in a table of blocks (chapter mamba).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import import_module
from types import SimpleNamespace
from typing import Any

from kvconf.conformance.adapters.peer_events import to_kit_events
from kvconf.conformance.adapters.vllm_cache import VLLMAdapter, external_hash, vllm_modules
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.errors import EngineRejected, EngineUnavailable
from kvconf.conformance.oracles.scheduler import table_for
from kvconf.conformance.scheduler.trace import SchedConfig
from kvconf.conformance.trace import write_atomic
from kvconf.reference.kv_events import KVEvent
from kvconf.reference.plan import (
    Abort,
    ExtendResult,
    Finish,
    ForwardRow,
    Plan,
    RequestSpec,
    RuntimeEvent,
)
from kvconf.reference.requests import Event, State

MAX_LEN = 1 << 16  # max_model_len and max_tokens: past any sequence the kit plays
# The model the scheduler is configured for: one tiny Llama layer, written by the adapter.
MODEL = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
    "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 1,
    "num_hidden_layers": 1, "vocab_size": 32000, "max_position_embeddings": MAX_LEN,
    "rms_norm_eps": 1e-6, "torch_dtype": "float16",
}


# The model configs ``model_window`` writes: the architecture's keys (a tiny text model) over the
# kit's config. A config with a use_sliding_window switch at a level is written as an architecture
# whose transformers config class has that switch (Qwen2, Qwen2-VL's text config); one without as
# one whose class has a sliding_window that defaults to none and no switch (Phi-3, Ministral 3).
# A nested text_config makes the model a composite one (Qwen2-VL, Mistral 3).
TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": 1, "num_hidden_layers": 1, "vocab_size": 32000,
        "max_position_embeddings": MAX_LEN, "rms_norm_eps": 1e-6, "bos_token_id": 1,
        "eos_token_id": 2, "pad_token_id": 0}
FLAT = {True: ("Qwen2ForCausalLM", "qwen2"), False: ("Phi3ForCausalLM", "phi3")}
COMPOSITE = {True: ("Qwen2VLForConditionalGeneration", "qwen2_vl", "qwen2_vl_text"),
             False: ("Mistral3ForConditionalGeneration", "mistral3", "ministral3")}


def as_architecture(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The kit's model config as the ``config.json`` of an architecture vLLM knows (``TEXT``
    and the architecture's names win over the kit's keys of the same name, which say nothing
    about a window)."""
    text = cfg.get("text_config")
    if isinstance(text, Mapping):
        arch, kind, text_kind = COMPOSITE["use_sliding_window" in text]
        return {**cfg, "architectures": [arch], "model_type": kind,
                "text_config": {**text, **TEXT, "model_type": text_kind}}
    arch, kind = FLAT["use_sliding_window" in cfg]
    return {**cfg, **TEXT, "architectures": [arch], "model_type": kind}


def write_config(path: str, cfg: Mapping[str, Any]) -> None:
    """``cfg`` as ``config.json`` in the folder ``path``, written atomically."""
    write_atomic(os.path.join(path, "config.json"), json.dumps(cfg))


def model_config(config_cls: Any) -> Any:
    """vLLM's ``ModelConfig`` of ``MODEL``, read from a ``config.json`` in a temporary folder,
    which is gone once the config is built (vLLM reads the files only then)."""
    with tempfile.TemporaryDirectory(prefix="kvconf-vllm-model-") as path:
        write_config(path, MODEL)
        # A ModelConfig inspects the architecture's class, importing vLLM's model code.
        return config_cls(model=path, skip_tokenizer_init=True, dtype="float16", seed=0,
                          max_model_len=MAX_LEN)


@cache
def sched_modules() -> SimpleNamespace:
    """vLLM's scheduler-level modules (beside the cache level's), or EngineUnavailable."""
    v = vllm_modules()
    try:
        v.config = import_module("vllm.config")
        v.sched = import_module("vllm.v1.core.sched.scheduler")
        v.outputs = import_module("vllm.v1.outputs")
        v.structured = import_module("vllm.v1.structured_output")
        v.model_config = model_config(v.config.ModelConfig)
        v.hf_configs = import_module("vllm.transformers_utils.config")
    except Exception as e:
        raise EngineUnavailable(
            f"vllm's scheduler cannot be built here ({type(e).__name__}: {e}); install vllm "
            "and its scheduler's import chain with .ci/install-peers.sh") from None
    return v


class VLLMSchedulerAdapter:
    name = "vllm-scheduler"
    features = frozenset({
        Feature.NAMESPACES, Feature.KV_EVENTS, Feature.IGNORES_UNKNOWN_EVENTS,
        Feature.SAME_FORWARD_REUSE, Feature.PREEMPTS_PREFILLING, Feature.MIXED_ONLY,
        Feature.ADAPTER_CAP, Feature.SLIDING_WINDOW, Feature.WINDOW_TABLE, Feature.MODEL_CONFIG,
        Feature.CONFIG_CLASS_WINDOW, Feature.MAMBA,
    })
    lacks = {  # why, each in the NOT_SUPPORTED cases' reason (docs/peers.md)
        Feature.HOST_TIER: "vLLM has no host tier without a KV connector; with its CPU "
                           "OffloadingConnector it is judged as the engine vllm-offload",
        Feature.L3_STORE: "no store below a host tier without a KV connector (LMCache and the "
                          "like are connectors)",
        Feature.UNLOAD: "unloading a LoRA adapter does not touch the prefix cache: its blocks "
                        "stay until evicted",
        Feature.HYBRID: "the KVCacheManager with full, sliding-window and Mamba groups is judged "
                        "at the hybrid cache level as the engine vllm-hybrid",
    }

    def __init__(self, config: SchedConfig) -> None:
        v = sched_modules()
        self.v = v
        self.version = v.version
        self.page_size = p = config.page_size
        self.null_page = 0  # vLLM's null block: page ids run from 1
        import torch

        c = v.config
        seqs = min(config.max_batch, config.max_slots, config.max_tokens)
        sched_cfg = c.SchedulerConfig(
            max_num_seqs=seqs, max_num_batched_tokens=config.max_tokens, max_model_len=MAX_LEN,
            enable_chunked_prefill=True, long_prefill_token_threshold=0,
            is_encoder_decoder=False)
        self.mamba = config.mamba
        # Mamba prefix caching is vLLM's "align" mode (MambaManager asserts it with caching on).
        cache_cfg = c.CacheConfig(block_size=p, enable_prefix_caching=True,
                                  mamba_cache_mode="align" if self.mamba else "none")
        # The adapter cap (PLAN-9) is vLLM's max_loras; without one, LoRA requests are not
        # counted at all (Scheduler.schedule reads lora_config only when it is set).
        lora = c.LoRAConfig(max_loras=config.max_adapters) if config.max_adapters else None
        vc = c.VllmConfig(
            scheduler_config=sched_cfg, model_config=v.model_config, cache_config=cache_cfg,
            lora_config=lora, kv_transfer_config=self.kv_transfer(config),
            device_config=c.DeviceConfig(device="cpu"),
            kv_events_config=c.KVEventsConfig(enable_kv_cache_events=True, publisher="null"))
        spec = v.spec.FullAttentionSpec(block_size=p, num_kv_heads=1, head_size=8,
                                        dtype=torch.float16)
        groups = [v.spec.KVCacheGroupSpec(["model.layers.0.self_attn.attn"], spec)]
        self.window = w = config.sliding_window
        if w:  # a hybrid model: a sliding-window group with a block table of its own (WIN-3)
            sw = v.spec.SlidingWindowSpec(block_size=p, num_kv_heads=1, head_size=8,
                                          dtype=torch.float16, sliding_window=w)
            groups.append(v.spec.KVCacheGroupSpec(["model.layers.1.self_attn.attn"], sw))
        if self.mamba:  # a Mamba group: one state per block of a page of tokens (chapter mamba)
            ms = v.spec.MambaSpec(block_size=p, shapes=((4,),), dtypes=(torch.float16,),
                                  mamba_cache_mode="align")
            groups.append(v.spec.KVCacheGroupSpec(["model.layers.2.mixer"], ms))
        self.state_group = len(groups) - 1 if self.mamba else -1
        # One pool for every group (vLLM's hybrid allocator): a block per KV group per page,
        # and the state slots beside them.
        kv_groups = 2 if w else 1
        blocks = kv_groups * config.device_pages + (config.mamba_slots if self.mamba else 0) + 1
        self.page_ids = (blocks, 0)
        self.state_ids = self.page_ids  # states are blocks of the pool, numbered as pages
        kv = v.spec.KVCacheConfig(num_blocks=blocks, kv_cache_tensors=[],
                                  kv_cache_groups=groups)
        cache_cfg.num_gpu_blocks = blocks
        self.sched = v.sched.Scheduler(
            vllm_config=vc, kv_cache_config=kv,
            structured_output_manager=v.structured.StructuredOutputManager(vc),
            block_size=p, log_stats=False)
        self.published: list[Any] = []  # what update_from_output publishes, until drained
        self.sched.kv_event_publisher = SimpleNamespace(
            publish=lambda batch: self.published.extend(batch.events), shutdown=lambda: None)
        self.hasher = v.utils.get_request_block_hasher(p, v.hashing.sha256)
        self.slots = config.max_slots
        self.slot: dict[str, int] = {}  # running request -> its row of the persistent batch
        self.ns: dict[str, int] = {}
        self.decoding: set[str] = set()  # computed through, its token reported
        self.pending: Any = None  # the scheduler output whose update_from_output is due
        self.sampling: set[str] = set()  # its rows that sample
        self.tokens: dict[str, int] = {}  # tokens reported for it
        self._step = 0
        # Each request's state in the spec's machine, and the (state, event) pairs taken
        # (transition coverage): the mapping of vLLM's states (docs/peers.md).
        self.state: dict[str, State] = {}
        self.taken: list[tuple[str, str]] = []
        # The cache-level adapter's hashing and event naming, over this scheduler's hasher
        # (EVENT-4, EVENT-5): vLLM's own functions, without a KV cache manager of its own.
        self._hashes = VLLMAdapter.__new__(VLLMAdapter)
        self._hashes.v, self._hashes.page_size = v, p
        self._hashes.hasher, self._hashes._requests = self.hasher, 0
        self._hashes._digests, self._hashes._event_ns = {}, {}
        self._hashes.namespace_part = "lora"

    def kv_transfer(self, config: SchedConfig) -> Any:
        """The KV connector the scheduler is built with: none (``vllm-offload`` adds one)."""
        return None

    # ----------------------------------------------------------------- requests
    def submit(self, specs: Sequence[RequestSpec]) -> None:
        v = self.v
        for s in specs:
            if s.rid in self.sched.requests or s.rid in self.ns:
                raise EngineRejected("duplicate", f"request {s.rid!r} was submitted before")
        for s in specs:
            kw: dict[str, Any] = {}
            if s.namespace:
                kw["lora_request"] = v.lora.LoRARequest(
                    f"kvconf-lora-{s.namespace}", s.namespace, f"kvconf/lora/{s.namespace}")
            params = v.sampling.SamplingParams(max_tokens=MAX_LEN, ignore_eos=True)
            req = v.request.Request(s.rid, list(s.tokens), params, None, arrival_time=0.0,
                                    block_hasher=self.hasher, **kw)
            for h in req.block_hashes:
                self._hashes._digests.setdefault(external_hash(h), h)
            self.sched.add_request(req)
            self.ns[s.rid] = s.namespace
            self.state[s.rid] = State.SUBMITTED

    def _take(self, rid: str, event: Event) -> None:
        """``rid`` takes ``event`` in the spec's machine (the last target where there are two:
        Finished, since without a host tier a Finish leaves nothing to drain)."""
        was = self.state.get(rid)
        if was is None:
            return
        to = TABLE.get((was, event), ())
        self.taken.append((was.value, event.value))
        self.state[rid] = to[-1] if to else was

    def transitions(self) -> list[tuple[str, str]]:
        """(state, event) pairs taken so far, in the spec's names: transition coverage."""
        return list(dict.fromkeys(self.taken))

    def _flush(self) -> None:
        """``update_from_output`` of the pending step, with the tokens reported for it."""
        out, self.pending = self.pending, None
        if out is None:
            return
        ids = list(out.num_scheduled_tokens)
        sampled = [[self.tokens[r]] if r in self.tokens else [] for r in ids]
        mro = self.v.outputs.ModelRunnerOutput(
            req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
            sampled_token_ids=sampled)
        self._report_transfers(mro)
        self.sched.update_from_output(out, mro)
        self.decoding.update(self.tokens)
        for rid in self.tokens:
            self._take(rid, Event.EXTEND_RESULT)
        self.tokens, self.sampling = {}, set()

    def _report_transfers(self, mro) -> None:
        """What a KV connector's worker reports with the step's output: nothing without one."""

    def next_plan(self) -> Plan:
        self._flush()
        self._step += 1
        out = self._schedule()
        for rid in sorted(out.preempted_req_ids):  # off: recomputed when admitted again
            self.slot.pop(rid, None)
            self.decoding.discard(rid)
            self._take(rid, Event.RETRACT_NO_COPY)
        admitted = {r.req_id for r in out.scheduled_new_reqs}
        admitted |= set(out.scheduled_cached_reqs.resumed_req_ids)
        rows = []
        for rid, n in out.num_scheduled_tokens.items():
            req = self.sched.requests[rid]
            start = req.num_computed_tokens - n  # advanced by the schedule already
            ids = self.sched.kv_cache_manager.get_block_ids(rid)
            table = tuple(ids[0])
            window = tuple(ids[1]) if self.window else ()
            work, src = (self._state_blocks(tuple(ids[self.state_group]), start, start + n)
                         if self.mamba else (-1, -1))
            if rid in admitted:
                self.decoding.discard(rid)
                self.slot.setdefault(rid, min(set(range(self.slots)) - set(self.slot.values())))
            kind = "decode" if rid in self.decoding else "prefill"
            reused = start if rid in admitted else 0
            samples = start + n == req.num_tokens
            if samples:
                self.sampling.add(rid)
            self._take(rid, Event.DECODE if kind == "decode" else Event.LAST_CHUNK if samples
                       else Event.CHUNK)
            shared = reused // self.page_size
            new = tuple(b for b in table[shared:] if b != 0)
            rows.append(ForwardRow(
                rid, kind, self.ns.get(rid, 0), start, tuple(req.all_token_ids[start:start + n]),
                reused, table, new, self.slot[rid], samples, window_table=window,
                mamba=work, mamba_src=src))
        self.pending = out if out.num_scheduled_tokens else None
        zero = tuple(out.new_block_ids_to_zero or ())
        return Plan(self._step, tuple(rows), (), (), zero=zero)

    def _schedule(self) -> Any:
        """``schedule()``: the step's ``SchedulerOutput``."""
        return self.sched.schedule()

    def _state_blocks(self, table: tuple[int, ...], start: int, end: int) -> tuple[int, int]:
        """The Mamba group's blocks a row of [start, end) uses (chapter mamba, states in a
        table of blocks): vLLM's "align" mode keeps in block p the state after (p + 1) pages
        of tokens and cuts prefill chunks at block boundaries (``_mamba_block_aligned_split``:
        "slot p holds the state after exactly (p + 1) * block_size tokens"), its model runner
        copying the last state into the block a row ends in before the forward
        (``precopy_mamba_align_fused_kernel``, ``mamba_utils.py``). So the state of depth
        ``end`` is left in the block of position end - 1, and the one of depth ``start`` read
        from the block of position start - 1 (a source of its own where that is another
        block)."""
        p = self.page_size

        def block(k: int) -> int:
            return table[k] if k < len(table) else self.null_page

        work = block((end - 1) // p)
        src = block((start - 1) // p) if start else -1
        return work, (src if src != work else -1)

    def advance(self, events: Sequence[RuntimeEvent]) -> None:
        tokens: dict[str, int] = {}
        for e in events:  # checked whole before anything is applied (REQ-2)
            if isinstance(e, ExtendResult):
                if e.rid not in self.sampling or e.rid in self.tokens or e.rid in tokens:
                    raise EngineRejected("no_token_due", f"no row of {e.rid!r} samples in the "
                                         "step, so its token has no place in vLLM's "
                                         "ModelRunnerOutput")
                tokens[e.rid] = e.token
            elif not isinstance(e, (Finish, Abort)):
                raise EngineRejected("unknown_op", f"{type(e).__name__}: vLLM's scheduler has "
                                     "no transfer in flight (no KV connector)")
        self.tokens.update(tokens)
        stops = [e for e in events if isinstance(e, (Finish, Abort))]
        if any(isinstance(e, Finish) for e in stops):
            self._flush()  # its last token first, as update_from_output delivers it
        status = self.v.request.RequestStatus
        for e in stops:
            how = status.FINISHED_STOPPED if isinstance(e, Finish) else status.FINISHED_ABORTED
            done = self.sched.finish_requests(e.rid, how)
            if done:
                self._take(e.rid, Event.FINISH if isinstance(e, Finish) else Event.ABORT)
                self.state.pop(e.rid, None)
                self.slot.pop(e.rid, None)
                self.decoding.discard(e.rid)
                self.sampling.discard(e.rid)
                self.tokens.pop(e.rid, None)

    # ----------------------------------------------------------------- events
    def drain_events(self) -> list[KVEvent]:
        """vLLM's KV events: those ``update_from_output`` published, then those its manager
        queued since (schedule stores and evicts blocks; update_from_output publishes them as
        one batch per step)."""
        raw, self.published = self.published, []
        raw += self.sched.kv_cache_manager.take_events()
        # The full-attention group's blocks are the cache's prefixes; a window or Mamba group
        # caches the same hashes again for its own blocks (group_idx 1, 2).
        raw = [e for e in raw if getattr(e, "group_idx", 0) in (0, None)]
        return to_kit_events(raw, self.v.events, self._hashes._event_namespace)

    def block_hash(self, parent: int | None, namespace: int, tokens: Sequence[int]) -> int:
        """vLLM's block hash, with the cache level's twin of the same functions."""
        return self._hashes.block_hash(parent, namespace, tokens)

    def snapshot(self) -> None:
        return None

    def model_window(self, model_config: Mapping[str, Any]) -> int:
        """The window vLLM reads from a model config (WIN-1, WIN-5), by ``ModelConfig``'s own steps:
        ``get_config`` of the folder, ``get_hf_text_config`` (the nested text config where there
        is one), a window of 0 read as none, then ``ModelConfig.get_sliding_window`` (the text
        config's ``sliding_window``). ``ModelConfig`` itself is not built: it also inspects the
        architecture's model code, which for the composite architectures needs packages that
        are not here (Mistral 3's ``mistral_common``) and plays no part in the window."""
        if not isinstance(model_config, Mapping):
            raise EngineRejected("bad_config", f"a model config is a mapping, got "
                                 f"{type(model_config).__name__}")
        v = self.v
        with tempfile.TemporaryDirectory(prefix="kvconf-vllm-model-") as path:
            write_config(path, as_architecture(model_config))
            try:
                hf = v.hf_configs.get_config(path, trust_remote_code=False)
            except (ValueError, TypeError) as e:  # transformers refuses the config
                raise EngineRejected("bad_config", f"{type(e).__name__}: {e}") from None
        text = v.hf_configs.get_hf_text_config(hf)
        if getattr(text, "sliding_window", None) == 0:  # as ModelConfig.__post_init__ does
            text.sliding_window = None
        window = v.config.ModelConfig.get_sliding_window(SimpleNamespace(hf_text_config=text))
        return window or 0


class VLLMEngine(VLLMAdapter):
    """vLLM at both levels under one name: its KV cache manager at the cache level (the ``vllm``
    adapter) and its scheduler at the scheduler level."""

    name = "vllm-scheduler"
    scheduler = VLLMSchedulerAdapter  # the scheduler-level factory (conformance.adapters)


TABLE = table_for(VLLMSchedulerAdapter.features)  # the spec's table with REQ-7's transition
