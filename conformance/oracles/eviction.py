"""Eviction oracle (EVICT-1..EVICT-5, HOST-6), white-box.

From the snapshot before an eviction it derives the victims the spec allows: repeatedly the
unpinned leaf of the tier with the oldest access time on that tier, ties by sequence number,
until enough pages are freed. The engine's victims must be exactly those.
"""

from __future__ import annotations

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.oracles.base import Ctx, Oracle
from kvconf.reference.snapshot import CacheSnapshot, NodeView
from kvconf.reference.tiers import Tier


def allowed_victims(snap: CacheSnapshot, tier: Tier, asked: int,
                    inclusive: bool = False) -> tuple[list[int], int]:
    """Node ids in eviction order and the pages they free, per EVICT-1..EVICT-4; ``inclusive``
    (HOST-12): a host eviction takes no node that still holds device pages, and orders the rest
    by the node's last use on either tier."""
    nodes = {n.id: n for n in snap.nodes}
    on_tier = {n.id for n in snap.nodes if n.pages(tier) is not None}
    spared = ({n.id for n in snap.nodes if n.device is not None}
              if inclusive and tier is Tier.HOST else set())
    kids: dict[int, set[int]] = {n.id: set() for n in snap.nodes}
    for n in snap.nodes:
        if n.parent is not None and n.id in on_tier:
            kids[n.parent].add(n.id)
    order: list[int] = []
    freed = 0
    while freed < asked:
        best: NodeView | None = None
        for nid in on_tier:
            n = nodes[nid]
            if n.parent is None or n.ref(tier) or kids[nid] or nid in spared:
                continue
            if best is None or (_age(n, tier, inclusive), n.seq) < (_age(best, tier, inclusive),
                                                                    best.seq):
                best = n
        if best is None:
            break
        order.append(best.id)
        on_tier.discard(best.id)
        kids[best.parent].discard(best.id)  # type: ignore[index]
        freed += len(best.pages(tier) or ())
    return order, freed


def _age(n: NodeView, tier: Tier, inclusive: bool) -> int:
    """A candidate's last use for ``tier``'s LRU: its access there, or for an inclusive host
    tier (HOST-12) its last access on either tier."""
    if inclusive and tier is Tier.HOST:
        return max(n.device_access, n.host_access)
    return n.access(tier)


class EvictionOracle(Oracle):
    name = "eviction"
    behaviours = ("EVICT-1", "EVICT-2", "EVICT-3", "EVICT-4", "EVICT-5", "HOST-6", "HOST-12",
                  "PIN-2")
    needs = frozenset({Feature.SNAPSHOT})
    after_acks_only = True  # HOST-6 is judged after a writeback lands, and only then
    hook_rules = {"on_evict": ("EVICT-1", "EVICT-2", "EVICT-3", "EVICT-4", "EVICT-5",
                               "HOST-12")}
    conditional = ("HOST-6",)

    @classmethod
    def applies(cls, engine) -> bool:
        """Victims are derived node by node; an engine that evicts page by page (EVICT-6) is
        judged by its counts, its matches and its events instead."""
        return super().applies(engine) and Feature.PAGE_EVICTION not in engine.features

    def on_evict(self, ctx, tier, asked, freed, before, after) -> None:
        if before is None or after is None:
            return
        inclusive = Feature.INCLUSIVE_HOST_TIER in ctx.engine.features
        want, want_freed = allowed_victims(before, tier, asked, inclusive)
        b_nodes = before.node_map()
        a_nodes = after.node_map()
        lost = [
            n.id for n in before.nodes
            if n.pages(tier) is not None
            and (n.id not in a_nodes or a_nodes[n.id].pages(tier) is None)
        ]
        for nid in lost:
            n = b_nodes[nid]
            if n.ref(tier):
                raise self.fail(
                    ("EVICT-1", "PIN-2"), f"node {nid} was evicted from {tier} while pinned there"
                )
            if any(c.parent == nid and c.pages(tier) is not None and c.id not in lost
                   for c in before.nodes):
                raise self.fail("EVICT-1", f"node {nid} was evicted from {tier} with a child there")
        if set(lost) != set(want):
            extra = sorted(set(lost) - set(want))
            missing = sorted(set(want) - set(lost))
            tie = any(
                b_nodes[x].access(tier) == b_nodes[y].access(tier) for x in extra for y in missing
            )
            detail = (
                f"evicted nodes {extra} instead of {missing} from {tier} "
                f"(access, seq: {[(b_nodes[x].access(tier), b_nodes[x].seq) for x in extra]} vs "
                f"{[(b_nodes[y].access(tier), b_nodes[y].seq) for y in missing]})"
            )
            if inclusive and any(b_nodes[x].device is not None for x in extra):
                raise self.fail("HOST-12", f"an inclusive host tier gave up the host copy of a "
                                f"node still on device: {detail}")
            if extra and missing:
                raise self.fail("EVICT-3" if tie else "EVICT-2", detail)
            raise self.fail("EVICT-4", f"asked for {asked} pages: {detail}")
        if freed != want_freed:
            raise self.fail("EVICT-4", f"reported {freed} pages freed, victims hold {want_freed}")
        for nid in lost:
            n = b_nodes[nid]
            other = Tier.HOST if tier is Tier.DEVICE else Tier.DEVICE
            if n.pages(other) is not None:
                if nid not in a_nodes or a_nodes[nid].pages(other) != n.pages(other):
                    raise self.fail(
                        "EVICT-5", f"node {nid} lost its {other} copy when evicted from {tier}"
                    )
            elif nid in a_nodes:
                raise self.fail("EVICT-5", f"node {nid} holds no tier but is still in the tree")

    def after_step(self, ctx: Ctx) -> None:
        if Feature.INCLUSIVE_HOST_TIER in ctx.engine.features:
            return  # a just-written node is on device, no host victim (HOST-12)
        if ctx.before is None or ctx.after is None or not any(
            op.kind == "writeback" and ok for op, ok in ctx.acks
        ):
            return
        before = ctx.before.node_map()
        filled = [
            n for n in ctx.after.nodes
            if n.parent is not None and n.host is not None
            and (n.id not in before or before[n.id].host is None)
        ]
        if not filled:
            return
        self.mark("HOST-6")
        newest_other = max(
            (n.host_access for n in ctx.after.nodes
             if n.parent is not None and n.host is not None and n not in filled),
            default=None,
        )
        for n in filled:
            if newest_other is not None and n.host_access < newest_other:
                raise self.fail(
                    "HOST-6",
                    f"node {n.id} was just written back but its host access time "
                    f"{n.host_access} is older than another node's {newest_other}",
                )


class PageEvictionOracle(Oracle):
    """EVICT-6, black-box: an engine that evicts page by page frees at most what it is asked
    (all of it while candidates last, which the scenarios' expected counts check)."""

    name = "page-eviction"
    behaviours = ("EVICT-6",)
    needs = frozenset({Feature.PAGE_EVICTION})
    hook_rules = {"on_evict": ("EVICT-6",)}

    def on_evict(self, ctx, tier, asked, freed, before, after) -> None:
        if not 0 <= freed <= asked:
            raise self.fail("EVICT-6", f"asked to evict {asked} {tier} pages, the engine reports "
                            f"{freed} freed; page-by-page eviction frees at most what is asked")
