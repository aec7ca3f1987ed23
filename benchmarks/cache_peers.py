"""The reference prefix cache against the peers' caches on one trace, in one process.

Usage: python benchmarks/cache_peers.py [--shape short|2k|tree16k|all] [--seed 0] [--scale 1.0]
                                        [--no-memory]

Engines: the reference ``PrefixCache``, SGLang's ``RadixCache`` and ``UnifiedRadixCache`` and
vLLM's ``KVCacheManager`` (whichever are installed: ``.ci/install-peers.sh``; a missing peer is
named and the others are measured without it). Each is built as the kit's adapter builds it on
CPU, then driven through its own calls, the way its own caller drives it.

The trace is made up front from a seeded RNG: requests whose prompts are a shared system prompt
plus a unique tail, whole pages of 16 tokens. Per request: ``match`` the prompt, ``lock`` the
match, ``insert`` the whole prompt (the matched pages plus new ones), ``unlock``; every 50
operations an ``evict`` of a few pages. The engines run in lockstep, one request of each in
turn (the first engine rotating), and the clock is the process's CPU time, so a load on the
machine falls on all of them alike and time spent waiting for a core is not counted. Only the
engines' own calls are timed: inputs are built in each engine's own form beforehand (a token
array for the reference, a ``RadixKey`` for SGLang) and the glue between calls (allocating pages,
building the value tensor) is outside the clock. vLLM has no separate lock, insert or evict: its
request cycle (``get_computed_blocks``, ``allocate_slots``, ``free``) does the same work, evicting
inside its allocation, and its figure is that cycle's time per four operations.

Shapes: ``short`` (prompts of 2 to 12 pages), ``2k`` (prompts of 1k to 2k tokens on shared
system prompts of 512 to 1,536 tokens), ``tree16k`` (16,384 distinct prompts: the tree grows to
16k prefixes, eviction rarely cuts it back).

Memory: for each engine, in fresh processes, what it keeps while the shape's prompts go in with
no eviction, divided by the tokens cached (the same count for every engine: the distinct whole
pages of the prompts). "heap" is the Python heap's growth (``tracemalloc``) plus, for SGLang's
``RadixCache``, the distinct tensor storages its nodes hold (tracemalloc does not see them);
the Rust tree core's memory is outside it, so for ``UnifiedRadixCache`` only "resident" (the
resident set's growth, in a process with no tracing; coarse) counts.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import subprocess
import sys
import time
import tracemalloc
import warnings
from array import array
from dataclasses import dataclass
from typing import Any

PAGE = 16
EVICT_EVERY = 50


@dataclass(frozen=True)
class Shape:
    name: str
    requests: int
    systems: int
    system_pages: tuple[int, int]
    tail_pages: tuple[int, int]
    device_pages: int
    evict_pages: int


SHAPES = {
    "short": Shape("short", 4000, 16, (1, 4), (1, 8), 8192, 16),
    "2k": Shape("2k", 600, 8, (32, 96), (32, 64), 16384, 128),
    "tree16k": Shape("tree16k", 16384, 64, (2, 8), (1, 3), 40000, 4),
}


def make_trace(shape: Shape, seed: int, scale: float) -> list[list[int]]:
    rng = random.Random(seed)
    systems = [[rng.randrange(32000) for _ in range(PAGE * rng.randint(*shape.system_pages))]
               for _ in range(shape.systems)]
    n = max(1, int(shape.requests * scale))
    return [rng.choice(systems) + [rng.randrange(32000)
                                   for _ in range(PAGE * rng.randint(*shape.tail_pages))]
            for _ in range(n)]


def cached_tokens(prompts: list[list[int]]) -> int:
    """Distinct whole-page prefixes of all prompts, in tokens: what any cache holds after
    inserting them all without eviction."""
    seen: set[tuple[int, ...]] = set()
    for p in prompts:
        for end in range(PAGE, len(p) + 1, PAGE):
            seen.add(tuple(p[:end]))
    return len(seen) * PAGE


# ----------------------------------------------------------------------------- engines
class Engine:
    """One engine driven through its own calls; ``seconds`` adds up the time inside them."""

    name = ""
    # Whether the Python heap holds what the engine keeps: False for an engine whose store is
    # native (a Rust or C++ core), whose heap growth is near zero and means nothing.
    heap_measurable = True

    def __init__(self) -> None:
        self.seconds = 0.0
        self.ops = 0

    def prepare(self, tokens: list[int]) -> Any:
        """The prompt in the engine's own input form (built outside the clock)."""
        return tokens

    def request(self, key: Any, tokens: list[int]) -> None:
        raise NotImplementedError

    def evict(self, pages: int) -> None:
        raise NotImplementedError

    def drain(self) -> None:
        """Take the published events (outside the clock), as a consumer would."""


