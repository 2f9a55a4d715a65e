"""The CUDA server: launches on CUDA streams, pinned transfers, pitched tensors, device timing.

Every operation resolves its stream through the core MultiStream first: memory of another stream
that has queued work makes this stream wait on that stream's event (on the device), and stays pinned
until the operation completed. Buffers are bound as ``page address + slice offset + view offset``.
Host transfers go through pinned blocks (:mod:`.staging`) with asynchronous copies on the stream;
a source that already is pinned (a ``reserve_staging`` buffer) is copied by DMA directly.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, cast

import numpy as np

from cubeplug.backends.cuda.compiler import DIALECTS, CudaProgram, compile_cuda
from cubeplug.backends.cuda.device import DeviceGuard, query
from cubeplug.backends.cuda.interop import cupy_view
from cubeplug.backends.cuda.launch import driver_available
from cubeplug.backends.cuda.layout import Rows, pitched_rows, pitched_strides
from cubeplug.backends.cuda.options import parse_options
from cubeplug.backends.cuda.staging import (
    PinnedBlock,
    PinnedBuffer,
    PinnedPool,
    StagedChunk,
    drain_chunks,
    plan_chunks,
)
from cubeplug.backends.cuda.storage import CudaStorage
from cubeplug.backends.cuda.stream import Completer, CudaStream, CudaStreams, EventFuture, map_cuda_error
from cubeplug.core.backend import Capabilities, DeviceInfo
from cubeplug.core.config import Config
from cubeplug.core.errors import CubeplugError, LaunchError, OutOfMemoryError, ValidationError
from cubeplug.core.handle import Handle, Tensor, contiguous_strides
from cubeplug.core.hostmem import host_address, host_buffer, host_copy
from cubeplug.core.kernel import DTYPES, Buffer, CubeCount, ExecutionMode, Kernel, dtype_of
from cubeplug.core.plans import QueueCode
from cubeplug.core.server import Compiled, ComputeServer
from cubeplug.core.storage import MemoryProperties
from cubeplug.core.stream import MultiStream, current_stream_id

#: Byte alignment required of a bound view's offset: covers every scalar and float4/int4/double2.
OFFSET_ALIGNMENT = 16
#: Sources this large and larger are checked for being pinned by someone else (cudaPointerGetAttributes).
_PINNED_PROBE_BYTES = 1 << 20
_H2D, _D2H, _D2D, _DEFAULT = 1, 2, 3, 4
#: Staged reads are split into pinned chunks of this many bytes (one event each): the host copies
#: one chunk out while the device copies the next.
_READ_CHUNK = 8 << 20
#: Reads of more than this many bytes are copied on the device and downloaded by the driver straight
#: into their results on the completer thread (CudaServer._read_snapshot): from about here that beats
#: a pinned block plus a host copy (H100, against CuPy's get(): 0.85 against 0.54 at 8 MiB, 0.96
#: against 0.73 at 16 MiB; bench/probes/cuda_large_read.py).
_SNAPSHOT_MIN = 4 << 20
#: cudaHostAllocPortable: pinned for every device's context, not only the current one.
_HOST_ALLOC_PORTABLE = 1
#: Held tokens of other streams are handed to the GC thread in batches of this many.


class CudaServer(ComputeServer):
    """Runs ``cuda`` and ``c`` kernels on one CUDA device through CuPy's runtime bindings."""

    dialects = DIALECTS
    per_stream_memory = True

    def __init__(
        self,
        storage: CudaStorage,
        streams: CudaStreams | None = None,
        config: Config | None = None,
        device: int = 0,
    ) -> None:
        import cupy
        from cupy.cuda import runtime

        config = config or Config()
        self.options = parse_options(config.backend_options("cuda"))
        streams = streams or CudaStreams(device)
        self.guard: DeviceGuard = streams._guard
        self.guard()
        props = query(device)
        page = self.options.page_size(props.total_memory)
        memory_properties = MemoryProperties(page, storage.alignment, props.total_memory)
        capabilities = Capabilities(
            dtypes=frozenset(DTYPES),
            multi_queue=True,
            device_timing=True,
            fp16=True,
            fp64=True,
            int64=True,
            atomics=True,
            dynamic_count=True,
            staging=True,
            pitched_tensors=self.options.pitch_alignment > 0,
            max_alloc_bytes=page,
            offset_alignment=OFFSET_ALIGNMENT,
            max_cube_dim=props.max_block_dim,
            max_cube_threads=props.max_threads_per_block,
            max_cube_count=props.max_grid_dim,
        )
        launch_path = "cupy" if self.options.launch == "cupy" or not driver_available() else "driver"
        info = DeviceInfo(
            "cuda",
            device,
            props.name,
            vendor="NVIDIA",
            driver=f"CUDA driver {props.driver_version}, runtime {props.runtime_version}",
        )
        properties = {
            **props.as_dict(),
            "max_page_size": page,
            "alignment": storage.alignment,
            "offset_alignment": OFFSET_ALIGNMENT,
            "pitch_alignment": self.options.pitch_alignment,
            "launch_path": launch_path,
            "cupy_version": cupy.__version__,
        }
        super().__init__(
            backend="cuda",
            info=info,
            storage=storage,
            memory_properties=memory_properties,
            capabilities=capabilities,
            config=config,
            properties=properties,
        )
        self.device = device
        self.device_properties = props
        self.storage: CudaStorage = storage
        self.streams = streams
        self.multistream: MultiStream[CudaStream, Any] = MultiStream(
            streams, self.config.streaming.max_streams
        )
        self._ptrs = storage.ptrs
        self._rt = runtime
        self._memcpy = runtime.memcpyAsync
        self._memcpy2d = runtime.memcpy2DAsync
        self.pinned = PinnedPool(
            lambda n: runtime.hostAlloc(n, _HOST_ALLOC_PORTABLE),
            runtime.freeHost,
            self.options.pinned_pool_bytes,
        )
        self._count_block = self.pinned.allocate(64)
        self._completer = Completer()
        #: The stream of the completer thread's downloads (made by the first large read).
        self._downloads: CudaStream | None = None
        self._errors: list[BaseException] = []
        self._closed = False
        #: Memory of other streams used by queued work, per stream slot, held until an event of this
        #: stream completes (the owner stream could otherwise reuse it while the work still runs).

    # ------------------------------------------------------------------ helpers
    def _ptr(self, handle: Handle) -> int:
        """The device address of a handle's first byte."""
        region = handle.memory().storage
        return self._ptrs[region.id] + region.offset + handle.start

    def _state(self, stream_id: int) -> CudaStream:
        return self.multistream.streams.get(stream_id).stream

    def _raise_errors(self) -> None:
        for errors in (self.multistream.gc.errors, self._errors):
            self.raise_async_error(errors)

    def _is_pinned(self, address: int, nbytes: int) -> bool:
        if self.pinned.contains(address, nbytes):
            return True
        if nbytes < _PINNED_PROBE_BYTES:
            return False
        try:
            return int(self._rt.pointerGetAttributes(address).type) == 1  # cudaMemoryTypeHost
        except Exception:
            return False

    # ------------------------------------------------------------------ compile and launch
    def compile(self, kernel: Kernel, dialect: str, mode: ExecutionMode) -> CudaProgram:
        """Compile with NVRTC for this device and build the kernel's launcher."""
        self.guard()
        return compile_cuda(
            kernel,
            dialect,
            mode,
            device=self.device,
            launch=self.options.launch,
            disk_cache=self.config.compilation.cache,
        )

    def execute(
        self,
        stream_id: int,
        compiled: Compiled,
        count: CubeCount,
        buffers: Sequence[Handle],
        scalars: Sequence[Any],
    ) -> None:
        """Queue a launch: pointers with offsets applied, after the buffers' other streams.

        With one device the guard runs only when a launch fails in a thread that never made the
        device current (the driver then reports no current context): the launch is tried again.
        """
        guard = self.guard
        if guard.multi:
            guard()
        ptrs = self._ptrs
        pointers = []
        try:
            for h in buffers:
                region = h._memory.storage  # type: ignore[union-attr]
                pointers.append(ptrs[region.id] + region.offset + h.start)
        except AttributeError:
            raise ValidationError("a buffer handle was dropped with .drop(); create a new handle") from None
        if count.handle is not None:
            grid = self._dynamic_grid(stream_id, count.handle)
            if grid is None:
                return
            self.check_count(*grid)  # as a static count is checked, before anything is queued
        else:
            grid = (count.x, count.y, count.z)
        program: CudaProgram = compiled.program
        ms = self.multistream
        state, analysis = ms.enter(stream_id, buffers)
        try:
            program.launch(state.stream, grid, pointers, scalars)
        except Exception as e:
            self._relaunch(program, state.stream, grid, pointers, scalars, e)
        if analysis is not None and analysis.pinned:
            ms.pin(analysis, state.stream)

    def _relaunch(
        self,
        program: CudaProgram,
        stream: CudaStream,
        grid: tuple[int, int, int],
        pointers: list[int],
        scalars: Sequence[Any],
        error: Exception,
    ) -> None:
        """A launch failed: in a thread that never made the one device current, make it current and
        launch again; otherwise (or if that fails too) raise the mapped error."""
        if isinstance(error, CubeplugError):
            raise error
        guard = self.guard
        if guard.multi or guard.ready():
            raise self._launch_error(program, grid, error) from error
        guard()  # this thread's first CUDA call: make the device's context current, retry
        try:
            program.launch(stream, grid, pointers, scalars)
        except CubeplugError:
            raise
        except Exception as e:
            raise self._launch_error(program, grid, e) from e

    def queue_code(self, kernel: Kernel, compiled: Compiled) -> QueueCode | None:
        """:meth:`execute`'s pointers, packing and ``cuLaunchKernel`` as source, for the kernel's
        checked plan; None with several devices (the guard runs before every launch there) or
        without CuPy's driver binding."""
        program: CudaProgram = compiled.program
        inline = getattr(program.launch, "inline_parts", None)
        parts = None if inline is None or self.guard.multi else inline()
        if parts is None:
            return None
        nbuf = len(kernel.buffer_params)
        lines: list[str] = []
        for i in range(nbuf):
            lines += [f"r{i} = t{i}.storage", f"p{i} = ptrs[r{i}.id] + r{i}.offset + b{i}.start"]
        values: list[str] = []
        counts = [0, 0]
        for p in kernel.params:
            is_buffer = isinstance(p, Buffer)
            values.append(f"{'p' if is_buffer else 's'}{counts[not is_buffer]}")
            counts[not is_buffer] += 1
        bx, by, bz = program.block
        pointers = ", ".join(f"p{i}" for i in range(nbuf))
        items = f"{pointers}, *scalars" if nbuf else "*scalars"
        if values:
            lines += [
                "try:",
                f"    pack({', '.join(values)})",
                "except PackErrors as e:  # unchecked plans only",
                f"    raise ValidationError(f'kernel arguments {{[{items}]!r}}: {{e}}') from e",
            ]
        lines += [
            "try:",
            f"    launch_kernel(function, count.x, count.y, count.z, {bx}, {by}, {bz}, 0, stream.ptr, "
            "params, 0)",
            "except Exception as e:",
            f"    owner._relaunch(program, stream, (count.x, count.y, count.z), [{pointers}], scalars, e)",
        ]
        namespace = {
            "ptrs": self._ptrs, "program": program, "ValidationError": ValidationError,
            "PackErrors": (struct.error, OverflowError, TypeError), **parts,
        }
        return QueueCode(lines, namespace, self.multistream)

    def _launch_error(
        self, program: CudaProgram, grid: tuple[int, int, int], error: Exception
    ) -> CubeplugError:
        limits = self.device_properties.max_grid_dim
        if any(g > m for g, m in zip(grid, limits, strict=True)):
            return LaunchError(
                f"kernel {program.name!r}: cube count {grid} exceeds this device's limits {limits}; "
                f"split the work or fold it into fewer cubes"
            )
        return map_cuda_error(error, f"launching kernel {program.name!r} with cube count {grid}")

    def _dynamic_grid(self, stream_id: int, handle: Handle) -> tuple[int, int, int] | None:
        """Read the three u32 of a dynamic count (CUDA has no indirect launch): a 12-byte download."""
        src = self._ptr(handle)
        block = self._count_block
        with self.multistream.resolve(stream_id, (handle,)) as res:
            self._memcpy(block.ptr, src, 12, _D2H, res.stream.ptr)
            self.streams.wait_event_sync(self.streams.flush(res.stream))
            x, y, z = (int(v) for v in block.array[:12].view(np.uint32))
        if x == 0 or y == 0 or z == 0:
            return None
        return (x, y, z)

    # ------------------------------------------------------------------ transfers
    def _h2d(self, stream: CudaStream, dst: int, src: int, n: int, rows: Rows | None) -> None:
        if rows is None:
            self._memcpy(dst, src, n, _H2D, stream.ptr)
        else:
            self._memcpy2d(dst, rows.pitch, src, rows.width, rows.width, rows.height, _H2D, stream.ptr)

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
            self._memcpy(dst, src, n, _DEFAULT, res.stream.ptr)
            self.multistream.gc.register(self.streams.flush(res.stream), obj)
        return handle

    def read(self, stream_id: int, handles: list[Handle]) -> Future[list[bytes]]:
        """A future of each handle's bytes (bytearrays), ordered after the stream's earlier work.

        Up to :data:`_SNAPSHOT_MIN` bytes in all (and ``staging_max_bytes``): async copies into
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
            if total > _SNAPSHOT_MIN or total > self.options.staging_max_bytes:
                return self._read_snapshot(stream_id, res.stream, srcs, sizes)
            return self._read_pinned(res.stream, srcs, sizes)

    def _read_pinned(self, stream: CudaStream, srcs: list[int], sizes: list[int]) -> Future[list[bytes]]:
        """Async copies into pooled pinned memory (one block, or chunks of :data:`_READ_CHUNK` with an
        event each); the completer thread copies them into the results."""
        total = sum(sizes)
        pool, wait = self.pinned, self.streams.wait_event_sync
        if total > _READ_CHUNK:
            chunks = self._read_staged(stream, srcs, sizes)
            event = chunks[0].event

            def finish() -> list[bytes]:
                return cast("list[bytes]", drain_chunks(chunks, sizes, wait, pool.give))

        else:  # one chunk (every small read): the same with less Python
            block = pool.take(total)
            offset = 0
            for src, n in zip(srcs, sizes, strict=True):
                if n:
                    self._memcpy(block.ptr + offset, src, n, _D2H, stream.ptr)
                offset += n
            event = self.streams.flush(stream)

            def finish() -> list[bytes]:
                array, out, at = block.array, [], 0
                for n in sizes:
                    out.append(host_copy(array[at : at + n]))
                    at += n
                pool.give(block)
                return cast("list[bytes]", out)

        future: EventFuture[list[bytes]] = EventFuture(event, finish, wait)
        self._completer.submit(future)
        return future

    def _read_staged(self, stream: CudaStream, srcs: list[int], sizes: list[int]) -> list[StagedChunk]:
        """Queue the copies of a staged read into pinned chunks, each followed by its event."""
        chunks: list[StagedChunk] = []
        taken: list[PinnedBlock] = []
        try:
            for nbytes, pieces in plan_chunks(sizes, _READ_CHUNK):
                block = self.pinned.take(nbytes)
                taken.append(block)
                for item, at, into, n in pieces:
                    self._memcpy(block.ptr + into, srcs[item] + at, n, _D2H, stream.ptr)
                chunks.append(StagedChunk(block, pieces, self.streams.flush(stream)))
        except BaseException as e:
            try:  # blocks with queued copies are reused once the stream passed them
                event = self.streams.flush(stream)
            except BaseException:
                event = None  # the context is gone: they stay out of the pool until it closes
            if event is not None:
                for block in taken:
                    self.pinned.give(block, event)
            if isinstance(e, self._rt.CUDARuntimeError):
                raise map_cuda_error(e, "a device-to-host copy") from e
            raise
        return chunks

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
                    self._memcpy(base + at, src, n, _D2D, stream.ptr)
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
                        memcpy(host_address(memoryview(buf)), base + at, n, _D2H, downloads.ptr)
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
                    self._memcpy(host_address(memoryview(buf)), src, n, _D2H, stream.ptr)
            event = self.streams.flush(stream)
        except self._rt.CUDARuntimeError as e:
            raise map_cuda_error(e, "a device-to-host copy") from e
        result = cast("list[bytes]", out)
        future: EventFuture[list[bytes]] = EventFuture(event, lambda: result, self.streams.wait_event_sync)
        self._completer.submit(future)
        return future

    def copy(self, stream_id: int, src: Handle, dst: Handle) -> None:
        """Queue a device-to-device copy of ``src.size`` bytes."""
        n = src.size
        if n == 0:
            return
        if n > dst.size:
            raise ValidationError(f"cannot copy {n} B into a view of {dst.size} B")
        self.guard()
        s, d = self._ptr(src), self._ptr(dst)
        with self.multistream.resolve(stream_id, (src, dst)) as res:
            self._memcpy(d, s, n, _D2D, res.stream.ptr)

    def reserve_staging(self, sizes: Sequence[int]) -> list[np.ndarray]:
        """Numpy arrays over pinned host memory; ``create`` copies them by DMA, with no extra copy."""
        out = []
        for size in sizes:
            if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
                raise ValidationError(f"staging sizes are non-negative byte counts, got {size!r}")
        self.guard()
        for size in sizes:
            out.append(PinnedBuffer(self.pinned, int(size)).array() if size else np.empty(0, dtype=np.uint8))
        return out

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
                dst, rows.pitch, src, rows.width, rows.width, rows.height, _DEFAULT, res.stream.ptr
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
                    out.ctypes.data, rows.width, src, rows.pitch, rows.width, rows.height, _D2H, stream.ptr
                )
                done = Future()
                done.set_result(out)
                return done
            block = self.pinned.take(n)
            self._memcpy2d(block.ptr, rows.width, src, rows.pitch, rows.width, rows.height, _D2H, stream.ptr)
            event = self.streams.flush(stream)
        pool = self.pinned

        def finish() -> np.ndarray:
            out = block.array[:n].view(dtype).reshape(shape).copy()
            pool.give(block)
            return out

        future: EventFuture[np.ndarray] = EventFuture(event, finish, self.streams.wait_event_sync)
        self._completer.submit(future)
        return future

    # ------------------------------------------------------------------ interop and other devices
    def export_pointer(self, handle: Handle, stream_id: int) -> tuple[int, CudaStream]:
        """A handle's device address and the stream after whose queued work its bytes are final."""
        self.check_handle(handle)
        self.guard()
        ptr = self._ptr(handle)
        with self.multistream.resolve(stream_id, (handle,)) as res:
            stream = res.stream
        return ptr, stream

    def as_native(self, handle: Handle, dtype: Any, shape: Sequence[int] | None, stream_id: int) -> Any:
        """A zero-copy ``cupy.ndarray`` over a handle, ordered after this stream's queued work."""
        return cupy_view(self, handle, dtype, shape, stream_id)

    def transfer_to(self, handle: Handle, other: ComputeServer, stream_id: int) -> Handle | None:
        """A copy of ``handle`` on another CUDA server (peer copy across devices); None for other backends."""
        if not isinstance(other, CudaServer) or other is self:
            return None
        self.check_handle(handle)
        n = handle.size
        other_sid = other.stream_id(current_stream_id())
        dst = other.empty(n, other_sid)
        if n == 0:
            return dst
        self.guard()
        src = self._ptr(handle)
        with self.multistream.resolve(stream_id, (handle,)) as res:
            ready = self.streams.flush(res.stream)
        other.guard()
        try:
            d = other._ptr(dst)
            with other.multistream.resolve(other_sid, (dst,)) as ores:
                other.streams.wait_event(ores.stream, ready)
                if other.device == self.device:
                    self._memcpy(d, src, n, _D2D, ores.stream.ptr)
                else:
                    self._rt.memcpyPeerAsync(d, other.device, src, self.device, n, ores.stream.ptr)
                done = other.streams.flush(ores.stream)
        finally:
            self.guard()
        self.multistream.gc.register(done, handle.memory())
        return dst

    # ------------------------------------------------------------------ timing
    def device_marker(self, stream_id: int) -> Any:
        """A timing event recorded on the stream."""
        return self.streams.record(self._state(stream_id), timing=True)

    def device_elapsed(self, start: Any, end: Any) -> float:
        """Seconds between two timing events."""
        self.streams.wait_event_sync(end)
        return float(self._rt.eventElapsedTime(start.ptr, end.ptr)) / 1e3

    # ------------------------------------------------------------------ synchronisation
    def flush(self, stream_id: int) -> None:
        """CUDA submits work at once: release deferred frees and raise recorded errors."""
        if self.storage.has_pending:
            self.guard()
            self.storage.flush()
        self._raise_errors()

    def sync(self, stream_id: int) -> None:
        """Block until the stream's work completed."""
        self.guard()
        self.multistream.sync(stream_id)
        self._raise_errors()

    def sync_begin(self, stream_id: int) -> Callable[[], None]:
        """Record the stream's event under the client's lock; the returned wait runs outside it."""
        self.guard()
        event = self.streams.flush(self._state(stream_id))
        streams = self.streams

        def wait() -> None:
            streams.wait_event_sync(event)
            self._raise_errors()

        return wait

    def sync_all(self) -> None:
        """Block until every stream's work completed and pinned memory was released."""
        self.guard()
        self.multistream.sync_all()
        self._raise_errors()

    def memory_cleanup(self) -> None:
        """Free unused pages and idle pinned blocks."""
        self.guard()
        super().memory_cleanup()
        self.pinned.trim()

    def close(self) -> None:
        """Wait for the device, stop the helper threads and free pinned and device memory."""
        if self._closed:
            return
        self._closed = True
        self.guard()
        try:
            self.multistream.sync_all()
        except Exception as e:  # the context may be lost; free what can be freed
            self._errors.append(e)
        self.multistream.close()
        self._completer.close()
        self.pinned.close()
        self.storage.close()
