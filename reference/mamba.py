"""Mamba state at the scheduler level (spec chapter mamba, MAMBA-1..MAMBA-8).

A hybrid model keeps, beside its KV pages, one recurrent state per sequence: the summary of
tokens[0..d] for one depth d. States live in fixed slots of a device pool and a host pool. A
cached prefix may hold a state (an *entry*, keyed by namespace and the exact prefix, so its depth
is explicit: D162-4); a request holds a working slot and a checkpoint slot while it computes.
Every slot has exactly one owner: the free list, an entry, a request, or a transfer in flight.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

from kvconf.reference.tiers import Tier


@dataclass(slots=True)
class MambaEntry:
    id: int
    namespace: int
    tokens: tuple[int, ...]  # the prefix the state summarises: depth = len(tokens)
    device: int | None = None
    host: int | None = None
    protect: int = 0  # retracted requests whose recovery state this is (D162-5)
    busy: int = 0  # transfers and plan rows reading or filling it
    access: int = 0
    seq: int = 0

    @property
    def depth(self) -> int:
        return len(self.tokens)

    def slot(self, tier: Tier) -> int | None:
        return self.device if tier is Tier.DEVICE else self.host


# The views are not frozen, as ``reference.snapshot``'s are not: a frozen slotted dataclass pays
# one ``object.__setattr__`` per field when made. Nothing changes one once made; an entry's view
# hashes by value.
@dataclass(slots=True, unsafe_hash=True)
class MambaEntryView:
    id: int
    namespace: int
    depth: int
    device: int | None
    host: int | None
    protect: int
    busy: int
    tokens: tuple[int, ...] = ()  # the prefix the state summarises (MAMBA-10 reads it)


@dataclass(slots=True)  # not frozen: see MambaEntryView
class MambaView:
    """The Mamba state pools' owners and free slots on each tier, and the cached entries."""

    owners: dict[Tier, tuple[str, ...]]  # per slot: "free", "entry:<id>", "request:<rid>",
    free: dict[Tier, tuple[int, ...]]  # "transfer:<op>"
    entries: tuple[MambaEntryView, ...]


