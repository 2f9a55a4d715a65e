"""Storage: raw allocations (pages) only. The core's memory pools cut pages into slices."""

from __future__ import annotations

import numpy as np

from cubeplug.plugin import ComputeStorage, MemoryProperties, OutOfMemoryError, StorageHandle, next_storage_id

#: Byte alignment of every page; pools align slices to it too.
ALIGNMENT = 64
#: The largest page the pools may ask for.
MAX_PAGE = 256 << 20


def memory_properties() -> MemoryProperties:
    """Page limits and alignment of the device."""
    return MemoryProperties(max_page_size=MAX_PAGE, alignment=ALIGNMENT, total_memory=None)


class HostStorage(ComputeStorage):
    """Pages are aligned numpy byte arrays; ``get`` returns a view of a region."""

    alignment = ALIGNMENT

    def __init__(self) -> None:
        self._pages: dict[int, np.ndarray] = {}

    def alloc(self, size: int) -> StorageHandle:
        """Allocate a page of ``size`` bytes now; OutOfMemoryError when the host has no room."""
        try:
            raw = np.zeros(size + ALIGNMENT, dtype=np.uint8)
        except MemoryError as e:
            reserved = sum(p.nbytes for p in self._pages.values())
            raise OutOfMemoryError(size, in_use=0, reserved=reserved, limit=None) from e
        start = (-raw.ctypes.data) % ALIGNMENT
        sid = next_storage_id()
        self._pages[sid] = raw[start : start + size]
        return StorageHandle(sid, 0, size)

    def dealloc(self, id: int) -> None:
        """Free the page (a device backend may defer this until ``flush``)."""
        self._pages.pop(id, None)

    def get(self, handle: StorageHandle) -> np.ndarray:
        """The resource behind a region: here a uint8 view."""
        return self._pages[handle.id][handle.offset : handle.offset + handle.size]

    def flush(self) -> None:
        """Run deferred frees (none here)."""
