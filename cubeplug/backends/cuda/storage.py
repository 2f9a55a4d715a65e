"""CUDA storage: raw ``cudaMalloc`` pages, deferred ``cudaFree`` (docs/memory.md).

The pools above ask for pages rarely and cut them into slices, so a page is a plain ``cudaMalloc``
(usable from every stream at once, 256-byte aligned or better) rather than CuPy's memory pool or a
stream-ordered allocation that would tie it to one stream. Frees are deferred until :meth:`flush`:
``cudaFree`` waits for the device to finish the work queued before it, so pages are released in a
batch at a flush or a cleanup instead of stalling the stream in the middle of a reservation.
"""

from __future__ import annotations

from typing import Any

from cubeplug.backends.cuda.device import on_device
from cubeplug.plugin import ComputeStorage, MemoryProperties, OutOfMemoryError, StorageHandle, next_storage_id

#: Byte alignment of every page and slice (cudaMalloc returns at least 256-byte aligned pointers).
ALIGNMENT = 256
#: cudaErrorMemoryAllocation.
_ERROR_MEMORY_ALLOCATION = 2


def memory_properties(device: int, max_page_size: int | None = None) -> MemoryProperties:
    """Pages up to a quarter of device memory (or ``max_page_size``), 256-byte aligned."""
    from cupy.cuda import runtime

    total = int(runtime.getDeviceProperties(device)["totalGlobalMem"])
    page = max_page_size if max_page_size is not None else total // 4
    return MemoryProperties(max_page_size=page, alignment=ALIGNMENT, total_memory=total)


class CudaStorage(ComputeStorage):
    """Device pages from ``cudaMalloc``; ``get`` resolves a region to its device address."""

    alignment = ALIGNMENT

    def __init__(self, device: int = 0) -> None:
        from cupy.cuda import runtime

        self.device = device
        self._runtime = runtime
        #: Device address of each live page, by storage id (read directly on the launch path).
        self.ptrs: dict[int, int] = {}
        self._sizes: dict[int, int] = {}
        self._pending: list[int] = []

    def alloc(self, size: int) -> StorageHandle:
        """Allocate a page now; OutOfMemoryError with the device's figures when it has no room."""
        rt = self._runtime
        if self._pending:
            self.flush()
        with on_device(self.device):
            try:
                ptr = rt.malloc(max(size, 1))
            except rt.CUDARuntimeError as e:
                if getattr(e, "status", None) != _ERROR_MEMORY_ALLOCATION:
                    raise
                free, total = self.memory_info() or (None, None)
                raise OutOfMemoryError(
                    size,
                    in_use=0,
                    reserved=self.reserved(),
                    limit=None,
                    device_free=free,
                    device_total=total,
                    detail=f"cudaMalloc failed on cuda:{self.device}",
                ) from e
        sid = next_storage_id()
        self.ptrs[sid] = ptr
        self._sizes[sid] = size
        return StorageHandle(sid, 0, size)

    def adopt(self, ptr: int, size: int) -> StorageHandle:
        """A region over device memory cubeplug did not allocate (``client.asarray`` of a CuPy array
        or a torch tensor): launches resolve it like a page, but it is never freed here and does
        not count as reserved; :meth:`forget` drops it when the last handle over it goes."""
        sid = next_storage_id()
        self.ptrs[sid] = ptr
        return StorageHandle(sid, 0, size)

    def forget(self, record: tuple[int, Any]) -> None:
        """The end of an adopted region: ``record`` is (storage id, the object owning the memory),
        which is let go here (a SliceToken's ``give_back``)."""
        self.ptrs.pop(record[0], None)

    def dealloc(self, id: int) -> None:
        """Forget the page; its memory is freed at the next :meth:`flush`."""
        ptr = self.ptrs.pop(id, None)
        if ptr is not None:
            self._sizes.pop(id, None)
            self._pending.append(ptr)

    @property
    def has_pending(self) -> bool:
        """True when deallocations wait for a flush."""
        return bool(self._pending)

    def flush(self) -> None:
        """Free the pages deallocated since the last flush (after the work queued before)."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        with on_device(self.device):
            for ptr in pending:
                self._runtime.free(ptr)

    def get(self, handle: StorageHandle) -> int:
        """The device address of a region."""
        return self.ptrs[handle.id] + handle.offset

    def reserved(self) -> int:
        """Bytes held in live pages."""
        return sum(self._sizes.values())

    def memory_info(self) -> tuple[int, int] | None:
        """(free, total) bytes of the device."""
        try:
            with on_device(self.device):
                free, total = self._runtime.memGetInfo()
        except Exception:
            return None
        return int(free), int(total)

    def close(self) -> None:
        """Free every page now (the caller synchronised the device)."""
        for sid in list(self.ptrs):
            self.dealloc(sid)
        self.flush()

    def __repr__(self) -> str:
        return f"<CudaStorage cuda:{self.device} pages={len(self.ptrs)} reserved={self.reserved()} B>"

    def __getstate__(self) -> Any:  # pragma: no cover - device pointers are process-local
        raise TypeError("CudaStorage cannot be pickled")
