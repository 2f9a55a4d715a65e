"""OpenCL storage: device pages of ``cl.Buffer``, slices bound as cached sub-buffers, pinned staging.

Every page is allocated on the device when :meth:`OpenCLStorage.alloc` is called: the buffer is
migrated to the device and the migration waited for, so that a driver that allocates lazily
(NVIDIA) reports out-of-memory there, as an :class:`OutOfMemoryError`, never at first use. The
alignment of pages and slices is the device's ``MEM_BASE_ADDR_ALIGN`` (at least 256 bytes), which is
what ``clCreateSubBuffer`` needs of a slice's offset.

:class:`StagingPool` holds host-allocated buffers (``ALLOC_HOST_PTR``) mapped once: their host
memory is pinned on GPU drivers, so transfers from and to it are DMA. Uploads are snapshotted into
staging chunks (large ones piece by piece, through a bounded ring of pooled chunks) and reads land in
one, which returns to the pool once its copies completed. The arrays lent by ``reserve_staging``
(:meth:`StagingPool.lend`) are registered by address, so that an upload from one is copied straight
from its mapped host memory, with no snapshot.
"""

from __future__ import annotations

import bisect
import functools
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from cubeplug.backends.opencl.devices import DeviceContext
from cubeplug.core.errors import BufferTooBig, OutOfMemoryError
from cubeplug.core.storage import ComputeStorage, MemoryProperties, StorageHandle, next_storage_id

#: Smallest alignment the backend uses, whatever the device reports.
MIN_ALIGNMENT = 256
#: Sub-buffers kept per page before the page's cache is reset.
SUB_BUFFER_CACHE = 4096


def alignment_of(ctx: DeviceContext) -> int:
    """The byte alignment of pages and slices on this device."""
    return max(MIN_ALIGNMENT, int(ctx.limits["base_address_alignment"]))


def memory_properties(ctx: DeviceContext) -> MemoryProperties:
    """Pages up to the device's largest allocation, aligned for sub-buffers."""
    limits = ctx.limits
    return MemoryProperties(
        max_page_size=int(limits["max_allocation"]),
        alignment=alignment_of(ctx),
        total_memory=int(limits["global_memory"]),
    )


