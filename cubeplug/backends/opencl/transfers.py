"""The OpenCL server's transfers: uploads through pinned staging, reads completed off the caller's thread.

Uploads are snapshotted into pooled pinned staging chunks (bounded pieces for large ones) and copied
without blocking; an upload from a ``reserve_staging`` array is copied straight from its mapped
memory and waited for, as is a large pageable one on a device whose memory is the host's. Reads
copy into a pooled staging chunk (into fresh host buffers above a size threshold) and the waiter
thread completes their future. Host buffers and staging chunks stay alive until their copy
completed. Device copies are ``clEnqueueCopyBuffer`` and fills ``clEnqueueFillBuffer``. The staging
memory and its policy are :mod:`~cubeplug.backends.opencl.staging`.

:class:`OpenCLTransfers` is the layer of :class:`~cubeplug.backends.opencl.server.OpenCLServer` that
does all this.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

import numpy as np

from cubeplug.backends.opencl.devices import DeviceContext
from cubeplug.backends.opencl.staging import READ_STAGING_MAX, StagingChunk, StagingPool
from cubeplug.backends.opencl.stream import EventWaiter, OpenCLStreams
from cubeplug.plugin import (
    ComputeServer,
    Handle,
    LaunchError,
    MultiStream,
    StagedRead,
    ValidationError,
    host_buffer,
    host_copies,
    repeated_byte,
    staging_sizes,
)

R = TypeVar("R")


class OpenCLTransfers(ComputeServer):
    """Copies of an OpenCL server: uploads, reads, device copies, the staging arrays it lends."""

    ctx: DeviceContext
    streams: OpenCLStreams
    multistream: MultiStream[Any, Any]
    waiter: EventWaiter
    staging: StagingPool
    #: The storage's pages by id, PyOpenCL's ``enqueue_copy`` and the ``pyopencl`` module.
    _pages: dict[int, Any]
    _copy: Any
    _cl: Any

    def write(self, stream_id: int, handle: Handle, data: memoryview) -> None:
        """Copy host bytes into a handle's region; ``data`` may be reused once this returns.

        A ``reserve_staging`` array of at least ``staging.direct_min`` bytes is copied straight from
        its mapped (pinned) memory and the call returns once that copy completed, as the CUDA backend
        does; so is a pageable source of at least ``staging.direct_pageable_min`` bytes (devices whose
        memory is the host's, where a snapshot only adds a memcpy). Any other source is snapshotted
        into pooled staging chunks and copied without blocking (see :meth:`_write_staged`).
        """
        n = data.nbytes
        if n == 0:
            return
        if n > handle.size:
            raise ValidationError(f"cannot write {n} B into a view of {handle.size} B")
        region = handle.memory().storage
        dst = region.offset + handle.start
        staging = self.staging
        direct = staging.direct_pageable_min
        if (direct is not None and n >= direct) or (n >= staging.direct_min and staging.is_lent(data)):
            self._write_direct(stream_id, handle, region.id, dst, data)
        else:
            self._write_staged(stream_id, handle, region.id, dst, data)

    def _write_direct(self, stream_id: int, handle: Handle, page: int, dst: int, data: memoryview) -> None:
        """Copy straight from the caller's host memory (no host copy), then wait for the copy.

        For a lent staging array the copy reads its mapped pointer (``clEnqueueWriteBuffer`` from
        pinned memory: DMA on GPU drivers) rather than its ``cl.Buffer``: OpenCL leaves commands on a
        buffer that is mapped undefined.
        """
        with self.multistream.resolve(stream_id, (handle,)) as resolved:
            queue = resolved.stream
            try:
                event = self._copy(queue, self._pages[page], data, dst_offset=dst, is_blocking=False)
            except self._cl.Error as e:
                raise LaunchError(f"uploading {data.nbytes} B failed on {self.ctx.name}: {e}") from e
            queue.flush()
        self.streams.wait_event_sync(event)  # the caller may overwrite its memory once this returns

    def _write_staged(self, stream_id: int, handle: Handle, page: int, dst: int, data: memoryview) -> None:
        """Snapshot ``data`` into pooled pinned chunks, piece by piece, and copy them without blocking.

        Pieces are at most ``staging.piece`` bytes and one upload holds at most ``staging.ring``
        chunks: a larger upload reuses its own chunks, each once the copy from it completed, so no
        upload allocates pinned memory as large as itself. Each chunk returns to the pool once its last
        copy completed (the GC thread holds it until then).
        """
        n = data.nbytes
        staging = self.staging
        piece, ring = max(1, staging.piece), max(1, staging.ring)
        src = np.frombuffer(data, dtype=np.uint8)
        buf = self._pages[page]
        chunks: list[Any] = []
        events: list[Any] = []
        try:
            with self.multistream.resolve(stream_id, (handle,)) as resolved:
                queue = resolved.stream
                for i, at in enumerate(range(0, n, piece)):
                    size = min(piece, n - at)
                    if i < ring:
                        chunks.append(staging.take(size))
                    else:
                        self.streams.wait_event_sync(events[i - ring])  # that chunk's copy is done
                    host = chunks[i % ring].array[:size]
                    host[:] = src[at : at + size]
                    try:
                        events.append(self._copy(queue, buf, host, dst_offset=dst + at, is_blocking=False))
                    except self._cl.Error as e:
                        raise LaunchError(f"uploading {n} B failed on {self.ctx.name}: {e}") from e
                    queue.flush()  # start this piece while the next one is snapshotted
        finally:
            # The GC thread holds each chunk until the last copy from it completed (the earlier ones
            # were waited for); a chunk no copy used goes straight back to the pool.
            for k in range(min(len(chunks), len(events))):
                self.multistream.gc.register(events[k + (len(events) - 1 - k) // ring * ring], chunks[k])

    def read(self, stream_id: int, handles: list[Handle]) -> Future[list[bytes]]:
        """Queue copies of the handles into one pooled pinned chunk (into fresh host buffers when the
        read is larger than ``staging.read_max``); the waiter thread turns them into bytearrays, gives
        the chunk back and completes the future, so the caller never blocks."""
        sizes = [h.size for h in handles]
        total = sum(sizes)
        if 0 < total <= self.staging.read_max:

            def copied_out(chunk: StagingChunk) -> list[bytes]:
                return host_copies(chunk.array, sizes)  # type: ignore[return-value]

            return self._read_chunk(stream_id, handles, total, copied_out)
        outs: list[Any] = [host_buffer(n) for n in sizes]  # no zero-fill: the copies write them whole
        targets = [np.frombuffer(out, dtype=np.uint8) for out in outs]
        return self._read_into(stream_id, handles, targets, outs, lambda: outs)  # bytearrays, read as bytes

    def read_staged(self, handle: Handle, stream_id: int) -> Future[StagedRead]:
        """``handle``'s bytes in a pooled staging chunk (a mapped ``ALLOC_HOST_PTR`` buffer: DMA on a
        GPU driver), lent until the copy to another backend that writes from it releases it. A
        chunk on every device, unlike :meth:`read` on one whose memory is the host's: nothing
        copies the bytes out of it, so it costs no second memcpy there either."""
        n = handle.size
        if n == 0 or n > READ_STAGING_MAX:
            return super().read_staged(handle, stream_id)

        def lent(chunk: StagingChunk) -> StagedRead:
            kept = [chunk]  # back to the pool at release, when the last reference goes
            return StagedRead(chunk.array[:n].data, kept.clear)

        return self._read_chunk(stream_id, [handle], n, lent)

    def _read_chunk(
        self, stream_id: int, handles: list[Handle], total: int, finish: Callable[[StagingChunk], R]
    ) -> Future[R]:
        """Copy the handles, end to end, into one pooled staging chunk of ``total`` bytes; the
        future's result is ``finish(chunk)``, called on the waiter thread once the copies completed
        (the chunk goes back to the pool when the last reference to it goes: after ``finish``
        returned, unless its result keeps it)."""
        held = [self.staging.take(total)]
        host, targets, at = held[0].array, [], 0
        for h in handles:
            targets.append(host[at : at + h.size])
            at += h.size
        del host
        return self._read_into(stream_id, handles, targets, held, lambda: finish(held.pop()))

    def _read_into(
        self, stream_id: int, handles: list[Handle], targets: list[np.ndarray], held: list[Any],
        finish: Callable[[], R],
    ) -> Future[R]:  # fmt: skip
        """Queue a copy of each handle into its host ``target`` (memory that ``held`` keeps alive)
        in stream order; the waiter thread completes the future with ``finish()`` once the copies
        completed (or with their error, dropping ``held``). The caller never blocks."""
        future: Future[R] = Future()
        events = []
        with self.multistream.resolve(stream_id, handles) as resolved:
            queue = resolved.stream
            try:
                for h, target in zip(handles, targets, strict=True):
                    if target.nbytes:
                        region = h.memory().storage
                        events.append(self._copy(
                            queue, target, self._pages[region.id],
                            src_offset=region.offset + h.start, is_blocking=False,
                        ))
                marker = self.streams.flush(queue)
            except self._cl.Error as e:
                raise LaunchError(f"reading back failed on {self.ctx.name}: {e}") from e
        del targets

        def done(error: BaseException | None, events: list[Any] = events) -> None:
            events.clear()  # the copies are done: drop their events (and their hold on the host memory)
            if error is not None:
                held.clear()
                future.set_exception(error)
                return
            try:
                result = finish()
            except BaseException as exc:  # (a MemoryError copying out): the caller hears of it
                future.set_exception(exc)
                return
            future.set_result(result)

        self.waiter.submit(marker, done)
        return future

    def copy(self, stream_id: int, src: Handle, dst: Handle) -> None:
        """Queue a device-to-device copy of ``src.size`` bytes (``clEnqueueCopyBuffer``: any offsets,
        within one page too; the core refuses overlapping ranges, which OpenCL refuses as well)."""
        if src.size == 0:
            return
        with self.multistream.resolve(stream_id, (src, dst)) as resolved:
            self.enqueue_copy(resolved.stream, src, dst)

    def enqueue_copy(self, queue: Any, src: Handle, dst: Handle) -> None:
        """:meth:`copy`'s command on ``queue``, ordered already (a graph's replay queues it too)."""
        rs, rd = src.memory().storage, dst.memory().storage
        try:
            self._copy(
                queue, self._pages[rd.id], self._pages[rs.id], byte_count=src.size,
                src_offset=rs.offset + src.start, dst_offset=rd.offset + dst.start,
            )
        except self._cl.Error as e:
            raise LaunchError(f"device copy of {src.size} B failed on {self.ctx.name}: {e}") from e

    def fill(self, stream_id: int, handle: Handle, pattern: bytes) -> None:
        """Queue ``clEnqueueFillBuffer`` of the handle's region with ``pattern``, in stream order
        (where :meth:`fill_pattern` finds none, the host write of :meth:`ComputeServer.fill`)."""
        if handle.size == 0:
            return
        native = self.fill_pattern(handle, pattern)
        if native is None:
            super().fill(stream_id, handle, pattern)
            return
        with self.multistream.resolve(stream_id, (handle,)) as resolved:
            self.enqueue_fill(resolved.stream, handle, native)

    def fill_pattern(self, handle: Handle, pattern: bytes) -> bytes | None:
        """The pattern ``clEnqueueFillBuffer`` fills the handle's region with, or None.

        OpenCL wants the region's offset to be a multiple of the pattern's size: a pattern of one
        repeated byte (zero included) is filled as that byte, which any offset takes; a wider
        pattern at an offset that is no multiple of its size (a view at an odd byte) has none (the
        host write of the repeated pattern fills it).
        """
        if repeated_byte(pattern) is not None:
            pattern = pattern[:1]
        offset = handle.memory().storage.offset + handle.start
        if offset % len(pattern) or handle.size % len(pattern):
            return None
        return pattern

    def enqueue_fill(self, queue: Any, handle: Handle, pattern: bytes) -> None:
        """:meth:`fill`'s command on ``queue`` with a :meth:`fill_pattern`, ordered already."""
        region = handle.memory().storage
        try:
            self._cl.enqueue_fill_buffer(
                queue, self._pages[region.id], np.frombuffer(pattern, dtype=np.uint8),
                region.offset + handle.start, handle.size,
            )
        except self._cl.Error as e:
            raise LaunchError(f"filling {handle.size} B failed on {self.ctx.name}: {e}") from e

    def reserve_staging(self, sizes: Sequence[int]) -> list[np.ndarray]:
        """Pinned host arrays (mapped host-allocated buffers) of the given byte sizes.

        ``create`` or a write from one copies straight from its memory, with no host copy, and returns
        once that copy completed: the array may be refilled as soon as the call returns.
        """
        return [self.staging.lend(n) for n in staging_sizes(sizes)]