class Reference(Engine):
    name = "reference"

    def __init__(self, device_pages: int) -> None:
        super().__init__()
        from kvconf.reference import CacheConfig, PrefixCache, Tier

        self.tier = Tier.DEVICE
        self.cache = PrefixCache(CacheConfig(page_size=PAGE, device_pages=device_pages))

    def prepare(self, tokens: list[int]) -> Any:
        from kvconf.reference.radix_tree import TOKEN

        return array(TOKEN, tokens)  # the tree's own form, as SGLang's RadixKey is its own

    def request(self, key: Any, tokens: list[int]) -> None:
        c, clock = self.cache, time.process_time
        c.tick()
        t0 = clock()
        m = c.match(0, key)
        handle = c.lock(m.device_node)
        t1 = clock()
        need = len(key) // PAGE - len(m.device_pages)
        new = c.alloc(need)
        if new is None:
            t2 = clock()
            c.evict(self.tier, need - c.available())
            t1 += clock() - t2  # eviction the allocation needed: the engine's work
            new = c.alloc(need)
        t2 = clock()
        c.insert(0, key, list(m.device_pages) + new)
        c.unlock(handle)
        self.seconds += (t1 - t0) + (clock() - t2)
        self.ops += 4

    def evict(self, pages: int) -> None:
        t0 = time.process_time()
        self.cache.evict(self.tier, pages)
        self.seconds += time.process_time() - t0
        self.ops += 1

    def drain(self) -> None:
        self.cache.drain_events()


class SGLangRadix(Engine):
    name = "sglang RadixCache"

    def __init__(self, device_pages: int) -> None:
        super().__init__()
        from kvconf.conformance.adapters.sglang_radix import SGLangRadixAdapter
        from kvconf.conformance.engine.config import EngineConfig

        a = SGLangRadixAdapter(EngineConfig(page_size=PAGE, device_pages=device_pages))
        self.cache, self.pool, self.sg = a.cache, a.pool, a.sg
        import torch

        self.torch = torch
        self.offsets = torch.arange(PAGE, dtype=torch.int64)

    def prepare(self, tokens: list[int]) -> Any:
        return self.sg.radix.RadixKey(array("q", tokens))

    def _slots(self, pages: list[int]) -> Any:
        t = self.torch
        return (t.tensor(pages, dtype=t.int64)[:, None] * PAGE + self.offsets).reshape(-1)

    def request(self, key: Any, tokens: list[int]) -> None:
        c, clock, base = self.cache, time.process_time, self.sg.base
        t0 = clock()
        m = c.match_prefix(base.MatchPrefixParams(key=key))
        node, n = m.last_device_node, m.device_prefix_len
        c.inc_lock_ref(node)
        prefix = c.path_device_indices(node)[:n]  # prefix_device_indices: the caller's row
        t1 = clock()
        need = len(tokens) // PAGE - n // PAGE
        new = self.pool.alloc(need)
        if new is None:
            t2 = clock()
            c.evict(base.EvictParams(num_tokens=(need - len(self.pool.free_pages)) * PAGE))
            t1 += clock() - t2  # eviction the allocation needed: the engine's work
            new = self.pool.alloc(need)
        value = self.torch.cat([prefix.to(self.torch.int64), self._slots(new)])
        t2 = clock()
        r = c.insert(base.InsertParams(key=key, value=value))
        c.dec_lock_ref(node)
        t3 = clock()
        if r.prefix_len > n:  # what RadixCache._insert_cache frees: the caller's duplicates
            self.pool.free_segment(value[n: r.prefix_len].tolist())
        self.seconds += (t1 - t0) + (t3 - t2)
        self.ops += 4

    def evict(self, pages: int) -> None:
        t0 = time.process_time()
        self.cache.evict(self.sg.base.EvictParams(num_tokens=pages * PAGE))
        self.seconds += time.process_time() - t0
        self.ops += 1

    def drain(self) -> None:
        self.cache.take_events()


