"""TokenSpeed's scheduler (the C++ extension ``tokenspeed_scheduler``) at the scheduler level,
radix-tree era (0.1.0: main at 75a9a8e8 and the pull requests the seeds discuss).

Written against the real binding, checked by driving it: ``ExecutionPlan.forward`` is a list of
``FlatForwardOp`` (usually one); events have only no-argument constructors, their fields set
afterwards; an ordinary decode row carries -1 for its input token and position, so the adapter
tracks each request's tokens itself; a ``WriteBackOp`` names no request, so the adapter gives each
op to the request whose page table holds its source pages; the runtime sends
``UpdateReserveNumTokens`` for every decode row, as TokenSpeed's own runtime loop does.

Features come from what the installed build offers, never from hope: namespaces (``lora_id``)
and the per-forward adapter cap (``max_loras``) only where the binding has them, and a sliding
window only where it has ``has_sliding_window``. Mid-flight publish is not a feature to declare:
PLAN-7 holds every revision to it, so those that publish at finish only fail it (D381-1).

L3 (PR 293, the only build with ``Cache.BackUpDoneEvent``): when a request arrives the adapter
does what TokenSpeed's runtime does, asking the engine for the keys past the host match
(``calc_rolling_hash(.., apply_match=True)``) and telling it how many of them the store holds;
a ``PrefetchOp`` is a prefetch of the pages those keys name, a ``BackUpOp`` (which names no
request) the backup of the acknowledged writeback whose host pages it reads, its (page, key)
pairs placed at the pages the keys name. Mamba (every radix-era build, asked with one request:
``keeps_mamba_state``): a row's working, copy-on-write and checkpoint slots, the checkpoint with
the depth TokenSpeed's runtime leaves there (``checkpoint_depth``), and each copy's state units
from ``*_pages_by_kind``; every admitted request takes two state slots (MAMBA-9). The
extension is not on PyPI; when it cannot be imported every scheduler case is NOT_SUPPORTED with
that reason. It offers no snapshot, so only the black-box oracles judge it.

Its version is the installed distribution's (the module has no ``__version__``), with the source
revision named in ``KVCONF_TOKENSPEED_REVISION`` when the user gives one, so a report says which
engine it judged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvconf.conformance.adapters.tokenspeed_binding import (
    block_hash,
    chunk_reused,
    engine_call,
    engine_version,
    extension,
    forward_event,
    new_event,
    read_kv_events,
)
from kvconf.conformance.adapters.tokenspeed_blockpool import (
    TokenSpeedBlockPoolAdapter,
    is_block_pool,
)
from kvconf.conformance.engine.features import Feature
from kvconf.conformance.errors import EngineRejected
from kvconf.conformance.scheduler.trace import SchedConfig
from kvconf.reference.kv_events import KVEvent
from kvconf.reference.plan import (
    Abort,
    BackupDone,
    CopyOp,
    ExtendResult,
    Finish,
    ForwardRow,
    L3Op,
    Plan,
    PrefetchDone,
    RequestSpec,
    RuntimeEvent,
    WritebackDone,
)

_MAMBA: dict[int, bool] = {}


def keeps_mamba_state(ts: Any) -> bool:
    """Whether this build schedules Mamba state slots beside KV: every radix-era binding has
    ``enable_mamba`` and the per-row slot fields, so ask the engine whether a request's forward
    row names a working slot when the switch is on."""
    key = id(ts)
    if key not in _MAMBA:
        c = ts.SchedulerConfig()
        if not hasattr(c, "enable_mamba"):
            _MAMBA[key] = False
            return False
        c.page_size, c.max_scheduled_tokens, c.max_batch_size = 2, 64, 4
        c.decode_input_tokens, c.role = 1, ts.SchedulerConfig.Role.Fused
        c.num_device_pages, c.num_host_pages, c.disable_l2_cache = 33, 0, True
        c.enable_mamba, c.mamba_cache_chunk_size, c.mamba_pool_total_chunks = True, 2, 4
        s = ts.Scheduler(c)
        s.submit_requests([new_event(ts.RequestSpec, request_id="m", tokens=list(range(1, 6)))])
        rows = [int(w) for fwd in s.next_execution_plan().forward
                for w in getattr(fwd, "mamba_pool_indices", [])]
        _MAMBA[key] = bool(rows) and all(w >= 0 for w in rows)
    return _MAMBA[key]


def checkpoint_depth(start: int, end: int, page: int) -> int:
    """The depth whose state TokenSpeed's runtime leaves in a row's checkpoint slot, or 0 for
    none: the last page boundary the row reaches past its start, when the row starts or ends on
    a boundary (its chunked scan tracks boundaries from the row's start). The scheduler assumes
    just that when it publishes the checkpoint as the state of the pages inserted up to there
    (HybridPrefixCache::Apply(DevicePrefix), should_publish_mamba_checkpoint)."""
    depth = end // page * page
    if depth > start and (start % page == 0 or end % page == 0):
        return depth
    return 0


class TokenSpeedAdapter:
    name = "tokenspeed"

    def __init__(self, config: SchedConfig) -> None:
        ts = extension()
        self.ts = ts
        self.version = engine_version(ts)
        self.page_size = config.page_size
        c = ts.SchedulerConfig()
        c.page_size = config.page_size
        c.max_scheduled_tokens = config.max_tokens
        c.max_batch_size = config.max_batch
        c.decode_input_tokens = 1
        c.role = ts.SchedulerConfig.Role.Fused
        # Page 0 of each pool is reserved (PageAllocator hands out ids 1..total-1,
        # csrc/resource/allocator/page_allocator.cpp): one more page on each tier gives the
        # engine the kit's pool sizes, with ids starting at 1.
        c.num_device_pages = config.device_pages + 1
        host = config.host_pages + 1 if config.host_pages else 0
        self.page_ids = (config.device_pages + 1, host)
        c.num_host_pages = host
        c.disable_l2_cache = config.host_pages == 0
        c.enable_mixed_prefill_decode = config.mixed
        # Events for unknown request ids and op ids are ignored by design
        # (csrc/scheduler/outside_event_handler.cpp: a failed lookup returns); REQ-6.
        features = {Feature.HOST_TIER, Feature.IGNORES_UNKNOWN_EVENTS}
        if hasattr(c, "has_sliding_window"):  # the sliding-window switch (PR 381)
            c.has_sliding_window = config.sliding_window > 0
            c.sliding_window_size = config.sliding_window
            # It publishes mid-flight up to sliding_window_size tokens, "so reuse stays in the
            # full-history-equivalent region" (types.h; forward.cpp,
            # maxMidflightPrefixPublishTokens): the runtime it is built for keeps them (WIN-2).
            features |= {Feature.SLIDING_WINDOW, Feature.KEEPS_WINDOW_PREFIX}
        if hasattr(c, "max_loras"):  # the LoRA branch caps adapters per forward (PLAN-9)
            # The kit's 0 means no cap; TokenSpeed's max_loras is the number of adapter slots,
            # so no cap is one slot per row of a batch.
            c.max_loras = config.max_adapters or config.max_batch
            features |= {Feature.ADAPTER_CAP}
        self.lora = hasattr(ts.RequestSpec(), "lora_id")
        if self.lora:
            features |= {Feature.NAMESPACES}
        # An L3 store where the runtime can acknowledge backups (BackUpDoneEvent, PR 293): every
        # radix-era binding has PrefetchOp, BackUpOp and enable_l3_storage, only PR 293 both
        # emits backups and takes their acknowledgement.
        if hasattr(ts.Cache, "BackUpDoneEvent"):
            features |= {Feature.L3_STORE}
        self.l3 = config.l3_store and Feature.L3_STORE in features
        if self.l3:
            c.enable_l3_storage = True
            # It prefetches when the hits exceed its threshold (Scheduler::schedulePrefetch,
            # csrc/scheduler/operations/cache.cpp); the kit's threshold is the least worth one.
            c.prefetch_threshold = config.prefetch_threshold - 1
        if keeps_mamba_state(ts):
            # A first chunk is admitted only with room for a working and a checkpoint slot
            # ("mamba_slots_needed = 2 + ..." in Scheduler::schedulePrefillFirstChunk,
            # csrc/scheduler/operations/forward.cpp; HybridPrefixCache::Apply on PR 243): MAMBA-9.
            features |= {Feature.MAMBA, Feature.MAMBA_CHECKPOINT_SLOT}
        self.mamba = config.mamba and Feature.MAMBA in features
        if self.mamba:
            c.enable_mamba = True
            c.mamba_cache_chunk_size = config.page_size  # states at page boundaries (MAMBA-3)
            c.mamba_pool_total_chunks = config.mamba_slots
            if config.mamba_host_slots and config.host_pages:
                c.enable_mamba_l2 = True
                c.mamba_l2_host_slots = config.mamba_host_slots
        if hasattr(ts.Scheduler, "drain_kv_events"):  # EVENT-1..4, EVENT-7 (device tier)
            c.enable_kv_cache_events = True
            features |= {Feature.KV_EVENTS}
        self.features = frozenset(features)
        self.sched = ts.Scheduler(c)
        self.event_ns: dict[int, int] = {}  # block hash -> the namespace of its chain
        self.chunk_end: dict[str, int] = {}  # where a request's unfinished prefill stopped
        self._step = 0
        self.tokens: dict[str, list[int]] = {}  # prompt and sampled tokens, per request
        self.ns: dict[str, int] = {}
        self.tables: dict[str, tuple[int, ...]] = {}  # the last page table each request had
        self.seen: dict[str, int] = {}  # the plan each request's table is from
        self.decoding: set[str] = set()  # requests with a decode row in the last plan
        self.ending: list[str] = []  # finished or aborted, a writeback of theirs still to come
        # L3: the page each request's keys start at (its host match when it arrived), the
        # request of each prefetch, and each writeback's request and sequence until its backup.
        self.l3_start: dict[str, int] = {}
        self.prefetching: dict[int, str] = {}
        self.written: dict[int, tuple[str, tuple[int, ...], tuple[int, ...]]] = {}
        self.acked: list[int] = []  # writebacks acknowledged since the last plan

    _call = staticmethod(engine_call)

    def submit(self, specs: Sequence[RequestSpec]) -> None:
        out = []
        for s in specs:
            if s.namespace != 0 and not self.lora:
                raise EngineRejected("unsupported", "namespaces need the LoRA branch (lora_id)")
            spec = self.ts.RequestSpec()
            spec.request_id = s.rid
            spec.tokens = list(s.tokens)
            if self.lora:
                spec.lora_id = s.namespace
            if self.l3:
                self._l3_query(spec, s)
            out.append(spec)
        self._call(self.sched.submit_requests, out)
        for s in specs:
            self.tokens[s.rid] = list(s.tokens)
            self.ns[s.rid] = s.namespace

    def _l3_query(self, spec: Any, s: RequestSpec) -> None:
        """What TokenSpeed's runtime tells the engine of the L3 store when a request arrives
        (calc_l3_query_hashes in PR 293's discussion): the keys of the prompt's full pages past
        the host match, from the engine's own ``calc_rolling_hash(.., apply_match=True)``, and
        how many of them the store holds. The kit's ``l3_hits`` counts from the first page, so
        the store holds ``l3_hits - match`` of them. Pages are those a first chunk can reuse:
        the last token's is left out, as the engine's own match leaves it."""
        p = self.page_size
        full = (len(s.tokens) - 1) // p
        hashes = [str(h) for h in self.sched.calc_rolling_hash(list(s.tokens[: full * p]), True)]
        start = full - len(hashes)
        spec.rolling_hashes = hashes
        spec.storage_hit_pages = max(0, s.l3_hits - start)
        self.l3_start[s.rid] = start

    def _prefetch(self, op: Any) -> L3Op:
        """A PrefetchOp: host pages to fill with the pages stored under its keys. The keys
        are the ones the runtime handed in at arrival, so they name pages from the host match
        of that moment on."""
        rid = str(op.request_id)
        self.prefetching[int(op.op_id)] = rid
        return L3Op(int(op.op_id), "prefetch", rid, self.ns.get(rid, 0),
                    self.l3_start.get(rid, 0), tuple(int(pg) for pg in op.dst_pages),
                    tuple(str(k) for k in op.rolling_page_hashes))

    def _backup(self, op: Any) -> L3Op:
        """A BackUpOp names no request: it is the backup of the acknowledged writeback whose
        host pages it reads (Scheduler::handleEvent(cache::WriteBackDone)). Its pages come in
        the writeback's order, node by node from the leaf (newWriteBackOperation), each with
        its key; the kit lists them in sequence order, so each (page, key) pair is placed at
        the page its key names in the request's sequence (the engine's own hash, with no
        match). Pairs whose keys name no page of it stay in the engine's order, where the kit
        reports the wrong key."""
        pages = [int(pg) for pg in op.src_pages]
        keys = [str(k) for k in op.rolling_page_hashes]
        owner = next((w for w in self.acked if set(pages) <= set(self.written[w][2])), None)
        if owner is None:
            return L3Op(int(op.op_id), "backup", "", 0, 0, tuple(pages), tuple(keys))
        rid, tokens, _host = self.written[owner]
        chain = [str(h) for h in self.sched.calc_rolling_hash(list(tokens), False)]
        at = {h: j for j, h in enumerate(chain)}
        where = [at.get(k) for k in keys]
        found = [j for j in where if j is not None]
        if len(found) == len(keys) and found and sorted(found) == list(
                range(min(found), min(found) + len(found))):
            order = sorted(range(len(keys)), key=lambda i: found[i])
            pages = [pages[i] for i in order]
            keys = [keys[i] for i in order]
            start = min(found)
        else:
            start = found[0] if found else max(0, (len(tokens) - 1) // self.page_size - len(keys))
        return L3Op(int(op.op_id), "backup", rid, self.ns.get(rid, 0), start, tuple(pages),
                    tuple(keys))

    def _mamba(self, i: int, start: int, n: int, work: Sequence[int], cow: Sequence[int],
               ckpt: Sequence[int]) -> tuple[int, int, int, int]:
        """A row's Mamba slots: its working slot, the cached state it resumes from (copy on
        write), and its checkpoint slot with the depth the runtime leaves there (none when the
        row passes no page boundary it can track)."""
        depth = checkpoint_depth(start, start + n, self.page_size)
        dst = int(ckpt[i]) if depth else -1
        return int(work[i]), int(cow[i]), dst, depth if dst >= 0 else 0

    def _rows(self, fwd) -> list[ForwardRow]:
        rows: list[ForwardRow] = []
        n_ext = fwd.num_extends()
        # Each property of the binding copies its whole vector into Python: read each once.
        rids, tables, news = fwd.request_ids, fwd.occupied_pages, fwd.new_occupied_pages
        slots, lengths = fwd.request_pool_indices, fwd.input_lengths
        prefix, prefill = fwd.extend_prefix_lens, fwd.prefill_lengths
        input_ids = fwd.input_ids
        hist, last = fwd.hist_token_lens, fwd.decode_input_ids
        if self.mamba:
            work, cow = fwd.mamba_pool_indices, fwd.mamba_cow_src_indices
            ckpt = fwd.mamba_checkpoint_dst_indices
        offset = 0
        for i, rid in enumerate(rids):
            table = tuple(tables[i])
            new = tuple(news[i])
            slot = int(slots[i])
            n = int(lengths[i])
            ns = self.ns.get(rid, 0)
            self.tables[rid] = table
            self.seen[rid] = self._step
            if i < n_ext:
                start = int(prefix[i])
                toks = tuple(input_ids[offset : offset + n])
                offset += n
                samples = start + n == int(prefill[i])
                reused = chunk_reused(self.chunk_end, rid, start, n, samples)
                rows.append(ForwardRow(rid, "prefill", ns, start, toks, reused, table, new, slot,
                                       samples, *self._mamba(i, start, n, work, cow, ckpt)
                                       if self.mamba else ()))
                continue
            j = i - n_ext
            known = self.tokens.get(rid, [])
            # -1 on an ordinary decode row: the input is the last token, at its position.
            start = int(hist[j]) if j < len(hist) else -1
            token = int(last[j]) if j < len(last) else -1
            if start < 0:
                start = len(known) - 1
            if token < 0:
                token = known[start] if 0 <= start < len(known) else -1
            rows.append(ForwardRow(rid, "decode", ns, start, (token,), 0, table, new, slot,
                                   True, *self._mamba(i, start, 1, work, cow, ckpt)
                                   if self.mamba else ()))
            self.decoding.add(rid)
        return rows

    @staticmethod
    def _states(op: Any) -> list[tuple[tuple[int, int], ...]]:
        """Each copy's Mamba state units: the ``mamba`` kind of ``src_pages_by_kind`` /
        ``dst_pages_by_kind`` (``src_pages`` / ``dst_pages`` hold the KV pages only)."""
        src = dict(op.src_pages_by_kind).get("mamba", [])
        dst = dict(op.dst_pages_by_kind).get("mamba", [])
        out = []
        for k in range(len(op.op_ids)):
            s = src[k] if k < len(src) else []
            d = dst[k] if k < len(dst) else []
            out.append(tuple(zip((int(x) for x in s), (int(x) for x in d), strict=True)))
        return out

    def _owner(self, src: Sequence[int], retract: bool, running: set[str]) -> str:
        """The request a writeback belongs to (the radix-era op names none): among those it can
        be for (a finished or aborted request; for a retract, one no longer scheduled), the one
        whose last page table shares the most pages with its source (a finished request's copy
        can take a shared prefix from the tree rather than its own duplicate pages). Of two that
        share as many, the one scheduled last: an older table may list pages the engine has
        since freed and handed to the newer one."""
        pages = set(src)
        if retract:
            candidates = [r for r in sorted(self.tables) if r not in running
                          and r not in self.ending]
        else:  # several requests can finish at once: the one that shares the most pages
            candidates = list(self.ending)
        best = max(candidates, key=lambda r: (len(pages & set(self.tables.get(r, ()))),
                                              self.seen.get(r, 0)), default=None)
        if best is not None and pages & set(self.tables.get(best, ())):
            return best
        return ""  # never a running request's: that would mark it as copying

    def next_plan(self) -> Plan:
        self._step += 1
        plan = self._call(self.sched.next_execution_plan)
        ops = plan.forward if isinstance(plan.forward, list) else [plan.forward]
        self.decoding = set()
        rows = [row for fwd in ops for row in self._rows(fwd)]
        running = {r.rid for r in rows}
        loads: list[CopyOp] = []
        writes: list[CopyOp] = []
        l3: list[L3Op] = []
        for op in plan.cache:
            kind = type(op).__name__
            if kind == "PrefetchOp":
                l3.append(self._prefetch(op))
                continue
            if kind == "BackUpOp":
                l3.append(self._backup(op))
                continue
            if kind not in ("LoadBackOp", "WriteBackOp"):
                continue
            retract = list(getattr(op, "is_retract", [False] * len(op.op_ids)))
            states = self._states(op) if self.mamba else [()] * len(op.op_ids)
            for k, op_id in enumerate(op.op_ids):
                src = [int(p) for p in op.src_pages[k]]
                pairs = tuple(zip(src, (int(p) for p in op.dst_pages[k]), strict=True))
                if kind == "LoadBackOp":
                    loads.append(CopyOp(int(op_id), "loadback", "", pairs, mamba=states[k]))
                else:
                    owner = self._owner(src, bool(retract[k]), running)
                    writes.append(CopyOp(int(op_id), "writeback", owner, pairs,
                                         bool(retract[k]), states[k]))
                    if self.l3 and owner:
                        self.written[int(op_id)] = (owner, tuple(self.tokens.get(owner, ())),
                                                    tuple(d for _s, d in pairs))
        for w in self.acked:  # backed up in this plan or never (the engine's queue is drained)
            self.written.pop(w, None)
        self.acked = []
        # A finished request's writeback comes in the plan right after its Finish (Draining
        # becomes WritingBack there) or never: forget it, so attribution stays cheap.
        for rid in self.ending:
            self.tables.pop(rid, None)
            self.seen.pop(rid, None)
            self.tokens.pop(rid, None)
        self.ending = []
        return Plan(self._step, tuple(rows), tuple(loads), tuple(writes), tuple(l3))

    def advance(self, events: Sequence[RuntimeEvent]) -> None:
        ts = self.ts
        ev = ts.ExecutionEvent()
        finished = {e.rid for e in events if isinstance(e, (Finish, Abort))}
        for e in events:
            if forward_event(ts, ev, e, self.decoding, finished):
                continue
            if isinstance(e, WritebackDone):
                ev.add_event(new_event(ts.Cache.WriteBackDoneEvent, op_id=e.op_id,
                                    success=e.success))
                if e.op_id in self.written:  # its backup comes in the next plan (PR 293)
                    self.acked.append(e.op_id)
            elif isinstance(e, PrefetchDone):
                ev.add_event(new_event(ts.Cache.PrefetchDoneEvent, op_id=e.op_id,
                                    request_id=self.prefetching.pop(e.op_id, ""),
                                    success=True, completed_pages=e.completed))
            elif isinstance(e, BackupDone):
                ev.add_event(new_event(ts.Cache.BackUpDoneEvent, op_id=e.op_id,
                                    success=e.success))
        self._call(self.sched.advance, ev)
        for e in events:  # taken: only now are the sampled tokens part of each sequence
            if isinstance(e, ExtendResult):
                self.tokens.setdefault(e.rid, []).append(e.token)
            elif isinstance(e, (Finish, Abort)):
                self.chunk_end.pop(e.rid, None)
                if e.rid in self.tables and e.rid not in self.ending:
                    self.ending.append(e.rid)

    def _root(self, namespace: int) -> int | None:
        """The parent hash of a namespace's first block: none in the base model; an adapter's
        chain hangs off its virtual root, the sentinel page [-lora_id, 0, ...] hashed with no
        parent (KVPrefixCache::getOrCreateLoraRoot, kv_prefix_cache.cpp)."""
        if namespace == 0:
            return None
        return block_hash(None, 0, [-namespace] + [0] * (self.page_size - 1))

    def block_hash(self, parent: int | None, namespace: int, tokens: Sequence[int]) -> int:
        """TokenSpeed's block hash (HashKvBlock, csrc/scheduler/kv_cache_events.cpp); a
        namespace's first block chains off its virtual root."""
        return block_hash(self._root(namespace) if parent is None else parent, 0, tokens)

    def drain_events(self) -> list[KVEvent]:
        """The engine's device-tier KV events; an adapter namespace's chain hangs off its
        virtual root, which no event announces (``read_kv_events``)."""
        roots = {self._root(ns): ns for ns in sorted(set(self.ns.values())) if ns}
        return read_kv_events(self.sched.drain_kv_events(), roots, self.event_ns)

    def snapshot(self) -> None:
        return None


def tokenspeed_adapter(config: SchedConfig) -> Any:
    """The adapter for the installed revision, whichever era it is: the block-pool binding
    (cache groups, today's main) or the radix-tree one (``page_size``). A user who installs
    either gets the right one under the one engine name."""
    if is_block_pool(extension()):
        return TokenSpeedBlockPoolAdapter(config)
    return TokenSpeedAdapter(config)


tokenspeed_adapter.level = "scheduler"  # called with a SchedConfig (conformance.adapters)