class OpenCLStorage(ComputeStorage):
    """Device pages (``cl.Buffer``) by storage id, with a cache of the sub-buffers bound from them."""

    def __init__(self, ctx: DeviceContext) -> None:
        self.ctx = ctx
        self.alignment = alignment_of(ctx)
        self.max_allocation = int(ctx.limits["max_allocation"])
        self.total = int(ctx.limits["global_memory"])
        self._pages: dict[int, Any] = {}
        self._sizes: dict[int, int] = {}
        self._subs: dict[int, dict[tuple[int, int], Any]] = {}
        self._reserved = 0
        #: Called before a page's sub-buffers are released, so that whatever else holds them (kernels
        #: keep the buffers they bound last) lets them go first; set by the server.
        self.forget_bindings: Callable[[], None] | None = None

    # ------------------------------------------------------------------ ComputeStorage
    def alloc(self, size: int) -> StorageHandle:
        """Allocate a page of ``size`` bytes on the device now; OutOfMemoryError if it has no room."""
        import pyopencl as cl

        if size > self.max_allocation:
            raise BufferTooBig(size, self.max_allocation)
        nbytes = max(size, self.alignment)  # OpenCL has no empty buffers
        if self._reserved + nbytes > self.total:
            raise self._oom(size, f"the device has {self.total} B of global memory")
        try:
            buf = cl.Buffer(self.ctx.context, cl.mem_flags.READ_WRITE, nbytes)
            # Force the allocation now: lazy drivers would otherwise fail at the first launch.
            cl.enqueue_migrate_mem_objects(
                self.ctx.alloc_queue, [buf], cl.mem_migration_flags.CONTENT_UNDEFINED
            ).wait()
        except MemoryError as e:
            raise self._oom(size, "host memory exhausted") from e
        except cl.Error as e:
            raise self._oom(size, f"{e.routine}: {_code_name(e)}") from e
        sid = next_storage_id()
        self._pages[sid] = buf
        self._sizes[sid] = nbytes
        self._reserved += nbytes
        return StorageHandle(sid, 0, size)

    def dealloc(self, id: int) -> None:
        """Release a page and its sub-buffers; OpenCL keeps them alive for commands still queued.

        The sub-buffers go first (kernels let go of those they bound last before), then the page:
        no sub-buffer outlives its page in this storage.
        """
        if id not in self._pages:
            return
        subs = self._subs.pop(id, None)
        if subs is not None:
            if self.forget_bindings is not None:
                self.forget_bindings()
            _release_subs(subs)
            del subs
        del self._pages[id]
        self._reserved -= self._sizes.pop(id)

    def get(self, handle: StorageHandle) -> Any:
        """The ``cl.Buffer`` to bind for a region: the page itself (a region at the page's start) or a
        cached sub-buffer."""
        return self.bind(handle.id, handle.offset, handle.size)

    def memory_info(self) -> tuple[int, int] | None:
        """(free, total) global memory as far as this storage knows (OpenCL reports no free figure)."""
        return max(0, self.total - self._reserved), self.total

    # ------------------------------------------------------------------ binding (launch hot path)
    def bind(self, page: int, offset: int, size: int) -> Any:
        """A buffer that starts at ``offset`` of ``page`` and covers ``size`` bytes (offset aligned by
        the caller): the page itself when the region starts the page, else a cached sub-buffer.

        A kernel does not see the size of its buffers, so a region at offset 0 binds the whole page
        rather than a sub-buffer. That is also what keeps NVIDIA's driver alive: several sub-buffers
        at origin 0 of one page (slices of different sizes lent at the page's start over time), used
        by kernels, segfault ``clReleaseMemObject`` when they are released.
        """
        if offset == 0 or size == 0:
            return self._pages[page]
        subs = self._subs.get(page)
        if subs is not None:
            buf = subs.get((offset, size))
            if buf is not None:
                return buf
        buf = self._pages[page]
        if subs is None or len(subs) >= SUB_BUFFER_CACHE:
            if subs is not None:
                _release_subs(subs)  # a kernel may still hold one it bound last: that one lives on
            subs = self._subs[page] = {}
        sub = subs[(offset, size)] = buf.get_sub_region(offset, size)
        return sub

    def page(self, page: int) -> Any:
        """The whole ``cl.Buffer`` of a page (for copies, which take byte offsets)."""
        return self._pages[page]

    def reserved(self) -> int:
        """Bytes held in pages."""
        return self._reserved

    def _oom(self, size: int, detail: str) -> OutOfMemoryError:
        return OutOfMemoryError(
            size,
            in_use=0,
            reserved=self._reserved,
            limit=None,
            device_free=max(0, self.total - self._reserved),
            device_total=self.total,
            detail=f"{self.ctx.name}: {detail}",
        )

    def close(self) -> None:
        """Release every page, each after its sub-buffers (see :meth:`dealloc`)."""
        if self._subs and self.forget_bindings is not None:
            self.forget_bindings()
        for subs in self._subs.values():
            _release_subs(subs)
        self._subs.clear()
        self._pages.clear()
        self._sizes.clear()
        self._reserved = 0


def _release_subs(subs: dict[tuple[int, int], Any]) -> None:
    """Release a page's sub-buffers newest first.

    NVIDIA's OpenCL driver (580) segfaults in ``clReleaseMemObject`` when, of two sub-buffers bound
    by kernels, such as a handle's region and a view of it ending at the same byte, the one created
    first is released first; releasing them in the reverse order of their creation is clean
    (``bench/probes/opencl_release_views.py``). ``dict.popitem`` takes the newest entry.
    """
    while subs:
        subs.popitem()