class SGLangUnified(SGLangRadix):
    name = "sglang UnifiedRadixCache"
    heap_measurable = False  # the tree lives in the Rust core, off the Python heap

    def __init__(self, device_pages: int) -> None:
        Engine.__init__(self)
        from kvconf.conformance.adapters.sglang_unified import SGLangUnifiedAdapter
        from kvconf.conformance.engine.config import EngineConfig

        a = SGLangUnifiedAdapter(EngineConfig(page_size=PAGE, device_pages=device_pages))
        self.cache, self.allocator, self.sg = a.cache, a.allocator, a.sg
        self.name = f"sglang UnifiedRadixCache ({a.tree_core})"
        import torch

        self.torch = torch

    def request(self, key: Any, tokens: list[int]) -> None:
        c, clock, base, t = self.cache, time.process_time, self.sg.base, self.torch
        t0 = clock()
        m = c.match_prefix(base.MatchPrefixParams(key=key))
        n = m.device_prefix_len
        lock = c.lock(m.last_device_node)
        prefix = c.path_device_indices(m.last_device_node)[:n]
        t1 = clock()
        need = len(tokens) - n
        new = self.allocator.alloc(need)
        if new is None:
            t2 = clock()
            c.evict(base.EvictParams(num_tokens=need - self.allocator.available_size()))
            t1 += clock() - t2  # eviction the allocation needed: the engine's work
            new = self.allocator.alloc(need)
        value = t.cat([prefix.to(t.int64), new.to(t.int64)])
        t2 = clock()
        c.insert(base.InsertParams(key=key, value=value, prev_prefix_len=n))
        c.unlock(lock)
        self.seconds += (t1 - t0) + (clock() - t2)
        self.ops += 4


class VLLM(Engine):
    name = "vLLM KVCacheManager"

    def __init__(self, device_pages: int) -> None:
        super().__init__()
        from kvconf.conformance.adapters.vllm_cache import VLLMAdapter
        from kvconf.conformance.engine.config import EngineConfig

        a = VLLMAdapter(EngineConfig(page_size=PAGE, device_pages=device_pages))
        self.v, self.mgr, self.hasher = a.v, a.mgr, a.hasher
        self.params = a.v.sampling.SamplingParams(max_tokens=1)
        self.n = 0

    def request(self, key: list[int], tokens: list[int]) -> None:
        v, clock = self.v, time.process_time
        self.n += 1
        t0 = clock()  # the request's block hashes are computed as it is made: matching work
        req = v.request.Request(f"r{self.n}", key, self.params, None, arrival_time=0.0,
                                block_hasher=self.hasher)
        blocks, n, _ = self.mgr.get_computed_blocks(req)
        got = self.mgr.allocate_slots(req, len(key) - n, n, blocks)
        if got is None:
            raise SystemExit("vLLM: pool too small for the shape")
        self.mgr.free(req)
        self.seconds += clock() - t0
        self.ops += 4

    def evict(self, pages: int) -> None:
        """vLLM evicts inside its allocation; there is no call to make."""
        self.ops += 1

    def drain(self) -> None:
        self.mgr.take_events()


ENGINES = {"reference": Reference, "sglang-radix": SGLangRadix,
           "sglang-unified": SGLangUnified, "vllm": VLLM}


def build(names: list[str], device_pages: int) -> tuple[list[Engine], list[str]]:
    """The engines that can be built here, and a line for each that cannot."""
    from kvconf.conformance.errors import EngineUnavailable

    out, missing = [], []
    for name in names:
        try:
            out.append(ENGINES[name](device_pages))
        except EngineUnavailable as e:
            missing.append(f"{name}: not measured ({e})")
    return out, missing


# ----------------------------------------------------------------------------- speed
def speed(shape: Shape, seed: int, scale: float, names: list[str]) -> None:
    prompts = make_trace(shape, seed, scale)
    engines, missing = build(names, shape.device_pages)
    for line in missing:
        print(f"  {line}")
    for e in build([k for k, c in ENGINES.items() if any(type(x) is c for x in engines)],
                   shape.device_pages)[0]:
        for tokens in make_trace(shape, seed + 1, 0.01)[:20]:  # first-call loads, off the clock
            e.request(e.prepare(tokens), tokens)
        e.evict(shape.evict_pages)
    keys = [[e.prepare(p) for p in prompts] for e in engines]
    ops = 0
    for i, tokens in enumerate(prompts):
        k = i % len(engines)
        for j in range(k, k + len(engines)):
            e = engines[j % len(engines)]
            e.request(keys[j % len(engines)][i], tokens)
        ops += 4
        if ops // EVICT_EVERY != (ops - 4) // EVICT_EVERY:
            for e in engines:
                e.evict(shape.evict_pages)
                e.drain()
    rates = {e.name: e.ops / e.seconds for e in engines}
    ref = rates.get("reference")
    for e in engines:
        ratio = f"  reference / this: {ref / rates[e.name]:.2f}x" if ref and e.name != "reference" \
            else ""
        print(f"  {e.name:34s} {rates[e.name]:>10,.0f} ops/s ({e.ops} ops){ratio}")


