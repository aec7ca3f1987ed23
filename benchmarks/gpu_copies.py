"""Copy throughput of the GPU harness against a plain torch copy of the same bytes.

Usage: python benchmarks/gpu_copies.py [--device auto|cpu|cuda] [--pages 64] [--batch 16]
       [--layers 32] [--heads 8] [--head-dim 128] [--page-size 16] [--dtype float16] [--reps 20]

For loadback (host -> device) and writeback (device -> host) it times the harness's path (one
batched index_select of scattered source pages, the transfer on a side stream through pinned
memory, one index_copy_ into scattered destination pages, and the check that the source did not
change while the copy was in flight) against ``dst.copy_(src)`` of one contiguous buffer of the
same size between the same memories, and prints both and their ratio. On CUDA it also prints the
pinned-memory limit of the card: the host-to-device and device-to-host bandwidth of one large
contiguous pinned copy, which no paged copy can beat.
"""

from __future__ import annotations

import argparse
import random
import time
import warnings

import torch

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

from kvconf.gpu_harness.device import describe, resolve_device  # noqa: E402
from kvconf.gpu_harness.layout import KVLayout, parse_dtype  # noqa: E402
from kvconf.gpu_harness.memory import TensorMemory  # noqa: E402
from kvconf.reference.tiers import Tier  # noqa: E402


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def timed(fn, dev: torch.device, reps: int) -> float:
    """Seconds per call: the best of ``reps`` after two warm-ups."""
    for _ in range(2):
        fn()
    sync(dev)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync(dev)
        best = min(best, time.perf_counter() - t0)
    return best


def gbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--pages", type=int, default=64, help="pages in each pool")
    ap.add_argument("--batch", type=int, default=16, help="pages per copy op")
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    dev = resolve_device(args.device)
    layout = KVLayout(args.layers, args.heads, args.head_dim, parse_dtype(args.dtype))
    mem = TensorMemory(args.page_size, args.pages, args.pages, layout, dev)
    rng = random.Random(args.seed)
    src = rng.sample(range(args.pages), args.batch)
    dst = rng.sample(range(args.pages), args.batch)
    pairs = list(zip(src, dst, strict=True))
    for tier in (Tier.DEVICE, Tier.HOST):
        mem.write_pages(tier, range(args.pages), [rng.getrandbits(62) for _ in range(args.pages)])
    nbytes = args.batch * layout.page_bytes(args.page_size)
    page_mib = layout.page_bytes(args.page_size) / 2**20
    print(f"device {describe(dev)}, torch {torch.__version__}; page {page_mib:.2f} MiB "
          f"({args.page_size} tokens x {args.layers} layers x K/V x {args.heads} heads x "
          f"{args.head_dim} x {args.dtype}); {args.batch} pages = {nbytes / 2**20:.1f} MiB "
          "per copy")

    pinned = dev.type == "cuda"
    host_buf = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
    dev_buf = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    rows = []
    for name, a, b, plain in (
        ("loadback  host->device", Tier.HOST, Tier.DEVICE, lambda: dev_buf.copy_(host_buf)),
        ("writeback device->host", Tier.DEVICE, Tier.HOST, lambda: host_buf.copy_(dev_buf)),
    ):
        def harness(a=a, b=b) -> None:
            mem.finish_copy(mem.start_copy(a, b, pairs), True)

        th = timed(harness, dev, args.reps)
        tp = timed(plain, dev, args.reps)
        rows.append((name, gbps(nbytes, th), gbps(nbytes, tp), tp / th))
    print(f"{'copy':24} {'harness GB/s':>13} {'plain GB/s':>11} {'harness/plain':>14}")
    for name, h, p, r in rows:
        print(f"{name:24} {h:13.2f} {p:11.2f} {r:14.2f}")

    if dev.type == "cuda":
        big = 1 << 30
        h = torch.empty(big, dtype=torch.uint8, pin_memory=True)
        d = torch.empty(big, dtype=torch.uint8, device=dev)
        h2d = gbps(big, timed(lambda: d.copy_(h, non_blocking=True), dev, 5))
        d2h = gbps(big, timed(lambda: h.copy_(d, non_blocking=True), dev, 5))
        print(f"pinned-memory limit (1 GiB contiguous): host->device {h2d:.2f} GB/s, "
              f"device->host {d2h:.2f} GB/s")
        for name, hv, _p, _r in rows:
            limit = h2d if name.startswith("loadback") else d2h
            print(f"{name}: harness at {100 * hv / limit:.0f}% of the pinned-memory limit")


if __name__ == "__main__":
    main()
