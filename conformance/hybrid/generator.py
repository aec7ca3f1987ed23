"""The hybrid-level fuzz search: seeded walks of requests over shared prefixes, and a shrinker.

A walk admits requests whose prompts share prefixes in two namespaces, has them compute their
prompts in chunks of random size (some ending mid-page, some on a page boundary), then most of
them decode a few output tokens one row at a time, finishes them, and asks for hits in between,
on a pool small enough that pages are evicted and window pages reused. Some prompts continue
the whole sequence (prompt and output) of an earlier request, so what a request cached while
it decoded is reused.
Each step is played as it is drawn, so every call is judged as it happens; a failing walk's
trace is shrunk by deleting steps while the same rule still breaks.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kvconf.conformance.engine.hybrid import HybridConfig
from kvconf.conformance.errors import KitError
from kvconf.conformance.hybrid.driver import HybridDriver, check_determinism, play_hybrid
from kvconf.conformance.hybrid.memory import StoreFactory, dict_store
from kvconf.conformance.hybrid.trace import (
    AdmitStep,
    DecodeStep,
    ExtendStep,
    FinishStep,
    HitStep,
    HybridStep,
    HybridTrace,
)
from kvconf.conformance.running import flight, judged
from kvconf.conformance.violation import Violation


@dataclass
class WalkStats:
    examples: int = 0
    steps: int = 0
    ops: dict[str, int] = field(default_factory=dict)
    last: HybridTrace | None = None


def _prompts(rng: random.Random, p: int) -> list[tuple[int, list[int]]]:
    """(namespace, tokens): two shared stems, each with a few continuations, in two
    namespaces; a token is drawn from a small alphabet so prefixes meet."""
    out = []
    for _ in range(2):
        stem = [rng.randrange(1, 6) for _ in range(p * rng.randint(1, 4))]
        for _ in range(3):
            tail = [rng.randrange(1, 6) for _ in range(rng.randint(1, 3 * p))]
            out.append((rng.choice((0, 0, 1)), stem + tail))
    return out


def _output(rng: random.Random, p: int) -> list[int]:
    """The tokens the runtime samples for a request: none a quarter of the time, else up to
    six pages' worth, enough for the window to slide past the prompt as it decodes."""
    if rng.random() < 0.25:
        return []
    return [rng.randrange(1, 6) for _ in range(rng.randint(1, 6 * p))]


def walk(factory, config: HybridConfig, seed: int, steps: int, stats: WalkStats,
         store: StoreFactory = dict_store) -> None:
    """Draw and play one walk of ``steps`` steps, its memory in ``store``; the first broken
    rule raises, with ``stats.last`` the trace so far (and a worker's flight recorder holding
    it, should the engine kill the process)."""
    rng = random.Random(seed)
    p = config.page_size
    trace = HybridTrace(name=f"fuzz-hybrid seed {seed}", config=config)
    stats.last = trace
    flight.begin(trace)
    driver = HybridDriver(factory(config), store=store)
    prompts = _prompts(rng, p)
    sequences: list[tuple[int, list[int]]] = []  # (ns, prompt + output) of admitted requests
    live: dict[str, list[int]] = {}  # rid -> [computed, prompt length, length]

    def play(step: HybridStep) -> dict:
        trace.steps.append(step)
        stats.ops[step.op] = stats.ops.get(step.op, 0) + 1
        stats.steps += 1
        return driver.step(len(trace.steps) - 1, step)

    try:
        _walk(rng, p, steps, driver, prompts, sequences, live, play)
        driver.drain()
    finally:  # what ran is judged, whether or not it held
        judged.record(driver.judged())
    stats.examples += 1
    check_determinism(factory, trace, driver.log)  # a fresh engine says the same (DET-1)