def _code_name(error: Any) -> str:
    """The symbolic name of a PyOpenCL error's status code."""
    import pyopencl as cl

    code = getattr(error, "code", None)
    for name in dir(cl.status_code):
        if not name.startswith("_") and getattr(cl.status_code, name) == code:
            return name
    return str(code)


#: Smallest staging chunk; chunks are powers of two from here.
MIN_STAGING = 4096
#: Bytes of idle staging chunks kept for reuse; chunks beyond that are released.
STAGING_KEEP = 256 << 20
#: Uploads are snapshotted in pieces of at most this many bytes (the size class of their chunks), so
#: that a large upload reuses a few pooled chunks instead of allocating one pinned chunk as large.
STAGING_PIECE = 16 << 20
#: Chunks one upload may have in flight; a larger upload waits for its oldest piece's copy.
STAGING_RING = 4
#: Uploads from a ``reserve_staging`` array of at least this many bytes are copied straight from its
#: mapped memory, and the write waits for that copy (as on CUDA). Smaller ones are snapshotted like
#: any other source: that memcpy costs a few microseconds, and the write never waits for the work
#: already queued on the stream (PoCL, idle queue: 20-25 us either way up to 64 KiB; straight from
#: the array is faster from there on: 24 vs 45 us at 256 KiB, 70 vs 195 us at 1 MiB).
DIRECT_MIN = 64 << 10
#: On a device whose memory is the host's (``host_unified_memory``: PoCL, integrated GPUs), pageable
#: uploads of at least this many bytes are copied straight from the caller's memory and waited for
#: (one memcpy instead of two); smaller ones, and every pageable upload on other devices, go through
#: the chunk ring. From this size on the ring is full, and larger uploads wait for their own earlier
#: pieces anyway. PoCL: 8.6 vs 18.8 ms at 64 MiB, 22 vs 73 ms at 256 MiB (straight vs ring).
DIRECT_PAGEABLE_MIN = STAGING_PIECE * STAGING_RING
#: Reads of up to this many bytes in all land in one pooled pinned chunk, whose copies are DMA on a
#: discrete GPU; larger ones go straight into fresh host memory (the driver's pageable path: one copy
#: instead of two, and no pinned chunk as large as the read). The CUDA backend's default too.
READ_STAGING_MAX = 64 << 20
#: The same threshold on a device whose memory is the host's (``host_unified_memory``): there a chunk
#: buys no DMA, only a second memcpy, so no read goes through one. Measured on PoCL, straight vs
#: through a chunk: read_async 35 vs 40 us at 1 KiB, 68 vs 85 us at 64 KiB, 151 vs 194 us at 256 KiB,
#: 475 vs 660 us at 1 MiB, 1.7 vs 2.2 ms at 4 MiB; read_one 34 vs 42 ms at 64 MiB.
HOST_READ_STAGING_MAX = 0


class StagingChunk:
    """A pinned host chunk (``array`` over a mapped host-allocated buffer); back to its pool when dropped."""

    __slots__ = ("array", "buffer", "pool", "size")

    def __init__(self, pool: StagingPool | None, buffer: Any, array: np.ndarray, size: int) -> None:
        self.pool = pool
        self.buffer = buffer
        self.array = array
        self.size = size

    def __del__(self) -> None:
        pool = getattr(self, "pool", None)  # None too when __init__ was interrupted before setting it
        if pool is not None:
            pool.give_back(StagingChunk(None, self.buffer, self.array, self.size))


