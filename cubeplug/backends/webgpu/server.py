"""The WebGPU server: virtual streams on the core scheduler, batched into one submit per flush.

A launch resolves its bind group and pipeline (:mod:`~cubeplug.backends.webgpu.bindings`, cached
per binding set: page buffers, offsets and sizes), packs its scalars and queues a task; nothing
reaches wgpu until the stream is flushed, read or synced, when
:class:`~cubeplug.backends.webgpu.queue.WgpuQueue` encodes the whole batch at once.
Everything that could fail in the encoder is checked when the task is queued, so a bad argument is
an error at the call that made it and never poisons a batch.

A lost device (see :mod:`~cubeplug.backends.webgpu.health`) is DeviceLostError at the call that
notices it and at every later call that would touch the device.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, NoReturn, cast

from cubeplug.backends.webgpu.bindings import BindGroups, up4
from cubeplug.backends.webgpu.compiler import COPY_KERNEL, DIALECTS, WgslCompiler, WgslProgram, wgsl_dtypes
from cubeplug.backends.webgpu.queue import (
    CLEAR,
    COPY,
    COPY_VIA,
    DISPATCH,
    INDIRECT,
    READ,
    TIMESTAMP,
    WRITE,
    WgpuQueue,
)
from cubeplug.backends.webgpu.reads import ReadFuture
from cubeplug.backends.webgpu.replay import TaskRecorder, WgpuReplay, replay_tasks
from cubeplug.backends.webgpu.storage import WgpuStorage
from cubeplug.plugin import (
    Compiled,
    CompileError,
    ComputeServer,
    Config,
    CubeCount,
    CubeplugError,
    DeviceInfo,
    DeviceSetup,
    ExecutionMode,
    Handle,
    Kernel,
    Scheduler,
    StagedRead,
    Step,
    ValidationError,
    describe,
    device_setup,
    unique_handles,
)

#: Tasks a virtual stream queues before it is submitted without an explicit flush.
MAX_TASKS = 128
#: Seconds after which a stream's batch submits itself at its next task: the GPU starts while the
#: host queues the rest. With batches of MAX_TASKS only, std ops of 256 MiB on the H200 took
#: 1.10-1.19x their device time when timed on the host; batches of 2, 4, 8... after each flush
#: (instead of an age) made 1000 tiny launches 18-33 % slower against raw batched wgpu.
MAX_AGE = 0.5e-3
#: The smallest scratch buffer of copies within one page (it grows to the largest such copy).
MIN_SCRATCH = 64 << 10


def _check_count(compiled: Compiled, buffers: Sequence[Handle]) -> None:
    """ValidationError unless ``buffers`` has one handle per buffer param of the kernel."""
    expected = compiled.program.layout.n_buffers
    if len(buffers) != expected:
        raise ValidationError(f"kernel {compiled.kernel.name!r} takes {expected} buffers, got {len(buffers)}")


def describe_device(device: int, storage: WgpuStorage) -> DeviceSetup:
    """What the core is told of ``webgpu:device``: its adapter, paging, capabilities (from the
    device's limits and features) and properties."""
    import wgpu

    gpu = storage.device
    limits = dict(gpu.limits)
    features = frozenset(str(f) for f in gpu.features)
    adapter = storage.adapter
    info_dict = dict(adapter.info) if adapter is not None else dict(getattr(gpu, "adapter_info", {}) or {})
    dtypes = wgsl_dtypes(features)
    timestamps = "timestamp-query" in features
    max_groups = int(limits["max-compute-workgroups-per-dimension"])
    name = str(info_dict.get("device") or "WebGPU adapter")
    api = str(info_dict.get("backend_type", "?"))
    driver = f"{api} {info_dict.get('description', '')}, wgpu {wgpu.__version__}".strip()
    return device_setup(
        DeviceInfo("webgpu", device, name, vendor=str(info_dict.get("vendor", "")), driver=driver),
        storage.properties,
        dtypes=dtypes,
        multi_queue=False,
        device_timing=timestamps,
        atomics=True,
        dynamic_count=True,
        staging=False,
        pitched_tensors=False,
        offset_alignment=storage.alignment,
        max_cube_dim=(
            int(limits["max-compute-workgroup-size-x"]),
            int(limits["max-compute-workgroup-size-y"]),
            int(limits["max-compute-workgroup-size-z"]),
        ),
        max_cube_threads=int(limits["max-compute-invocations-per-workgroup"]),
        max_cube_count=(max_groups, max_groups, max_groups),
        max_shared_bytes=int(limits["max-compute-workgroup-storage-size"]),
        properties={
            "backend_type": api,
            "adapter_type": info_dict.get("adapter_type", ""),
            "description": info_dict.get("description", ""),
            "wgpu_version": wgpu.__version__,
            "features": sorted(features),
            "limits": limits,
            "timestamp_query": timestamps,
            "shader_f16": "f16" in dtypes,
        },
    )


class WgpuServer(ComputeServer):
    """Runs ``wgsl`` kernels on one GPUDevice through the single-queue scheduler."""

    dialects = DIALECTS
    per_stream_memory = False

    def __init__(self, storage: WgpuStorage, config: Config | None = None, device: int = 0) -> None:
        import wgpu

        gpu = storage.device
        setup = describe_device(device, storage)
        super().__init__(backend="webgpu", storage=storage, config=config, **setup.server_args())
        caps = setup.capabilities
        self.gpu = gpu
        #: Whether the device was lost (shared with the storage and the queue).
        self.health = storage.health
        storage.health.name = setup.info.name
        self._pages = storage.buffers
        self._max_groups = caps.max_cube_count[0]
        features = frozenset(str(f) for f in gpu.features)
        max_bindings = int(gpu.limits["max-storage-buffers-per-shader-stage"])
        self.compiler = WgslCompiler(gpu, features, max_bindings)
        self.queue = WgpuQueue(gpu, storage.alignment, caps.device_timing, self.health)
        self.scheduler = Scheduler(
            self.queue.submit,
            max_streams=self.config.streaming.max_streams,
            max_tasks=MAX_TASKS,
            # A CPU adapter (lavapipe) runs one submission at a time on the host's own cores: the
            # host would wait at each early submit for work that cannot overlap with it anyway.
            max_age=None if self.properties.get("adapter_type") == "CPU" else MAX_AGE,
            errors=self.queue.errors,
            describe=WgpuQueue.describe,
            on_drop=WgpuQueue.fail_reads,
        )
        self.queue.committed = self.scheduler.committed  # the queue says how far a batch got
        #: The launches' bind groups and which pipeline each was made for.
        self.bind_groups = BindGroups(gpu, self.compiler, self.health, self.queue.arena)
        self._bind_groups = self.bind_groups.cache  # the launch path's lookup, without an attribute
        self._empty = gpu.create_buffer(size=64, usage=wgpu.BufferUsage.STORAGE)
        self._copy: WgslProgram | None = None
        #: The scratch buffer of copies within one page (:meth:`_scratch_for`); None until one needs it.
        self._scratch: Any = None
        storage.on_dealloc = self.bind_groups.forget_page
        self._closed = False

    # ------------------------------------------------------------------ device loss
    def _lost_or(self, error: BaseException) -> NoReturn:
        """Raise DeviceLostError for a lost-device ``error``, else ``error`` itself."""
        self.health.raise_lost(error)
        raise error

    # ------------------------------------------------------------------ kernels and bind groups
    def compile(self, kernel: Kernel, dialect: str, mode: ExecutionMode) -> WgslProgram:
        """Compile a ``wgsl``-dialect source to a pipeline."""
        import wgpu

        self.health.check()
        try:
            return self.compiler.compile(kernel, dialect, mode)
        except CompileError as e:
            if e.__cause__ is not None:
                self.health.raise_lost(e.__cause__)
            raise
        except wgpu.GPUError as e:
            self._lost_or(e)

    def _regions(self, buffers: Sequence[Handle]) -> list[tuple[Any, int, int]]:
        """The ``(page buffer, offset, size)`` each handle binds (an empty one binds a buffer of
        the server's own, as WebGPU binds no zero-size region)."""
        pages = self._pages
        regions = []
        for h in buffers:
            self.check_handle(h, "buffer")
            st = h.memory().storage
            offset = st.offset + h.start
            if offset % self._align:
                raise ValidationError(
                    f"a buffer is bound at byte offset {h.start}; webgpu needs offsets aligned to "
                    f"{self._align} B"
                )
            if h.size == 0:
                regions.append((self._empty, 0, self._empty.size))
            else:
                regions.append((pages[st.id], offset, h.size))
        return regions

    def binds_read_only(self, compiled: Compiled, buffers: Sequence[Handle]) -> bool:
        """Whether a launch of ``compiled`` with ``buffers`` binds its ``read`` buffers read-only
        (with its read-only pipeline): when none of them lies in a page that a written buffer binds.

        The memory pools cut small reservations from shared pages; those above the memory
        properties' ``max_slice_size`` (8 MiB) get pages of their own.
        """
        program: WgslProgram = compiled.program
        _check_count(compiled, buffers)
        if not self.bind_groups.may_bind_read_only(program, self._regions(buffers)):
            return False
        built = program.read_only_pipeline  # None: not built yet, and asking does not build it
        return built is None or built[0] is not program.pipeline

    # ------------------------------------------------------------------ launches
    def execute(
        self,
        stream_id: int,
        compiled: Compiled,
        count: CubeCount,
        buffers: Sequence[Handle],
        scalars: Sequence[Any],
    ) -> None:
        """Queue a dispatch; its bind group and scalar block are ready before it is queued."""
        if self.health.reason is not None:
            raise self.health.error()
        program: WgslProgram = compiled.program
        buffers = tuple(buffers)
        key_list = [program.bindings_id]
        try:
            for h in buffers:
                st = h.token.storage  # type: ignore[union-attr]
                key_list += (st.id, st.offset + h.start, h.size)
        except AttributeError:
            for h in buffers:
                self.check_handle(h, "buffer")
            raise
        key = tuple(key_list)
        entry = self._bind_groups.get(key)
        if entry is None:
            _check_count(compiled, buffers)
            entry = self.bind_groups.entry(program, key, self._regions(buffers))
        bind_group, read_only = entry
        pipeline = program.pipeline
        if read_only:
            # Another program of the same bindings may have made the bind group: build this one's.
            built = program.read_only_pipeline
            pipeline = built[0] if built is not None else self.bind_groups.read_only(program)[0]
            if pipeline is program.pipeline:  # its read-only pipeline failed: a bind group to match
                bind_group = self.bind_groups.make(program, program.layout, self._regions(buffers))
        packer = program.scalars
        try:
            block = packer.packer.pack(*scalars) if packer is not None else None
        except (struct.error, OverflowError, TypeError) as e:
            raise _scalar_error(compiled.kernel, scalars, e) from e
        handle = count.handle
        if handle is None:
            # The count is within the device's limits: the plans and the general path checked it.
            x, y, z = count.x, count.y, count.z
            # Queued work holds the slice tokens, never the user's handles (which may be dropped).
            keep = tuple([h.token for h in buffers])
            self.scheduler.register(
                stream_id, (DISPATCH, pipeline, bind_group, block, x, y, z, keep), buffers
            )
            return
        st = handle.memory().storage
        offset = st.offset + handle.start
        if offset % 4:
            raise ValidationError(
                f"CubeCount.dynamic needs its handle at a 4-byte aligned offset, got offset {handle.start}"
            )
        keep = (*[h.token for h in buffers], handle.token)
        task = (INDIRECT, pipeline, bind_group, block, self._pages[st.id], offset, keep)
        self.scheduler.register(stream_id, task, (*buffers, handle))

    def new_replay(self, steps: Sequence[Step]) -> WgpuReplay | None:
        """The graph's steps as the queue tasks the eager calls would queue, made once
        (:mod:`~cubeplug.backends.webgpu.replay`); None for a dynamic count (read at each launch)."""
        import wgpu

        if any(step.dynamic for step in steps):
            return None
        self.health.check()
        recorder = TaskRecorder()
        # The server's own execute, copy and fill build the tasks (one implementation of each):
        # while they run, the scheduler they queue on is the recorder.
        scheduler, self.scheduler = self.scheduler, recorder  # type: ignore[assignment]
        try:
            for step in steps:
                if step.is_launch:
                    assert step.compiled is not None and step.count is not None
                    self.execute(0, step.compiled, step.count, step.handles, step.scalars)
                elif step.is_copy:
                    self.copy(0, step.handles[0], step.handles[1])
                else:
                    self.fill(0, step.handles[0], step.pattern)
        finally:
            self.scheduler = scheduler

        def upload(data: bytes) -> Any:
            try:
                return self.gpu.create_buffer_with_data(data=data, usage=wgpu.BufferUsage.COPY_SRC)
            except wgpu.GPUError as e:
                self._lost_or(e)

        tasks = replay_tasks(recorder.tasks, upload)
        return WgpuReplay(scheduler, self.health, tasks, unique_handles(steps))

    def _copy_program(self) -> WgslProgram:
        if self._copy is None:
            self._copy = self.compile_kernel(COPY_KERNEL, ExecutionMode.UNCHECKED).program
        return self._copy

    def _copy_bytes(
        self, stream_id: int, src: tuple[Any, int], dst: tuple[Any, int], nbytes: int, keep: tuple[Any, ...]
    ) -> None:
        """Queue the byte-copy kernel: any offsets and sizes, and within one page."""
        program = self._copy_program()
        align = self._align
        (sbuf, soff), (dbuf, doff) = src, dst
        sbase, dbase = soff - soff % align, doff - doff % align
        sshift, dshift = soff - sbase, doff - dbase
        words = (dshift + nbytes + 3) // 4
        bind_group = self.bind_groups.make(
            program, program.layout, [(sbuf, sbase, up4(sshift + nbytes)), (dbuf, dbase, words * 4)]
        )
        assert program.scalars is not None
        block = program.scalars.packer.pack(sshift, dshift, nbytes, words)
        groups = min(self._max_groups, -(-words // 256))
        tokens = tuple(h.memory() if isinstance(h, Handle) else h for h in keep)
        task = (DISPATCH, program.pipeline, bind_group, block, groups, 1, 1, tokens)
        self.scheduler.register(stream_id, task, [h for h in keep if isinstance(h, Handle)])

    # ------------------------------------------------------------------ transfers
    def _region(self, handle: Handle) -> tuple[Any, int, Any]:
        st = handle.memory().storage
        return self._pages[st.id], st.offset + handle.start, st

    def _padding_free(self, handle: Handle, st: Any, nbytes: int) -> bool:
        """True when the bytes up to the next 4-byte boundary after the view are slice padding."""
        return nbytes % 4 == 0 or (handle.end == 0 and handle.start + up4(nbytes) <= st.size)

    def create(self, data: Any, stream_id: int) -> Handle:
        """Fresh memory has no queued work on it, so its bytes are written now (queue order)."""
        self.health.check()
        view = self.as_bytes(data)
        handle = self.empty(view.nbytes, stream_id)
        if view.nbytes:
            self._write(stream_id, handle, view, direct=True)
        return handle

    def write(self, stream_id: int, handle: Handle, data: memoryview) -> None:
        """Queue a copy of host bytes into the handle's region, after the stream's queued work."""
        self.health.check()
        sched = self.scheduler
        last = handle.memory().stream
        direct = not sched.pending(stream_id) and (last < 0 or not sched.pending(last))
        self._write(stream_id, handle, data, direct=direct)

    def _write(self, stream_id: int, handle: Handle, data: memoryview, direct: bool) -> None:
        import wgpu

        buffer, offset, st = self._region(handle)
        n = data.nbytes
        if n == 0:
            return
        if offset % 4 == 0 and self._padding_free(handle, st, n):
            if n % 4:
                data = memoryview(bytes(data) + bytes(-n % 4))
            if direct:
                try:
                    self.queue.queue.write_buffer(buffer, offset, data)
                except wgpu.GPUError as e:
                    self._lost_or(e)
            else:
                task = (WRITE, buffer, offset, bytes(data), handle.memory())
                self.scheduler.register(stream_id, task, (handle,))
            return
        shift = offset % 4
        staged = bytes(shift) + bytes(data) + bytes(-(shift + n) % 4)
        try:
            temp = self.gpu.create_buffer_with_data(data=staged, usage=wgpu.BufferUsage.STORAGE)
        except wgpu.GPUError as e:
            self._lost_or(e)
        self._copy_bytes(stream_id, (temp, shift), (buffer, offset), n, (handle, temp))

    def read(self, stream_id: int, handles: list[Handle]) -> Future[list[bytes]]:
        """Queue copies into a staging buffer after the stream's work, submit, and map after the submit
        (first raising an asynchronous error: a dropped batch says so at the next read too)."""
        return self._read(stream_id, handles, lend=False)

    def read_staged(self, handle: Handle, stream_id: int) -> Future[StagedRead]:
        """``handle``'s bytes in a mapped MAP_READ staging buffer, lent (mapped) until the copy to
        another backend that writes from it releases it, which unmaps it and gives it back: the
        read's copy out of the mapping is left out."""
        if handle.size == 0:
            return super().read_staged(handle, stream_id)
        return cast("Future[StagedRead]", self._read(stream_id, [handle], lend=True))

    def _read(self, stream_id: int, handles: list[Handle], *, lend: bool) -> Future[list[bytes]]:
        self.health.check()
        self.raise_async_error(self.queue.errors)
        parts: list[tuple[int, int]] = []
        regions: list[tuple[Any, int, int]] = []
        pos = 0
        for h in handles:
            size = h.size
            if size == 0:
                parts.append((pos, 0))
                continue
            buffer, offset, _ = self._region(h)
            base = offset - offset % 4
            span = up4(offset - base + size)
            regions.append((buffer, base, span))
            parts.append((pos + offset - base, size))
            pos += span
        future = ReadFuture(parts, pos, self.queue.staging, lend)
        keep = [h.memory() for h in handles]
        self.scheduler.register(stream_id, (READ, regions, future, keep), handles)
        self.scheduler.flush(stream_id)
        return future

    def copy(self, stream_id: int, src: Handle, dst: Handle) -> None:
        """Queue a device copy with ``copy_buffer_to_buffer``, in stream order.

        Between pages it is one ``copy_buffer_to_buffer``; within one page (which that command
        refuses: its source and destination must differ) two in one encoder, through the server's
        scratch buffer. It needs offsets that are multiples of 4 and a size that is one (or ends
        where the slice's padding may be written too); any other copy falls back to the byte-copy
        kernel. The core refuses overlapping ranges.
        """
        self.health.check()
        sbuf, soff, _ = self._region(src)
        dbuf, doff, dst_st = self._region(dst)
        n = src.size
        if soff % 4 == 0 and doff % 4 == 0 and self._padding_free(dst, dst_st, n):
            size = up4(n)
            if sbuf is not dbuf:
                task: tuple[Any, ...] = (COPY, sbuf, soff, dbuf, doff, size, src.memory(), dst.memory())
            else:
                scratch = self._scratch_for(size)
                task = (COPY_VIA, sbuf, soff, dbuf, doff, size, scratch, (src.memory(), dst.memory()))
            self.scheduler.register(stream_id, task, (src, dst))
            return
        self._copy_bytes(stream_id, (sbuf, soff), (dbuf, doff), n, (src, dst))

    def _scratch_for(self, nbytes: int) -> Any:
        """The scratch buffer of copies within one page, at least ``nbytes`` large.

        One per server, shared by every such copy: the queue runs copies in order, each through the
        scratch and out again before the next. It grows to the next power of two when a larger copy
        comes; the smaller one is dropped, not destroyed (queued copies may still name it; wgpu
        releases it once they let go). It is no page of the pools, so it is not in the memory usage.
        """
        import wgpu

        scratch = self._scratch
        if scratch is not None and scratch.size >= nbytes:
            return scratch
        size = max(MIN_SCRATCH, 1 << (nbytes - 1).bit_length())
        usage = wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        try:
            self._scratch = self.gpu.create_buffer(size=size, usage=usage)
        except wgpu.GPUError as e:
            self.health.raise_lost(e)
            try:  # a power of two may be too much: the exact size, once
                self._scratch = self.gpu.create_buffer(size=nbytes, usage=usage)
            except wgpu.GPUError as e2:
                self._lost_or(e2)
        return self._scratch

    def fill(self, stream_id: int, handle: Handle, pattern: bytes) -> None:
        """Queue the handle's region filled with ``pattern``, in stream order.

        Zeros are ``clear_buffer`` in the stream's encoder, when the region's offset and size are
        multiples of 4 (what the command takes); any other pattern, and zeros elsewhere, is a
        ``write`` of the repeated pattern (``queue.write_buffer`` when aligned). WebGPU has no command
        that fills with a value, and a fill kernel would cost a pipeline and a bind group per region
        for what the queue's own staging copy does; an unaligned region takes the write's byte-copy
        kernel path.
        """
        self.health.check()
        buffer, offset, _ = self._region(handle)
        n = handle.size
        if not any(pattern) and offset % 4 == 0 and n % 4 == 0:
            self.scheduler.register(stream_id, (CLEAR, buffer, offset, n, handle.memory()), (handle,))
            return
        self.write(stream_id, handle, memoryview(pattern * (n // len(pattern))))

    # ------------------------------------------------------------------ synchronisation and timing
    def flush(self, stream_id: int) -> None:
        """Submit the stream's queued tasks as one batch."""
        self.scheduler.flush(stream_id)
        self.raise_async_error(self.queue.errors)
        self.health.check()

    def release_queued(self, wait: bool) -> bool:
        """Submit every stream's queued tasks (``wait`` or not): a queued task holds its
        bindings' memory until its batch is submitted (the submitted command buffers then hold the
        GPUBuffers), so the outputs a loop dropped meanwhile become free to lend again. The device
        queue runs in submission order, so the next user of that memory comes after them.

        Without it, on an H100 a loop of ``std.transpose`` of 16k x 16k f32 got a new 1 GiB page
        per call, each zero-initialised by wgpu at its first use: rounds of 1.2-6.2 ms a call for
        0.81 ms on the device; with it, 0.80-0.82 ms (``bench/results/std-bench-*-h100-*-2026-11-26.json``,
        docs/std.md)."""
        scheduler = self.scheduler  # a TaskRecorder while a graph is built: it holds nothing
        return isinstance(scheduler, Scheduler) and scheduler.flush_all() > 0

    def sync(self, stream_id: int) -> None:
        """Submit the stream's tasks and wait until the device ran everything submitted."""
        self.sync_begin(stream_id)()

    def sync_begin(self, stream_id: int) -> Callable[[], None]:
        """Submit the stream's tasks and a fence under the client's lock; the returned wait needs no lock.

        The fence (a staging-buffer mapping, :meth:`WgpuQueue.fence_task`) is the stream's last task,
        so it rides in the stream's own submit: a second submit would wait for the device under the
        lock on drivers that keep one submission in flight (lavapipe). wgpu-py resolves mappings on
        its per-device poll thread, concurrently with other threads' wgpu calls, and the wait calls
        no wgpu function but a probe for a lost device, so it needs no lock of the backend either
        (see :mod:`~cubeplug.backends.webgpu.reads`). It raises DeviceLostError if the device goes
        meanwhile, then the first asynchronous error.
        """
        self.health.check()
        task, fence = self.queue.fence_task()
        self.scheduler.register(stream_id, task)
        self.scheduler.flush(stream_id)
        errors = self.queue.errors

        def wait() -> None:
            try:
                fence.result()
            except CubeplugError:
                self.raise_async_error(errors)  # the failed batch's own error, raised once
                raise
            self.raise_async_error(errors)

        return wait

    def sync_all(self) -> None:
        """Submit every stream's tasks and wait until the device ran them."""
        self.scheduler.flush_all()
        self.queue.wait_idle()
        self.raise_async_error(self.queue.errors)

    def device_marker(self, stream_id: int) -> Any:
        """A timestamp query written after the stream's queued work (None without timestamp-query)."""
        if self.queue.query_set is None:
            return None
        self.health.check()
        future = ReadFuture([(0, 8)], 8, self.queue.staging)
        self.scheduler.register(stream_id, (TIMESTAMP, self.queue.next_query(), future))
        return future

    def device_elapsed(self, start: Any, end: Any) -> float:
        """Seconds between two timestamp markers (wgpu reports nanoseconds)."""
        t0 = int.from_bytes(start.result()[0], "little")
        t1 = int.from_bytes(end.result()[0], "little")
        return max(0, t1 - t0) * 1e-9

    def close(self) -> None:
        """Finish queued work, stop the completer thread, destroy the device's buffers, then the
        device itself: it was requested for this client (``plugin.cubeplug_compute_storage``), and
        destroying it stops wgpu's poll thread, which otherwise lives until the closed client is
        collected (a thread and a device per closed client). A second call does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.health.reason is None:  # a lost device has nothing left to finish
                self.scheduler.flush_all()
                self.queue.wait_idle()
        finally:
            try:
                self.bind_groups.clear()
                self.queue.close()
                self._empty.destroy()
                if self._scratch is not None:
                    self._scratch.destroy()
                    self._scratch = None
                storage = self.storage
                if isinstance(storage, WgpuStorage):
                    storage.close()
            finally:  # a failure above must not leave the device and its poll thread behind
                self.gpu.destroy()


def _scalar_error(kernel: Kernel, scalars: Sequence[Any], error: BaseException) -> ValidationError:
    """The ValidationError for scalars that do not pack into the kernel's scalar block."""
    declared = ", ".join(f"{p.name}: {p.dtype}" for p in kernel.scalar_params) or "none"
    return ValidationError(
        f"kernel {kernel.name!r} cannot pass its scalars ({declared}) the values "
        f"{describe(list(scalars))}: {error}; pass one value per scalar that fits its dtype (a checked "
        f"launch names the one that does not)"
    )
