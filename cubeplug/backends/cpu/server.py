"""The CPU server: virtual streams on the core scheduler, work run by the worker thread."""

from __future__ import annotations

import platform
import threading
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

from cubeplug.backends.cpu.compiler import DIALECTS, LaunchInfo, PythonProgram, compile_python
from cubeplug.backends.cpu.queue import WorkerQueue
from cubeplug.backends.cpu.storage import CpuStorage, memory_properties
from cubeplug.plugin import (
    DTYPES,
    Compiled,
    ComputeServer,
    Config,
    CubeCount,
    DeviceInfo,
    ExecutionMode,
    Handle,
    Kernel,
    LaunchError,
    Scheduler,
    SliceToken,
    device_setup,
)

#: What queued work holds of a handle: its slice token (keeping the memory reserved), offset, size.
#: Never the user's Handle itself, which may be dropped while the work is queued.
Binding = tuple[SliceToken, int, int]


def _binding(handle: Handle) -> Binding:
    return (handle.memory(), handle.start, handle.size)


#: Seconds one side of a copy between two cpu devices waits for the other's worker: past it the side
#: fails (an asynchronous LaunchError) instead of hanging when the other side's work was dropped.
PEER_TIMEOUT = 300.0


class _PeerLink:
    """The two events of one copy between cpu devices: the source's work before it ran (``ready``),
    and the copy is done (``done``: the source's worker may run later work that writes the source)."""

    __slots__ = ("done", "ready")

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.done = threading.Event()


