"""Fault oracle (FAULT-1, FAULT-2, FAULT-4, PIN-3, HOST-4, HOST-5).

Rejected calls and declined transfers must leave the engine exactly as it was (compared on the
white-box snapshot); a failed transfer must hand back its destination pages. Crashes on legal
calls, answers of the wrong shape (``conformance/cache/answers.py``) and acceptance of
unbalanced unlocks are raised by the driver citing this oracle.
"""

from __future__ import annotations

from kvconf.conformance.oracles.base import Ctx, Oracle
from kvconf.reference.snapshot import CacheSnapshot
from kvconf.reference.tiers import Tier


class FaultOracle(Oracle):
    name = "faults"
    after_acks_only = True  # its after_step reads nothing but ``ctx.acks``
    behaviours = ("FAULT-1", "FAULT-2", "FAULT-4", "PIN-3", "HOST-4", "HOST-5")
    # FAULT-2 and FAULT-4 (every answer's type, checked where the driver receives it) are
    # judged on every call; the rest only where a call was refused or declined, an
    # unlock repeated (the driver marks PIN-3) or a copy failed.
    conditional = ("FAULT-1", "PIN-3", "HOST-4", "HOST-5")

    def on_unchanged_call(self, ctx, call, detail, before, after) -> None:
        if before is None or after is None:
            return
        rule = "HOST-5" if call.startswith("start_") else "FAULT-1"
        self.mark(rule)
        if before == after:
            return
        what = "declined" if rule == "HOST-5" else "rejected"
        raise self.fail(rule, f"{call} was {what} ({detail}) but changed the engine's state")

    def after_step(self, ctx: Ctx) -> None:
        if not isinstance(ctx.after, CacheSnapshot):
            return
        for op, ok in ctx.acks:
            if ok:
                continue
            self.mark("HOST-4")
            dst = Tier.HOST if op.kind == "writeback" else Tier.DEVICE
            owners = ctx.after.pools[dst].owners
            kept = [d for _, d in op.pairs if owners[d] != "free"]
            if kept:
                raise self.fail(
                    "HOST-4",
                    f"failed {op.kind} {op.op_id} left its destination {dst} pages {kept} "
                    f"with owners {[owners[d] for d in kept]}",
                )

