"""WebGPU storage: every page is one GPUBuffer usable as storage, copy source/destination and indirect.

Slices of a page are bound with a binding offset, so the pools align them to the device's
``minStorageBufferOffsetAlignment`` and no page is larger than ``maxStorageBufferBindingSize``.
wgpu-py raises validation and out-of-memory errors synchronously at the call, so they are mapped
to cubeplug errors right where the allocation was asked for; a lost device is DeviceLostError.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cubeplug.backends.webgpu.health import DeviceHealth
from cubeplug.plugin import (
    BufferTooBig,
    ComputeStorage,
    MemoryProperties,
    OutOfMemoryError,
    StorageHandle,
    ValidationError,
    next_storage_id,
)


def buffer_usage() -> int:
    """STORAGE | COPY_SRC | COPY_DST | INDIRECT: what a page must allow."""
    import wgpu

    u = wgpu.BufferUsage
    return int(u.STORAGE | u.COPY_SRC | u.COPY_DST | u.INDIRECT)


#: Reservations above this size get pages of their own (MemoryProperties.max_slice_size).
MAX_SLICE_SIZE = 8 << 20


def memory_properties(limits: dict[str, int]) -> MemoryProperties:
    """Pages up to the largest storage binding (and buffer), aligned to the storage offset
    alignment; reservations above :data:`MAX_SLICE_SIZE` in pages of their own.

    Why own pages: a kernel's read buffers are bound read-only only where no page they lie in is
    bound to a written buffer too (WebGPU forbids both in one dispatch; ``compiler.py`` says what
    read-only binding gains). The default ladder cuts reservations up to a quarter of the largest
    page from shared pages, so on the H100 std.matmul's three 64 MiB matrices of 4096^3 f32 shared
    one. 8 MiB: a 2048 x 2048 f32 matrix (16 MiB) is above it, a 1024 x 1024 one (4 MiB) below.
    Small reservations keep sharing pages: a new page costs a ``create_buffer`` (10-15 us on the
    H100, ``cubeplug bench --only alloc``), where a pooled 1 MiB reservation costs about 1 us.
    """
    max_binding = int(limits["max-storage-buffer-binding-size"])
    max_buffer = int(limits.get("max-buffer-size", max_binding))
    align = max(4, int(limits["min-storage-buffer-offset-alignment"]))
    max_page = min(max_binding, max_buffer)
    max_page -= max_page % align
    return MemoryProperties(max_page_size=max_page, alignment=align, max_slice_size=MAX_SLICE_SIZE)


class WgpuStorage(ComputeStorage):
    """Pages are GPUBuffers of one device; ``get`` gives ``(buffer, offset, size)``."""

    def __init__(self, device: Any, properties: MemoryProperties, adapter: Any = None) -> None:
        self.device = device
        #: The GPUAdapter the device came from (for the server's device info).
        self.adapter = adapter
        name = str((getattr(adapter, "info", None) or {}).get("device", "")) if adapter is not None else ""
        #: Whether the device was lost; shared with the server and its queue.
        self.health = DeviceHealth(device, name)
        #: The device's paging, as :func:`memory_properties` read it.
        self.properties = properties
        self.alignment = properties.alignment
        self.max_page_size = properties.max_page_size
        self.buffers: dict[int, Any] = {}
        self._usage = buffer_usage()
        self._reserved = 0
        #: Called with a page id before the page is released (the server drops cached bind groups).
        self.on_dealloc: Callable[[int], None] | None = None

    def alloc(self, size: int) -> StorageHandle:
        """Create a page now; raise BufferTooBig, ValidationError, OutOfMemoryError or DeviceLostError."""
        import wgpu

        if size > self.max_page_size:
            raise BufferTooBig(size, self.max_page_size)
        self.health.check()
        nbytes = max(4, size + (-size) % 4)
        try:
            buffer = self.device.create_buffer(size=nbytes, usage=self._usage)
        except wgpu.GPUError as e:
            raise self._alloc_error(size, e) from e
        sid = next_storage_id()
        self.buffers[sid] = buffer
        self._reserved += nbytes
        return StorageHandle(sid, 0, size)

    def _alloc_error(self, size: int, error: Exception) -> Exception:
        """The cubeplug error for a failed ``create_buffer``: lost device, out of memory or refused."""
        import wgpu

        lost = self.health.lost(error)
        if lost is not None:
            return lost
        text = str(error).strip()
        if isinstance(error, wgpu.GPUOutOfMemoryError) or (
            not isinstance(error, wgpu.GPUValidationError) and "memory" in text.lower()
        ):
            return OutOfMemoryError(
                size, in_use=0, reserved=self._reserved, limit=None, detail=f"wgpu: {text}"
            )
        return ValidationError(f"the device refused a buffer of {size} B: {text}")

    def dealloc(self, id: int) -> None:
        """Destroy the page; wgpu frees it once the submitted work that uses it is done."""
        buffer = self.buffers.pop(id, None)
        if buffer is None:
            return
        if self.on_dealloc is not None:
            self.on_dealloc(id)
        self._reserved -= buffer.size
        buffer.destroy()

    def get(self, handle: StorageHandle) -> tuple[Any, int, int]:
        """The page buffer with the region's offset and size."""
        return self.buffers[handle.id], handle.offset, handle.size

    def reserved(self) -> int:
        """Bytes held in pages."""
        return self._reserved

    def close(self) -> None:
        """Destroy every page."""
        for sid in list(self.buffers):
            self.dealloc(sid)
