"""A page pool that hands out free pages from the other end of the free list than the
reference's: a legal choice (POOL-3) that makes an engine's answers differ from the reference's."""

from kvconf.reference.pages import PagePool


class OtherEndPool(PagePool):
    __slots__ = ()

    def alloc(self, n: int, owner: str) -> list[int] | None:
        self._free.reverse()
        try:
            return super().alloc(n, owner)
        finally:
            self._free.reverse()
