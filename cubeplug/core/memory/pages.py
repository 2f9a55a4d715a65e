"""The page source: the pools' one way to allocate and free device pages, under the memory limit."""

from __future__ import annotations

from cubeplug.core.errors import OutOfMemoryError
from cubeplug.core.memory.limit import MemoryLimit
from cubeplug.core.storage import ComputeStorage, StorageHandle


class PageSource:
    """Allocates pages from a storage, counting them against an optional shared limit."""

    __slots__ = ("alignment", "limit", "pages", "reserved", "storage")

    def __init__(self, storage: ComputeStorage, limit: MemoryLimit | None = None, alignment: int = 0) -> None:
        self.storage = storage
        self.limit = limit
        #: Byte alignment of every slice offset and size (at least the storage's).
        self.alignment = max(1, alignment or storage.alignment)
        #: Pages alive and the bytes they hold.
        self.pages = 0
        self.reserved = 0

    def align(self, size: int) -> int:
        """``size`` rounded up to the alignment."""
        a = self.alignment
        return -(-size // a) * a

    def alloc(self, size: int) -> StorageHandle:
        """A new page of ``size`` bytes; OutOfMemoryError when the limit or the device has no room."""
        limit = self.limit
        if limit is not None and not limit.try_acquire(size):
            raise OutOfMemoryError(
                size,
                in_use=0,
                reserved=limit.used,
                limit=limit.bytes,
                detail=f"a page of {size} B would exceed the memory limit ({limit.used} B used)",
            )
        try:
            handle = self.storage.alloc(size)
        except BaseException:
            if limit is not None:
                limit.release(size)
            raise
        self.pages += 1
        self.reserved += size
        return handle

    def free(self, handle: StorageHandle, size: int) -> None:
        """Return a page of ``size`` bytes to the storage (which may defer it) and to the limit."""
        self.pages -= 1
        self.reserved -= size
        try:
            self.storage.dealloc(handle.id)
        finally:
            if self.limit is not None:
                self.limit.release(size)
