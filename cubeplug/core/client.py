"""The ComputeClient: every call users make (after cubecl-runtime's client).

Users' guide: docs/kernels.md and docs/memory.md.

A client wraps one server through a :class:`~cubeplug.core.channel.DeviceHandle`. Every method is
safe to call from many threads at once; work is ordered per stream (one per thread by default, or
a fresh one inside ``with client.stream():``). Asynchronous errors surface at the next flush, sync
or read.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

import numpy as np

from cubeplug.core import collective
from cubeplug.core.array import Array, host_source
from cubeplug.core.backend import Capabilities, DeviceInfo
from cubeplug.core.channel import DeviceHandle
from cubeplug.core.collective import Collectives
from cubeplug.core.errors import CaptureError, DeviceLostError, ForkedClientError, ValidationError, describe
from cubeplug.core.graph import COPY, FILL, CaptureLauncher, Graph, own
from cubeplug.core.handle import Handle, Tensor, check_shape
from cubeplug.core.hostmem import StagedRead
from cubeplug.core.kernel import DTYPES, CubeCount, ExecutionMode, Kernel, dtype_of
from cubeplug.core.launcher import Launcher, LaunchSettings
from cubeplug.core.memory import AllocationMode, MemoryUsage, PoolReport
from cubeplug.core.profile import ProfileDuration, ProfileLog
from cubeplug.core.replay import Replay
from cubeplug.core.server import ComputeServer
from cubeplug.core.stream import current_stream_id, stream_scope, thread_streams

R = TypeVar("R")
_CHECKED = ExecutionMode.CHECKED
_UNCHECKED = ExecutionMode.UNCHECKED


class ComputeClient:
    """What users call: memory, launches, reads, synchronisation, profiling, for one device."""

    def __init__(self, server: ComputeServer) -> None:
        self._channel = DeviceHandle(server)
        self._server = server
        #: The seats of this client's collectives by ``devices`` list (kept by core/collective.py).
        self.collective_seats: dict[tuple[Any, ...], Any] = {}
        self._lock = self._channel.lock
        self._acquire = self._lock.acquire
        self._release = self._lock.release
        #: Every thread maps to stream 0 (the "single" streaming policy).
        self._single = server.config.streaming.policy == "single"
        # ``empty`` is the server's closure over this client's stream lookup and lock: the method
        # below spelled as one frame, which lends a freed slice of the exact size again without the
        # lock (ComputeServer.empty_path says how that is safe). Same behaviour, a third less time.
        # An instance attribute, not a method that calls the closure: that frame cost 5-6 % per
        # allocation (paired, 2-core machine: 1651 -> 1748 ns on cpu, 1068 -> 1157 ns on PoCL).
        fast_empty = server.empty_path(self._single, self._lock)
        if fast_empty is not None:
            self.empty = fast_empty  # type: ignore[method-assign,assignment]
        server.client = self
        _live_clients.add(self)
        self._profile = ProfileLog(server.config.profiling.level)
        self._profiling = self._profile.enabled  # the level is fixed for the client's life
        self._default_mode = (
            _UNCHECKED if server.config.compilation.check_mode == "unchecked" else _CHECKED
        )
        # Every launch goes through the server's launcher (core/launcher.py); a backend may give a
        # faster one of the same interface (ComputeServer.new_launcher).
        profile = self._profile if self._profiling else None
        settings = LaunchSettings(self._lock, self._single, self._default_mode, profile)
        self._launcher: Launcher | CaptureLauncher = server.new_launcher(settings)

    # ------------------------------------------------------------------ identity
    @property
    def backend(self) -> str:
        """The backend's name, e.g. ``"opencl"``."""
        return self._server.backend

    @property
    def device(self) -> DeviceInfo:
        """Which device this client drives."""
        return self._server.info

    @property
    def properties(self) -> dict[str, Any]:
        """Device limits and facts (backend-specific keys, plus the capabilities)."""
        return self._server.properties

    @property
    def capabilities(self) -> Capabilities:
        """What the device can do (dtypes, timing, staging, ...)."""
        return self._server.capabilities

    @property
    def server(self) -> ComputeServer:
        """The server behind this client (for backend authors and tests); closed once the client is."""
        server = self._server
        return server.closed if isinstance(server, _ClosedServer) else server

    @property
    def lock(self) -> threading.RLock:
        """The lock held around this client's server calls (a collective that queues the other
        ranks' parts from one thread holds theirs)."""
        return self._lock

    def __repr__(self) -> str:
        return f"<ComputeClient {self._server.info}>"

    def _sid(self) -> int:
        return self._server.stream_id(current_stream_id())

    # ------------------------------------------------------------------ memory
    def empty(self, nbytes: int) -> Handle:
        """A handle to ``nbytes`` of uninitialised device memory."""
        try:  # the thread's stream, inlined (this is a hot path)
            sid = 0 if self._single else thread_streams.stack[-1]
        except AttributeError:
            sid = self._sid()
        with self._lock:
            return self._server.empty(nbytes, sid)

    def create(self, data: Any) -> Handle:
        """A handle holding a copy of ``data`` (bytes-like or numpy array)."""
        sid = self._sid()
        with self._lock:
            return self._server.create(data, sid)

    def write(self, handle: Handle, data: Any) -> None:
        """Copy host ``data`` (bytes-like, buffer protocol or numpy) into ``handle`` (a view too),
        ordered after the work queued before it on this thread's stream, like a launch. The sizes
        must match; ``data`` may be reused once this returns."""
        sid = self._sid()
        with self._lock:
            self._server.write_into(handle, data, sid)

    def copy(self, src: Handle, dst: Handle) -> None:
        """Copy ``src`` into ``dst`` on the device (views too; the sizes must match), ordered like a
        launch: after the work that writes ``src``, before later work that reads ``dst``."""
        graph = self.capturing()
        if graph is not None:
            if self._server.check_copy(src, dst):  # False: nothing to copy, nothing to replay
                graph.record((COPY, own(src), own(dst)))
            return
        sid = self._sid()
        with self._lock:
            self._server.copy_into(src, dst, sid)

    def fill(self, handle: Handle, value: Any, dtype: Any) -> None:
        """Set every ``dtype`` element of ``handle`` (a view too) to ``value``, ordered like a launch."""
        graph = self.capturing()
        if graph is not None:
            pattern = self._server.check_fill(handle, value, dtype)
            if handle.size:
                graph.record((FILL, own(handle), value, dtype, pattern))
            return
        sid = self._sid()
        with self._lock:
            self._server.fill_with(handle, value, dtype, sid)

    # ------------------------------------------------------------------ graphs
    @contextlib.contextmanager
    def capture(self) -> Iterator[Graph]:
        """Record the launches, copies and fills this thread issues in the block, without running
        them; the :class:`~cubeplug.core.graph.Graph` yielded replays them (``graph.replay()``).
        Reads and syncs inside the block raise CaptureError (nothing ran yet to read)."""
        ident = threading.get_ident()
        graph = Graph(self)
        with self._lock:
            current = self._launcher
            capture: CaptureLauncher
            if isinstance(current, CaptureLauncher):
                if ident in current.graphs:
                    raise CaptureError(
                        "this thread is already capturing into a graph: end that block first (a "
                        "graph may replay another one's work: replay it inside the block)"
                    )
                capture = current
            else:
                capture = CaptureLauncher(current)
                self._launcher = capture
            capture.graphs[ident] = graph
        failed = True
        try:
            yield graph
            failed = False
        finally:
            with self._lock:
                capture.graphs.pop(ident, None)
                if not capture.graphs and self._launcher is capture:
                    self._launcher = capture.real
                # The server's native replay, if it has one (a closed client's stand-in raises);
                # none for a block that raised, so that its error is the one the caller sees.
                graph.seal(_no_replay if failed else self._server.new_replay)

    def capturing(self) -> Graph | None:
        """The graph the calling thread captures into (inside a ``capture()`` block), else None."""
        launcher = self._launcher
        return launcher.graph() if isinstance(launcher, CaptureLauncher) else None

    def run_replay(self, replay: Replay, times: int) -> None:
        """Run a graph's native replay ``times`` times on this thread's stream (``graph.replay``)."""
        sid = self._sid()  # a closed client raises here, before anything reaches the device
        with self._lock:
            replay.run(sid, times)

    def _refuse_in_capture(self, what: str) -> None:
        if self.capturing() is not None:
            raise CaptureError(
                f"{what} inside a capture block: nothing in the block has run yet; {what} after the "
                f"block (after graph.replay())"
            )

    def empty_tensor(self, shape: Iterable[int], dtype: Any) -> Tensor:
        """A tensor of uninitialised memory; rows may be padded (pitched) on some backends."""
        sid = self._sid()
        with self._lock:
            return self._server.empty_tensor(shape, dtype, sid)

    def create_tensor(self, array: Any) -> Tensor:
        """A tensor holding a copy of a numpy array."""
        sid = self._sid()
        with self._lock:
            return self._server.create_tensor(array, sid)

    def empty_array(self, shape: Iterable[int] | int, dtype: Any) -> Array:
        """An :class:`~cubeplug.Array` of uninitialised memory, C-contiguous."""
        dims = (shape,) if isinstance(shape, (int, np.integer)) else shape
        dims = check_shape(dims)
        dt = DTYPES[dtype_of(dtype)]
        nbytes = dt.itemsize
        for d in dims:
            nbytes *= d
        return Array(self, self.empty(nbytes), dt, dims)

    def asarray(self, obj: Any, dtype: Any = None) -> Array:
        """``obj`` as an :class:`~cubeplug.Array` of this client.

        An Array of this client is returned as is (a copy when ``dtype`` differs), one of another
        client copied here; a Handle (with ``dtype``) or a Tensor is wrapped without a copy; device
        memory (``__cuda_array_interface__``, a GPU ``__dlpack__``) is taken where the backend can
        (zero copy where it can wrap it); anything in host memory (numpy, a CPU ``__dlpack__``
        object, lists of numbers) is copied to the device.
        """
        if isinstance(obj, Array):
            arr: Array = obj
            if arr.client is not self:
                moved = arr if arr.is_contiguous else arr.copy()
                arr = Array(self, arr.client.to_client(moved.handle, self), moved.dtype, moved.shape)
            if dtype is None or DTYPES[dtype_of(dtype)] == arr.dtype:
                return arr
            return self.asarray(arr.numpy().astype(DTYPES[dtype_of(dtype)]))
        if type(obj) is Handle:
            if dtype is None:
                raise ValidationError(
                    "asarray of a Handle needs its dtype: client.asarray(handle, dtype) wraps it "
                    "without a copy"
                )
            self._server.check_handle(obj)
            return Array(self, obj, dtype)
        if isinstance(obj, Tensor):
            self._server.check_handle(obj.handle, "the tensor's handle")
            if dtype is not None and DTYPES[dtype_of(dtype)] != obj.dtype:
                raise ValidationError(
                    f"asarray wraps a Tensor without a copy, as {obj.dtype}; read it with "
                    f"client.read_tensor(t) to convert it to {dtype}"
                )
            return Array(self, obj.handle, obj.dtype, obj.shape, obj.strides)
        host = host_source(obj, dtype)
        if host is None:
            sid = self._sid()
            with self._lock:
                tensor = self._server.import_device_array(obj, sid)
            if tensor is None:
                raise ValidationError(
                    f"this {self.backend} client cannot take device memory of {describe(obj)}; copy "
                    f"it to the host first (cupy: .get(), torch: .cpu()) and pass that"
                )
            out = Array(self, tensor.handle, tensor.dtype, tensor.shape, tensor.strides)
            if dtype is not None and DTYPES[dtype_of(dtype)] != out.dtype:
                return self.asarray(out.numpy(), dtype)
            return out
        shape = tuple(int(d) for d in host.shape)
        return Array(self, self.create(host), host.dtype, shape)

    def memory_usage(self) -> MemoryUsage:
        """Allocations, bytes in use, padding and bytes reserved from the device."""
        with self._lock:
            return self._server.memory_usage()

    def memory_report(self) -> list[PoolReport]:
        """A report per memory pool."""
        with self._lock:
            return self._server.memory_report()

    def memory_cleanup(self) -> None:
        """Return to the device every page that no handle and no queued work uses."""
        with self._lock:
            self._server.memory_cleanup()

    @contextlib.contextmanager
    def persistent_memory(self) -> Iterator[None]:
        """Allocate persistently (exact-size, kept across cleanups) inside the block; nests."""
        with self._lock:
            self._server.push_allocation_mode(AllocationMode.PERSISTENT)
        try:
            yield
        finally:
            with self._lock:
                self._server.pop_allocation_mode()

    def reserve_staging(self, sizes: Sequence[int]) -> list[np.ndarray]:
        """Host buffers for fast uploads (pinned where the backend has pinned memory)."""
        with self._lock:
            return self._server.reserve_staging(list(sizes))

    # ------------------------------------------------------------------ reads
    def read_async(self, handles: Sequence[Handle]) -> Future[list[bytes]]:
        """A future of the bytes of each handle, after the work that writes them."""
        self._refuse_in_capture("a read")
        sid = self._sid()
        handles = _handle_list(handles, "read")
        with self._lock:
            return self._server.read_async(handles, sid)

    def read(self, handles: Sequence[Handle]) -> list[bytes]:
        """The bytes of each handle, after the work that writes them."""
        return self.read_async(handles).result()

    def read_one(self, handle: Handle) -> bytes:
        """The bytes of one handle."""
        return self.read_async([handle]).result()[0]

    def to_numpy(self, handle: Handle, dtype: Any, shape: Iterable[int] | None = None) -> np.ndarray:
        """A handle's bytes as a numpy array of ``dtype`` (and ``shape``)."""
        dt = DTYPES[dtype_of(dtype)]
        if type(handle) is not Handle:
            raise ValidationError(f"to_numpy takes a cubeplug Handle, got {type(handle).__name__}")
        if handle.size % dt.itemsize:
            raise ValidationError(f"a view of {handle.size} B is not a whole number of {dt} elements")
        dims = None if shape is None else _shape_for(shape, handle.size // dt.itemsize, dt)
        arr = _writable(np.frombuffer(self.read_one(handle), dtype=dt))
        return arr if dims is None else arr.reshape(dims)

    def read_tensor(self, tensor: Tensor) -> np.ndarray:
        """A tensor as a C-contiguous numpy array, honouring its strides (pitched rows)."""
        if not isinstance(tensor, Tensor):
            raise ValidationError(f"read_tensor takes a Tensor, got {type(tensor).__name__}")
        sid = self._sid()
        with self._lock:
            future = self._server.read_tensor_async(tensor, sid)
        return future.result()

    def as_native(self, handle: Handle, dtype: Any, shape: Iterable[int] | None = None) -> Any:
        """A zero-copy array of the backend's library over a handle (CuPy on cuda); it keeps it alive."""
        sid = self._sid()
        with self._lock:
            return self._server.as_native(handle, dtype, None if shape is None else tuple(shape), sid)

    def as_cupy(self, handle: Handle, dtype: Any, shape: Iterable[int] | None = None) -> Any:
        """A zero-copy ``cupy.ndarray`` over a CUDA handle (exposes ``__cuda_array_interface__``)."""
        if self.backend != "cuda":
            raise ValidationError(f"as_cupy needs a cuda client, this one is {self.backend}")
        return self.as_native(handle, dtype, shape)

    # ------------------------------------------------------------------ launches
    def launch(
        self,
        kernel: Kernel,
        count: CubeCount | int | tuple[int, ...],
        buffers: Sequence[Handle] = (),
        scalars: Sequence[Any] = (),
    ) -> None:
        """Launch ``kernel`` on ``count`` cubes; arguments are validated (checked mode)."""
        self._launcher.launch(kernel, count, buffers, scalars)

    def launch_unchecked(
        self,
        kernel: Kernel,
        count: CubeCount | int | tuple[int, ...],
        buffers: Sequence[Handle] = (),
        scalars: Sequence[Any] = (),
    ) -> None:
        """Launch without validating the arguments (the caller vouches for them)."""
        self._launcher.launch_unchecked(kernel, count, buffers, scalars)

    @property
    def launcher(self) -> Launcher:
        """The launcher of this client's launches (for backend authors and tests)."""
        launcher = self._launcher
        if isinstance(launcher, CaptureLauncher):  # a capture block stands in for it meanwhile
            return launcher.real
        return launcher

    def profiling_summary(self) -> str:
        """The table of per-kernel timings collected under ``[profiling] level``."""
        return self._profile.summary()

    # ------------------------------------------------------------------ synchronisation
    def flush(self) -> None:
        """Submit the current stream's queued work to the device."""
        sid = self._sid()
        with self._lock:
            self._server.flush(sid)

    def sync(self, all_streams: bool = False) -> None:
        """Wait until the current stream's work (or every stream's) completed."""
        self._refuse_in_capture("a sync")
        sid = self._sid()
        if all_streams:
            with self._lock:
                self._server.sync_all()
        else:
            with self._lock:
                wait = self._server.sync_begin(sid)
            if wait is not None:
                wait()  # outside the lock: other threads keep launching meanwhile
        self._server.check_red_zones(sid)  # the checked-memory mode (``[memory] guard``) only

    @contextlib.contextmanager
    def stream(self) -> Iterator[int]:
        """Run the block on a fresh stream of its own; yields the stream id."""
        with stream_scope() as sid:
            yield sid

    def profile(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> tuple[R, ProfileDuration]:
        """Run ``fn`` and measure the device work it queued: (result, ProfileDuration)."""
        if not callable(fn):
            raise ValidationError(
                f"profile takes a function to run (and its arguments), got {describe(fn)}; e.g. "
                f"client.profile(client.launch, kernel, count, buffers, scalars)"
            )
        sid = self._sid()
        with self._lock:
            pid = self._server.profile_start(sid)
        try:
            result = fn(*args, **kwargs)
        finally:
            with self._lock:
                duration = self._server.profile_end(pid)
        return result, duration

    # ------------------------------------------------------------------ between clients
    def to_client(self, handle: Handle, other: ComputeClient) -> Handle:
        """A copy of ``handle`` owned by ``other`` (same device, another device or another backend):
        device to device where the backend copies between its devices (``peer_copies_to``), else
        through host memory."""
        if not isinstance(other, ComputeClient):
            raise ValidationError(f"to_client needs a ComputeClient, got {type(other).__name__}")
        if other is self:
            sid = self._sid()
            with self._lock:
                return self._server.copy_handle(handle, sid)
        sid = self._sid()
        first, second = sorted((self, other), key=lambda c: c._server.id)
        with first._lock, second._lock:
            moved = self._server.transfer_to(handle, other._server, sid)
        if moved is not None:
            return moved
        handle = self._server.check_handle(handle)
        if not handle.size:
            return other.create(b"")
        dst = other.empty(handle.size)
        self._copy_through_host(handle, other, dst, sid, other._sid())
        return dst

    def stream_id(self) -> int:
        """The server stream id of the calling thread (what :meth:`copy_to` takes as a stream)."""
        return self._sid()

    def copy_to(
        self,
        src: Handle,
        other: ComputeClient,
        dst: Handle,
        *,
        src_stream: int | None = None,
        dst_stream: int | None = None,
    ) -> None:
        """Copy ``src`` (this client's) into ``dst`` (``other``'s, a view too; the sizes must match),
        after the work queued on ``src_stream`` here and before later work on ``dst_stream`` there
        (both default to the calling thread's streams, see :meth:`stream_id`). Device to device where
        the backend can (``ComputeServer.peer_copies_to``), else a read and a write through the host."""
        if other is self and src_stream is None and dst_stream is None:
            self.copy(src, dst)  # recorded inside a capture block, as a copy is
            return
        self._refuse_in_capture("a copy to another client")
        if other is self:
            if src_stream is not None and dst_stream is not None and src_stream != dst_stream:
                raise ValidationError(
                    f"copy_to within one client runs on one stream; src_stream={src_stream} and "
                    f"dst_stream={dst_stream} differ (order the streams with client.sync, or copy)"
                )
            given = src_stream if src_stream is not None else dst_stream
            sid = self._sid() if given is None else given
            with self._lock:
                self._server.copy_into(src, dst, sid)
            return
        if not isinstance(other, ComputeClient):
            raise ValidationError(f"copy_to needs a ComputeClient, got {type(other).__name__}")
        sid = self._sid() if src_stream is None else src_stream
        osid = other._sid() if dst_stream is None else dst_stream
        src = self._server.check_handle(src, "source handle")
        dst = other._server.check_handle(dst, "destination handle")
        if src.size != dst.size:
            raise ValidationError(
                f"copy_to: a source of {src.size} B into a destination of {dst.size} B; the sizes must match"
            )
        if not src.size:
            return
        first, second = sorted((self, other), key=lambda c: c._server.id)
        with first._lock, second._lock:
            if self._server.peer_copies_to(other._server):
                self._server.copy_to_peer(src, other._server, dst, sid, osid)
                return
        self._copy_through_host(src, other, dst, sid, osid)

    def _copy_through_host(self, src: Handle, other: ComputeClient, dst: Handle, sid: int, osid: int) -> None:
        """``src`` into ``dst`` (checked, of equal sizes) through host memory, in pieces of
        :data:`HOST_PIECE` bytes: each read into this backend's staging memory
        (``ComputeServer.read_staged``: pinned or mapped where it has some, never a host copy of
        the bytes) and written into ``dst`` from there, the read of the next piece queued before
        the write of this one. A piece bounds the staging memory one copy holds."""
        n = src.size
        pieces = [(at, min(HOST_PIECE, n - at)) for at in range(0, n, HOST_PIECE)]

        def read(i: int) -> Future[StagedRead]:
            at, size = pieces[i]
            with self._lock:
                return self._server.read_staged(_piece(src, at, size), sid)

        pending: Future[StagedRead] | None = read(0)
        try:
            for i, (at, size) in enumerate(pieces):
                assert pending is not None
                staged = pending.result()
                pending = read(i + 1) if i + 1 < len(pieces) else None
                try:
                    with other._lock:
                        other._server.write_into(_piece(dst, at, size), staged.view, osid)
                finally:
                    staged.release()
        finally:
            if pending is not None:  # an error: the next piece's memory goes back once read
                pending.add_done_callback(_release_staged)

    # ------------------------------------------------------------------ collectives
    @property
    def collectives(self) -> Collectives:
        """The collectives of this client: the backend's own (``ComputeServer.new_collectives``),
        else the portable ones (docs/devices.md)."""
        impl = self.__dict__.get("_collectives")
        if impl is None:
            impl = self._server.new_collectives() or collective.portable()
            self.__dict__["_collectives"] = impl
        return impl

    def all_reduce(
        self, src: Any, dst: Any, op: str = "sum", *, devices: Sequence[Any], dtype: Any = None,
        timeout: float | None = None,
    ) -> None:  # fmt: skip
        """Every participant's ``dst`` gets ``op`` ("sum", "prod", "min", "max") over the ``src`` of
        all. Called once per client listed in ``devices`` (the clients, or their device indices), each
        from its own thread; returns once every participant queued its part (the work runs on the
        calling thread's stream). ``src`` and ``dst`` are Arrays, or Handles with ``dtype``; they may
        be the same (in place)."""
        collective.run(self, "all_reduce", src, dst, devices=devices, op=op, dtype=dtype,
                       timeout=timeout)  # fmt: skip

    def broadcast(
        self, src: Any, dst: Any, root: int = 0, *, devices: Sequence[Any], dtype: Any = None,
        timeout: float | None = None,
    ) -> None:  # fmt: skip
        """Every participant's ``dst`` gets the ``src`` of rank ``root`` (others may pass None)."""
        collective.run(self, "broadcast", src, dst, devices=devices, root=root, dtype=dtype,
                       timeout=timeout)  # fmt: skip

    def all_gather(
        self, src: Any, dst: Any, *, devices: Sequence[Any], dtype: Any = None, timeout: float | None = None
    ) -> None:
        """Every participant's ``dst`` (N times ``src``) gets the ``src`` of each rank in rank order."""
        collective.run(self, "all_gather", src, dst, devices=devices, dtype=dtype,
                       timeout=timeout)  # fmt: skip

    def reduce_scatter(
        self, src: Any, dst: Any, op: str = "sum", *, devices: Sequence[Any], dtype: Any = None,
        timeout: float | None = None,
    ) -> None:  # fmt: skip
        """Rank r's ``dst`` gets ``op`` over chunk r (``src`` is N chunks the size of ``dst``) of all."""
        collective.run(self, "reduce_scatter", src, dst, devices=devices, op=op,
                       dtype=dtype, timeout=timeout)  # fmt: skip

    def sync_collective(self) -> None:
        """Wait until the collectives this thread queued on this client completed (CubeCL's name)."""
        self._refuse_in_capture("a collective sync")
        self.collectives.sync(self)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran: every call then raises ValidationError."""
        return isinstance(self._server, _ClosedServer)

    def close(self) -> None:
        """Wait for queued work and release the device; later calls raise ValidationError.

        Closing twice is harmless. Handles of the client may still be dropped; using them (or the
        client) raises. ``cubeplug.client()`` makes a new client in place of a closed one.
        """
        with self._lock:
            server = self._server
            if isinstance(server, _ClosedServer):
                return
            try:
                server.sync_all()
            except DeviceLostError:
                pass  # nothing to wait for on a lost device: closing it only releases what is left
            finally:
                # Every path now reaches the stand-in, which raises, and never the released device
                # (a closed WebGPU device aborts the process on a submit).
                closed = _ClosedServer(server)
                self._server = closed  # type: ignore[assignment]
                self._launcher.close(closed)
                self.__dict__.pop("empty", None)  # the lock-free closure over the server's pools
                try:
                    collective.forget(int(server.id))  # its groups' communicators, before the device
                finally:
                    server.close()


#: Bytes of one piece of a copy between backends through host memory (a read into staging memory,
#: then a write from it); the next piece is read while this one is written.
HOST_PIECE = 16 << 20


def _piece(handle: Handle, at: int, size: int) -> Handle:
    """Bytes ``[at, at + size)`` of ``handle``, as a view (the handle itself when that is all of it)."""
    if at == 0 and size == handle.size:
        return handle
    return handle.range(at, size)


def _release_staged(future: Future[StagedRead]) -> None:
    if future.exception() is None:
        future.result().release()


def _no_replay(steps: Sequence[Any]) -> None:
    """The native replay of a graph whose capture block raised: none (the recorded one serves)."""
    return None


class _ClosedServer:
    """What a closed client's calls reach: its identity, and ValidationError for anything else
    (ForkedClientError for a client inherited through ``fork``)."""

    __slots__ = ("backend", "closed", "forked", "info")

    def __init__(self, server: ComputeServer, forked: bool = False) -> None:
        self.backend = server.backend
        self.info = server.info
        #: The server that was closed (``client.server`` still gives it, for tests and backend authors).
        self.closed = server
        self.forked = forked

    def __getattr__(self, name: str) -> Any:
        if self.forked:
            raise ForkedClientError(
                f"this {self.backend} client ({self.info}) was created before this process forked; its "
                f"device, threads and locks belong to the parent process. Create a new client in the "
                f"child with cubeplug.client(...), or start worker processes with the \"spawn\" method "
                f"(multiprocessing.get_context('spawn'))"
            )
        raise ValidationError(
            f"this {self.backend} client ({self.info}) was closed; get a new client with "
            f"cubeplug.client(...) (it replaces a closed one)"
        )


#: Every client of this process (weakly): a forked child turns them into closed stand-ins.
_live_clients: weakref.WeakSet[ComputeClient] = weakref.WeakSet()
#: What the parent's clients held, kept alive (and never released) in a forked child: releasing a
#: device object, joining a thread or taking a lock of the parent there may hang or crash.
_inherited: list[Any] = []


def _after_fork_in_child() -> None:
    """Every client inherited through ``fork`` raises ForkedClientError from now on (at once, where
    it used to hang on a lock, a thread or a device of the parent); ``cubeplug.client()`` sees it as
    closed and makes a new one."""
    for client in list(_live_clients):
        server = client._server
        if isinstance(server, _ClosedServer):
            continue
        server.forked = True
        _inherited.append(server)
        _inherited.append(client.__dict__.copy())  # compiled launchers, lock-free paths, plans
        lock = threading.RLock()  # another thread of the parent may have held the old one
        client._channel = DeviceHandle.__new__(DeviceHandle)
        client._channel.server, client._channel.lock = server, lock
        client._lock, client._acquire, client._release = lock, lock.acquire, lock.release
        closed = _ClosedServer(server, forked=True)
        client._server = closed  # type: ignore[assignment]
        client._launcher.refuse(closed, lock)
        client.__dict__.pop("empty", None)
    _live_clients.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _handle_list(handles: Any, what: str) -> list[Handle]:
    """``handles`` as a list, or ValidationError for one handle or anything that is not a sequence."""
    if type(handles) is list:
        return handles
    if isinstance(handles, Handle):
        raise ValidationError(
            f"{what} takes a list of handles, got one Handle; use client.{what}([handle]) or "
            f"client.read_one(handle)"
        )
    if isinstance(handles, (str, bytes, dict)) or not isinstance(handles, Iterable):
        raise ValidationError(f"{what} takes a list of handles, got {describe(handles)}")
    return list(handles)


def _shape_for(shape: Any, elements: int, dtype: np.dtype[Any]) -> tuple[int, ...]:
    """``shape`` as a tuple of ints holding exactly ``elements``, or ValidationError saying why not."""
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or not all(
        isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= -1 for d in shape
    ):
        raise ValidationError(f"shape must be a tuple of non-negative ints, got {describe(shape)}")
    dims = tuple(int(d) for d in shape)
    known = 1
    for d in dims:
        known *= d if d >= 0 else 1
    free = dims.count(-1)
    fits = known == elements if not free else free == 1 and known and elements % known == 0
    if not fits:
        raise ValidationError(
            f"shape {dims} does not hold the {elements} {dtype} elements of the handle; give a shape "
            f"whose product is {elements} (or -1 for one axis), or read a view of the handle"
        )
    return dims


def _writable(arr: np.ndarray) -> np.ndarray:
    return arr if arr.flags.writeable else arr.copy()