class MambaCache:
    """The state pools and the entries of cached prefixes; deterministic (stacks, counters)."""

    def __init__(self, device_slots: int, host_slots: int) -> None:
        self.size = {Tier.DEVICE: device_slots, Tier.HOST: host_slots}
        self.free_slots = {t: list(range(n - 1, -1, -1)) for t, n in self.size.items()}
        self.owners = {t: ["free"] * n for t, n in self.size.items()}
        self.entries: dict[tuple[int, tuple[int, ...]], MambaEntry] = {}
        self.by_id: dict[int, MambaEntry] = {}
        self.clock = 0
        self._seq = 0
        # Each entry's fields and view at the last ``view``, reused while the fields stay; and
        # the last view, handed out again while it shows the pools and entries as they are.
        self._entry_views: dict[int, tuple[tuple, MambaEntryView]] = {}
        self._view: MambaView | None = None

    # ------------------------------------------------------------- slots
    def alloc(self, tier: Tier, owner: str) -> int | None:
        """A free slot, evicting the least recently used unprotected state on ``tier`` if none."""
        if not self.free_slots[tier]:
            self.evict(tier)
        if not self.free_slots[tier]:
            return None
        slot = self.free_slots[tier].pop()
        self.owners[tier][slot] = owner
        return slot

    def free(self, tier: Tier, slot: int) -> None:
        assert self.owners[tier][slot] != "free", (tier, slot)
        self.owners[tier][slot] = "free"
        self.free_slots[tier].append(slot)

    def give(self, tier: Tier, slot: int, owner: str) -> None:
        """Move ``slot`` to a new owner (a transfer of ownership, never a copy)."""
        self.owners[tier][slot] = owner

    def evictable(self, e: MambaEntry, tier: Tier) -> bool:
        return e.slot(tier) is not None and not e.busy and not (tier is Tier.HOST and e.protect)

    def evict(self, tier: Tier) -> bool:
        """Detach one state from ``tier`` only (D162-2): the entry keeps its other tier."""
        cands = [e for e in self.entries.values() if self.evictable(e, tier)]
        if not cands:
            return False
        victim = min(cands, key=lambda e: (e.access, e.seq))
        self.detach(victim, tier)
        return True

    def detach(self, e: MambaEntry, tier: Tier) -> None:
        slot = e.slot(tier)
        assert slot is not None
        self.free(tier, slot)
        if tier is Tier.DEVICE:
            e.device = None
        else:
            e.host = None
        if e.device is None and e.host is None and not e.protect and not e.busy:
            del self.entries[(e.namespace, e.tokens)]
            del self.by_id[e.id]

    # ------------------------------------------------------------- entries
    def tick(self) -> None:
        self.clock += 1

    def touch(self, e: MambaEntry) -> None:
        e.access = self.clock

    def get(self, namespace: int, tokens: tuple[int, ...]) -> MambaEntry | None:
        return self.entries.get((namespace, tokens))

    def entry(self, namespace: int, tokens: tuple[int, ...]) -> MambaEntry:
        e = self.entries.get((namespace, tokens))
        if e is None:
            self._seq += 1
            e = MambaEntry(self._seq, namespace, tokens, access=self.clock, seq=self._seq)
            self.entries[(namespace, tokens)] = e
            self.by_id[e.id] = e
        return e

    def attach(self, namespace: int, tokens: tuple[int, ...], tier: Tier, slot: int) -> bool:
        """The state in ``slot`` becomes the entry's for ``tier``; if the entry has one there
        already, ``slot`` is a duplicate and goes back free. Returns whether it was kept."""
        e = self.entry(namespace, tokens)
        self.touch(e)
        if e.slot(tier) is not None:
            self.free(tier, slot)
            return False
        if tier is Tier.DEVICE:
            e.device = slot
        else:
            e.host = slot
        self.give(tier, slot, f"entry:{e.id}")
        return True

    def deepest(self, namespace: int, tokens: list[int], limit: int,
                page_size: int) -> MambaEntry | None:
        """The entry of the deepest page-aligned prefix of at most ``limit`` tokens that holds a
        state on some tier: its depth is exact by construction (D162-4)."""
        d = (limit // page_size) * page_size
        while d > 0:
            e = self.entries.get((namespace, tuple(tokens[:d])))
            if e is not None and (e.device is not None or e.host is not None):
                return e
            d -= page_size
        return None

    def release(self, e: MambaEntry) -> None:
        """Drop an entry left with no state once nothing refers to it."""
        if e.device is None and e.host is None and not e.protect and not e.busy \
                and self.entries.get((e.namespace, e.tokens)) is e:
            del self.entries[(e.namespace, e.tokens)]
            del self.by_id[e.id]

    def view(self) -> MambaView:
        """The pools and entries as a snapshot shows them. An entry whose fields are as at the
        last view keeps its view, and a view equal to the last one is the last one: compared
        field by field, so what a subclass changes anywhere shows."""
        made, now = self._entry_views, {}
        entries = []
        for e in sorted(self.entries.values(), key=_BY_ID):
            seen = _ENTRY_FIELDS(e)
            got = made.get(e.id)
            if got is None or got[0] != seen:
                got = (seen, MambaEntryView(*seen))
            now[e.id] = got
            entries.append(got[1])
        self._entry_views = now
        view = MambaView({t: tuple(o) for t, o in self.owners.items()},
                         {t: tuple(f) for t, f in self.free_slots.items()}, tuple(entries))
        last = self._view
        if last is not None and last == view:
            return last
        self._view = view
        return view


_BY_ID = attrgetter("id")
# What an entry's view shows of it, in ``MambaEntryView``'s order.
_ENTRY_FIELDS = attrgetter("id", "namespace", "depth", "device", "host", "protect", "busy",
                           "tokens")
