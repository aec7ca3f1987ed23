"""Mamba state oracles (spec chapter mamba): what a resumed row reads, and who owns each slot.

The content check is black-box: the driver knows every state tag, (namespace, tokens[0..d]) for
depth d, so a row that resumes at position s must read the tag of depth s. The ownership check
reads the engine's snapshot: every slot has exactly one owner, and request-local slots follow
the request's state.
"""

from __future__ import annotations

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.oracles.base import Oracle, Violation
from kvconf.conformance.runtime.memory import POISON
from kvconf.reference.requests import HOLDS, State
from kvconf.reference.tiers import Tier

LIVE_SLOT = frozenset(s for s, holds in HOLDS.items() if "slot" in holds)


class MambaContentOracle(Oracle):
    name = "mamba-content"
    behaviours = ("MAMBA-1", "MAMBA-2", "MAMBA-3", "MAMBA-6")
    needs = frozenset({Feature.MAMBA})

    def wrong(self, row, depth: int, slot: int, got: int | None, own: dict[int, int]) -> Violation:
        """``own``: the request's state tags by depth, to tell a wrong depth from a wrong
        prefix."""
        where = f"{row.kind} row of {row.rid} resumes at depth {depth} from state slot {slot}"
        if row.kind == "prefill" and row.reused and row.reused == row.start \
                and row.mamba_src < 0 and got is not None and got != POISON and got not in own:
            return self.fail(("MAMBA-1", "MAMBA-3"), f"{where}, which holds the state of "
                             "another prefix: it reuses KV with no state of that depth loaded")
        if got is None:
            return self.fail(("MAMBA-1", "MAMBA-2", "MAMBA-3"), f"{where}, which holds nothing: "
                             "no state of that depth was loaded or kept for the reused prefix")
        if got == POISON:
            return self.fail(("MAMBA-1", "MAMBA-2"), f"{where}, which holds the remains of an "
                             "unfinished or failed copy")
        if got in own:
            return self.fail(("MAMBA-1", "MAMBA-3"), f"{where}, which holds its state of depth "
                             f"{own[got]}: a state is reused only at its exact depth")
        return self.fail(("MAMBA-1", "MAMBA-6"), f"{where}, which holds the state of another "
                         "prefix")


class MambaOwnershipOracle(Oracle):
    name = "mamba-ownership"
    behaviours = ("MAMBA-4", "MAMBA-5", "MAMBA-7", "MAMBA-8")
    needs = frozenset({Feature.MAMBA, Feature.SNAPSHOT})

    def __init__(self) -> None:
        # What the slot checks of the last snapshot that held read: the Mamba view, and of
        # each request its id, state, slots and recovery entry (``_owners``).
        self.passed: tuple | None = None

    def check(self, before, after, finished: set[str], page_size: int) -> None:
        view = after.mamba
        if view is None:
            return
        entries = {e.id: e for e in view.entries}
        seen = (view, [(v.rid, v.state, v.mamba, v.checkpoint, v.mamba_state)
                       for v in after.requests])
        last = self.passed
        # The slot checks read the view and those fields of the requests only: equal to what a
        # check that held read, they hold again.
        if not (self.incremental and last is not None and seen[1] == last[1]
                and (view is last[0] or view == last[0])):
            self._owners(view, after, entries)
            self.passed = seen
        self._published(before, after, finished, page_size, entries)

    def _owners(self, view, after, entries) -> None:
        """MAMBA-4, MAMBA-5, MAMBA-8: every slot has exactly one owner, entries and requests
        hold what they own, request-local slots follow the request's state."""
        claims: dict[tuple[Tier, int], str] = {}

        def claim(tier: Tier, slot: int, who: str, rules=("MAMBA-8",)) -> None:
            owner = view.owners[tier][slot]
            if (tier, slot) in claims or owner != who:
                raise self.fail(rules, f"{tier} state slot {slot} is claimed by {who} but owned "
                                f"by {claims.get((tier, slot)) or owner}")
            claims[(tier, slot)] = who

        for e in view.entries:
            for tier, slot in ((Tier.DEVICE, e.device), (Tier.HOST, e.host)):
                if slot is not None:
                    claim(tier, slot, f"entry:{e.id}", ("MAMBA-5", "MAMBA-8"))
        for v in after.requests:
            for slot in (v.mamba, v.checkpoint):
                if slot is None:
                    continue
                if v.state not in LIVE_SLOT:
                    raise self.fail("MAMBA-8", f"{v.rid} in {v.state} still holds state slot "
                                    f"{slot}: finish, abort and retraction release it")
                claim(Tier.DEVICE, slot, f"request:{v.rid}")
            if v.mamba_state is not None:
                e = entries.get(v.mamba_state)
                if e is None or e.protect < 1:
                    raise self.fail("MAMBA-4", f"{v.rid} ({v.state}) recovers from state entry "
                                    f"{v.mamba_state}, which is gone or unprotected")
        for tier, owners in view.owners.items():
            free = set(view.free[tier])
            for slot, owner in enumerate(owners):
                if owner == "free":
                    if slot not in free:
                        raise self.fail("MAMBA-8", f"{tier} state slot {slot} is free but not "
                                        "in the free list")
                    continue
                if slot in free:
                    raise self.fail("MAMBA-8", f"{tier} state slot {slot} is in the free list "
                                    f"and owned by {owner}")
                if owner.startswith("transfer:"):
                    continue
                if (tier, slot) not in claims:
                    raise self.fail(("MAMBA-5", "MAMBA-8"), f"{tier} state slot {slot} is owned "
                                    f"by {owner}, which does not hold it: a leak")

    def _published(self, before, after, finished: set[str], page_size: int, entries) -> None:
        """MAMBA-7: a request that finished with a state at its published depth left it in the
        cache, unless it reported the checkpoint failure."""
        if before is None or not finished:
            return
        prev = {v.rid: v for v in before.requests}
        now = {v.rid: v for v in after.requests}
        for rid in sorted(finished):
            old, v = prev.get(rid), now.get(rid)
            if old is None or v is None or old.state is not State.DECODING:
                continue
            depth = (old.computed // page_size) * page_size
            working = old.mamba is not None and old.computed == depth  # the fallback's slot
            if not depth or (v.mamba_failed and not working):
                continue
            have = {e.depth for e in entries.values() if e.namespace == v.namespace
                    and (e.device is not None or e.host is not None)}
            if depth not in have and v.shared * page_size >= depth:
                raise self.fail("MAMBA-7", f"{rid} finished with {depth} tokens published but no "
                                "state of that depth was kept, and no checkpoint failure was "
                                "reported")