# ----------------------------------------------------------------------------- memory
def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def tensor_bytes(engine: Engine) -> int:
    """Bytes of the distinct tensor storages a Python tree's nodes hold (outside tracemalloc's
    view); 0 for an engine whose tree is not Python objects."""
    if engine.name != "sglang RadixCache":
        return 0
    seen: dict[int, int] = {}
    stack = [engine.cache.root_node]
    while stack:
        node = stack.pop()
        stack.extend(node.children.values())
        if hasattr(node.value, "untyped_storage"):  # the root's value is a plain list
            st = node.value.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def memory_child(name: str, shape: Shape, seed: int, scale: float, heap: bool) -> dict:
    """Growth of one engine's memory while the shape's prompts go in, no eviction: the Python
    heap (``heap``) or, in another process with no tracing, the resident set.

    The prompts are made after the baseline and dropped before the figure is read, so what is
    left is what the engine keeps: token objects a key refers to count, as they would once the
    requests that brought them are gone."""
    pages = int(shape.requests * scale) * (shape.system_pages[1] + shape.tail_pages[1]) + 16
    engines, missing = build([name], pages)
    if not engines:
        return {"missing": missing[0]}
    e = engines[0]
    e.evict = lambda pages: None  # nothing leaves: every distinct page stays cached
    gc.collect()
    if heap:
        tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0] if heap else rss()
    prompts = make_trace(shape, seed, scale)
    n = cached_tokens(prompts)
    for i, tokens in enumerate(prompts):
        e.request(e.prepare(tokens), tokens)
        if i % EVICT_EVERY == 0:
            e.drain()
    e.drain()
    del prompts, tokens
    gc.collect()
    grown = (tracemalloc.get_traced_memory()[0] + tensor_bytes(e)) if heap else rss()
    return {"engine": e.name, "tokens": n, "bytes": (grown - base) / n,
            "measurable": e.heap_measurable or not heap}


def memory(shape: Shape, seed: int, scale: float, names: list[str]) -> None:
    figs: dict[str, dict] = {}
    for name in names:
        for kind in ("heap", "rss"):
            out = subprocess.run(
                [sys.executable, __file__, "--memory-child", f"{name}:{kind}", "--shape",
                 shape.name, "--seed", str(seed), "--scale", str(scale)],
                capture_output=True, text=True, check=False,
            )
            if out.returncode != 0:
                print(f"  {name}: memory not measured (exit {out.returncode}: "
                      f"{out.stderr.strip().splitlines()[-1:]})")
                break
            fig = json.loads(out.stdout.strip().splitlines()[-1])
            if "missing" in fig:
                break
            # a figure that means nothing for this engine is None: printed, never divided by
            figs.setdefault(name, {"engine": fig["engine"], "tokens": fig["tokens"]})[kind] = \
                fig["bytes"] if fig.get("measurable", True) else None
    ref = figs.get("reference")
    for f in figs.values():
        parts = [] if not ref or f is ref else [
            ratio(ref[kind], f.get(kind), what) for kind, what in (("heap", "heap"),
                                                                   ("rss", "resident"))]
        tail = f"  reference / this: {', '.join(parts)}" if parts else ""
        print(f"  {f['engine']:34s} {per_token(f.get('heap'))} heap, "
              f"{per_token(f.get('rss'))} resident ({f['tokens']:,} tokens cached){tail}")


# Below this many bytes per token a growth is noise (an engine that keeps its store off the
# heap measured by tracemalloc): no ratio is taken against it.
MEASURABLE_B_PER_TOKEN = 1.0


def per_token(b: float | None) -> str:
    return "not measurable" if b is None else f"{b:6.1f} B/token"


def ratio(ref: float | None, this: float | None, what: str) -> str:
    """The reference's figure over this engine's, or why there is none."""
    if ref is None or this is None or this < MEASURABLE_B_PER_TOKEN:
        return f"{what} not measurable"
    return f"{ref / this:.2f}x {what}"


def main() -> None:
    warnings.filterwarnings("ignore")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=[*SHAPES, "all"], default="all")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply each shape's requests")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--memory-child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    shapes = list(SHAPES.values()) if a.shape == "all" else [SHAPES[a.shape]]
    if a.memory_child:
        name, kind = a.memory_child.split(":")
        print(json.dumps(memory_child(name, shapes[0], a.seed, a.scale, kind == "heap")))
        return
    names = a.engines.split(",")
    for shape in shapes:
        print(f"{shape.name}: {int(shape.requests * a.scale)} requests, page size {PAGE}, "
              f"evict {shape.evict_pages} pages every {EVICT_EVERY} operations")
        speed(shape, a.seed, a.scale, names)
        if not a.no_memory:
            memory(shape, a.seed, a.scale, names)


if __name__ == "__main__":
    main()