class CpuServer(ComputeServer):
    """Runs ``python``-dialect kernels on numpy views, asynchronously, in submission order."""

    dialects = DIALECTS
    per_stream_memory = False

    def __init__(self, storage: CpuStorage, config: Config | None = None, device: int = 0) -> None:
        name = platform.processor() or platform.machine() or "host CPU"
        setup = device_setup(
            DeviceInfo("cpu", device, name, vendor="host", driver=f"numpy {np.__version__}"),
            memory_properties(),
            dtypes=DTYPES,
            atomics=True,
            dynamic_count=True,
            offset_alignment=1,
            # Host memory has no such limit; CUDA's static __shared__ limit (48 KiB), so that a
            # kernel the CPU backend runs fits a CUDA GPU too.
            max_shared_bytes=48 * 1024,
        )
        super().__init__(backend="cpu", storage=storage, config=config, **setup.server_args())
        self._pages = storage.pages
        self.queue = WorkerQueue()
        # A server dropped without close() still stops its worker thread.
        self._finalizer = weakref.finalize(self, self.queue.close)
        self.scheduler = Scheduler(
            self.queue.submit,
            max_streams=self.config.streaming.max_streams,
            errors=self.queue.errors,
            describe=_describe,
            on_drop=_fail_reads,
            settle=WorkerQueue.settle,
        )

    # ------------------------------------------------------------------ device access (worker side)
    def _view(self, binding: Binding) -> np.ndarray:
        """The bytes a binding covers, as a uint8 numpy array over the page."""
        token, offset, size = binding
        region = token.storage
        start = region.offset + offset
        return self._pages[region.id][start : start + size]

    def _run_kernel(
        self,
        program: PythonProgram,
        count: CubeCount,
        buffers: tuple[Binding, ...],
        scalars: list[Any],
        count_binding: Binding | None,
    ) -> None:
        if count_binding is not None:
            x, y, z = (int(v) for v in self._view(count_binding)[:12].view(np.uint32))
            if x == 0 or y == 0 or z == 0:
                return
            dims = (x, y, z)
        else:
            dims = (count.x, count.y, count.z)
        args: list[Any] = []
        for is_buffer, index, dtype, vector in program.layout:
            if is_buffer:
                view = self._view(buffers[index]).view(dtype)
                args.append(view.reshape(-1, vector) if vector > 1 else view)
            else:
                args.append(scalars[index])
        program.fn(LaunchInfo(dims, program.cube_dim), *args)

    def _run_write(self, binding: Binding, data: bytes) -> None:
        self._view(binding)[:] = np.frombuffer(data, dtype=np.uint8)

    def _run_read(self, bindings: list[Binding], future: Future[list[bytes]]) -> None:
        try:
            result = [bytearray(self._view(b)) for b in bindings]
        except BaseException as e:
            future.set_exception(e)
            return
        future.set_result(result)  # type: ignore[arg-type]

    def _run_copy(self, src: Binding, dst: Binding) -> None:
        self._view(dst)[:] = self._view(src)

    def _run_fill(self, binding: Binding, pattern: bytes) -> None:
        view = self._view(binding)
        width = len(pattern)
        if width in (1, 2, 4, 8):  # numpy's fill of the region seen as width-byte words
            view.view(f"u{width}")[:] = np.frombuffer(pattern, f"u{width}")[0]
        else:
            view[:] = np.frombuffer(pattern * (view.nbytes // width), dtype=np.uint8)

    # ------------------------------------------------------------------ primitives
    def compile(self, kernel: Kernel, dialect: str, mode: ExecutionMode) -> PythonProgram:
        """Compile a ``python``-dialect source."""
        return compile_python(kernel, dialect, mode)

    def execute(
        self,
        stream_id: int,
        compiled: Compiled,
        count: CubeCount,
        buffers: Sequence[Handle],
        scalars: Sequence[Any],
    ) -> None:
        """Queue the kernel on the stream; the task holds the bindings' memory until it has run."""
        bindings = tuple([(h.memory(), h.start, h.size) for h in buffers])
        scalars = compiled.kernel.numpy_scalars(scalars)
        task: tuple[Any, tuple[Any, ...]]
        if count.handle is not None:
            dyn = count.handle
            count_binding = (dyn.memory(), dyn.start, 12)
            task = (self._run_kernel, (compiled.program, count, bindings, scalars, count_binding))
            self.scheduler.register(stream_id, task, (*buffers, dyn))
        else:
            task = (self._run_kernel, (compiled.program, count, bindings, scalars, None))
            self.scheduler.register(stream_id, task, buffers)

    def dlpack_device(self) -> tuple[int, int]:
        """kDLCPU: an Array exports a host copy (pooled memory is lent again once its handle goes,
        which a DLPack consumer could not see)."""
        return (1, 0)

    def create(self, data: Any, stream_id: int) -> Handle:
        """Fresh memory has no queued work on it, so the copy happens now, with no snapshot."""
        view = self.as_bytes(data)
        handle = self.empty(view.nbytes, stream_id)
        if view.nbytes:
            self._view((handle.memory(), handle.start, view.nbytes))[:] = np.frombuffer(view, dtype=np.uint8)
        return handle

    def write(self, stream_id: int, handle: Handle, data: memoryview) -> None:
        """Queue a copy of a snapshot of ``data``."""
        task = (self._run_write, (_binding(handle), bytes(data)))
        self.scheduler.register(stream_id, task, (handle,))

    def read(self, stream_id: int, handles: list[Handle]) -> Future[list[bytes]]:
        """Queue a read after the stream's work and submit it (first raising an asynchronous error)."""
        self.raise_async_error(self.queue.errors)
        future: Future[list[bytes]] = Future()
        task = (self._run_read, ([_binding(h) for h in handles], future))
        self.scheduler.register(stream_id, task, handles)
        self.scheduler.flush(stream_id)
        return future

    def copy(self, stream_id: int, src: Handle, dst: Handle) -> None:
        """Queue a copy between two handles (numpy's, on the worker)."""
        self.scheduler.register(stream_id, (self._run_copy, (_binding(src), _binding(dst))), (src, dst))

    # ------------------------------------------------------------------ other devices
    def peer_copies_to(self, other: ComputeServer) -> bool:
        """Another cpu device's memory is host memory too: copy directly, between the two workers."""
        return isinstance(other, CpuServer) and other is not self

    def copy_to_peer(
        self, src: Handle, other: ComputeServer, dst: Handle, stream_id: int, other_stream_id: int
    ) -> None:
        """The source's worker signals when the work before the copy ran and waits until the
        destination's worker, at the copy's place in its own order, copied the bytes. Both halves are
        submitted at once, in the order the copies were asked for, so their waits never form a cycle."""
        assert isinstance(other, CpuServer)
        link = _PeerLink()
        self.scheduler.register(stream_id, (self._run_send, (link,)), (src,))
        self.scheduler.flush(stream_id)
        task = (other._run_receive, (link, self, _binding(src), _binding(dst)))
        other.scheduler.register(other_stream_id, task, (dst,))
        other.scheduler.flush(other_stream_id)

    def _run_send(self, link: _PeerLink) -> None:
        link.ready.set()
        if not link.done.wait(PEER_TIMEOUT):
            raise LaunchError(
                f"a copy to another cpu device did not complete within {PEER_TIMEOUT:g} s (the other "
                f"device's work was dropped?); the destination does not hold the data"
            )

    def _run_receive(self, link: _PeerLink, source: CpuServer, src: Binding, dst: Binding) -> None:
        try:
            if not link.ready.wait(PEER_TIMEOUT):
                raise LaunchError(
                    f"a copy from another cpu device never started within {PEER_TIMEOUT:g} s (the "
                    f"source device's work was dropped?); the destination does not hold the data"
                )
            self._view(dst)[:] = source._view(src)
        finally:
            link.done.set()

    def fill(self, stream_id: int, handle: Handle, pattern: bytes) -> None:
        """Queue a numpy fill of the handle's bytes with ``pattern`` (no host snapshot of the region)."""
        self.scheduler.register(stream_id, (self._run_fill, (_binding(handle), pattern)), (handle,))

    def flush(self, stream_id: int) -> None:
        """Submit the stream's queued tasks to the worker."""
        self.scheduler.flush(stream_id)
        self.raise_async_error(self.queue.errors)

    def sync(self, stream_id: int) -> None:
        """Submit the stream's tasks and wait until the worker ran them."""
        self.scheduler.flush(stream_id)
        self.queue.fence().wait()
        self.raise_async_error(self.queue.errors)

    def sync_begin(self, stream_id: int) -> Callable[[], None]:
        """Submit the stream's tasks now; the returned wait for the worker needs no lock."""
        self.scheduler.flush(stream_id)
        fence = self.queue.fence()
        errors = self.queue.errors

        def wait() -> None:
            fence.wait()
            self.raise_async_error(errors)

        return wait

    def release_queued(self, wait: bool) -> bool:
        """On the out-of-memory path (``wait``): submit every stream's tasks and wait until the
        worker ran them, so that the memory of dropped handles they held is free again. The worker
        lets a task's memory go only once it ran it, so before a pool merely grows (no ``wait``)
        nothing would be freed at once: False, and the batches stay whole. (The worker takes no
        lock of the client's, so the wait under it cannot deadlock.) Errors of that work are raised
        at the next flush, sync or read, as always."""
        if not wait:
            return False
        self.scheduler.flush_all()
        self.queue.fence().wait()
        return True

    def sync_all(self) -> None:
        """Submit every stream's tasks and wait until the worker ran them."""
        self.release_queued(True)
        self.raise_async_error(self.queue.errors)

    def close(self) -> None:
        """Stop the worker thread."""
        self._finalizer()


def _describe(tasks: list[Any]) -> str:
    """What dropped tasks were: launches (by kernel), writes, copies and reads."""
    kernels: dict[str, int] = {}
    other = {"write": 0, "copy": 0, "fill": 0, "read": 0}
    for fn, args in tasks:
        name = getattr(fn, "__name__", "")
        if name == "_run_kernel":
            kernel = getattr(args[0], "name", "") or "?"
            kernels[kernel] = kernels.get(kernel, 0) + 1
        elif name in ("_run_write", "_run_copy", "_run_fill", "_run_read"):
            other[name[5:]] += 1
    parts = [f"{n} launch{'es' if n > 1 else ''} of {k!r}" for k, n in kernels.items()]
    parts += [f"{n} {what}{'s' if n > 1 else ''}" for what, n in other.items() if n]
    return ", ".join(parts) or f"{len(tasks)} tasks"


def _fail_reads(batch: list[Any], ran: int, error: BaseException) -> None:
    """Reads among the dropped tasks fail with the drop's error (nothing else would complete them)."""
    for fn, args in batch[ran:]:
        if getattr(fn, "__name__", "") == "_run_read" and not args[1].done():
            args[1].set_exception(error)
