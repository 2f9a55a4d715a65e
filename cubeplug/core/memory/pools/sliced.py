"""The sliced pool: pages of one size cut into slices, with first fit, splitting and coalescing."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from cubeplug.core.memory.options import slice_fits
from cubeplug.core.memory.pages import PageSource
from cubeplug.core.memory.pools.lending import LendingPool
from cubeplug.core.memory.slice_token import SliceToken, lend
from cubeplug.core.memory.usage import MemoryUsage, PoolReport
from cubeplug.core.storage import StorageHandle


class _Page:
    """One storage allocation and the first of its slices (a list linked by offset)."""

    __slots__ = ("handle", "head", "used", "used_bytes")

    def __init__(self, handle: StorageHandle) -> None:
        self.handle = handle
        self.head: _Slice | None = None
        #: Number and bytes of the slices lent now.
        self.used = 0
        self.used_bytes = 0


class _Slice:
    """A region of a page, free or lent; ``next`` is the slice that follows it in the page."""

    __slots__ = ("free", "next", "offset", "page", "requested", "size", "storage")

    def __init__(self, page: _Page, offset: int, size: int, next: _Slice | None = None) -> None:
        self.page = page
        self.offset = offset
        self.size = size
        self.next = next
        self.free = True
        self.requested = 0
        #: The StorageHandle of this region, kept while offset and size stay the same.
        self.storage: StorageHandle | None = None


class SlicedPool(LendingPool):
    """Pages of ``page_size`` cut into aligned slices up to ``max_slice_size`` (or within 20 % of a page).

    The usage figures are counted over the pages when asked for, so that lending and freeing a
    slice only touch the slice and its page. A reservation first reuses a freed slice of exactly its
    padded size (the most recently freed one still intact), so that the steady state of freeing
    and reserving one size costs O(1); the server's allocation path goes one step further and
    lends the slice freed first again without a call when its size fits (:meth:`reuse_entry`).
    Otherwise it takes the first free slice that fits, over pages in the order they were allocated
    and offsets in a page, coalescing adjacent free slices as it goes, and splits off the aligned
    remainder. Pages are returned to the storage only by an explicit cleanup, and only when no
    slice of them is lent.
    """

    kind = "sliced"

    def __init__(
        self,
        source: PageSource,
        page_size: int,
        max_slice_size: int,
        max_pages: int | None = None,
        near_full: bool = True,
    ) -> None:
        super().__init__()
        self._source = source
        self._align = source.alignment
        self.page_size = source.align(page_size)
        self.max_slice_size = max_slice_size
        self.max_pages = max_pages
        #: Whether sizes within 20 % of a page are taken too (:attr:`PoolOptions.near_full`).
        self.near_full = near_full
        self._pages: list[_Page] = []
        #: Freed slices by size, most recent last; entries are checked when taken (lazy removal).
        self._free_sizes: dict[int, list[_Slice]] = {}
        self._index_entries = 0
        self._slices = 0

    # ------------------------------------------------------------------ routing
    def accepts(self, size: int) -> bool:
        """True for sizes up to the largest slice, or (``near_full``) that leave less than 20 % of a
        page unused (:func:`~cubeplug.core.memory.options.slice_fits`)."""
        return slice_fits(size, self.max_slice_size, self.page_size, self.near_full)

    # ------------------------------------------------------------------ reservations
    def try_reserve(self, size: int) -> SliceToken | None:
        """A slice of a page the pool holds: an exact-size free slice, else the first that fits."""
        a = self._align
        padded = -(-size // a) * a or a
        if self._freed:
            self._drain()
        bucket = self._free_sizes.get(padded)
        while bucket:
            s = bucket.pop()
            self._index_entries -= 1
            if s.free and s.size == padded:
                return self._take(s, size)
        return self._first_fit(size, padded)

    def reuse_entry(self, size: int) -> tuple[deque[_Slice], int, Callable[[_Slice], object]]:
        """What the allocation hot path needs to lend a slice of ``size`` bytes again without a call
        (memory management keeps these entries in ``MemoryManagement.reuse``).

        ``(freed, padded, release)``: take the record at the left of ``freed`` (the slice whose
        token died first) off the deque in one ``popleft``; when its ``size == padded``, setting
        its ``requested`` to the size and lending its ``storage`` in a token released by
        ``release`` is exactly what :meth:`try_reserve` would do, less the bookkeeping of marking
        the slice free and taking it again; otherwise put it back with ``appendleft``. This needs
        no lock (``ComputeServer.empty_path`` runs it without one): the record stays lent, so its
        page stays in use, and the drains take records with ``popleft`` alone.
        """
        a = self._align
        return self._freed, -(-size // a) * a or a, self._on_free

    def alloc(self, size: int) -> SliceToken | None:
        """A slice at the start of a new page; None when ``max_pages`` pages exist already."""
        if self.max_pages is not None and len(self._pages) >= self.max_pages:
            return None
        a = self._align
        padded = -(-size // a) * a or a
        page_size = self.page_size
        page = _Page(self._source.alloc(page_size))
        s = page.head = _Slice(page, 0, page_size)
        self._pages.append(page)
        self._slices += 1
        self._reserved += page_size
        if padded < page_size:
            self._split(s, padded)
        return self._take(s, size)

    def _take(self, s: _Slice, size: int) -> SliceToken:
        s.free = False
        page = s.page
        page.used += 1
        page.used_bytes += s.size
        storage = s.storage
        if storage is None:
            storage = s.storage = page.handle.region(s.offset, s.size)
        s.requested = size
        return lend(storage, s, self._on_free)

    def _split(self, s: _Slice, size: int) -> None:
        s.next = _Slice(s.page, s.offset + size, s.size - size, s.next)
        s.size = size
        s.storage = None
        self._slices += 1

    def _first_fit(self, size: int, padded: int) -> SliceToken | None:
        page_size = self.page_size
        for page in self._pages:
            if page_size - page.used_bytes < padded:
                continue
            s = page.head
            while s is not None:
                if s.free:
                    n = s.next
                    merged = n is not None and n.free
                    while n is not None and n.free:
                        s.size += n.size
                        n.free = False
                        n = n.next
                        self._slices -= 1
                    if merged:
                        s.next = n
                        s.storage = None
                    if s.size >= padded:
                        if s.size > padded:
                            self._split(s, padded)
                        return self._take(s, size)
                s = s.next
        return None

    # ------------------------------------------------------------------ frees
    def _drain(self) -> None:
        """Mark free the slices whose tokens died (their finalizers queued the slices)."""
        freed = self._freed
        free_sizes = self._free_sizes
        while freed:
            try:  # a client's lock-free empty may take the last one meanwhile
                s = freed.popleft()
            except IndexError:
                break
            if s.free:  # never expected: a record is queued once per token
                continue
            s.free = True
            page = s.page
            page.used -= 1
            page.used_bytes -= s.size
            bucket = free_sizes.get(s.size)
            if bucket is None:
                free_sizes[s.size] = [s]
            else:
                bucket.append(s)
            self._index_entries += 1
        if self._index_entries > 2 * self._slices + 64:
            self._rebuild_index()

    def _rebuild_index(self) -> None:
        """Drop stale entries of the freed-slice index (merged, taken or freed-page slices), keeping order."""
        index: dict[int, list[_Slice]] = {}
        entries = 0
        for size, bucket in self._free_sizes.items():
            seen: set[int] = set()
            kept = []
            for s in bucket:
                if s.free and s.size == size and id(s) not in seen:
                    seen.add(id(s))
                    kept.append(s)
            if kept:
                index[size] = kept
                entries += len(kept)
        self._free_sizes = index
        self._index_entries = entries

    def cleanup(self, explicit: bool) -> int:
        """On explicit cleanup, return every page with no lent slice to the storage; the bytes freed."""
        if not explicit:
            return 0
        if self._freed:
            self._drain()
        keep: list[_Page] = []
        freed = 0
        for page in self._pages:
            if page.used:
                keep.append(page)
                continue
            s = page.head
            while s is not None:
                s.free = False
                self._slices -= 1
                s = s.next
            page.head = None
            self._source.free(page.handle, self.page_size)
            freed += self.page_size
        if freed:
            self._pages = keep
            self._reserved -= freed
            self._rebuild_index()
        return freed

    # ------------------------------------------------------------------ figures

    def usage(self) -> MemoryUsage:
        """Live slices, their requested bytes and padding (counted over the pages), and pages held."""
        if self._freed:
            self._drain()
        live = in_use = padding = 0
        for page in self._pages:
            if not page.used:
                continue
            s = page.head
            while s is not None:
                if not s.free:
                    live += 1
                    in_use += s.requested
                    padding += s.size - s.requested
                s = s.next
        return MemoryUsage(live, in_use, padding, self._reserved)

    def report(self) -> PoolReport:
        """The pool's page size, largest slice, pages, live slices and bytes."""
        usage = self.usage()
        return PoolReport(
            self.kind,
            self.page_size,
            self.max_slice_size,
            len(self._pages),
            usage.number_allocs,
            usage.bytes_in_use,
            self._reserved,
        )

    def layout(self) -> list[list[tuple[int, int, bool]]]:
        """Per page, its slices as (offset, size, lent) in offset order (for tests and debugging)."""
        if self._freed:
            self._drain()
        pages = []
        for page in self._pages:
            slices = []
            s = page.head
            while s is not None:
                slices.append((s.offset, s.size, not s.free))
                s = s.next
            pages.append(slices)
        return pages
