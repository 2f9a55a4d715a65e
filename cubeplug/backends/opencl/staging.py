"""Pinned staging memory of OpenCL transfers: host-allocated buffers mapped once, in the toolkit's pool.

:class:`StagingPool` holds host-allocated buffers (``ALLOC_HOST_PTR``) mapped once: their host
memory is pinned on GPU drivers, so transfers from and to it are DMA. Uploads are snapshotted into
staging chunks (large ones piece by piece, through a bounded ring of pooled chunks) and reads land in
one, which returns to the pool once its copies completed (a :class:`StagingChunk` goes back when the
last reference to it is dropped). The arrays lent by ``reserve_staging`` (:meth:`StagingPool.lend`)
are registered by address, so that an upload from one is copied straight from its mapped host
memory, with no snapshot. The size classes, the idle chunks and the address registry are the
toolkit's :class:`cubeplug.plugin.StagingPool`; the transfer policy (when to snapshot, when to copy
straight, when a read goes through a chunk) is here.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import numpy as np

from cubeplug.backends.opencl.devices import DeviceContext
from cubeplug.plugin import OutOfMemoryError
from cubeplug.plugin import StagingPool as ToolkitPool

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


class StagingPool(ToolkitPool[StagingChunk]):
    """Mapped host-allocated buffers by power-of-two size class, reused once their copies completed."""

    def __init__(self, ctx: DeviceContext, keep: int = STAGING_KEEP) -> None:
        super().__init__(MIN_STAGING, keep=keep)
        self.ctx = ctx
        #: Transfer policy read by the server (instance attributes, so that a test can change them).
        unified = bool(ctx.limits.get("host_unified_memory"))
        self.piece = STAGING_PIECE
        self.ring = STAGING_RING
        self.direct_min = DIRECT_MIN
        self.direct_pageable_min: int | None = DIRECT_PAGEABLE_MIN if unified else None
        self.read_max = HOST_READ_STAGING_MAX if unified else READ_STAGING_MAX

    def take(self, nbytes: int) -> StagingChunk:
        """A chunk of at least ``nbytes``; it returns to the pool when the last reference to it is dropped."""
        size = self.size_class(nbytes)
        chunk = self.reuse(size)
        if chunk is not None:
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
            # Registered while the mapping lives: its weak reference's callback unregisters it.
            ref = weakref.ref(mapping, functools.partial(self.unregister, start))
            self.register(start, start + mapping.nbytes, ref)
        return array

    def is_lent(self, data: memoryview) -> bool:
        """True when ``data`` lies inside one live array lent by :meth:`lend` (pinned, mapped memory)."""
        if not self._starts or data.nbytes == 0:
            return False
        ref = self.owner_of(int(np.frombuffer(data, dtype=np.uint8).ctypes.data), data.nbytes)
        return ref is not None and ref() is not None

    def give_back(self, chunk: StagingChunk) -> None:
        """Keep an idle chunk for reuse, unless the pool already keeps enough (then it is released)."""
        self.keep_idle(chunk, chunk.size)

    def clear(self) -> None:
        """Release every idle chunk."""
        self.drain()
