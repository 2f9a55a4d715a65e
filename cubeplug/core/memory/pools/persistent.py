"""The persistent pool: one page per reservation, kept in exact-size buckets for reuse."""

from __future__ import annotations

from cubeplug.core.memory.pages import PageSource
from cubeplug.core.memory.pools.lending import LendingPool
from cubeplug.core.memory.slice_token import SliceToken, lend
from cubeplug.core.memory.usage import PoolReport
from cubeplug.core.storage import StorageHandle


class _Page:
    """One storage allocation of an exact (padded) size, lent to at most one token."""

    __slots__ = ("handle", "lent", "padded", "requested", "size", "storage")

    def __init__(self, handle: StorageHandle, size: int, padded: int) -> None:
        self.handle = handle
        self.size = size
        self.padded = padded
        self.lent = False
        self.requested = 0
        self.storage = handle.region(0, padded)


class PersistentPool(LendingPool):
    """Exact-size pages for reservations in persistent windows, reused by later reservations of that size.

    Buckets are keyed by the padded size (the size rounded up to the alignment); a size-0
    reservation gets a page of ``alignment`` bytes. Only an explicit cleanup frees pages, and
    only those no token holds.
    """

    kind = "persistent"

    def __init__(self, source: PageSource, max_alloc_size: int) -> None:
        super().__init__()
        self._source = source
        self._align = source.alignment
        self.max_alloc_size = max_alloc_size
        #: Number of pages, lent or free (memory management skips this pool while it is 0).
        self.count = 0
        self._pages: list[_Page] = []
        self._free: dict[int, list[_Page]] = {}

    def accepts(self, size: int) -> bool:
        """True for sizes up to ``max_alloc_size``."""
        return size <= self.max_alloc_size

    def try_reserve(self, size: int) -> SliceToken | None:
        """A free page of exactly the padded size, or None."""
        if self._freed:
            self._drain()
        a = self._align
        bucket = self._free.get(-(-size // a) * a)
        if not bucket:
            return None
        return self._take(bucket.pop(), size)

    def alloc(self, size: int) -> SliceToken:
        """A token on a new page of the padded size."""
        a = self._align
        padded = -(-size // a) * a
        page_size = max(padded, a)
        page = _Page(self._source.alloc(page_size), page_size, padded)
        self._pages.append(page)
        self.count += 1
        self._reserved += page_size
        return self._take(page, size)

    def _take(self, page: _Page, size: int) -> SliceToken:
        token = lend(page.storage, page, self._on_free)
        page.lent = True
        page.requested = size
        self._live += 1
        self._in_use += size
        self._padding += page.padded - size
        return token

    def _drain(self) -> None:
        """Put back in their bucket the pages whose tokens died."""
        freed = self._freed
        while freed:
            page = freed.popleft()
            if not page.lent:  # never expected: a record is queued once per token
                continue
            page.lent = False
            self._live -= 1
            self._in_use -= page.requested
            self._padding -= page.padded - page.requested
            bucket = self._free.get(page.padded)
            if bucket is None:
                self._free[page.padded] = [page]
            else:
                bucket.append(page)

    def cleanup(self, explicit: bool) -> int:
        """On explicit cleanup, free every page no token holds; the bytes freed."""
        if not explicit:
            return 0
        if self._freed:
            self._drain()
        freed = 0
        for bucket in self._free.values():
            for page in bucket:
                self._source.free(page.handle, page.size)
                freed += page.size
        if freed:
            self._free = {}
            self._pages = [p for p in self._pages if p.lent]
            self.count = len(self._pages)
            self._reserved -= freed
        return freed


    def report(self) -> PoolReport:
        """The pool's pages, live pages and bytes."""
        if self._freed:
            self._drain()
        return PoolReport(
            self.kind, None, self.max_alloc_size, len(self._pages), self._live, self._in_use, self._reserved
        )
