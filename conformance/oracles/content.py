"""Content oracle (TREE-2, NS-1, HOST-11): every page an engine serves holds the tag of its own
prefix; a page still being filled by a stream-ordered loadback (HOST-11) when the copy lands."""

from __future__ import annotations

from collections.abc import Sequence

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.engine.protocol import Match
from kvconf.conformance.oracles.base import Ctx, Oracle
from kvconf.conformance.runtime.content import page_tags
from kvconf.conformance.runtime.memory import POISON, TORN
from kvconf.reference.tiers import Tier


def filling(ctx: Ctx) -> dict[int, object]:
    """Device pages that in-flight loadbacks are still filling, by op id, where the engine's
    readers are ordered after the copy (HOST-11): read when the copy lands, not before. Empty
    for any other engine, whose served pages must hold their KV at once (HOST-3)."""
    if Feature.STREAM_ORDERED_LOADBACK not in ctx.engine.features:
        return {}
    return {d: op.op_id for op in ctx.ledger.transfers.values() if op.kind == "loadback"
            for _, d in op.pairs}


class ContentOracle(Oracle):
    name = "content"
    after_acks_only = True  # its after_step reads nothing but ``ctx.acks``
    behaviours = ("TREE-2", "NS-1", "HOST-11")
    # What a match serves; HOST-11 where a copy landed (judged as it lands).
    hook_rules = {"on_match": ("TREE-2", "NS-1"), "after_acks": ("HOST-11",)}

    def __init__(self) -> None:
        # HOST-11: device pages served while a loadback was still filling them, judged when it
        # lands, where a stream-ordered reader reads: op id -> (page, position, namespace, tag)
        self._landing: dict[object, list[tuple[int, int, int, int, int]]] = {}

    def on_match(self, ctx: Ctx, ns: int, tokens: Sequence[int], m: Match) -> None:
        p = ctx.ledger.page_size
        want = page_tags(ns, tokens[: max(m.device_len, m.host_len)], p)
        filling = self._filling(ctx)
        for tier, pages in ((Tier.DEVICE, m.device_pages), (Tier.HOST, m.host_pages)):
            if not pages:
                continue
            for i, (page, got) in enumerate(zip(pages, ctx.ledger.memory.read_pages(tier, pages),
                                                strict=True)):
                if tier is Tier.DEVICE and page in filling:
                    self._landing.setdefault(filling[page], []).append(
                        (page, i, len(pages), ns, want[i]))
                    continue
                if got != want[i]:  # else what ``_judge`` accepts at once
                    self._judge(ctx, tier, ns, page, i, len(pages), got, want[i])

    def on_alloc(self, ctx: Ctx, pages: list[int]) -> None:
        filling = self._filling(ctx)
        for page in pages:
            if page in filling:
                raise self.fail("HOST-11", f"device page {page} is handed to the caller while "
                                f"loadback {filling[page]} is still filling it")

    def after_step(self, ctx: Ctx) -> None:
        for op, ok in ctx.acks:
            served = self._landing.pop(op.op_id, ())
            if not served:
                continue
            got = ctx.ledger.memory.read_pages(Tier.DEVICE, [s[0] for s in served])
            for (page, i, n, ns, want), seen in zip(served, got, strict=True):
                if not ok:
                    raise self.fail("HOST-11", f"device page {page} was served before loadback "
                                    f"{op.op_id} landed, and the copy failed")
                self._judge(ctx, Tier.DEVICE, ns, page, i, n, seen, want,
                            when=f" when loadback {op.op_id} landed")

    @staticmethod
    def _filling(ctx: Ctx) -> dict[int, object]:
        return filling(ctx)

    def _judge(self, ctx: Ctx, tier: Tier, ns: int, page: int, i: int, n: int,
               got: int | None, want: int, when: str = "") -> None:
        if got == want:
            return
        if got is None:
            seen = "nothing the kit ever wrote"
        elif got == POISON:
            seen = "the remains of a failed or unfinished copy"
        elif got == TORN:
            seen = "slots of different prefixes (a torn page)"
        else:
            other = ctx.ledger.origin.get(got)
            if other and other.namespace != ns:
                raise self.fail(
                    "NS-1",
                    f"{tier} page {page} served at position {i} in namespace {ns} holds "
                    f"KV of namespace {other.namespace}{when}",
                )
            seen = f"the KV of a {other.depth}-page prefix" if other else "a foreign tag"
        raise self.fail(
            "TREE-2",
            f"{tier} page {page} served as page {i} of a {n}-page match in "
            f"namespace {ns} holds {seen}{when}",
        )
