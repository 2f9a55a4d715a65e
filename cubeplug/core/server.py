"""The ComputeServer contract: what executes work for one device (docs/kernels.md, docs/memory.md).

:class:`ComputeServer` does everything that is the same on every backend: it validates arguments,
reserves memory through the pools, makes handles, caches compiled kernels and keeps profiling
tokens. A backend subclasses it and implements the device primitives in the second half of the
class (compile, execute, write, read, copy, flush, sync). The client calls a server only through
its channel, so a server never sees two calls at once.
"""

from __future__ import annotations

import itertools
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import Any, TypeGuard

import numpy as np

from cubeplug.core import events
from cubeplug.core.backend import Capabilities, DeviceInfo
from cubeplug.core.collective import Collectives
from cubeplug.core.config import Config
from cubeplug.core.errors import CubeplugError, LaunchError, ValidationError
from cubeplug.core.handle import Handle, Tensor, check_shape, contiguous_strides, gather, tensor_extent
from cubeplug.core.hostmem import StagedRead, staging_sizes
from cubeplug.core.kernel import (
    DTYPES,
    CompileCache,
    CubeCount,
    ExecutionMode,
    Kernel,
    Scalar,
    dtype_of,
    to_scalar,
)
from cubeplug.core.launcher import Compiled as Compiled  # re-exported: part of a server's interface
from cubeplug.core.launcher import Launcher, LaunchSettings
from cubeplug.core.memory import (
    AllocationMode,
    MemoryLimit,
    MemoryManagement,
    MemoryUsage,
    PoolReport,
    SliceToken,
)
from cubeplug.core.memory.guard import RedZones
from cubeplug.core.plans import QueueCode
from cubeplug.core.profile import ProfileDuration, ProfileToken
from cubeplug.core.replay import Replay, Step
from cubeplug.core.storage import ComputeStorage, MemoryProperties
from cubeplug.core.stream import StreamPool, current_stream_id, thread_streams

_new = object.__new__
_server_ids = itertools.count(1)


def repeated_byte(pattern: bytes) -> int | None:
    """The byte a fill ``pattern`` repeats (every byte the same: zero, or a u8's value), else None:
    such a fill is a memset on every device API (CUDA, OpenCL), any offset and size."""
    return pattern[0] if pattern and pattern.count(pattern[:1]) == len(pattern) else None