class StagingPool:
    """Mapped host-allocated buffers by power-of-two size class, reused once their copies completed."""

    def __init__(self, ctx: DeviceContext, keep: int = STAGING_KEEP) -> None:
        self.ctx = ctx
        self.keep = keep
        #: Transfer policy read by the server (instance attributes, so that a test can change them).
        unified = bool(ctx.limits.get("host_unified_memory"))
        self.piece = STAGING_PIECE
        self.ring = STAGING_RING
        self.direct_min = DIRECT_MIN
        self.direct_pageable_min: int | None = DIRECT_PAGEABLE_MIN if unified else None
        self.read_max = HOST_READ_STAGING_MAX if unified else READ_STAGING_MAX
        self._free: dict[int, deque[StagingChunk]] = {}
        self._idle = 0
        # Re-entrant: a chunk or a lent array collected by the garbage collector inside a locked
        # section comes back (give_back, _forget) on the same thread.
        self._lock = threading.RLock()
        # Arrays lent by reserve_staging: start address -> (end address, weak reference to the mapping).
        self._lent: dict[int, tuple[int, weakref.ref[np.ndarray]]] = {}
        self._starts: list[int] = []

    def take(self, nbytes: int) -> StagingChunk:
        """A chunk of at least ``nbytes``; it returns to the pool when the last reference to it is dropped."""
        size = max(MIN_STAGING, 1 << max(0, nbytes - 1).bit_length())
        free = self._free.get(size)
        if free:
            with self._lock:
                if free:
                    chunk = free.pop()
                    self._idle -= size
                    return StagingChunk(self, chunk.buffer, chunk.array, size)
        buffer, array = self.allocate(size)
        return StagingChunk(self, buffer, array, size)

    def allocate(self, nbytes: int) -> tuple[Any, np.ndarray]:
        """A new host-allocated buffer of ``nbytes`` and a writable uint8 array mapped over it."""
        import pyopencl as cl

        flags: Any = cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR
        access: Any = cl.map_flags.READ | cl.map_flags.WRITE
        map_buffer: Any = cl.enqueue_map_buffer
        try:
            buffer = cl.Buffer(self.ctx.context, flags, max(1, nbytes))
            array, _ = map_buffer(
                self.ctx.alloc_queue, buffer, access, 0, (max(1, nbytes),), np.uint8, is_blocking=True
            )
        except (MemoryError, cl.Error) as e:
            raise OutOfMemoryError(
                nbytes, in_use=0, reserved=self._idle, limit=None,
                detail=f"{self.ctx.name}: pinned host staging buffer: {e}",
            ) from e
        return buffer, array[:nbytes]

    def lend(self, nbytes: int) -> np.ndarray:
        """A user's staging array of ``nbytes`` over a new mapped buffer, registered while mapped."""
        _, array = self.allocate(nbytes)
        mapping = array.base if isinstance(array.base, np.ndarray) else array
        if nbytes:
            start = int(mapping.ctypes.data)
            ref = weakref.ref(mapping, functools.partial(self._forget, start))
            with self._lock:
                if self._lent.get(start) is None:
                    bisect.insort(self._starts, start)
                self._lent[start] = (start + mapping.nbytes, ref)
        return array

    def _forget(self, start: int, ref: weakref.ref[np.ndarray]) -> None:
        """Unregister a lent array whose mapping is being released (its weak reference's callback)."""
        with self._lock:
            entry = self._lent.get(start)
            if entry is not None and entry[1] is ref:
                del self._lent[start]
                del self._starts[bisect.bisect_left(self._starts, start)]

    def is_lent(self, data: memoryview) -> bool:
        """True when ``data`` lies inside one live array lent by :meth:`lend` (pinned, mapped memory)."""
        if not self._starts or data.nbytes == 0:
            return False
        address = int(np.frombuffer(data, dtype=np.uint8).ctypes.data)
        with self._lock:
            starts = self._starts
            i = bisect.bisect_right(starts, address) - 1
            entry = self._lent.get(starts[i]) if 0 <= i < len(starts) else None
        return entry is not None and address + data.nbytes <= entry[0] and entry[1]() is not None

    def give_back(self, chunk: StagingChunk) -> None:
        """Keep an idle chunk for reuse, unless the pool already keeps enough."""
        with self._lock:
            if self._idle + chunk.size <= self.keep:
                self._free.setdefault(chunk.size, deque()).append(chunk)
                self._idle += chunk.size

    def clear(self) -> None:
        """Release every idle chunk."""
        with self._lock:
            self._free.clear()
            self._idle = 0