def _walk(rng: random.Random, p: int, steps: int, driver: HybridDriver, prompts, sequences,
          live: dict[str, list[int]], play: Callable[[HybridStep], dict]) -> None:
    """The steps of a walk, drawn by ``rng`` and played by ``play``."""
    n = 0
    for _ in range(steps):
        roll = rng.random()
        if (roll < 0.25 and len(live) < 3) or not live:
            if sequences and rng.random() < 0.3:  # continue an earlier whole sequence
                ns, seq = rng.choice(sequences)
                tokens = seq + [rng.randrange(1, 6) for _ in range(rng.randint(1, p))]
            else:
                ns, tokens = rng.choice(prompts)
            output = _output(rng, p)
            n += 1
            rid = f"r{n}"
            out = play(AdmitStep(rid=rid, ns=ns, tokens=tokens, output=output))
            sequences.append((ns, tokens + output))
            live[rid] = [out["length"], len(tokens), len(tokens) + len(output)]
        elif roll < 0.7:
            rid = rng.choice(sorted(live))
            done, prompt, total = live[rid]
            if done >= total:
                play(FinishStep(rid=rid))
                del live[rid]
                continue
            if done >= prompt:  # decode rows, a few in a row as a running batch decodes
                for _ in range(rng.randint(1, 2 * p)):
                    if live[rid][0] >= total:
                        break
                    room = play(DecodeStep(rid=rid))["room"]
                    if not room:
                        break
                    live[rid][0] += 1
            else:
                upto = min(prompt, done + rng.randint(1, 3 * p))
                if rng.random() < 0.5 and upto // p * p > done:
                    upto = upto // p * p  # end on a page boundary: a state is saved there
                limit = driver.oracle.chunk_end_limit(done)  # MAMBA-11
                if limit is not None:
                    upto = min(upto, limit)
                room = play(ExtendStep(rid=rid, upto=upto))["room"]
                if room:
                    live[rid][0] = upto
            if not room and len(live) > 1:  # no room: another request gives way
                other = rng.choice(sorted(r for r in live if r != rid))
                play(FinishStep(rid=other))
                del live[other]
        elif roll < 0.85:
            ns, tokens = rng.choice(prompts + sequences[-3:])
            play(HitStep(ns=ns, tokens=tokens[: rng.randint(1, len(tokens))]))
        else:
            rid = rng.choice(sorted(live))
            play(FinishStep(rid=rid))
            del live[rid]


def search(factory, config: HybridConfig, seeds: Callable[[int], int], steps: int,
           examples: int | None, seconds: float | None, stats: WalkStats,
           store: StoreFactory = dict_store) -> None:
    """Walks until the budget is spent; raises the first Violation."""
    deadline = None if seconds is None else time.perf_counter() + seconds
    k = 0
    while True:
        if examples is not None and k >= examples:
            return
        if deadline is not None and time.perf_counter() >= deadline:
            return
        walk(factory, config, seeds(k), steps, stats, store)
        k += 1


def shrink(factory, trace: HybridTrace, v: Violation, max_replays: int,
           store: StoreFactory = dict_store) -> tuple[HybridTrace, Violation]:
    """Delete steps (halves, then one at a time) while the trace still breaks one of the
    rules ``v`` names; a step whose removal makes the trace invalid stays."""
    return shrink_with(trace, v, lambda t: play_hybrid(factory, t, store=store), max_replays)


def shrink_with(trace: HybridTrace, v: Violation, attempt: Callable[[HybridTrace], object],
                max_replays: int) -> tuple[HybridTrace, Violation]:
    """``shrink`` with ``attempt`` playing each candidate: it raises the candidate's Violation
    (a crash's shrinker plays it in a forked child, ``running.crash``)."""
    want = set(v.behaviours)
    best, best_v = trace, v
    replays = 0

    def fails(steps: list[HybridStep]) -> Violation | None:
        nonlocal replays
        replays += 1
        t = best.model_copy(update={"steps": steps})
        try:
            attempt(t)
        except Violation as got:
            return got if want & set(got.behaviours) else None
        except KitError:
            return None
        return None

    chunk = max(1, len(best.steps) // 2)
    while chunk >= 1 and replays < max_replays:
        i, changed = 0, False
        while i < len(best.steps) and replays < max_replays:
            cand = best.steps[:i] + best.steps[i + chunk:]
            got = fails(cand) if cand else None
            if got is not None:
                best, best_v, changed = best.model_copy(update={"steps": cand}), got, True
            else:
                i += chunk
        if not changed:
            chunk //= 2
    return best, best_v