class ComputeServer(ABC):
    """One device's executor: generic memory, handle and launch logic over backend primitives."""

    #: Kernel dialects this backend compiles, in order of preference.
    dialects: tuple[str, ...] = ()
    #: True for backends with native streams (one memory management per stream, stream-ordered reuse).
    per_stream_memory: bool = False
    #: True in a child process for a server its parent made before ``fork`` (never used there).
    forked: bool = False

    def __init__(
        self,
        *,
        backend: str,
        info: DeviceInfo,
        storage: ComputeStorage,
        memory_properties: MemoryProperties,
        capabilities: Capabilities,
        config: Config | None = None,
        properties: dict[str, Any] | None = None,
    ) -> None:
        self.id = next(_server_ids)
        self.backend = backend
        self.info = info
        self.storage = storage
        self.memory_properties = memory_properties
        self.capabilities = capabilities
        self.config = config or Config()
        self.properties: dict[str, Any] = dict(properties or {})
        self._client_ref: weakref.ref[Any] | None = None
        self.compile_cache = CompileCache()
        self._single_stream = self.config.streaming.policy == "single"
        self._align = capabilities.offset_alignment
        self._max_count: tuple[int, int, int] = capabilities.max_cube_count
        self._modes: list[AllocationMode] = []
        self._profiles: dict[int, ProfileToken] = {}
        self._profile_ids = itertools.count(1)
        total = memory_properties.total_memory
        limit = self.config.memory.limit
        self.limit = MemoryLimit.parse(limit, total) if limit is not None else None
        persistent = self.config.memory.persistent_memory
        # Nothing the server owns refers back to it strongly (weak callbacks, a weak client), so a
        # dropped server is released by reference counting, at once, with its device resources.
        me = weakref.ref(self)
        self._memories: StreamPool[MemoryManagement] = StreamPool(
            lambda: _server(me)._new_memory(persistent), self.config.streaming.max_streams
        )
        self._mm_shared = None if self.per_stream_memory else self._new_memory(persistent)
        self._mm_slots, self._mm_count = self._memories.slots, self._memories.max_streams
        #: The checked-memory mode's red zones (``[memory] guard``); None when it is off.
        self.red_zones = RedZones(capabilities.offset_alignment) if self.config.memory.guard else None

    @property
    def client(self) -> Any:
        """The client wrapping this server (None once that client is gone)."""
        ref = self._client_ref
        return None if ref is None else ref()

    @client.setter
    def client(self, value: Any) -> None:
        self._client_ref = None if value is None else weakref.ref(value)

    def _new_memory(self, persistent: str) -> MemoryManagement:
        me = weakref.ref(self)
        mm = MemoryManagement(
            self.storage,
            self.memory_properties,
            limit=self.limit,
            persistent=persistent,
            on_oom=lambda requested, in_use, reserved: _server(me)._on_oom(requested, in_use, reserved),
            reclaim=lambda: _server(me)._reclaim(),
            # Asked only of a server that holds memory in queued work (it overrides release_queued):
            # the others would be called at every pool growth for nothing.
            release_queued=(
                None if type(self).release_queued is ComputeServer.release_queued
                else lambda wait: _server(me).release_queued(wait)
            ),
        )
        for mode in self._modes:
            mm.push_mode(mode)
        return mm

    def _reclaim(self) -> None:
        """On the out-of-memory path: free the cached pages of every stream's memory management."""
        for mm in self._all_memories():
            mm.cleanup(explicit=True)

    def release_queued(self, wait: bool) -> bool:
        """Called before a memory pool grows (``wait`` False) and on the out-of-memory path (True):
        hand queued work whose tasks still hold the memory of dropped handles to the device, so that
        the pools can lend it again; True when memory may have been freed.

        The base server queues nothing on the host (its tasks reach the device queue at once):
        False. Backends on the single-queue scheduler override it."""
        return False

    def _on_oom(self, requested: int, in_use: int, reserved: int) -> None:
        """Called just before OutOfMemoryError; notifies the plugins observing out-of-memory."""
        try:
            events.out_of_memory(self.backend, requested, in_use, reserved)
        except Exception:  # an observer never turns an OOM into another error
            pass

    # ------------------------------------------------------------------ streams and memory
    def stream_id(self, current: int) -> int:
        """The stream to use for the caller's stream id (all map to 0 under the single policy)."""
        return 0 if self._single_stream else current

    def memory(self, stream_id: int) -> MemoryManagement:
        """The memory management that serves ``stream_id``."""
        mm = self._mm_shared
        return mm if mm is not None else self._memories.get(stream_id)

    def _all_memories(self) -> list[MemoryManagement]:
        if self._mm_shared is not None:
            return [self._mm_shared]
        return [mm for _, mm in self._memories.created()]

    def empty(self, nbytes: int, stream_id: int) -> Handle:
        """A handle to ``nbytes`` of uninitialised device memory (under the client's lock)."""
        if type(nbytes) is not int or nbytes < 0:
            nbytes = _byte_count(nbytes)
        mm = self._mm_shared or self._mm_slots[stream_id % self._mm_count] or self._memories.get(stream_id)
        zones = self.red_zones
        if zones is None:
            return Handle(mm.reserve(nbytes, stream_id), self, nbytes, stream_id)
        raw = Handle(mm.reserve(nbytes + zones.extra(), stream_id), self, nbytes + zones.extra(), stream_id)
        return zones.arm(self, raw, nbytes, stream_id)

    def check_red_zones(self, stream_id: int) -> None:
        """In the checked-memory mode, MemoryCorruptionError when a kernel wrote into a red zone
        (the client calls it after each sync); nothing otherwise."""
        if self.red_zones is not None:
            self.red_zones.check(self, stream_id)

    def empty_path(self, single: bool, lock: Any) -> Callable[[int], Handle] | None:
        """The client's ``empty(nbytes)``: a freed slice of the exact size lent again without the
        lock, otherwise :meth:`empty` under ``lock``.

        The thread's stream is found as the client finds it: ``0`` when ``single``, else the top of
        the thread's stream stack (through :meth:`stream_id` on a thread that has none yet). The
        lock-free part is the protocol of ``MemoryManagement.reuse`` (see ``SlicedPool.reuse_entry``):
        the record at the left of the pool's ``freed`` deque is taken off in one atomic ``popleft``,
        so no two threads ever get the same one, lent again when its size is the padded size, and
        otherwise put back where it was. Each reservation still counts towards the idle checks
        (a count lost to a race only delays one check). None when the server's class overrides
        :meth:`empty`: the client then calls that under the lock every time.
        """
        if type(self).empty is not ComputeServer.empty or self.red_zones is not None:
            return None
        acquire, release, general = lock.acquire, lock.release, self.empty
        me: Any = self
        shared, slots, nslots = self._mm_shared, self._mm_slots, self._mm_count

        def empty(nbytes: int) -> Handle:
            """A handle to ``nbytes`` of uninitialised device memory."""
            try:
                sid = 0 if single else thread_streams.stack[-1]
            except AttributeError:
                sid = me.stream_id(current_stream_id())
            mm = shared or slots[sid % nslots]
            if mm is not None and type(nbytes) is int:
                reuse = mm.reuse.get(nbytes)
                if reuse is not None:
                    until = mm.until_check
                    freed, padded, release_record = reuse
                    if until > 1 and freed:
                        try:
                            record = freed.popleft()  # atomic: the record is this thread's alone
                        except IndexError:  # another thread took the last one
                            pass
                        else:
                            if record.size == padded:
                                mm.until_check = until - 1
                                record.requested = nbytes
                                # Handle(token, server, nbytes, sid) without the calls: the hot path
                                handle = _new(Handle)
                                token = handle.token = _new(SliceToken)
                                token.storage = record.storage
                                token.stream = sid
                                token.record = record
                                token.give_back = release_record
                                handle.owner = me
                                handle.nbytes = nbytes
                                handle.stream = sid
                                handle.start = handle.end = 0
                                return handle
                            freed.appendleft(record)  # another size: back where it was
            try:  # not ``with``: half the cost; taken inside the ``try`` (see ComputeClient.launch)
                acquire()
                return general(nbytes, sid)
            finally:
                release()

        return empty

    def create(self, data: Any, stream_id: int) -> Handle:
        """A handle holding a copy of ``data`` (bytes-like or numpy array)."""
        view = self.as_bytes(data)
        handle = self.empty(view.nbytes, stream_id)
        if view.nbytes:
            self.write(stream_id, handle, view)
        return handle

    def as_bytes(self, data: Any) -> memoryview:
        """``data`` as a C-contiguous byte view; ValidationError for what cannot be uploaded."""
        if isinstance(data, np.ndarray):
            if data.dtype.hasobject:
                raise ValidationError("cannot upload an array of Python objects; use a numeric dtype")
            return np.ascontiguousarray(data).reshape(-1).data.cast("B")
        if isinstance(data, (bytes, bytearray, memoryview)):
            view = memoryview(data)
            if not view.c_contiguous:
                view = memoryview(view.tobytes())
            return view.cast("B") if view.format != "B" or view.ndim != 1 else view
        if hasattr(data, "__array_interface__") or hasattr(data, "__buffer__"):
            return np.ascontiguousarray(np.asarray(data)).data.cast("B")
        raise ValidationError(
            f"create() takes bytes-like data or a numpy array, got {type(data).__name__}; "
            f"for a list use numpy.asarray(values, dtype=...)"
        )

    def is_live_handle(self, handle: Any) -> TypeGuard[Handle]:
        """True for what :meth:`check_handle` accepts, in one test (for hot paths that check first
        and ask :meth:`check_handle` for the error only when this is False)."""
        return type(handle) is Handle and handle.owner is self and handle.token is not None

    def check_handle(self, handle: Any, what: str = "handle") -> Handle:
        """``handle`` if it is a live handle of this server, else ValidationError saying why."""
        if self.is_live_handle(handle):
            return handle
        if type(handle) is not Handle:
            raise ValidationError(f"{what} must be a cubeplug Handle, got {type(handle).__name__}")
        if handle.owner is not self:
            owner = getattr(handle.owner, "info", "another client")
            where = f"another client of the same device ({owner})" if owner == self.info else (
                f"another client ({owner}), not {self.info}"
            )
            raise ValidationError(
                f"{what} belongs to {where}; move it with client.to_client(handle, this_client)"
            )
        if handle.token is None:
            raise ValidationError(f"{what} was dropped with .drop(); create a new handle")
        return handle

    def memory_usage(self) -> MemoryUsage:
        """Memory figures summed over every memory management of this server."""
        usage = MemoryUsage(0, 0, 0, 0)
        for mm in self._all_memories():
            usage = usage + mm.usage()
        return usage

    def memory_report(self) -> list[PoolReport]:
        """A report per pool, over every memory management of this server."""
        return [r for mm in self._all_memories() for r in mm.report()]

    def memory_cleanup(self) -> None:
        """Free every page no handle uses, after the queued work that may still use it."""
        self.sync_all()
        for mm in self._all_memories():
            mm.cleanup(explicit=True)
        self.storage.flush()

    def push_allocation_mode(self, mode: AllocationMode) -> None:
        """Enter an allocation-mode window (nests)."""
        self._modes.append(mode)
        for mm in self._all_memories():
            mm.push_mode(mode)

    def pop_allocation_mode(self) -> None:
        """Leave the innermost allocation-mode window."""
        self._modes.pop()
        for mm in self._all_memories():
            mm.pop_mode()

    # ------------------------------------------------------------------ launch
    def new_launcher(self, settings: LaunchSettings) -> Launcher:
        """The launcher of this server's client (:mod:`cubeplug.core.launcher`). A backend with a
        faster launch path returns its subclass of :class:`~cubeplug.core.launcher.Launcher` here."""
        return Launcher(self, settings)

    def new_replay(self, steps: Sequence[Step]) -> Replay | None:
        """A native replay of a captured graph's ``steps`` (:mod:`cubeplug.core.replay`), or None:
        the graph then replays them through the launcher, which every backend supports. A backend
        returns its own (a CUDA graph, a whole replay in one submit) for the steps it can replay
        natively, and None for the others (for example a dynamic ``CubeCount``). Called under the
        client's lock when a capture block ends."""
        return None

    def queue_code(self, kernel: Kernel, compiled: Compiled) -> QueueCode | None:
        """The backend's launch of ``kernel`` as source for the checked plan to inline
        (:class:`~cubeplug.core.plans.QueueCode`); None, the default: the plan calls :meth:`execute`."""
        return None

    def check_count(self, x: int, y: int, z: int) -> None:
        """ValidationError when ``(x, y, z)`` cubes exceed the device's ``max_cube_count``; backends
        call it for counts they read from the device (``CubeCount.dynamic``) too."""
        mx, my, mz = self._max_count
        if x > mx or y > my or z > mz:
            raise ValidationError(
                f"a launch of ({x}, {y}, {z}) cubes exceeds this device's limit of {self._max_count} "
                f"cubes per dimension ({self.info}); spread the cubes over x, y and z, or loop inside the "
                f"kernel over more elements per unit"
            )

    def compile_kernel(self, kernel: Kernel, mode: ExecutionMode) -> Compiled:
        """``kernel`` compiled for this device in ``mode``, once per server and kernel id."""
        dialect = kernel.pick_dialect(self.dialects, self.backend)
        key = kernel.kernel_id(mode, dialect)
        compiled: Compiled = self.compile_cache.get(key, lambda: self._compile_new(kernel, dialect, mode))
        return compiled

    def _compile_new(self, kernel: Kernel, dialect: str, mode: ExecutionMode) -> Compiled:
        start = time.perf_counter()
        compiled = Compiled(kernel, dialect, self.compile(kernel, dialect, mode))
        events.kernel_compiled(self.backend, kernel.name, dialect, time.perf_counter() - start)
        return compiled

    # ------------------------------------------------------------------ reads and tensors
    def read_async(self, handles: Sequence[Handle], stream_id: int) -> Future[list[bytes]]:
        """A future of the bytes of each handle, after the work that writes them."""
        for h in handles:
            self.check_handle(h)
        return self.read(stream_id, list(handles))

    def tensor_strides(self, shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
        """The strides (in elements) this backend gives a new tensor; contiguous unless overridden."""
        return contiguous_strides(shape)

    def empty_tensor(self, shape: Iterable[int], dtype: Any, stream_id: int) -> Tensor:
        """A tensor of uninitialised memory, laid out as :meth:`tensor_strides` says."""
        shape_t = check_shape(shape)
        dt = DTYPES[dtype_of(dtype)]
        strides = self.tensor_strides(shape_t, dt.itemsize)
        nbytes = tensor_extent(shape_t, strides) * dt.itemsize
        return Tensor(self.empty(nbytes, stream_id), shape_t, strides, dt)

    def create_tensor(self, array: Any, stream_id: int) -> Tensor:
        """A tensor holding a copy of a numpy array."""
        arr = np.asarray(array)
        dtype_of(arr.dtype)
        shape = tuple(int(s) for s in arr.shape)
        strides = self.tensor_strides(shape, arr.itemsize)
        if strides == contiguous_strides(shape):
            return Tensor(self.create(arr, stream_id), shape, strides, arr.dtype)
        tensor = self.empty_tensor(shape, arr.dtype, stream_id)
        host = np.zeros(tensor_extent(shape, strides), dtype=arr.dtype)
        view = np.lib.stride_tricks.as_strided(
            host, shape=shape, strides=tuple(s * arr.itemsize for s in strides)
        )
        view[...] = arr
        self.write(stream_id, tensor.handle, host.data.cast("B"))
        return tensor

    # ------------------------------------------------------------------ profiling
    def profile_start(self, stream_id: int) -> int:
        """Open a profiling token (tokens nest and overlap); returns its id."""
        self.sync(stream_id)
        token = ProfileToken(stream_id, time.perf_counter(), self.device_marker(stream_id))
        pid = next(self._profile_ids)
        self._profiles[pid] = token
        return pid

    def profile_end(self, pid: int) -> ProfileDuration:
        """Close a profiling token and return its duration."""
        try:
            token = self._profiles.pop(pid)
        except KeyError:
            raise ValidationError(f"profiling token {pid} is not open (ended twice?)") from None
        end_marker = self.device_marker(token.stream_id)
        self.sync(token.stream_id)
        end = time.perf_counter()
        if token.marker is not None and end_marker is not None:
            return ProfileDuration(self.device_elapsed(token.marker, end_marker), "device")
        return ProfileDuration(end - token.start, "system")

    def device_marker(self, stream_id: int) -> Any:
        """A device timestamp marker on a stream, or None where the backend times on the host."""
        return None

    def device_elapsed(self, start: Any, end: Any) -> float:
        """Seconds between two device markers."""
        raise NotImplementedError

    # ------------------------------------------------------------------ transfers
    def reserve_staging(self, sizes: Sequence[int]) -> list[np.ndarray]:
        """Host buffers for uploads; pinned where the backend has pinned memory."""
        return [np.empty(n, dtype=np.uint8) for n in staging_sizes(sizes)]

    def read_tensor_async(self, tensor: Tensor, stream_id: int) -> Future[np.ndarray]:
        """A future of a tensor as a C-contiguous numpy array, honouring its strides."""
        result: Future[np.ndarray] = Future()
        raw = self.read_async([tensor.handle], stream_id)

        def done(f: Future[list[bytes]]) -> None:
            try:
                result.set_result(gather(f.result()[0], tensor))
            except BaseException as e:
                result.set_exception(e)

        raw.add_done_callback(done)
        return result

    def as_native(self, handle: Handle, dtype: Any, shape: Sequence[int] | None, stream_id: int) -> Any:
        """A zero-copy array of the backend's own library over a handle (e.g. a CuPy array)."""
        raise ValidationError(
            f"{self.backend} has no zero-copy native array view; use client.to_numpy(handle, dtype) instead"
        )

    def dlpack_device(self) -> tuple[int, int] | None:
        """The DLPack ``(device type, device id)`` of this server's memory, or None (the default)
        where DLPack has no device type that a consumer takes (an Array then has no ``__dlpack__``).
        A backend that answers also gives, from :meth:`as_native`, an array with ``__dlpack__``."""
        return None

    def import_device_array(self, obj: Any, stream_id: int) -> Tensor | None:
        """A tensor over device memory that ``obj`` exposes (``__cuda_array_interface__``, or a
        ``__dlpack__`` of a non-CPU device), for ``client.asarray``: zero copy where the backend
        can wrap foreign memory, else a device-side copy. None (the default) when this backend
        cannot take it; ``asarray`` then asks the user to copy it to the host first."""
        return None

    def transfer_to(self, handle: Handle, other: ComputeServer, stream_id: int) -> Handle | None:
        """A device-side copy of ``handle`` on ``other`` (:meth:`copy_to_peer` into fresh memory of
        ``other``, on the calling thread's stream there); None when there is no device path."""
        handle = self.check_handle(handle)
        if not self.peer_copies_to(other):
            return None
        other_sid = other.stream_id(current_stream_id())
        dst = other.empty(handle.size, other_sid)
        if handle.size:
            self.copy_to_peer(handle, other, dst, stream_id, other_sid)
        return dst

    def read_staged(self, handle: Handle, stream_id: int) -> Future[StagedRead]:
        """A future of ``handle``'s bytes in host memory that a copy to another backend writes
        from (after the work queued on ``stream_id``), lent until the result's ``release()``: a
        backend with pinned or mapped staging memory reads into it, with no host copy. The
        default is the plain read (ordinary memory). Called with the client's lock held."""
        staged: Future[StagedRead] = Future()

        def done(read: Future[list[bytes]]) -> None:
            try:
                staged.set_result(StagedRead(memoryview(read.result()[0])))
            except BaseException as e:
                staged.set_exception(e)

        self.read_async([handle], stream_id).add_done_callback(done)
        return staged

    def peer_copies_to(self, other: ComputeServer) -> bool:
        """Whether :meth:`copy_to_peer` copies to ``other`` without the host (False by default)."""
        return False

    def copy_to_peer(
        self, src: Handle, other: ComputeServer, dst: Handle, stream_id: int, other_stream_id: int
    ) -> None:
        """Queue a copy of ``src`` (this server's, read after the work queued on ``stream_id``) into
        ``dst`` (``other``'s, written before the work queued later on ``other_stream_id``), device to
        device, ordered by events on both sides. Called with both clients' locks held, only where
        :meth:`peer_copies_to` says True; the sizes were checked."""
        raise NotImplementedError(f"{type(self).__name__} has no peer copies")

    def new_collectives(self) -> Collectives | None:
        """This backend's own collectives (e.g. NCCL on cuda), made once per client; None (the
        default) for the portable ones (device reductions in ``cubeplug.lang`` plus transfers)."""
        return None

    def write_into(self, handle: Any, data: Any, stream_id: int) -> None:
        """Check ``handle`` and ``data`` (the same number of bytes), then :meth:`write` it."""
        handle = self.check_handle(handle)
        view = self.as_bytes(data)
        if view.nbytes != handle.size:
            raise ValidationError(
                f"write: {view.nbytes} B of data into a handle of {handle.size} B; the sizes must match "
                f"(write part of a handle through a view: handle.offset_start(n) / offset_end(n))"
            )
        if view.nbytes:
            self.write(stream_id, handle, view)

    def copy_into(self, src: Any, dst: Any, stream_id: int) -> None:
        """Check both handles (:meth:`check_copy`), then :meth:`copy` ``src`` into ``dst``."""
        if self.check_copy(src, dst):
            self.copy(stream_id, src, dst)

    def check_copy(self, src: Any, dst: Any) -> bool:
        """ValidationError unless ``src`` and ``dst`` are live handles of this server of one size
        whose bytes do not overlap; False when there is nothing to copy (empty, or a range onto
        itself), else True. Views of one allocation may be copied into each other."""
        src = self.check_handle(src, "source handle")
        dst = self.check_handle(dst, "destination handle")
        if src.size != dst.size:
            raise ValidationError(
                f"copy: a source of {src.size} B into a destination of {dst.size} B; the sizes must "
                f"match (copy part of a handle through views: offset_start(n) / offset_end(n))"
            )
        if not src.size:
            return False
        rs, rd = src.memory().storage, dst.memory().storage
        if rs.id == rd.id:
            s0, d0 = rs.offset + src.start, rd.offset + dst.start
            if s0 == d0:
                return False  # the same bytes (the queue order is kept by the ranges' own work)
            if s0 < d0 + src.size and d0 < s0 + src.size:
                # The native copies (cudaMemcpyAsync, clEnqueueCopyBuffer, copy_buffer_to_buffer)
                # leave overlapping ranges undefined or refuse them: refused alike on every backend.
                raise ValidationError(
                    f"copy: the source and destination overlap ({src.size} B each, {abs(d0 - s0)} B "
                    f"apart in one allocation); copy through a separate handle"
                )
        return True

    def fill(self, stream_id: int, handle: Handle, pattern: bytes) -> None:
        """Queue ``handle`` filled with repetitions of ``pattern`` (one element's bytes, 1 to 8 of
        them; the handle's size is a multiple of it), ordered like any other work on the stream. The
        default writes the repeated pattern from the host; the built-in backends override it with
        their device's fill command (see each backend's ``fill``)."""
        self.write(stream_id, handle, memoryview(pattern * (handle.size // len(pattern))))

    def fill_with(self, handle: Any, value: Any, dtype: Any, stream_id: int) -> None:
        """Check ``handle``, ``value`` and ``dtype`` (:meth:`check_fill`), then :meth:`fill` it."""
        pattern = self.check_fill(handle, value, dtype)
        if handle.size:
            self.fill(stream_id, handle, pattern)

    def check_fill(self, handle: Any, value: Any, dtype: Any) -> bytes:
        """The bytes of one ``dtype`` element of ``value``; ValidationError unless ``handle`` is a
        live handle of this server holding a whole number of such elements and ``value`` fits."""
        handle = self.check_handle(handle)
        name = dtype_of(dtype)
        dt = DTYPES[name]
        if handle.size % dt.itemsize:
            raise ValidationError(
                f"fill: a handle of {handle.size} B is not a whole number of {name} elements "
                f"({dt.itemsize} B each)"
            )
        try:
            pattern: bytes = to_scalar(Scalar("value", name), value, "fill").tobytes()
        except ValidationError as e:
            raise ValidationError(f"fill: {value!r} cannot be stored as {name}: {e}") from None
        return pattern

    def copy_handle(self, src: Handle, stream_id: int) -> Handle:
        """A new handle of this server holding a device copy of ``src``."""
        self.check_handle(src)
        dst = self.empty(src.size, stream_id)
        if src.size:
            self.copy(stream_id, src, dst)
        return dst

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release device resources; the server is unusable afterwards."""

    def sync_begin(self, stream_id: int) -> Callable[[], None] | None:
        """Start a sync under the client's lock; return a wait to run outside it (None: done).

        Backends whose wait needs no server state override this so that one thread waiting for the
        device never stalls the other threads' calls; the default syncs under the lock.
        """
        self.sync(stream_id)
        return None

    def raise_async_error(self, errors: list[BaseException]) -> None:
        """Raise (and clear) the first asynchronous error recorded by a backend."""
        if errors:
            try:
                first = errors.pop(0)  # atomic: safe from a wait running outside the lock
            except IndexError:
                return
            errors.clear()
            if isinstance(first, CubeplugError):  # already mapped by the backend (LaunchError, ...)
                raise first
            message = f"queued work failed on {self.info}: {type(first).__name__}: {first}"
            raise LaunchError(message) from first

    # ================================================================== backend primitives
    @abstractmethod
    def compile(self, kernel: Kernel, dialect: str, mode: ExecutionMode) -> Any:
        """Compile ``kernel`` from its ``dialect`` source; raise CompileError with the log on failure."""

    @abstractmethod
    def execute(
        self,
        stream_id: int,
        compiled: Compiled,
        count: CubeCount,
        buffers: Sequence[Handle],
        scalars: Sequence[Any],
    ) -> None:
        """Queue a launch on a stream.

        ``buffers`` are handles (validated in checked mode). ``scalars`` are the values in declared
        order: Python numbers or numpy scalars that fit their dtypes in checked mode, the caller's
        values as given in unchecked mode; pack them before returning (the caller may reuse them).
        """

    @abstractmethod
    def write(self, stream_id: int, handle: Handle, data: memoryview) -> None:
        """Queue a copy of host bytes into a handle's region; ``data`` may be reused once this returns."""

    @abstractmethod
    def read(self, stream_id: int, handles: list[Handle]) -> Future[list[bytes]]:
        """A future of each handle's bytes, ordered after the work queued before it."""

    @abstractmethod
    def copy(self, stream_id: int, src: Handle, dst: Handle) -> None:
        """Queue a device-to-device copy of ``src.size`` bytes from ``src`` into ``dst``."""

    @abstractmethod
    def flush(self, stream_id: int) -> None:
        """Submit the stream's queued work; raise the first asynchronous error recorded so far."""

    @abstractmethod
    def sync(self, stream_id: int) -> None:
        """Block until the stream's work completed; raise the first asynchronous error."""

    @abstractmethod
    def sync_all(self) -> None:
        """Block until the work of every stream completed; raise the first asynchronous error."""


def _server(ref: weakref.ref[ComputeServer]) -> ComputeServer:
    server = ref()
    if server is None:  # only reachable from a callback that outlived its server
        raise LaunchError("the server of this memory was closed and released")
    return server


def _byte_count(nbytes: Any) -> int:
    """``nbytes`` as a non-negative int, or ValidationError saying what was wrong."""
    if isinstance(nbytes, (bool, float)) or not isinstance(nbytes, (int, np.integer)):
        raise ValidationError(f"sizes are byte counts (int), got {type(nbytes).__name__} {nbytes!r}")
    if nbytes < 0:
        raise ValidationError(f"sizes are non-negative byte counts, got {nbytes}")
    return int(nbytes)
