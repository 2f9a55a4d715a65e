"""The exclusive pool: one reservation per page, pages sized by a running average, idle pages freed."""

from __future__ import annotations

from cubeplug.core.memory.pages import PageSource
from cubeplug.core.memory.pools.lending import LendingPool
from cubeplug.core.memory.slice_token import SliceToken, lend
from cubeplug.core.memory.usage import PoolReport
from cubeplug.core.storage import StorageHandle

#: Weight of each new reservation in the running average of sizes.
SIZE_AVG_DECAY = 0.01
#: Idle checks a free page survives; at this many strikes it is deallocated.
IDLE_STRIKES = 5


class _Page:
    """One storage allocation, lent whole to at most one token."""

    __slots__ = ("handle", "idle", "lent", "padded", "requested", "size", "storage")

    def __init__(self, handle: StorageHandle, size: int) -> None:
        self.handle = handle
        self.size = size
        self.idle = 0
        self.lent = False
        self.requested = 0
        self.padded = 0
        self.storage: StorageHandle | None = None


class ExclusivePool(LendingPool):
    """Pages lent whole to one reservation of at most ``max_alloc_size`` bytes each.

    A reservation reuses the free page with the fewest idle strikes (ties: the smallest) whose
    size is at least the padded size and at most twice it (any page for size 0). A new page is
    sized to the running average of reserved sizes (``avg = 0.99 avg + 0.01 size``, starting at 0),
    bounded by the padded size below and twice the padded size above (so the page stays reusable
    by the size that made it), and never smaller than the alignment (size-0 reservations get a
    page of ``alignment`` bytes and a zero-size region of it). Each :meth:`cleanup` that is not
    explicit is one idle check: every free page takes a strike, every lent page is cleared, and
    a page with :data:`IDLE_STRIKES` strikes is deallocated; an explicit cleanup frees every free page.
    """

    kind = "exclusive"

    def __init__(self, source: PageSource, max_alloc_size: int, max_pages: int | None = None) -> None:
        super().__init__()
        self._source = source
        self._align = source.alignment
        self.max_alloc_size = max_alloc_size
        self.max_pages = max_pages
        #: The running average of reserved sizes, in bytes.
        self.average = 0.0
        self._pages: list[_Page] = []
        self._free: list[_Page] = []

    def accepts(self, size: int) -> bool:
        """True for sizes up to ``max_alloc_size``."""
        return size <= self.max_alloc_size

    def try_reserve(self, size: int) -> SliceToken | None:
        """A free page that fits ``size`` (see the class docstring), or None; updates the average."""
        self.average = self.average * (1.0 - SIZE_AVG_DECAY) + size * SIZE_AVG_DECAY
        if self._freed:
            self._drain()
        free = self._free
        if not free:
            return None
        a = self._align
        padded = -(-size // a) * a
        most = 2 * padded if size else None
        best: _Page | None = None
        best_i = -1
        for i, page in enumerate(free):
            if page.size < padded or (most is not None and page.size > most):
                continue
            if best is None or (page.idle, page.size) < (best.idle, best.size):
                best, best_i = page, i
        if best is None:
            return None
        free[best_i] = free[-1]
        free.pop()
        return self._take(best, size, padded)

    def page_size_for(self, size: int) -> int:
        """The size of the page a new reservation of ``size`` bytes gets now."""
        a = self._align
        padded = -(-size // a) * a
        average = -(-int(self.average) // a) * a
        return max(padded, min(average, 2 * padded), a)

    def alloc(self, size: int) -> SliceToken | None:
        """A token on a new page; None when ``max_pages`` pages exist already."""
        if self.max_pages is not None and len(self._pages) >= self.max_pages:
            return None
        page_size = self.page_size_for(size)
        page = _Page(self._source.alloc(page_size), page_size)
        self._pages.append(page)
        self._reserved += page_size
        a = self._align
        return self._take(page, size, -(-size // a) * a)

    def _take(self, page: _Page, size: int, padded: int) -> SliceToken:
        storage = page.storage
        if storage is None or page.padded != padded:
            storage = page.storage = page.handle.region(0, padded)
        token = lend(storage, page, self._on_free)
        page.lent = True
        page.requested = size
        page.padded = padded
        page.idle = 0
        self._live += 1
        self._in_use += size
        self._padding += padded - size
        return token

    def _drain(self) -> None:
        """Mark free the pages whose tokens died."""
        freed = self._freed
        while freed:
            page = freed.popleft()
            if not page.lent:  # never expected: a record is queued once per token
                continue
            page.lent = False
            self._live -= 1
            self._in_use -= page.requested
            self._padding -= page.padded - page.requested
            self._free.append(page)

    def cleanup(self, explicit: bool) -> int:
        """Explicit: free every free page; otherwise one idle check (see the class). The bytes freed."""
        if self._freed:
            self._drain()
        freed = 0
        keep: list[_Page] = []
        for page in self._pages:
            if page.lent:
                page.idle = 0
                keep.append(page)
                continue
            if not explicit:
                page.idle += 1
                if page.idle < IDLE_STRIKES:
                    keep.append(page)
                    continue
            self._source.free(page.handle, page.size)
            freed += page.size
        if freed:
            self._pages = keep
            self._free = [p for p in keep if not p.lent]
            self._reserved -= freed
        return freed


    def report(self) -> PoolReport:
        """The pool's largest reservation, pages, live pages and bytes."""
        if self._freed:
            self._drain()
        return PoolReport(
            self.kind, None, self.max_alloc_size, len(self._pages), self._live, self._in_use, self._reserved
        )

    def page_sizes(self) -> list[tuple[int, bool, int]]:
        """Each page as (size, lent, idle strikes), in allocation order (for tests and debugging)."""
        if self._freed:
            self._drain()
        return [(p.size, p.lent, p.idle) for p in self._pages]
