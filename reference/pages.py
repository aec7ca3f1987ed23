"""Page pools with explicit ownership (spec POOL-1..POOL-4).

Every page of a pool has exactly one owner at any time: the pool's free list, a tree node's tier,
the caller that allocated it, or an in-flight transfer. Ownership changes only by moves that name
the expected previous owner, so a double free or a stolen page is caught where it happens.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kvconf.reference.errors import CacheError
from kvconf.reference.snapshot import PoolView
from kvconf.reference.tiers import Tier

FREE = "free"
CALLER = "caller"


def node_owner(node_id: int) -> str:
    return f"node:{node_id}"


def transfer_owner(op_id: int) -> str:
    return f"transfer:{op_id}"


_NODE = "node:"  # the prefix of a tree node's owner name


def _cached(owner: str) -> bool:
    return owner.startswith(_NODE)


class PagePool:
    """A fixed set of page ids ``0..size-1`` on one tier.

    The free list is a stack (the most recently released page is handed out first, the lowest of
    one release first); the spec leaves the pick open (POOL-3), this is only the reference's
    deterministic choice.
    """

    __slots__ = ("_cached", "_free", "_owner", "_shown", "size", "tier")

    def __init__(self, tier: Tier, size: int) -> None:
        if size < 0:
            raise CacheError("bad_config", f"{tier} pool size must be >= 0, got {size}")
        self.tier = tier
        self.size = size
        self._free: list[int] = list(range(size - 1, -1, -1))
        self._owner: list[str] = [FREE] * size
        self._cached = 0  # pages tree nodes own, kept with every move (POOL-6)
        # The free list and owners as the last view showed them, copied, and that view.
        self._shown: tuple[list[int], list[str], PoolView] | None = None

    @property
    def free_count(self) -> int:
        return len(self._free)

    @property
    def cached_count(self) -> int:
        """Pages owned by tree nodes: counted as they move, never by a scan (POOL-6)."""
        return self._cached

    def alloc(self, n: int, owner: str) -> list[int] | None:
        """All ``n`` pages or none (POOL-2): a partial allocation would leak on failure."""
        if n < 0:
            raise CacheError("bad_count", f"cannot allocate {n} pages")
        if n > len(self._free):
            return None
        top = len(self._free) - n
        pages = self._free[top:][::-1]  # the top ``n`` of the stack, as popped one by one
        del self._free[top:]
        for p in pages:
            self._owner[p] = owner
        if _cached(owner):
            self._cached += n
        return pages

    def check_owned(self, pages: Iterable[int], owner: str) -> None:
        owners, size = self._owner, self.size
        for p in pages:
            if type(p) is int and 0 <= p < size and owners[p] == owner:
                continue  # the usual case, in one test; the rest says what is wrong
            if type(p) is not int:  # a page id is a plain int (not a bool, not a float)
                raise CacheError("bad_pages", f"{self.tier} page {p!r} is not an int")
            if not 0 <= p < size:
                raise CacheError("bad_pages", f"{self.tier} page {p} is outside the pool")
            if owners[p] != owner:
                raise CacheError(
                    "bad_pages", f"{self.tier} page {p} is owned by {owners[p]}, not {owner}"
                )

    def move(self, pages: Sequence[int], src: str, dst: str) -> None:
        """Transfer ownership of ``pages`` from ``src`` to ``dst`` (checked first, then applied)."""
        self.check_owned(pages, src)
        if len(pages) > 1 and len(set(pages)) != len(pages):
            raise CacheError("bad_pages", f"{self.tier} pages repeated in {pages}")
        owners = self._owner
        for p in pages:
            owners[p] = dst
        self._cached += len(pages) * (dst.startswith(_NODE) - src.startswith(_NODE))

    def release(self, pages: Sequence[int], src: str) -> None:
        """Return ``pages`` from ``src`` to the free list."""
        self.move(pages, src, FREE)
        self._free.extend(sorted(pages, reverse=True))

    def owner(self, page: int) -> str:
        return self._owner[page]

    def held_by(self, pages: Iterable[int], owner: str) -> list[int]:
        """The pages of ``pages`` that ``owner`` holds, in order."""
        owners = self._owner
        return [p for p in pages if owners[p] == owner]

    def owners(self) -> list[str]:
        return list(self._owner)

    def free_list(self) -> list[int]:
        return list(self._free)

    def view(self, last: PoolView | None = None) -> PoolView:
        """The pool as a snapshot shows it: ``last`` itself when that shows it as it is now.
        When ``last`` is the view this pool made last, the lists it was made from are compared
        as they are now (most snapshots: nothing copied); else the view's own tuples are."""
        shown = self._shown
        if shown is not None and shown[2] is last and last.size == self.size \
                and shown[1] == self._owner and shown[0] == self._free:
            return last
        free, owners = tuple(self._free), tuple(self._owner)
        if last is not None and last.owners == owners and last.free == free \
                and last.size == self.size:
            view = last
        else:
            view = PoolView(self.tier, self.size, free, owners)
        self._shown = (list(free), list(owners), view)
        return view
