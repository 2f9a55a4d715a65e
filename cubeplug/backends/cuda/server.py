"""The CUDA server: launches on CUDA streams, device timing, synchronisation (docs/backends.md).

Every operation resolves its stream through the core MultiStream first: memory of another stream
that has queued work makes this stream wait on that stream's event (on the device), and stays pinned
until the operation completed. Buffers are bound as ``page address + slice offset + view offset``.
The copies (host transfers through pinned blocks, reads, pitched tensors, peer copies) are the
server's transfer layer, :class:`~cubeplug.backends.cuda.transfers.CudaTransfers`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from cubeplug.backends.cuda.collectives import NcclCollectives, load_nccl
from cubeplug.backends.cuda.compiler import DIALECTS, CudaProgram, compile_cuda
from cubeplug.backends.cuda.device import DeviceGuard, DeviceProperties, query
from cubeplug.backends.cuda.interop import cupy_view
from cubeplug.backends.cuda.launch import driver_available
from cubeplug.backends.cuda.options import CudaOptions, parse_options
from cubeplug.backends.cuda.replay import CudaReplay, capturable
from cubeplug.backends.cuda.storage import CudaStorage
from cubeplug.backends.cuda.stream import CudaStream, CudaStreams, map_cuda_error
from cubeplug.backends.cuda.transfers import D2D, D2H, SNAPSHOT_MIN, CudaTransfers
from cubeplug.plugin import (
    DTYPES,
    Buffer,
    Compiled,
    Config,
    CubeCount,
    CubeplugError,
    DeviceInfo,
    DeviceSetup,
    ExecutionMode,
    Handle,
    Kernel,
    LaunchError,
    MemoryProperties,
    MultiStream,
    QueueCode,
    Step,
    ValidationError,
    device_setup,
    unique_handles,
)

#: Byte alignment required of a bound view's offset: covers every scalar and float4/int4/double2.
OFFSET_ALIGNMENT = 16
#: ``SNAPSHOT_MIN`` under the name bench/bench_cuda.py reads here (the reads use transfers.py's).
_SNAPSHOT_MIN = SNAPSHOT_MIN


def describe_device(
    device: int, props: DeviceProperties, storage: CudaStorage, options: CudaOptions
) -> DeviceSetup:
    """What the core is told of ``cuda:device``: its identity, paging, capabilities and properties."""
    import cupy

    page = options.page_size(props.total_memory)
    launch_path = "cupy" if options.launch == "cupy" or not driver_available() else "driver"
    driver = f"CUDA driver {props.driver_version}, runtime {props.runtime_version}"
    return device_setup(
        DeviceInfo("cuda", device, props.name, vendor="NVIDIA", driver=driver),
        MemoryProperties(page, storage.alignment, props.total_memory),
        dtypes=DTYPES,
        multi_queue=True,
        device_timing=True,
        atomics=True,
        dynamic_count=True,
        staging=True,
        pitched_tensors=options.pitch_alignment > 0,
        offset_alignment=OFFSET_ALIGNMENT,
        max_cube_dim=props.max_block_dim,
        max_cube_threads=props.max_threads_per_block,
        max_cube_count=props.max_grid_dim,
        max_shared_bytes=props.shared_memory_per_block,  # the static __shared__ limit (48 KiB)
        properties={
            **props.as_dict(),
            "offset_alignment": OFFSET_ALIGNMENT,
            "pitch_alignment": options.pitch_alignment,
            "launch_path": launch_path,
            "cupy_version": cupy.__version__,
        },
    )


class CudaServer(CudaTransfers):
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
        from cupy.cuda import runtime

        config = config or Config()
        self.options = parse_options(config.backend_options("cuda"))
        streams = streams or CudaStreams(device)
        self.guard: DeviceGuard = streams.guard
        self.guard()
        props = query(device)
        setup = describe_device(device, props, storage, self.options)
        super().__init__(backend="cuda", storage=storage, config=config, **setup.server_args())
        self.device = device
        self.device_properties = props
        self.storage: CudaStorage = storage
        self.streams = streams
        self.multistream: MultiStream[CudaStream, Any] = MultiStream(
            streams, self.config.streaming.max_streams
        )
        self._ptrs = storage.ptrs
        self.open_transfers(runtime)
        self._count_block = self.pinned.allocate(64)
        self._errors: list[BaseException] = []
        self._closed = False

    # ------------------------------------------------------------------ helpers
    def _state(self, stream_id: int) -> CudaStream:
        return self.multistream.streams.get(stream_id).stream

    def _raise_errors(self) -> None:
        for errors in (self.multistream.gc.errors, self._errors):
            self.raise_async_error(errors)

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
                region = h.token.storage  # type: ignore[union-attr]
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

    def new_replay(self, steps: Sequence[Step]) -> CudaReplay | None:
        """The graph's steps as a CUDA graph (:mod:`~cubeplug.backends.cuda.replay`), queued once on a
        private stream in capture mode; None for steps a CUDA graph cannot hold."""
        import cupy

        if not capturable(list(steps)):
            return None
        self.guard()
        capture = CudaStream(cupy.cuda.Stream(non_blocking=True), self.device)
        capture.cupy.begin_capture()  # relaxed: other threads may allocate meanwhile
        try:
            for step in steps:
                if step.is_launch:
                    assert step.compiled is not None and step.count is not None
                    count = step.count
                    grid = (count.x, count.y, count.z)
                    self.check_count(*grid)
                    pointers = [self._ptr(h) for h in step.handles]
                    program: CudaProgram = step.compiled.program
                    program.launch(capture, grid, pointers, step.scalars)
                elif step.is_copy:
                    src, dst = step.handles
                    self._memcpy(self._ptr(dst), self._ptr(src), src.size, D2D, capture.ptr)
                else:
                    (handle,) = step.handles
                    self._memset(self._ptr(handle), step.pattern[0], handle.size, capture.ptr)
        except BaseException:
            capture.cupy.end_capture()  # a stream must leave capture mode whatever happened
            raise
        graph = capture.cupy.end_capture()
        return CudaReplay(graph, self.multistream, self.guard, unique_handles(steps))

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
            self._memcpy(block.ptr, src, 12, D2H, res.stream.ptr)
            self.streams.wait_event_sync(self.streams.flush(res.stream))
            x, y, z = (int(v) for v in block.array[:12].view(np.uint32))
        if x == 0 or y == 0 or z == 0:
            return None
        return (x, y, z)

    # ------------------------------------------------------------------ interop
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

    def dlpack_device(self) -> tuple[int, int]:
        """kDLCUDA and this device: an Array exports the zero-copy CuPy array of :meth:`as_native`."""
        return (2, self.device)


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

    def new_collectives(self) -> NcclCollectives | None:
        """NCCL (CollectiveUnavailableError where it is missing), unless ``[backends.cuda]
        collectives = "portable"`` asks for the portable collectives."""
        if self.options.collectives == "portable":
            return None
        return NcclCollectives(self, load_nccl())

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
