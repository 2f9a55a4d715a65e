"""CPU storage: pages are aligned numpy byte arrays in host memory."""

from __future__ import annotations

import os

import numpy as np

from cubeplug.plugin import ComputeStorage, MemoryProperties, OutOfMemoryError, StorageHandle, next_storage_id

#: Byte alignment of every page and slice (a cache line).
ALIGNMENT = 64


def host_memory_total() -> int | None:
    """Total physical memory of this machine, where the OS says."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def memory_properties() -> MemoryProperties:
    """Pages up to a quarter of host memory (at most 4 GiB), cache-line aligned."""
    total = host_memory_total()
    max_page = 4 << 30 if total is None else min(4 << 30, max(64 << 20, total // 4))
    return MemoryProperties(max_page_size=max_page, alignment=ALIGNMENT, total_memory=total)


class CpuStorage(ComputeStorage):
    """Allocations are numpy uint8 arrays whose first byte is aligned to :data:`ALIGNMENT`."""

    alignment = ALIGNMENT

    def __init__(self) -> None:
        self._pages: dict[int, np.ndarray] = {}

    @property
    def pages(self) -> dict[int, np.ndarray]:
        """The pages by storage id (the server reads them directly to view a binding's bytes)."""
        return self._pages

    def alloc(self, size: int) -> StorageHandle:
        """Allocate an aligned host page now."""
        try:
            raw = np.empty(size + ALIGNMENT, dtype=np.uint8)
        except MemoryError as e:
            raise OutOfMemoryError(
                size, in_use=0, reserved=self.reserved(), limit=None, detail="host allocation failed"
            ) from e
        start = (-raw.ctypes.data) % ALIGNMENT
        sid = next_storage_id()
        self._pages[sid] = raw[start : start + size]
        return StorageHandle(sid, 0, size)

    def dealloc(self, id: int) -> None:
        """Drop the page; numpy frees it once no view is left."""
        self._pages.pop(id, None)

    def get(self, handle: StorageHandle) -> np.ndarray:
        """A uint8 view of the region."""
        return self._pages[handle.id][handle.offset : handle.offset + handle.size]

    def reserved(self) -> int:
        """Bytes held in pages."""
        return sum(p.nbytes for p in self._pages.values())

    def memory_info(self) -> tuple[int, int] | None:
        """(available, total) host memory, where the OS says."""
        total = host_memory_total()
        if total is None:
            return None
        try:
            free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
        except (ValueError, OSError):
            free = total
        return free, total
