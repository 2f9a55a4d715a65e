"""The CUDA server's transfers: every copy between the host and a device, and between devices.

Host transfers go through pinned blocks (:class:`~cubeplug.backends.cuda.staging.PinnedPool`) with
asynchronous copies on the stream; a source that already is pinned (a ``reserve_staging`` buffer)
is copied by DMA directly. Reads return at once: the completer thread completes their futures
(small ones through one pinned block, staged ones through pinned chunks with an event each, large
ones copied on the device and downloaded by the driver straight into their results). Pitched
tensors move with one 2-D copy; device copies are ``cudaMemcpyAsync`` and fills ``cudaMemsetAsync``
(or copy-doubling of a seed); a device array (``__cuda_array_interface__``) is copied on the
device, after its producer stream; another CUDA server gets a peer copy.

:class:`CudaTransfers` is the layer of :class:`~cubeplug.backends.cuda.server.CudaServer` that does
all this; the server sets up what it uses (:meth:`CudaTransfers.open_transfers`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, cast

import numpy as np

from cubeplug.backends.cuda.device import DeviceGuard
from cubeplug.backends.cuda.layout import Rows, pitched_rows, pitched_strides
from cubeplug.backends.cuda.options import CudaOptions
from cubeplug.backends.cuda.staging import (
    PinnedBlock,
    PinnedBuffer,
    PinnedPool,
    StagedChunk,
    drain_chunks,
    plan_chunks,
)
from cubeplug.backends.cuda.storage import CudaStorage
from cubeplug.backends.cuda.stream import CudaStream, CudaStreams, map_cuda_error
from cubeplug.plugin import (
    Completer,
    ComputeServer,
    EventFuture,
    Handle,
    MultiStream,
    OutOfMemoryError,
    SliceToken,
    StagedRead,
    Tensor,
    ValidationError,
    contiguous_strides,
    dtype_of,
    host_address,
    host_buffer,
    host_copies,
    repeated_byte,
    staging_sizes,
)

#: Sources this large and larger are checked for being pinned by someone else (cudaPointerGetAttributes).
PINNED_PROBE_BYTES = 1 << 20
#: cudaMemcpyKind: host to device, device to host, device to device, inferred from the addresses.
H2D, D2H, D2D, DEFAULT = 1, 2, 3, 4
#: Staged reads are split into pinned chunks of this many bytes (one event each): the host copies
#: one chunk out while the device copies the next.
READ_CHUNK = 8 << 20
#: Reads of more than this many bytes are copied on the device and downloaded by the driver straight
#: into their results on the completer thread (CudaTransfers._read_snapshot): from about here that
#: beats a pinned block plus a host copy (H100, against CuPy's get(): 0.85 against 0.54 at 8 MiB, 0.96
#: against 0.73 at 16 MiB; bench/probes/cuda_large_read.py).
SNAPSHOT_MIN = 4 << 20
#: The most bytes of a fill's pattern uploaded as the seed that device copies double (CudaTransfers.fill).
FILL_SEED = 64 << 10
#: cudaHostAllocPortable: pinned for every device's context, not only the current one.
HOST_ALLOC_PORTABLE = 1
#: cudaErrorPeerAccessAlreadyEnabled: another client of the device enabled it first.
PEER_ACCESS_ALREADY_ENABLED = 704


class CudaTransfers(ComputeServer):
    """Copies of a CUDA server: uploads, reads, device and peer copies, pitched tensors, staging."""

    guard: DeviceGuard
    options: CudaOptions
    device: int
    storage: CudaStorage
    streams: CudaStreams
    multistream: MultiStream[CudaStream, Any]
    #: Device address of each page, by storage id (the storage's, read on every copy and launch).
    _ptrs: dict[int, int]

    def open_transfers(self, runtime: Any) -> None:
        """Set up what the transfers use: the runtime's copies, the pinned pool, the completer thread."""
        self._rt = runtime
        self._memcpy = runtime.memcpyAsync
        self._memcpy2d = runtime.memcpy2DAsync
        self._memset = runtime.memsetAsync
        self.pinned = PinnedPool(
            lambda n: runtime.hostAlloc(n, HOST_ALLOC_PORTABLE),
            runtime.freeHost,
            self.options.pinned_pool_bytes,
        )
        self._completer = Completer("cubeplug-cuda-reads")
        #: The stream of the completer thread's downloads (made by the first large read).
        self._downloads: CudaStream | None = None

    def device_pointer(self, handle: Handle) -> int:
        """The device address of a handle's first byte (for the backend's NCCL calls)."""
        return self._ptr(handle)

    def _ptr(self, handle: Handle) -> int:
        """The device address of a handle's first byte."""
        region = handle.memory().storage
        return self._ptrs[region.id] + region.offset + handle.start

    def _is_pinned(self, address: int, nbytes: int) -> bool:
        if self.pinned.contains(address, nbytes):
            return True
        if nbytes < PINNED_PROBE_BYTES:
            return False
        try:
            return int(self._rt.pointerGetAttributes(address).type) == 1  # cudaMemoryTypeHost
        except Exception:
            return False

    # ------------------------------------------------------------------ transfers
    def _h2d(self, stream: CudaStream, dst: int, src: int, n: int, rows: Rows | None) -> None:
        if rows is None:
            self._memcpy(dst, src, n, H2D, stream.ptr)
        else:
            self._memcpy2d(dst, rows.pitch, src, rows.width, rows.width, rows.height, H2D, stream.ptr)

    def _upload(self, stream: CudaStream, dst: int, view: memoryview, rows: Rows | None = None) -> None:
        """Copy host bytes to ``dst`` on ``stream``; ``view`` may be reused when this returns."""
        n = view.nbytes
        src = host_address(view)
        if self._is_pinned(src, n):
            # DMA straight from the caller's pinned buffer; wait so that it may be reused at once.
            self._h2d(stream, dst, src, n, rows)
            self.streams.wait_event_sync(self.streams.flush(stream))
        elif n <= self.options.staging_max_bytes:
            block = self.pinned.take(n)
            block.array[:n] = np.frombuffer(view, dtype=np.uint8)
            self._h2d(stream, dst, block.ptr, n, rows)
            self.pinned.give(block, self.streams.flush(stream))
        else:
            # Large pageable source: the driver stages it and returns once it may be reused.
            self._h2d(stream, dst, src, n, rows)

    def write(self, stream_id: int, handle: Handle, data: memoryview) -> None:
        """Queue a copy of host bytes into a handle's region, through pinned memory."""
        n = data.nbytes
        if n == 0:
            return
        if n > handle.size:
            raise ValidationError(f"cannot write {n} B into a view of {handle.size} B")
        self.guard()
        dst = self._ptr(handle)
        with self.multistream.resolve(stream_id, (handle,)) as res:
            self._upload(res.stream, dst, data)

    def create(self, data: Any, stream_id: int) -> Handle:
        """A handle holding a copy of host data, or of a device array (a device-to-device copy)."""
        cai = getattr(data, "__cuda_array_interface__", None)
        if cai is not None:
            return self._create_from_device(data, cai, stream_id)
        return super().create(data, stream_id)

    def _device_source(self, cai: dict[str, Any]) -> tuple[int, tuple[int, ...], np.dtype[Any], Any]:
        shape = tuple(int(s) for s in cai["shape"])
        dtype = np.dtype(cai["typestr"])
        strides = cai.get("strides")
        if strides is not None:
            expect = tuple(s * dtype.itemsize for s in contiguous_strides(shape))
            if any(n > 1 and s != e for n, s, e in zip(shape, strides, expect, strict=False)):
                raise ValidationError(
                    f"create() takes C-contiguous device arrays; this one has strides {tuple(strides)} "
                    f"for shape {shape}; pass cupy.ascontiguousarray(x)"
                )
        return int(cai["data"][0]), shape, dtype, cai.get("stream")

    def _after_producer(self, stream: CudaStream, producer: Any) -> None:
        """Order ``stream`` after the producer stream named by a __cuda_array_interface__."""
        if not producer:
            return
        try:
            event = self.streams.event()
            self._rt.eventRecord(event.ptr, int(producer))
            self.streams.wait_event(stream, event)
        except self._rt.CUDARuntimeError:  # a stream of another device: wait on the host instead
            self._rt.streamSynchronize(int(producer))

    def _create_from_device(self, obj: Any, cai: dict[str, Any], stream_id: int) -> Handle:
        src, shape, dtype, producer = self._device_source(cai)
        n = math.prod(shape) * dtype.itemsize
        handle = self.empty(n, stream_id)
        if n == 0:
            return handle
        self.guard()
        dst = self._ptr(handle)
        with self.multistream.resolve(stream_id, (handle,)) as res:
            self._after_producer(res.stream, producer)
            self._memcpy(dst, src, n, DEFAULT, res.stream.ptr)
            self.multistream.gc.register(self.streams.flush(res.stream), obj)
        return handle

    def import_device_array(self, obj: Any, stream_id: int) -> Tensor | None:
        """A tensor over the device memory of ``obj`` (``__cuda_array_interface__``, or a CUDA
        ``__dlpack__`` such as a torch tensor), without a copy; None when ``obj`` has neither.

        The memory stays the producer's: the handle's slice token keeps ``obj`` alive and never
        frees it (``CudaStorage.adopt``). The stream waits, on the device, for the producer's stream
        when the interface names one, so cubeplug's work reads what the producer wrote.
        """
        cai = getattr(obj, "__cuda_array_interface__", None)
        if cai is None and hasattr(obj, "__dlpack__"):
            kind = int(getattr(obj, "__dlpack_device__", lambda: (0, 0))()[0])
            if kind != 2:  # kDLCUDA
                return None
            import cupy  # present wherever a CUDA client is; needed only to take a DLPack capsule

            obj = cupy.from_dlpack(obj)  # zero copy; the CuPy array keeps the producer's capsule
            cai = obj.__cuda_array_interface__
        if cai is None:
            return None
        shape = tuple(int(n) for n in cai["shape"])
        dt = np.dtype(cai["typestr"])
        dtype_of(dt)  # a dtype cubeplug has, or ValidationError
        if cai.get("strides") is None:
            strides = contiguous_strides(shape)
        elif any(st % dt.itemsize or st < 0 for st in cai["strides"]):
            raise ValidationError(
                f"device array strides {tuple(cai['strides'])} are not non-negative multiples of its "
                f"{dt.itemsize}-byte elements; pass a contiguous copy (cupy.ascontiguousarray(x))"
            )
        else:
            strides = tuple(int(st) // dt.itemsize for st in cai["strides"])
        ptr = int(cai["data"][0])
        self._check_on_device(ptr)
        extent = 0 if 0 in shape else 1 + sum((n - 1) * st for n, st in zip(shape, strides))
        nbytes = extent * dt.itemsize
        with self.multistream.resolve(stream_id) as res:
            self._after_producer(res.stream, cai.get("stream"))
        region = self.storage.adopt(ptr, nbytes)
        token = SliceToken(region, -1, (region.id, obj), self.storage.forget)
        return Tensor(Handle(token, self, nbytes, stream_id), shape, strides, dt)

    def _check_on_device(self, ptr: int) -> None:
        """ValidationError unless ``ptr`` is memory of this server's device."""
        try:
            device = int(self._rt.pointerGetAttributes(ptr).device)
        except Exception:  # not a pointer the runtime knows: let the first use say so
            return
        if device != self.device:
            raise ValidationError(
                f"the device array lives on cuda:{device}, this client is cuda:{self.device}: use "
                f"cubeplug.client('cuda:{device}'), or copy it to this device first"
            )

    def read(self, stream_id: int, handles: list[Handle]) -> Future[list[bytes]]:
        """A future of each handle's bytes (bytearrays), ordered after the stream's earlier work.

        Up to :data:`SNAPSHOT_MIN` bytes in all (and ``staging_max_bytes``): async copies into
        pooled pinned memory, which the completer thread copies into the results once the copies'
        event fired (:meth:`_read_pinned`). Larger reads are copied on the device, in stream order,
        and downloaded by the driver on the completer thread (:meth:`_read_snapshot`). Either way
        the caller does not wait, and each byte reaches its result with one host copy at most, into
        memory that nothing zero-filled first.
        """
        sizes = [h.size for h in handles]
        total = sum(sizes)
        if total == 0:
            done: Future[list[bytes]] = Future()
            done.set_result(cast("list[bytes]", [bytearray() for _ in handles]))
            return done
        self.guard()
        srcs = [self._ptr(h) for h in handles]
        with self.multistream.resolve(stream_id, handles) as res:
            if total > SNAPSHOT_MIN or total > self.options.staging_max_bytes:
                return self._read_snapshot(stream_id, res.stream, srcs, sizes)
            return self._read_pinned(res.stream, srcs, sizes)

    def _read_pinned(self, stream: CudaStream, srcs: list[int], sizes: list[int]) -> Future[list[bytes]]:
        """Async copies into pooled pinned memory (one block, or chunks of :data:`READ_CHUNK` with an
        event each); the completer thread copies them into the results."""
        total = sum(sizes)
        pool, wait = self.pinned, self.streams.wait_event_sync
        if total > READ_CHUNK:
            chunks = self._copy_to_chunks(stream, srcs, sizes)
            event = chunks[0].event

            def finish() -> list[bytes]:
                return cast("list[bytes]", drain_chunks(chunks, sizes, wait, pool.give))

        else:  # one chunk (every small read): the same with less Python
            block, event = self._copy_to_block(stream, srcs, sizes)

            def finish() -> list[bytes]:
                out = host_copies(block.array, sizes)
                pool.give(block)
                return cast("list[bytes]", out)

        future: EventFuture[list[bytes]] = EventFuture(event, finish, wait)
        self._completer.submit(future)
        return future

    def _copy_to_block(
        self, stream: CudaStream, srcs: list[int], sizes: list[int]
    ) -> tuple[PinnedBlock, Any]:
        """Queue copies of the device ranges ``srcs`` (``sizes`` bytes each), end to end, into one
        block of the pinned pool, then record an event: (the block, the event). The caller gives
        the block back once it is done with it."""
        block = self.pinned.take(sum(sizes))
        try:
            offset = 0
            for src, n in zip(srcs, sizes, strict=True):
                if n:
                    self._memcpy(block.ptr + offset, src, n, D2H, stream.ptr)
                offset += n
            return block, self.streams.flush(stream)
        except BaseException as e:
            self._give_back_queued(stream, [block])
            if isinstance(e, self._rt.CUDARuntimeError):
                raise map_cuda_error(e, "a device-to-host copy") from e
            raise

    def _copy_to_chunks(self, stream: CudaStream, srcs: list[int], sizes: list[int]) -> list[StagedChunk]:
        """Queue the copies of a read, end to end, into pinned chunks of :data:`READ_CHUNK` bytes,
        each followed by its event (:func:`drain_chunks` copies them out)."""
        chunks: list[StagedChunk] = []
        taken: list[PinnedBlock] = []
        try:
            for nbytes, pieces in plan_chunks(sizes, READ_CHUNK):
                block = self.pinned.take(nbytes)
                taken.append(block)
                for item, at, into, n in pieces:
                    self._memcpy(block.ptr + into, srcs[item] + at, n, D2H, stream.ptr)
                chunks.append(StagedChunk(block, pieces, self.streams.flush(stream)))
        except BaseException as e:
            self._give_back_queued(stream, taken)
            if isinstance(e, self._rt.CUDARuntimeError):
                raise map_cuda_error(e, "a device-to-host copy") from e
            raise
        return chunks

    def _give_back_queued(self, stream: CudaStream, blocks: list[PinnedBlock]) -> None:
        """Return the pinned blocks of copies that failed part-way: reused once the stream passed the
        copies already queued into them (when the context is gone and no event can be recorded,
        they stay out of the pool until it closes)."""
        try:
            event = self.streams.flush(stream)
        except BaseException:
            return
        for block in blocks:
            self.pinned.give(block, event)

    def _read_snapshot(
        self, stream_id: int, stream: CudaStream, srcs: list[int], sizes: list[int]
    ) -> Future[list[bytes]]:
        """Large reads: a device copy of the bytes, taken in stream order at device speed, which the
        completer thread downloads while the client's lock is free (a pageable download holds the
        calling thread for as long as it runs: 256 MiB take about 70 ms).

        The copy is device memory of the stream's pools, kept until the download finished; the
        download runs on a stream of its own, straight into the results (:meth:`_read_pageable`'s
        way). Without room for the copy, the read goes through pinned memory (up to
        ``staging_max_bytes``) or is :meth:`_read_pageable` itself.
        """
        total = sum(sizes)
        try:
            copy = self.empty(total, stream_id)
        except OutOfMemoryError:  # no device memory to spare: pinned memory, or the driver's way
            if total <= self.options.staging_max_bytes:
                return self._read_pinned(stream, srcs, sizes)
            return self._read_pageable(stream, srcs, sizes)
        base, offsets = self._ptr(copy), []
        try:
            at = 0
            for src, n in zip(srcs, sizes, strict=True):
                if n:
                    self._memcpy(base + at, src, n, D2D, stream.ptr)
                offsets.append(at)
                at += n
            event = self.streams.flush(stream)
        except self._rt.CUDARuntimeError as e:
            raise map_cuda_error(e, "a device-to-device copy") from e
        if self._downloads is None:
            self._downloads = self.streams.create_stream()
        downloads, memcpy, guard = self._downloads, self._memcpy, self.guard

        def finish() -> list[bytes]:
            guard()  # the completer thread works for this device
            out = [host_buffer(n) for n in sizes]
            try:
                for buf, at, n in zip(out, offsets, sizes, strict=True):
                    if n:
                        memcpy(host_address(memoryview(buf)), base + at, n, D2H, downloads.ptr)
            except self._rt.CUDARuntimeError as e:
                raise map_cuda_error(e, "a device-to-host copy") from e
            finally:
                copy.drop()  # the downloads returned: they are complete
            return cast("list[bytes]", out)

        future: EventFuture[list[bytes]] = EventFuture(event, finish, self.streams.wait_event_sync)
        self._completer.submit(future)
        return future

    def _read_pageable(self, stream: CudaStream, srcs: list[int], sizes: list[int]) -> Future[list[bytes]]:
        """Large reads: one copy per handle straight into its result, as CuPy's ``ndarray.get()`` does.

        The driver stages a copy to pageable memory through its own pinned buffers (pipelined) and
        returns once it completed: the caller waits for the stream, like ``get()``. The results come
        from :func:`host_buffer` (not zero-filled, huge pages, like the numpy array ``get()`` fills),
        and are the very buffers the copies write: no second copy. The event only guards platforms
        where such a copy might return early; ordinarily it has already fired.
        """
        out = [host_buffer(n) for n in sizes]
        try:
            for buf, src, n in zip(out, srcs, sizes, strict=True):
                if n:
                    self._memcpy(host_address(memoryview(buf)), src, n, D2H, stream.ptr)
            event = self.streams.flush(stream)
        except self._rt.CUDARuntimeError as e:
            raise map_cuda_error(e, "a device-to-host copy") from e
        result = cast("list[bytes]", out)
        future: EventFuture[list[bytes]] = EventFuture(event, lambda: result, self.streams.wait_event_sync)
        self._completer.submit(future)
        return future

    def read_staged(self, handle: Handle, stream_id: int) -> Future[StagedRead]:
        """``handle``'s bytes in a block of the pinned pool (one DMA, no host copy), lent until the
        copy to another backend that writes from it releases it; a handle larger than
        ``staging_max_bytes`` (a copy between backends reads pieces of 16 MiB) is read the plain way."""
        n = handle.size
        if n == 0 or n > self.options.staging_max_bytes:
            return super().read_staged(handle, stream_id)
        self.guard()
        src = self._ptr(handle)
        pool = self.pinned
        with self.multistream.resolve(stream_id, (handle,)) as res:
            block, event = self._copy_to_block(res.stream, [src], [n])

        def finish() -> StagedRead:
            return StagedRead(block.array[:n].data, lambda: pool.give(block))

        def failed(f: Future[StagedRead]) -> None:
            # The wait for the copy failed (a sticky CUDA error): no StagedRead will give the block
            # back. (A cancelled future keeps it: the copy may still be writing into it.)
            if not f.cancelled() and f.exception() is not None:
                pool.give(block)

        future: EventFuture[StagedRead] = EventFuture(event, finish, self.streams.wait_event_sync)
        future.add_done_callback(failed)
        self._completer.submit(future)
        return future

    def copy(self, stream_id: int, src: Handle, dst: Handle) -> None:
        """Queue a device-to-device ``cudaMemcpyAsync`` of ``src.size`` bytes (the core refuses
        overlapping ranges, which it leaves undefined)."""
        n = src.size
        if n == 0:
            return
        if n > dst.size:
            raise ValidationError(f"cannot copy {n} B into a view of {dst.size} B")
        self.guard()
        s, d = self._ptr(src), self._ptr(dst)
        with self.multistream.resolve(stream_id, (src, dst)) as res:
            self._memcpy(d, s, n, D2D, res.stream.ptr)

    def fill(self, stream_id: int, handle: Handle, pattern: bytes) -> None:
        """Queue the handle's region filled with ``pattern`` on the device, in stream order.

        A pattern of one repeated byte (zero included, any dtype) is one ``cudaMemsetAsync``. CuPy
        binds no ``cuMemsetD16/D32Async``, so a wider pattern is filled by copy-doubling on the
        device: a seed of at most :data:`FILL_SEED` bytes is uploaded through pinned memory, then
        ``cudaMemcpyAsync`` doubles it in place (device to device, never overlapping): about
        log2(size / seed) copies on the stream.
        """
        n = handle.size
        if n == 0:
            return
        self.guard()
        dst = self._ptr(handle)
        with self.multistream.resolve(stream_id, (handle,)) as res:
            stream = res.stream
            byte = repeated_byte(pattern)
            if byte is not None:
                self._memset(dst, byte, n, stream.ptr)
                return
            width = len(pattern)
            seed = min(n, FILL_SEED - FILL_SEED % width)
            self._upload(stream, dst, memoryview(pattern * (seed // width)))
            done = seed
            while done < n:
                step = min(done, n - done)
                self._memcpy(dst + done, dst, step, D2D, stream.ptr)
                done += step

    def reserve_staging(self, sizes: Sequence[int]) -> list[np.ndarray]:
        """Numpy arrays over pinned host memory; ``create`` copies them by DMA, with no extra copy."""
        checked = staging_sizes(sizes)
        self.guard()
        return [PinnedBuffer(self.pinned, n).array() if n else np.empty(0, dtype=np.uint8) for n in checked]

    # ------------------------------------------------------------------ tensors
    def tensor_strides(self, shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
        """Pitched strides (rows padded as CubeCL's pitched layout policy does)."""
        return pitched_strides(shape, itemsize, self.options.pitch_alignment)

    def create_tensor(self, array: Any, stream_id: int) -> Tensor:
        """A tensor holding a copy of a host or device array; pitched rows move with one 2-D copy."""
        cai = getattr(array, "__cuda_array_interface__", None)
        if cai is not None:
            return self._create_tensor_from_device(array, cai, stream_id)
        arr = np.asarray(array)
        dtype_of(arr.dtype)
        shape = tuple(int(s) for s in arr.shape)
        strides = self.tensor_strides(shape, arr.itemsize)
        rows = pitched_rows(shape, strides, arr.itemsize)
        if rows is None:
            return Tensor(self.create(arr, stream_id), shape, strides, arr.dtype)
        tensor = self.empty_tensor(shape, arr.dtype, stream_id)
        host = np.ascontiguousarray(arr)
        self.guard()
        dst = self._ptr(tensor.handle)
        with self.multistream.resolve(stream_id, (tensor.handle,)) as res:
            self._upload(res.stream, dst, memoryview(host.reshape(-1).view(np.uint8)), rows)  # type: ignore[arg-type]
        return tensor

    def _create_tensor_from_device(self, obj: Any, cai: dict[str, Any], stream_id: int) -> Tensor:
        src, shape, dtype, producer = self._device_source(cai)
        dtype_of(dtype)
        strides = self.tensor_strides(shape, dtype.itemsize)
        rows = pitched_rows(shape, strides, dtype.itemsize)
        if rows is None:
            return Tensor(self._create_from_device(obj, cai, stream_id), shape, strides, dtype)
        tensor = self.empty_tensor(shape, dtype, stream_id)
        self.guard()
        dst = self._ptr(tensor.handle)
        with self.multistream.resolve(stream_id, (tensor.handle,)) as res:
            self._after_producer(res.stream, producer)
            self._memcpy2d(
                dst, rows.pitch, src, rows.width, rows.width, rows.height, DEFAULT, res.stream.ptr
            )
            self.multistream.gc.register(self.streams.flush(res.stream), obj)
        return tensor

    def read_tensor_async(self, tensor: Tensor, stream_id: int) -> Future[np.ndarray]:
        """A future of a tensor as a C-contiguous array; pitched rows come back with one 2-D copy."""
        handle = self.check_handle(tensor.handle)
        shape, dtype = tensor.shape, tensor.dtype
        rows = pitched_rows(shape, tensor.strides, dtype.itemsize)
        if rows is None:
            if not tensor.is_contiguous:  # any other strides (a transposed view...): the generic gather
                return super().read_tensor_async(tensor, stream_id)
            rows = Rows(tensor.size * dtype.itemsize, 1, tensor.size * dtype.itemsize)
        n = rows.nbytes
        if n == 0:
            done: Future[np.ndarray] = Future()
            done.set_result(np.empty(shape, dtype=dtype))
            return done
        self.guard()
        src = self._ptr(handle)
        with self.multistream.resolve(stream_id, (handle,)) as res:
            stream = res.stream
            if n > self.options.staging_max_bytes:
                out = np.empty(shape, dtype=dtype)
                self._memcpy2d(
                    out.ctypes.data, rows.width, src, rows.pitch, rows.width, rows.height, D2H, stream.ptr
                )
                done = Future()
                done.set_result(out)
                return done
            block = self.pinned.take(n)
            self._memcpy2d(block.ptr, rows.width, src, rows.pitch, rows.width, rows.height, D2H, stream.ptr)
            event = self.streams.flush(stream)
        pool = self.pinned

        def finish() -> np.ndarray:
            out: np.ndarray = block.array[:n].view(dtype).reshape(shape).copy()
            pool.give(block)
            return out

        future: EventFuture[np.ndarray] = EventFuture(event, finish, self.streams.wait_event_sync)
        self._completer.submit(future)
        return future

    # ------------------------------------------------------------------ other devices
    def peer_copies_to(self, other: ComputeServer) -> bool:
        """Another CUDA server: a device copy (same device), a peer copy, or one staged in pinned memory."""
        return isinstance(other, CudaTransfers) and other is not self

    def copy_to_peer(
        self, src: Handle, other: ComputeServer, dst: Handle, stream_id: int, other_stream_id: int
    ) -> None:
        """``src`` into ``dst`` of another CUDA server: ``other``'s stream waits on an event of this
        server's stream, then copies (a device copy on one device; ``memcpyPeerAsync`` where peer
        access is possible, NVLink or PCIe P2P; else down into a pinned block on this side and up on
        the other, never through pageable memory). ``src`` is held until the copy completed, and this
        server's stream waits for it before its later work."""
        assert isinstance(other, CudaTransfers)
        n = src.size
        self.guard()
        s = self._ptr(src)
        staged = other.device != self.device and not self._peer_access(other)
        block = self.pinned.take(n) if staged else None
        with self.multistream.resolve(stream_id, (src,)) as res:
            if block is not None:
                self._memcpy(block.ptr, s, n, D2H, res.stream.ptr)
            ready = self.streams.flush(res.stream)
            source_stream = res.stream
        other.guard()
        try:
            d = other._ptr(dst)
            with other.multistream.resolve(other_stream_id, (dst,)) as ores:
                other.streams.wait_event(ores.stream, ready)
                if block is not None:
                    other._memcpy(d, block.ptr, n, H2D, ores.stream.ptr)
                elif other.device == self.device:
                    self._memcpy(d, s, n, D2D, ores.stream.ptr)
                else:
                    self._rt.memcpyPeerAsync(d, other.device, s, self.device, n, ores.stream.ptr)
                done = other.streams.flush(ores.stream)
        finally:
            self.guard()
        # This side's later work (a write to ``src``, in place collectives included) must wait for
        # the other side's read: the copy runs on the other server's stream.
        self.streams.wait_event(source_stream, done)
        if block is not None:
            self.pinned.give(block, done)
        self.multistream.gc.register(done, src.memory())

    def _peer_access(self, other: CudaTransfers) -> bool:
        """Whether the two devices reach each other's memory; enabled both ways on the first copy
        (cudaDeviceEnablePeerAccess: without it ``memcpyPeerAsync`` is staged by the driver)."""
        known: dict[int, bool] = self.__dict__.setdefault("_peers", {})
        found = known.get(other.device)
        if found is None:
            found = bool(self._rt.deviceCanAccessPeer(self.device, other.device)) and bool(
                self._rt.deviceCanAccessPeer(other.device, self.device)
            )
            if found:
                for server, peer in ((self, other.device), (other, self.device)):
                    server.guard()
                    try:
                        self._rt.deviceEnablePeerAccess(peer)
                    except self._rt.CUDARuntimeError as e:
                        if getattr(e, "status", None) != PEER_ACCESS_ALREADY_ENABLED:
                            raise
                self.guard()
            known[other.device] = found
        return found
