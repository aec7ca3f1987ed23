"""Hand-written scheduler-level workloads, each aimed at named behaviours."""

from __future__ import annotations

from dataclasses import dataclass

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.scheduler.trace import AbortAt, Arrival, Preload, SchedConfig, SchedTrace

SYSTEM = [1, 2, 1, 2, 0, 1, 2, 0]  # a shared "system prompt" of 4 pages at page size 2
L3 = frozenset({Feature.L3_STORE})
CAP = frozenset({Feature.ADAPTER_CAP, Feature.NAMESPACES})
MAMBA = frozenset({Feature.MAMBA})
OTHER = [2, 2, 1, 1, 0, 0, 2, 1]  # a second shared prompt, four pages


@dataclass(frozen=True)
class SchedScenario:
    name: str
    behaviours: tuple[str, ...]
    needs: frozenset[Feature]
    trace: SchedTrace
    doc: str


def _t(name: str, behaviours: tuple[str, ...], **kw) -> SchedTrace:
    return SchedTrace(name=name, behaviours=list(behaviours), **kw)


SCHED_SCENARIOS: tuple[SchedScenario, ...] = (
    SchedScenario(
        "sched-mid-flight-reuse", ("PLAN-7", "PLAN-4", "FIN-1"),
        frozenset(),
        _t("sched-mid-flight-reuse", ("PLAN-7",),
           arrivals=[Arrival(at=0, rid="first", tokens=[*SYSTEM, 0, 0], new_tokens=8),
                     Arrival(at=3, rid="second", tokens=[*SYSTEM, 2, 2, 1], new_tokens=2)]),
        "A request arriving while another with its prompt decodes reuses the published pages "
        "(D381-1), which their publisher keeps pinned (D381-2); that another namespace does "
        "not is sched-adapter-continuations'.",
    ),
    SchedScenario(
        "sched-retract-and-recover", ("PLAN-6", "LIVE-1", "REQ-1", "REQ-3"),
        frozenset({Feature.NAMESPACES}),
        _t("sched-retract-and-recover", ("PLAN-6",),
           config=SchedConfig(device_pages=9, host_pages=16, max_tokens=12),
           arrivals=[Arrival(at=0, rid="a", tokens=[0, 1, 2, 0, 1], new_tokens=9),
                     Arrival(at=0, rid="b", tokens=[2, 2, 1, 1], new_tokens=9, ns=1),
                     Arrival(at=1, rid="c", tokens=[1, 0], new_tokens=7)]),
        "A full device retracts the longest decode into its own namespace and recovers it.",
    ),
    SchedScenario(
        "sched-retract-own-namespace", ("PLAN-6", "NS-1", "NS-3", "TREE-2"),
        frozenset({Feature.NAMESPACES}),
        _t("sched-retract-own-namespace", ("PLAN-6",),
           config=SchedConfig(device_pages=9, host_pages=16, max_tokens=12,
                              publish_mid_flight=False),
           arrivals=[Arrival(at=0, rid="adapter", ns=1, tokens=[0, 1, 2, 0, 1], new_tokens=9),
                     Arrival(at=0, rid="base", tokens=[2, 2, 1], new_tokens=8),
                     Arrival(at=1, rid="later", tokens=[1, 0], new_tokens=7),
                     Arrival(at=4, rid="base-twin", tokens=[0, 1, 2, 0, 1], new_tokens=2)]),
        "A retracted request's pages go into its own namespace, where its recovery finds them, "
        "and a base-model request with the same prompt never sees them (D268-2).",
    ),
    SchedScenario(
        "sched-adapter-continuations", ("NS-3", "NS-1", "PLAN-7", "TREE-2"),
        frozenset({Feature.NAMESPACES}),
        _t("sched-adapter-continuations", ("NS-3",),
           config=SchedConfig(max_tokens=4),
           arrivals=[Arrival(at=0, rid="adapter", ns=1, tokens=[*SYSTEM, 0, 0], new_tokens=6),
                     Arrival(at=5, rid="twin", ns=1, tokens=[*SYSTEM, 2, 1], new_tokens=2),
                     Arrival(at=6, rid="base-twin", tokens=[*SYSTEM, 0, 0, 1], new_tokens=2),
                     Arrival(at=12, rid="after", ns=1, tokens=[*SYSTEM, 0, 0, 1],
                             new_tokens=2)]),
        "An adapter's prompt is prefilled in chunks, published mid-flight and at finish in its "
        "own namespace: an adapter twin reuses it, a base-model twin never sees it (D268-3).",
    ),
    SchedScenario(
        "sched-adapter-cap", ("PLAN-9", "LIVE-1", "NS-3"), CAP,
        _t("sched-adapter-cap", ("PLAN-9",),
           config=SchedConfig(max_adapters=1, max_slots=3, max_tokens=12), max_plans=120,
           arrivals=[Arrival(at=0, rid="one", ns=1, tokens=[0, 1, 2], new_tokens=4),
                     Arrival(at=0, rid="two", ns=2, tokens=[0, 1, 2, 1], new_tokens=3),
                     Arrival(at=0, rid="base", tokens=[0, 1, 2], new_tokens=3),
                     Arrival(at=0, rid="three", ns=3, tokens=[2, 1], new_tokens=3),
                     Arrival(at=1, rid="one-more", ns=1, tokens=[0, 1, 2, 2], new_tokens=2)]),
        "With one adapter slot per forward, three adapters and the base model share the "
        "scheduler: no forward serves two adapters, and the cap counts only what a forward "
        "holds, so every adapter gets its turn (D268-5).",
    ),
    SchedScenario(
        "sched-abort-everywhere", ("REQ-4", "REQ-2", "FIN-2"),
        frozenset(),
        _t("sched-abort-everywhere", ("REQ-4",),
           config=SchedConfig(max_tokens=8),
           arrivals=[Arrival(at=0, rid="writing", tokens=[2, 2, 2, 2, 1], new_tokens=1),
                     Arrival(at=0, rid="prefilling", tokens=[0, 1, 2, 0, 1, 2, 0, 1, 2]),
                     Arrival(at=0, rid="queued", tokens=[2, 1]),
                     Arrival(at=0, rid="decoding", tokens=[1, 1], new_tokens=6)],
           aborts=[AbortAt(at=0, rid="prefilling"), AbortAt(at=0, rid="queued"),
                   AbortAt(at=0, rid="writing", in_flight=True), AbortAt(at=3, rid="decoding")],
           acks=["later", "later", "later"]),
        "Abort is accepted while prefilling, queued, decoding and with a writeback in flight "
        "(E-2).",
    ),
    SchedScenario(
        "sched-failed-writebacks", ("REQ-5", "FIN-2", "LIVE-1"),
        frozenset({Feature.HOST_TIER}),
        _t("sched-failed-writebacks", ("REQ-5",),
           arrivals=[Arrival(at=0, rid="a", tokens=[*SYSTEM, 1], new_tokens=2),
                     Arrival(at=4, rid="b", tokens=[*SYSTEM, 2], new_tokens=2)],
           acks=["fail"]),
        "A writeback acknowledged as failed leaves no host copy; the request still finishes "
        "(E-1).",
    ),
    SchedScenario(
        "sched-sliding-window", ("PLAN-8", "TREE-2", "LIVE-1"),
        frozenset({Feature.SLIDING_WINDOW}),
        _t("sched-sliding-window", ("PLAN-8",),
           config=SchedConfig(sliding_window=3),
           arrivals=[Arrival(at=0, rid="first", tokens=[*SYSTEM, 0, 0], new_tokens=8),
                     Arrival(at=3, rid="second", tokens=[*SYSTEM, 2, 2, 1], new_tokens=3),
                     Arrival(at=12, rid="third", tokens=[*SYSTEM, 1], new_tokens=2)]),
        "Under a sliding window nothing a request computed is published: later requests with "
        "the same prefix recompute it instead of reading dropped KV (D381-4, D381-5).",
    ),
    SchedScenario(
        "sched-no-mixed-batches", ("PLAN-2", "PLAN-3", "PLAN-1"),
        frozenset(),
        _t("sched-no-mixed-batches", ("PLAN-3",),
           config=SchedConfig(mixed=False, max_tokens=6, max_batch=2),
           arrivals=[Arrival(at=i, rid=f"r{i}", tokens=[i % 3, 1, 2, 0, i % 2], new_tokens=3)
                     for i in range(5)]),
        "Without mixed mode a forward is all prefill or all decode, within budget and batch.",
    ),
    SchedScenario(
        "sched-l3-prefetch", ("L3-1", "L3-2", "L3-3", "L3-5", "TREE-2", "NS-1"),
        L3 | {Feature.NAMESPACES},
        _t("sched-l3-prefetch", ("L3-3",),
           config=SchedConfig(l3_store=True),
           l3_preload=[Preload(tokens=[*SYSTEM, 2, 2, 1, 1, 0]),
                       Preload(ns=1, tokens=[*SYSTEM, 0, 1])],
           arrivals=[Arrival(at=0, rid="warm", tokens=[*SYSTEM[:4], 2]),
                     Arrival(at=3, rid="fetch", tokens=[*SYSTEM, 2, 2, 1, 1, 0, 0],
                             new_tokens=3),
                     Arrival(at=3, rid="adapter", ns=1, tokens=[*SYSTEM, 0, 1, 1],
                             new_tokens=2),
                     Arrival(at=4, rid="gone", tokens=[*SYSTEM, 2, 2, 1, 0])],
           aborts=[AbortAt(at=4, rid="gone")],
           l3_acks=["now", "partial", "now", "later", "lose", "now"]),
        "A prompt past a host hit is prefetched from L3 below that hit, partly or not at all, "
        "in its own namespace; an adapter's prompt is fetched under its own keys; an abort "
        "while prefetching is accepted; finished KV is backed up (D293-1, D293-2, D293-3, "
        "D268-7, D268-9, D381-3).",
    ),
    SchedScenario(
        "sched-l3-host-moves", ("L3-1", "L3-2", "L3-3"), L3,
        _t("sched-l3-host-moves", ("L3-1",),
           config=SchedConfig(l3_store=True, max_batch=1, max_tokens=6),
           l3_preload=[Preload(tokens=[*SYSTEM, 2, 2, 1, 1])],
           arrivals=[Arrival(at=0, rid="warm", tokens=[*SYSTEM[:4], 2]),
                     Arrival(at=0, rid="long", tokens=[0, 0, 2] * 6, new_tokens=2),
                     Arrival(at=0, rid="waits", tokens=[*SYSTEM, 2, 2, 1, 1, 0],
                             new_tokens=2)]),
        "A request waits while another prefills; meanwhile its host match grows, and its "
        "prefetch is keyed for the match as it is when planned (D293-5).",
    ),
    SchedScenario(
        "sched-l3-tight-host", ("L3-4", "L3-5", "LIVE-1"), L3,
        _t("sched-l3-tight-host", ("L3-4", "L3-5"),
           config=SchedConfig(l3_store=True, host_pages=5, prefetch_threshold=3),
           l3_preload=[Preload(tokens=[2, 2, 0, 0, 1, 1, 2, 2, 0, 0, 1, 1])],
           arrivals=[Arrival(at=0, rid="backed", tokens=[2, 2, 0, 0, 1]),
                     Arrival(at=1, rid="wants-room", tokens=[1, 1, 2, 2, 1, 1, 2, 2, 0]),
                     Arrival(at=6, rid="fetch", tokens=[2, 2, 0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 0],
                             new_tokens=2)],
           l3_acks=["later"]),
        "A tiny host tier: a backup's source stays pinned while a later writeback wants room "
        "(D293-4), and a prefetch pins its host match before evicting for room (D293-6).",
    ),
    SchedScenario(
        "sched-mamba-reuse", ("MAMBA-1", "MAMBA-2", "MAMBA-3", "MAMBA-6", "MAMBA-7", "MAMBA-8"),
        MAMBA,
        _t("sched-mamba-reuse", ("MAMBA-3",),
           config=SchedConfig(mamba=True, device_pages=14, host_pages=24, mamba_slots=7,
                              mamba_host_slots=8, max_tokens=12),
           arrivals=[Arrival(at=0, rid="sys", tokens=SYSTEM),
                     Arrival(at=0, rid="other", tokens=OTHER),
                     Arrival(at=6, rid="sys-2", tokens=[*SYSTEM, 1, 1], new_tokens=2),
                     Arrival(at=6, rid="other-2", tokens=[*OTHER, 0, 0], new_tokens=2),
                     Arrival(at=10, rid="filler", tokens=[0, 1, 1, 2, 2, 1, 0, 0, 1, 2, 1],
                             new_tokens=3),
                     Arrival(at=18, rid="sys-3", tokens=[*SYSTEM, 2], new_tokens=3),
                     Arrival(at=18, rid="other-3", tokens=[*OTHER, 2, 2], new_tokens=3)]),
        "Finished prompts leave KV and a Mamba state of the same depth; two requests admitted "
        "in one plan resume from their own cached states; after device pressure the states "
        "come back from host in the loadbacks with the KV (D162-1, D162-3, D162-6, D243-3).",
    ),
    SchedScenario(
        "sched-mamba-retract", ("MAMBA-4", "MAMBA-5", "MAMBA-7", "MAMBA-8", "PLAN-6", "LIVE-1"),
        MAMBA | {Feature.NAMESPACES},
        _t("sched-mamba-retract", ("MAMBA-4",),
           config=SchedConfig(mamba=True, device_pages=9, host_pages=16, max_tokens=12,
                              mamba_slots=5, mamba_host_slots=2),
           arrivals=[Arrival(at=0, rid="a", tokens=[0, 1, 2, 0, 1], new_tokens=9),
                     Arrival(at=0, rid="b", tokens=[2, 2, 1, 1], new_tokens=9, ns=1),
                     Arrival(at=1, rid="c", tokens=[1, 0], new_tokens=7),
                     Arrival(at=3, rid="d", tokens=[1, 1, 0, 2], new_tokens=2),
                     Arrival(at=5, rid="e", tokens=[2, 0, 2, 0, 1], new_tokens=2)]),
        "A full device retracts decodes with their Mamba state to a two-slot host pool, where "
        "it stays protected while finished prompts' states are written back and evicted around "
        "it; recovery resumes from it (D162-2, D162-5, D243-3, D243-4).",
    ),
    SchedScenario(
        "sched-mamba-tight-slots", ("MAMBA-5", "MAMBA-7", "MAMBA-8", "LIVE-1"), MAMBA,
        _t("sched-mamba-tight-slots", ("MAMBA-7",),
           config=SchedConfig(mamba=True, device_pages=16, mamba_slots=3, mamba_host_slots=1),
           arrivals=[Arrival(at=0, rid="r1", tokens=[0, 1, 2, 0]),
                     Arrival(at=0, rid="r2", tokens=[1, 2, 0, 1]),
                     Arrival(at=0, rid="r3", tokens=[2, 0, 1, 2]),
                     Arrival(at=4, rid="r4", tokens=[0, 1, 2, 0, 1], new_tokens=2)]),
        "Three state slots for three requests: one gets no checkpoint, says so, and finishes "
        "from its working slot; one host slot: host eviction detaches only host states (D243-3, "
        "D162-2).",
    ),
    SchedScenario(
        "sched-mamba-finish-fallback", ("MAMBA-7",), MAMBA,
        _t("sched-mamba-finish-fallback", ("MAMBA-7",),
           config=SchedConfig(mamba=True, device_pages=16, mamba_slots=1, mamba_host_slots=1),
           arrivals=[Arrival(at=0, rid="r0", tokens=[0, 1, 2], new_tokens=2),
                     Arrival(at=6, rid="twin", tokens=[0, 1, 2, 0, 1], new_tokens=1)]),
        "One state slot: the request has no checkpoint at all, so its finish publishes the "
        "state of its working slot at the depth it publishes (D243-3).",
    ),
)
