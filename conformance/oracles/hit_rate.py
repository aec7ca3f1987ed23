"""Hit-rate oracle (POOL-8): the hit statistics an engine reports are its matches, summed.

The kit sums every match call it makes itself (``Ledger.queried``, ``Ledger.hits``: the query's
tokens and the device tokens served), so the check needs nothing but the counts: a statistic
the engine leaves out is not judged, one it reports must equal the kit's sum after every call.
"""

from __future__ import annotations

from collections.abc import Mapping

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.oracles.base import Ctx, Oracle


class HitRateOracle(Oracle):
    name = "hit-rate"
    behaviours = ("POOL-8",)
    needs = frozenset({Feature.COUNTERS})
    conditional = ("POOL-8",)  # judged only where the engine reports a statistic

    def after_step(self, ctx: Ctx) -> None:
        counts = ctx.counters
        if not isinstance(counts, Mapping):  # its shape is POOL-6's (``CounterOracle``)
            return
        led = ctx.ledger
        for name, want, what in (
            ("query_tokens", led.queried, "the tokens of every query matched"),
            ("hit_tokens", led.hits, "the device tokens those matches served"),
        ):
            got = counts.get(name)
            if got is None:
                continue
            self.mark("POOL-8")
            if got != want:
                raise self.fail("POOL-8", f"after step {ctx.index} ({ctx.op}) the engine "
                                f"counts {name} = {got!r}; {what}, summed over the "
                                f"{'match calls' if led.queried else 'no match call'} the kit "
                                f"made, are {want}")
