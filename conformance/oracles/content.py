"""Content oracle (TREE-2, NS-1): every page an engine serves holds the tag of its own prefix."""

from __future__ import annotations

from collections.abc import Sequence

from kvconf.conformance.engine.protocol import Match
from kvconf.conformance.oracles.base import Ctx, Oracle
from kvconf.conformance.runtime.content import page_tags
from kvconf.conformance.runtime.memory import POISON, TORN
from kvconf.reference.tiers import Tier


class ContentOracle(Oracle):
    name = "content"
    behaviours = ("TREE-2", "NS-1")

    def on_match(self, ctx: Ctx, ns: int, tokens: Sequence[int], m: Match) -> None:
        p = ctx.ledger.page_size
        want = page_tags(ns, tokens[: max(m.device_len, m.host_len)], p)
        for tier, pages in ((Tier.DEVICE, m.device_pages), (Tier.HOST, m.host_pages)):
            if not pages:
                continue
            for i, (page, got) in enumerate(zip(pages, ctx.ledger.memory.read_pages(tier, pages),
                                                strict=True)):
                if got == want[i]:
                    continue
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
                            f"KV of namespace {other.namespace}",
                        )
                    seen = f"the KV of a {other.depth}-page prefix" if other else "a foreign tag"
                raise self.fail(
                    "TREE-2",
                    f"{tier} page {page} served as page {i} of a {len(pages)}-page match in "
                    f"namespace {ns} holds {seen}",
                )
