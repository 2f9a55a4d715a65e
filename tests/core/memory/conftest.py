"""An in-memory test storage that records its calls and can be told to run out of memory."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import pytest

from cubeplug.core.errors import OutOfMemoryError
from cubeplug.core.memory import SliceToken
from cubeplug.core.memory.pages import PageSource
from cubeplug.core.storage import ComputeStorage, MemoryProperties, StorageHandle, next_storage_id

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30


class FakeStorage(ComputeStorage):
    """Pages are counters (sizes by id); allocations fail past ``capacity`` or while ``fail_next`` > 0."""

    def __init__(self, alignment: int = 256, capacity: int | None = None, deferred: bool = False) -> None:
        self.alignment = alignment
        self.capacity = capacity
        #: When True, dealloc only queues the page; flush() frees it.
        self.deferred = deferred
        self.live: dict[int, int] = {}
        self.pending: list[int] = []
        self.alloc_calls: list[int] = []
        self.dealloc_calls: list[int] = []
        self.failed_allocs: list[int] = []
        self.fail_next = 0
        self.flushes = 0

    @property
    def used(self) -> int:
        """Bytes of device memory held (including deferred frees not yet flushed)."""
        return sum(self.live.values())

    @property
    def alive(self) -> int:
        """Bytes of pages the caller still owns (deferred frees excluded)."""
        return sum(size for sid, size in self.live.items() if sid not in self.pending)

    def alloc(self, size: int) -> StorageHandle:
        if self.fail_next > 0 or (self.capacity is not None and self.used + size > self.capacity):
            self.fail_next = max(0, self.fail_next - 1)
            self.failed_allocs.append(size)
            raise OutOfMemoryError(size, in_use=0, reserved=self.used, limit=None, detail="test storage full")
        sid = next_storage_id()
        self.live[sid] = size
        self.alloc_calls.append(size)
        return StorageHandle(sid, 0, size)

    def dealloc(self, id: int) -> None:
        assert id in self.live and id not in self.pending, f"double free of page {id}"
        self.dealloc_calls.append(id)
        if self.deferred:
            self.pending.append(id)
        else:
            del self.live[id]

    def flush(self) -> None:
        self.flushes += 1
        for sid in self.pending:
            del self.live[sid]
        self.pending.clear()

    def get(self, handle: StorageHandle) -> StorageHandle:
        size = self.live[handle.id]
        assert handle.offset >= 0 and handle.offset + handle.size <= size
        return handle

    def memory_info(self) -> tuple[int, int] | None:
        if self.capacity is None:
            return None
        return self.capacity - self.used, self.capacity


def props(max_page_size: int = 4 * GiB, alignment: int = 256) -> MemoryProperties:
    """Memory properties for a test device."""
    return MemoryProperties(max_page_size=max_page_size, alignment=alignment, total_memory=None)


def check_no_overlap(tokens: Iterable[SliceToken]) -> None:
    """Fail if two live tokens share bytes of one page."""
    by_page: dict[int, list[tuple[int, int]]] = {}
    for t in tokens:
        s = t.storage
        if s.size:
            by_page.setdefault(s.id, []).append((s.offset, s.offset + s.size))
    for page, spans in by_page.items():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end <= start, f"overlapping slices in page {page}: {spans}"


def check_in_storage(storage: FakeStorage, tokens: Iterable[SliceToken], alignment: int) -> None:
    """Fail unless every token lies, aligned, inside a page the storage still holds."""
    for t in tokens:
        s = t.storage
        assert s.id in storage.live and s.id not in storage.pending, f"{t} is on a freed page"
        assert s.offset % alignment == 0 and s.size % alignment == 0, f"{t} is not aligned to {alignment}"
        assert s.offset + s.size <= storage.live[s.id], f"{t} goes past its page"


@pytest.fixture
def storage() -> FakeStorage:
    """A fresh test storage with 256-byte alignment."""
    return FakeStorage()


@pytest.fixture
def source(storage: FakeStorage) -> PageSource:
    """A page source over the test storage."""
    return PageSource(storage)
