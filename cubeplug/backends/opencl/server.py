"""The OpenCL server: launches, timing and synchronisation on in-order queues driven by the core MultiStream.

Each stream is an in-order ``cl.CommandQueue``; before an operation binds memory that another
stream may still be writing, :meth:`MultiStream.resolve` makes the queue wait on that stream's
marker. Memory is per stream (stream-ordered reuse). The copies (uploads through pinned staging,
reads completed by the waiter thread) are the server's transfer layer,
:class:`~cubeplug.backends.opencl.transfers.OpenCLTransfers`; its driver objects are released in a
fixed order by :mod:`~cubeplug.backends.opencl.release`.

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

import functools
import struct
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from cubeplug.backends.opencl import launch_path, replay
from cubeplug.backends.opencl.compiler import DIALECTS, UNSET, OpenCLProgram, compile_kernel
from cubeplug.backends.opencl.devices import DeviceContext
from cubeplug.backends.opencl.options import options
from cubeplug.backends.opencl.release import Natives, forget_bindings, open_servers, release
from cubeplug.backends.opencl.staging import StagingPool
from cubeplug.backends.opencl.storage import OpenCLStorage, code_name, memory_properties
from cubeplug.backends.opencl.stream import EventWaiter, OpenCLStreams
from cubeplug.backends.opencl.transfers import OpenCLTransfers
from cubeplug.plugin import (
    DTYPES,
    Compiled,
    Config,
    CubeCount,
    DeviceInfo,
    DeviceSetup,
    ExecutionMode,
    Handle,
    Kernel,
    Launcher,
    LaunchError,
    LaunchSettings,
    MultiStream,
    QueueCode,
    Replay,
    Step,
    ValidationError,
    device_setup,
)

#: What setting scalars that do not pack raises (unchecked launches only).
_SCALAR_ERRORS = (ValueError, TypeError, RuntimeError, struct.error)

#: The most cubes a launch runs per dimension. OpenCL sets no limit on work-group counts (a launch
#: of 2**32-1 x 65535 groups is accepted and runs for days), so OpenCL takes those of the ``c``
#: dialect it shares with CUDA: a grid every CUDA device runs (the compiled launcher gets them too).
MAX_CUBE_COUNT = (2**31 - 1, 65535, 65535)


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


def describe_device(ctx: DeviceContext, storage: OpenCLStorage, profiling: bool) -> DeviceSetup:
    """What the core is told of the device: its identity, paging, capabilities (from the limits read
    once) and properties."""
    import pyopencl as cl

    limits = ctx.limits
    dtypes = set(DTYPES)
    if not limits["fp16"]:
        dtypes.discard("f16")
    if not limits["fp64"]:
        dtypes.discard("f64")
    sizes = (*limits["max_work_item_sizes"], 1, 1, 1)
    properties = {k: v for k, v in limits.items() if k != "extensions"}
    properties.update(
        profiling=profiling, pyopencl=cl.VERSION_TEXT, extensions=" ".join(limits["extensions"])
    )
    driver = str(limits["driver_version"])
    info = DeviceInfo("opencl", ctx.index, ctx.name, vendor=limits["vendor"], driver=driver)
    return device_setup(
        info,
        memory_properties(ctx),
        dtypes=dtypes,
        multi_queue=True,
        device_timing=profiling,
        atomics=bool(limits["int32_atomics"]),
        dynamic_count=True,
        staging=True,
        pitched_tensors=False,
        offset_alignment=storage.alignment,
        max_cube_dim=(int(sizes[0]), int(sizes[1]), int(sizes[2])),
        max_cube_threads=int(limits["max_work_group_size"]),
        max_cube_count=MAX_CUBE_COUNT,
        max_shared_bytes=int(limits["local_memory"]),  # CL_DEVICE_LOCAL_MEM_SIZE
        properties=properties,
    )


class OpenCLServer(OpenCLTransfers):
    """Runs ``opencl`` and ``c`` kernels on one OpenCL device, one in-order queue per stream."""

    dialects = DIALECTS
    per_stream_memory = True

    def __init__(self, storage: OpenCLStorage, streams: OpenCLStreams, config: Config | None = None) -> None:
        import pyopencl as cl

        ctx = storage.ctx
        setup = describe_device(ctx, storage, streams.profiling)
        super().__init__(backend="opencl", storage=storage, config=config, **setup.server_args())
        self.ctx = ctx
        self.cl_storage = storage
        self.streams = streams
        self.multistream: MultiStream[Any, Any] = MultiStream(streams, self.config.streaming.max_streams)
        self.waiter = EventWaiter(streams)
        self.staging = StagingPool(ctx)
        self._cache_programs = bool(self.config.compilation.cache)
        self._bind = storage.bind
        self._pages = storage.pages
        self._enqueue = cl.enqueue_nd_range_kernel
        self._copy = cl.enqueue_copy
        self._cl = cl
        self._closed = False
        self._natives = Natives(
            ctx, storage, self.multistream, self.waiter, self.staging, [self.compile_cache.entries]
        )
        storage.forget_bindings = functools.partial(forget_bindings, self._natives.compiled)
        self._release = weakref.finalize(self, release, self._natives)
        open_servers.add(self)

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
                    region = h.token.storage  # type: ignore[union-attr]
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

    def new_replay(self, steps: Sequence[Step]) -> Replay | None:
        """A graph's native replay (:mod:`~cubeplug.backends.opencl.replay`): a command buffer where
        the device has ``cl_khr_command_buffer``, else pre-bound kernels; None for the steps it does
        not replay. Closed with the server if the graph is not closed before."""
        opts = options(self.config)
        native = replay.new_replay(self, steps, opts.command_buffers, opts.native_launch)
        if native is not None:
            self._natives.replays.add(native)
        return native

    def _launch_error(self, prog: OpenCLProgram, size: tuple[int, int, int], e: Any) -> LaunchError:
        code = code_name(e)
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
        forget_bindings(self._natives.compiled)
        super().memory_cleanup()
        self.staging.clear()

    # ------------------------------------------------------------------ profiling
    def device_marker(self, stream_id: int) -> Any:
        """A timestamped command on the stream (with the host time), or None when the queues do not profile.

        The command is a 4-byte fill of a scratch buffer rather than a marker: every driver reports
        profiling times for a fill, not every one does for markers.
        """
        if not self.streams.profiling:
            return None
        natives = self._natives
        if natives.scratch is None:
            natives.scratch = self._cl.Buffer(self.ctx.context, self._cl.mem_flags.READ_WRITE, 64)
        queue = self.multistream.streams.get(stream_id).stream
        event = self._cl.enqueue_fill_buffer(queue, natives.scratch, np.uint32(0), 0, 4)
        queue.flush()
        return (event, time.perf_counter())

    def device_elapsed(self, start: Any, end: Any) -> float:
        """Seconds between two markers from their profiling timestamps (host clock if the driver has none)."""
        (ev0, t0), (ev1, _) = start, end
        try:
            ev1.wait()
            begin, finish = int(ev0.profile.end), int(ev1.profile.end)
            if begin > 0 and finish >= begin:
                return float(finish - begin) * 1e-9
        except self._cl.Error:
            pass
        return max(0.0, time.perf_counter() - float(t0))

    def close(self) -> None:
        """Wait for the queued work, stop the helper threads and release the driver objects now
        (queues, kernels, pages, staging), rather than leave them to the cyclic garbage collector."""
        if self._closed:
            return
        self._closed = True
        open_servers.discard(self)
        try:
            self.multistream.sync_all()
        finally:
            self._release()
