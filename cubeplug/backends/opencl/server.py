"""The OpenCL server: launches, transfers and timing on in-order queues driven by the core MultiStream.

Each stream is an in-order ``cl.CommandQueue``; before an operation binds memory that another
stream may still be writing, :meth:`MultiStream.resolve` makes the queue wait on that stream's
marker. Memory is per stream (stream-ordered reuse). Uploads are snapshotted into pooled pinned staging
chunks (bounded pieces for large ones) and copied without blocking; an upload from a
``reserve_staging`` array is copied straight from its mapped memory and waited for. Reads copy into
a pooled staging chunk (into fresh host buffers above a size threshold) and the waiter thread
completes their future. Host buffers and staging chunks stay alive until their copy completed.

Launch hot path: the ``cl.Kernel`` is built once per compiled kernel; a buffer argument is set only
when the bound ``cl.Buffer`` (page or cached sub-buffer) differs from the previous launch's, and the
scalars, through PyOpenCL's multi-argument setter, only when they differ from the previous
launch's. :meth:`OpenCLServer.queue_code` hands the same steps to the kernel's launch plan as
source, so that a launch on the thread's own memory runs in one frame. OpenCL has no indirect
dispatch, so a ``CubeCount.dynamic`` is read on the host after the stream's earlier work (a
blocking read).
Timing uses profiling timestamps of tiny fills when the queues profile (``device_timing``).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import struct
import threading
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

from cubeplug.backends.opencl import launch_path
from cubeplug.backends.opencl.compiler import DIALECTS, UNSET, OpenCLProgram, compile_kernel
from cubeplug.backends.opencl.devices import DeviceContext
from cubeplug.backends.opencl.options import options
from cubeplug.backends.opencl.storage import OpenCLStorage, StagingPool, _code_name, memory_properties
from cubeplug.backends.opencl.stream import EventWaiter, OpenCLStreams
from cubeplug.core.backend import Capabilities, DeviceInfo
from cubeplug.core.config import Config
from cubeplug.core.errors import LaunchError, ValidationError
from cubeplug.core.handle import Handle
from cubeplug.core.hostmem import host_buffer, host_copy
from cubeplug.core.kernel import DTYPES, CubeCount, ExecutionMode, Kernel
from cubeplug.core.launcher import Launcher, LaunchSettings
from cubeplug.core.plans import QueueCode
from cubeplug.core.server import Compiled, ComputeServer
from cubeplug.core.stream import MultiStream

#: Servers still open: closed at interpreter exit, so that no helper thread is inside a PyOpenCL call
#: (a C++ frame) when Python finalises, which aborts the process ("terminate called...").
_open_servers: weakref.WeakSet[OpenCLServer] = weakref.WeakSet()

#: What setting scalars that do not pack raises (unchecked launches only).
_SCALAR_ERRORS = (ValueError, TypeError, RuntimeError, struct.error)

#: The most cubes a launch runs per dimension. OpenCL sets no limit on work-group counts (a launch
#: of 2**32-1 x 65535 groups is accepted and runs for days), so OpenCL takes those of the ``c``
#: dialect it shares with CUDA: a grid every CUDA device runs (the compiled launcher gets them too).
MAX_CUBE_COUNT = (2**31 - 1, 65535, 65535)

#: How long closing waits for a helper thread (it only waits for work already queued).
_JOIN_TIMEOUT = 60.0


class _Natives:
    """Everything a server holds of the driver, with no reference back to the server.

    A server always sits in reference cycles (the client and the server point at each other, the
    memory management calls back into the server), so whatever driver objects it still holds are
    released by the cyclic garbage collector, in an order that depends on the collector's lists,
    on whichever thread happens to collect (NVIDIA's driver segfaulted in ``clReleaseMemObject``
    there, releasing a closed client's sub-buffers inside ``gc.collect()``). So the driver objects
    are held here, and :func:`_release` drops them once, in a fixed order, when the server is closed
    or, failing that, from the server's finalizer when it is collected.
    """

    __slots__ = ("compiled", "ctx", "multistream", "plans", "scratch", "staging", "storage", "waiter")

    def __init__(
        self,
        ctx: DeviceContext,
        storage: OpenCLStorage,
        multistream: MultiStream[Any, Any],
        waiter: EventWaiter,
        staging: StagingPool,
        compiled: list[dict[Any, Any]],
    ) -> None:
        self.ctx = ctx
        self.storage = storage
        self.multistream = multistream
        self.waiter = waiter
        self.staging = staging
        self.compiled = compiled
        #: The server's launch plans, checked and unchecked (they hold compiled kernels too).
        self.plans: list[dict[Any, Any]] = []
        self.scratch: Any = None


def _relaunch(server_ref: Any, prog: OpenCLProgram, queue: Any, size: tuple[int, int, int]) -> None:
    """After a driver error in the C launcher: the same enqueue through PyOpenCL, which raises the
    error that :meth:`OpenCLServer._launch_error` reports (or succeeds, if the cause has gone). The
    server is reached weakly: the launcher's entries are released with the server, never keep it."""
    server = server_ref()
    if server is None:
        raise ReferenceError("the server of this launch was garbage-collected")
    try:
        server._enqueue(queue, prog.kernel, size, prog.local)
    except server._cl.Error as e:
        prog.forget_bindings()
        raise server._launch_error(prog, size, e) from e


def _forget_bindings(tables: list[dict[Any, Any]]) -> None:
    """Kernels forget the buffers they bound last (they bind them again at their next launch)."""
    for table in tables:
        for compiled in list(table.values()):
            compiled.program.forget_bindings()


def _release(natives: _Natives) -> None:
    """Release a server's driver objects in a safe order: first stop the helper threads (after the
    work already queued), so that no thread waits on an event while its queue goes away; then let
    every queue finish; then drop the kernels (they hold their last buffer arguments), the staging
    chunks (their unmaps run on the allocation queue, which is finished next), the pages and
    sub-buffers, and last the queues themselves."""
    import pyopencl as cl

    ms = natives.multistream
    if threading.current_thread() in (ms.gc.thread, natives.waiter.thread):
        # The collector ran on a helper thread of this very server, which cannot wait for itself.
        threading.Thread(target=_release, args=(natives,), name="cubeplug-opencl-release").start()
        return
    natives.waiter.close(_JOIN_TIMEOUT)
    ms.close()
    ms.gc.join(_JOIN_TIMEOUT)
    states = [state for _, state in ms.streams.created()]
    states.extend(ms.streams.created_specials())
    for state in states:
        with contextlib.suppress(cl.Error):
            state.stream.finish()
    _forget_bindings(natives.compiled)
    for table in natives.compiled:
        table.clear()
    for plans in natives.plans:
        plans.clear()
    natives.scratch = None
    natives.staging.keep = 0  # chunks still on their way back are released, not kept
    natives.staging.clear()
    with contextlib.suppress(cl.Error):
        natives.ctx.alloc_queue.finish()
    natives.storage.close()
    ms.streams.clear()
    del states


@atexit.register
def _close_open_servers() -> None:
    for server in list(_open_servers):
        if server.forked:  # a forked child's copy of the parent's server: its driver is the parent's
            continue
        with contextlib.suppress(Exception):
            server.close()


def capabilities(ctx: DeviceContext, storage: OpenCLStorage, profiling: bool) -> Capabilities:
    """What the device can do, from the limits read once."""
    limits = ctx.limits
    dtypes = set(DTYPES)
    if not limits["fp16"]:
        dtypes.discard("f16")
    if not limits["fp64"]:
        dtypes.discard("f64")
    sizes = (*limits["max_work_item_sizes"], 1, 1, 1)
    return Capabilities(
        dtypes=frozenset(dtypes),
        multi_queue=True,
        device_timing=profiling,
        fp16=bool(limits["fp16"]),
        fp64=bool(limits["fp64"]),
        int64=True,
        atomics=bool(limits["int32_atomics"]),
        dynamic_count=True,
        staging=True,
        pitched_tensors=False,
        max_alloc_bytes=int(limits["max_allocation"]),
        offset_alignment=storage.alignment,
        max_cube_dim=(int(sizes[0]), int(sizes[1]), int(sizes[2])),
        max_cube_threads=int(limits["max_work_group_size"]),
        max_cube_count=MAX_CUBE_COUNT,
    )


class OpenCLServer(ComputeServer):
    """Runs ``opencl`` and ``c`` kernels on one OpenCL device, one in-order queue per stream."""

    dialects = DIALECTS
    per_stream_memory = True

    def __init__(self, storage: OpenCLStorage, streams: OpenCLStreams, config: Config | None = None) -> None:
        import pyopencl as cl

        ctx = storage.ctx
        limits = ctx.limits
        caps = capabilities(ctx, storage, streams.profiling)
        info = DeviceInfo(
            "opencl", ctx.index, ctx.name, vendor=limits["vendor"], driver=f"{limits['driver_version']}"
        )
        properties = {k: v for k, v in limits.items() if k != "extensions"}
        properties.update(
            alignment=storage.alignment,
            max_page_size=storage.max_allocation,
            total_memory=limits["global_memory"],
            profiling=streams.profiling,
            pyopencl=cl.VERSION_TEXT,
            extensions=" ".join(limits["extensions"]),
        )
        super().__init__(
            backend="opencl",
            info=info,
            storage=storage,
            memory_properties=memory_properties(ctx),
            capabilities=caps,
            config=config,
            properties=properties,
        )
        self.ctx = ctx
        self.cl_storage = storage
        self.streams = streams
        self.multistream: MultiStream[Any, Any] = MultiStream(streams, self.config.streaming.max_streams)
        self.waiter = EventWaiter(streams)
        self.staging = StagingPool(ctx)
        self._cache_programs = bool(self.config.compilation.cache)
        self._bind = storage.bind
        self._pages = storage._pages
        self._enqueue = cl.enqueue_nd_range_kernel
        self._copy = cl.enqueue_copy
        self._cl = cl
        self._closed = False
        self._natives = _Natives(
            ctx, storage, self.multistream, self.waiter, self.staging, [self.compile_cache._entries]
        )
        storage.forget_bindings = functools.partial(_forget_bindings, self._natives.compiled)
        self._release = weakref.finalize(self, _release, self._natives)
        _open_servers.add(self)

    # ------------------------------------------------------------------ streams
    def bound_buffer(self, handle: Handle) -> Any:
        """The ``cl.Buffer`` a launch binds for a handle: its page or a sub-buffer at the handle's offset."""
        region = handle.memory().storage
        return self._bind(region.id, region.offset + handle.start, handle.size)

    # ------------------------------------------------------------------ primitives
    def compile(self, kernel: Kernel, dialect: str, mode: ExecutionMode) -> OpenCLProgram:
        """Build an ``opencl`` or ``c`` source for this device."""
        return compile_kernel(self.ctx, kernel, dialect, mode, cache=self._cache_programs)

    def execute(
        self,
        stream_id: int,
        compiled: Compiled,
        count: CubeCount,
        buffers: Sequence[Handle],
        scalars: Sequence[Any],
    ) -> None:
        """Bind the buffers and set the scalars that changed since the kernel's last launch, enqueue."""
        prog: OpenCLProgram = compiled.program
        dynamic = count.handle
        ms = self.multistream
        try:
            state, analysis = ms.enter(stream_id, buffers if dynamic is None else (*buffers, dynamic))
            queue = state.stream
            lx, ly, lz = prog.local
            if dynamic is None:
                size = (count.x * lx, count.y * ly, count.z * lz)
            else:
                cx, cy, cz = self._dynamic_count(queue, dynamic)
                if cx == 0 or cy == 0 or cz == 0:
                    return
                self.check_count(cx, cy, cz)
                size = (cx * lx, cy * ly, cz * lz)
            if buffers:
                last = prog.last_buffers
                bind = self._bind
                for i, h in enumerate(buffers):
                    region = h._memory.storage  # type: ignore[union-attr]
                    start = h.start
                    mem = bind(region.id, region.offset + start, h.nbytes - start - h.end)
                    if mem is not last[i]:
                        last[i] = mem
                        prog.set_buffers((prog.buffer_slots[i], mem))
        except AttributeError:
            # Only unchecked launches get here with something that is not a live handle: say which.
            for h in buffers if dynamic is None else (*buffers, dynamic):
                self.check_handle(h)
            raise
        if scalars:
            # Arguments stay set on a kernel between enqueues: values equal to the last launch's are
            # not set again, unless one is zero (0.0 == -0.0, but their bits differ).
            last = prog.last_scalars
            try:
                values = list(scalars)
                if values != last or 0 in values:
                    args = prog.scalar_args
                    args[2::3] = values
                    prog.set_scalars(tuple(args))
                    last[:] = values
            except _SCALAR_ERRORS as e:  # unchecked launches only
                last[:] = [UNSET] * len(last)
                raise ValidationError(f"kernel {prog.name!r} scalars {list(scalars)!r}: {e}") from e
        try:
            self._enqueue(queue, prog.kernel, size, prog.local)
        except self._cl.Error as e:
            prog.forget_bindings()
            raise self._launch_error(prog, size, e) from e
        if analysis is not None and analysis.pinned:
            ms.pin(analysis, queue)

    def queue_code(self, kernel: Kernel, compiled: Compiled) -> QueueCode:
        """:meth:`execute`'s binding, scalars and enqueue as source, for the kernel's checked plan."""
        prog: OpenCLProgram = compiled.program
        lines: list[str] = []
        for i, slot in enumerate(prog.buffer_slots):
            lines += [  # a region at a page's start binds the page itself (see OpenCLStorage.bind)
                f"r{i} = t{i}.storage",
                f"o{i} = r{i}.offset + b{i}.start",
                f"m{i} = pages[r{i}.id] if not o{i} else "
                f"bind(r{i}.id, o{i}, b{i}.nbytes - b{i}.start - b{i}.end)",
                f"if m{i} is not last[{i}]:",
                f"    last[{i}] = m{i}",
                f"    set_buffers(({slot}, m{i}))",
            ]
        if kernel.scalar_params:
            # As in execute: values equal to those set last are not set again, unless a float is
            # zero; each value is compared and stored alone (no tuple per launch).
            n = len(kernel.scalar_params)
            changed = [f"s{j} != held[{j}]" for j in range(n)]
            changed += [f"s{j} == 0" for j, p in enumerate(kernel.scalar_params) if p.dtype.startswith("f")]
            lines += [
                "try:",
                f"    if {' or '.join(changed)}:",
                *[f"        args[{3 * j + 2}] = s{j}" for j in range(n)],
                "        set_scalars(tuple(args))",
                *[f"        held[{j}] = s{j}" for j in range(n)],
                "except ScalarErrors as e:  # unchecked plans only",
                "    held[:] = [UNSET] * len(held)",
                "    raise ValidationError(f'kernel {prog.name!r} scalars {list(scalars)!r}: {e}') from e",
            ]
        dims = [f"count.{a}" + (f" * {d}" if d != 1 else "") for a, d in zip("xyz", prog.local, strict=True)]
        lines += [
            f"size = ({', '.join(dims)})",
            "try:",
            f"    owner._enqueue(stream, cl_kernel, size, {prog.local!r})",
            "except Error as e:",
            "    prog.forget_bindings()",
            "    raise owner._launch_error(prog, size, e) from e",
        ]
        namespace = {
            "pages": self._pages, "bind": self._bind, "prog": prog, "last": prog.last_buffers,
            "set_buffers": prog.set_buffers, "args": prog.scalar_args, "set_scalars": prog.set_scalars,
            "held": prog.last_scalars, "cl_kernel": prog.kernel, "Error": self._cl.Error,
            "ValidationError": ValidationError, "ScalarErrors": _SCALAR_ERRORS, "UNSET": UNSET,
        }
        return QueueCode(lines, namespace, self.multistream)

    def new_launcher(self, settings: LaunchSettings) -> Launcher:
        """The launcher in C (launch_path.py) when it is built, ``native_launch`` is on and the client
        does not profile; else the core's. Its kernels and plans are released with the server's."""
        launcher: Launcher | None = None
        if options(self.config).native_launch and settings.profile is None:
            parts = launch_path.NativeParts(
                self._align, self._pages, self._bind, functools.partial(_relaunch, weakref.ref(self))
            )
            launcher = launch_path.make_launcher(self, settings, parts)
        if launcher is None:
            launcher = super().new_launcher(settings)
        self._natives.compiled.append(launcher.compiled)
        self._natives.plans.extend(launcher.tables())
        return launcher

    def _launch_error(self, prog: OpenCLProgram, size: tuple[int, int, int], e: Any) -> LaunchError:
        code = _code_name(e)
        hint = ""
        threads = 1
        for d in prog.local:
            threads *= d
        if code == "INVALID_WORK_GROUP_SIZE" or threads > prog.max_group_size:
            hint = (
                f"; this kernel allows at most {prog.max_group_size} units per cube on {self.ctx.name}, "
                f"its cube_dim has {threads}: use a smaller cube_dim"
            )
        elif code == "INVALID_GLOBAL_WORK_SIZE":
            hint = "; the cube count times the cube dim is too large for this device: launch fewer cubes"
        return LaunchError(
            f"launching kernel {prog.name!r} on {size} units (cube dim {prog.local}) failed: "
            f"{code} ({e}){hint}"
        )

    def _dynamic_count(self, queue: Any, handle: Handle) -> tuple[int, int, int]:
        """Read the three u32 of a dynamic count on the host, after the stream's earlier work."""
        region = handle.memory().storage
        out = np.empty(3, dtype=np.uint32)
        try:
            self._copy(queue, out, self._pages[region.id], src_offset=region.offset + handle.start,
                       is_blocking=True)
        except self._cl.Error as e:
            raise LaunchError(f"reading CubeCount.dynamic failed on {self.ctx.name}: {e}") from e
        return int(out[0]), int(out[1]), int(out[2])

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
        future: Future[list[bytes]] = Future()
        sizes = [h.size for h in handles]
        total = sum(sizes)
        # held: the chunk or the host buffers the copies write, kept until they completed.
        held: list[Any] = []
        starts = [0]
        for n in sizes:
            starts.append(starts[-1] + n)
        staged = 0 < total <= self.staging.read_max
        if staged:
            held.append(self.staging.take(total))
            host = held[0].array
            targets = [host[starts[i] : starts[i + 1]] for i in range(len(sizes))]
            del host
        else:
            held.extend(host_buffer(n) for n in sizes)  # no zero-fill: the copies write them whole
            targets = [np.frombuffer(out, dtype=np.uint8) for out in held]
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
            if staged:
                chunk = held.pop()
                outs = [host_copy(chunk.array[starts[i] : starts[i + 1]]) for i in range(len(sizes))]
                del chunk  # back to the pool before the caller sees the result
            else:
                outs = held[:]
                held.clear()
            future.set_result(outs)  # type: ignore[arg-type]

        self.waiter.submit(marker, done)
        return future

    def copy(self, stream_id: int, src: Handle, dst: Handle) -> None:
        """Queue a device-to-device copy of ``src.size`` bytes."""
        if src.size == 0:
            return
        rs, rd = src.memory().storage, dst.memory().storage
        with self.multistream.resolve(stream_id, (src, dst)) as resolved:
            try:
                self._copy(
                    resolved.stream, self._pages[rd.id], self._pages[rs.id], byte_count=src.size,
                    src_offset=rs.offset + src.start, dst_offset=rd.offset + dst.start,
                )
            except self._cl.Error as e:
                raise LaunchError(f"device copy of {src.size} B failed on {self.ctx.name}: {e}") from e

    def flush(self, stream_id: int) -> None:
        """Submit the stream's queued commands to the device."""
        self.multistream.streams.get(stream_id).stream.flush()
        self.raise_async_error(self.multistream.gc.errors)

    def sync(self, stream_id: int) -> None:
        """Wait until the stream's commands completed."""
        self.multistream.sync(stream_id)
        self.raise_async_error(self.multistream.gc.errors)

    def sync_begin(self, stream_id: int) -> Callable[[], None]:
        """Flush the stream's queue under the client's lock; the returned wait runs outside it."""
        ms = self.multistream
        event = ms.backend.flush(ms.streams.get(stream_id).stream)
        errors = ms.gc.errors

        def wait() -> None:
            ms.backend.wait_event_sync(event)
            self.raise_async_error(errors)

        return wait

    def sync_all(self) -> None:
        """Wait until every stream's commands completed and pinned memory was released."""
        self.multistream.sync_all()
        self.raise_async_error(self.multistream.gc.errors)

    # ------------------------------------------------------------------ memory
    def memory_cleanup(self) -> None:
        """Free unused pages; kernels forget the buffers bound last, so freed pages are not kept alive."""
        _forget_bindings(self._natives.compiled)
        super().memory_cleanup()
        self.staging.clear()

    def reserve_staging(self, sizes: Sequence[int]) -> list[np.ndarray]:
        """Pinned host arrays (mapped host-allocated buffers) of the given byte sizes.

        ``create`` or a write from one copies straight from its memory, with no host copy, and returns
        once that copy completed: the array may be refilled as soon as the call returns.
        """
        out = []
        for size in sizes:
            if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
                raise ValidationError(f"staging sizes are non-negative byte counts, got {size!r}")
            out.append(self.staging.lend(int(size)))
        return out

    # ------------------------------------------------------------------ profiling
    def device_marker(self, stream_id: int) -> Any:
        """A timestamped command on the stream (with the host time), or None when the queues do not profile.

        The command is a 4-byte fill of a scratch buffer rather than a marker: every driver reports
        profiling times for a fill, not every one does for markers.
        """
        if not self.streams.profiling:
            return None
        import time

        natives = self._natives
        if natives.scratch is None:
            natives.scratch = self._cl.Buffer(self.ctx.context, self._cl.mem_flags.READ_WRITE, 64)
        queue = self.multistream.streams.get(stream_id).stream
        event = self._cl.enqueue_fill_buffer(queue, natives.scratch, np.uint32(0), 0, 4)
        queue.flush()
        return (event, time.perf_counter())

    def device_elapsed(self, start: Any, end: Any) -> float:
        """Seconds between two markers from their profiling timestamps (host clock if the driver has none)."""
        import time

        (ev0, t0), (ev1, _) = start, end
        try:
            ev1.wait()
            begin, finish = int(ev0.profile.end), int(ev1.profile.end)
            if begin > 0 and finish >= begin:
                return (finish - begin) * 1e-9
        except self._cl.Error:
            pass
        return max(0.0, time.perf_counter() - t0)

    def close(self) -> None:
        """Wait for the queued work, stop the helper threads and release the driver objects now
        (queues, kernels, pages, staging), rather than leave them to the cyclic garbage collector."""
        if self._closed:
            return
        self._closed = True
        _open_servers.discard(self)
        try:
            self.multistream.sync_all()
        finally:
            self._release()
