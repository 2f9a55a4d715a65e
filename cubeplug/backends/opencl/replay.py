"""OpenCL replays of captured graphs: a ``cl_khr_command_buffer``, else pre-bound kernels.

``OpenCLServer.new_replay`` turns a graph's steps (:mod:`cubeplug.core.replay`) into one of two
replays, both ordered with the client's other work like a launch (``MultiStream.enter`` over the
graph's handles once per replay, then ``pin`` when memory of another stream is used):

- :class:`CommandBufferReplay` (``graph.replayed_by == "cl_khr_command_buffer"``), where the device
  has the extension (PoCL 3.1 does; NVIDIA's driver 580 does not) and ``[backends.opencl]
  command_buffers`` is on (it is off by default: slower than the pre-bound replay on PoCL, see
  ``options.py``): the steps are recorded once into a command buffer, which a replay enqueues ``times`` times
  with one call each. The spec has a command capture the kernel arguments set when it is recorded,
  but PoCL 3.1 copies them from the kernel when the command buffer is enqueued (two launches of
  one kernel object with other scalars both ran with the last ones: ``test_replays_equal_numpy``),
  so each launch is recorded on a kernel object of its own, bound once, as the pre-bound replay
  binds them. The commands of a command buffer are ordered by sync points only (not by the
  queue), so each one waits on the sync point of the one before. A command buffer belongs to the
  queue it was made for: one is recorded per stream's queue, for the capturing thread's stream
  when the graph is sealed (a driver that refuses it there gets the pre-bound replay instead) and
  for any other stream at its first replay. Before version 0.9.7 of the extension, a command
  buffer enqueued again while still pending needs the simultaneous-use flag: where the device
  offers it (PoCL 3.1 does) the buffer is made with it, else a queue keeps up to :data:`RING`
  copies and reuses each one once its previous enqueue completed (waited for on the host when all
  are pending). From 0.9.7 on, any command buffer may be (the flag is gone).
- :class:`PreboundReplay` (``"pre-bound kernels"``), everywhere else: every launch has a kernel
  object of its own (one per distinct kernel and arguments) whose arguments were all set when the
  graph was sealed, and a replay only enqueues, through the C loop ``_fastlaunch.Batch`` (or
  :class:`PythonBatch`, the same loop in Python, when the extension is not built or
  ``native_launch`` is off); copies and fills go through the server's own ``enqueue_copy`` and
  ``enqueue_fill``.

None (the core's recorded replay, which runs each step through the launch path) for what neither
replays as the launch path would: a dynamic ``CubeCount`` (read on the host at each launch), the
checked-memory mode (red zones: each launch is recorded), a static count beyond the device's limits
or scalars that do not pack (the launch raises: so does the recorded replay, at the replay), and a
fill of a wide pattern at an offset that is no multiple of its size (the server fills it from the
host). Launches with an empty count run nothing and are left out.

The extension's entry points come from ``clGetExtensionFunctionAddressForPlatform`` of the ICD
loader PyOpenCL uses (ctypes). Its signatures changed at version 0.9.5 (the copy, fill and barrier
commands took a properties argument): the device's version of the extension picks them.
"""

from __future__ import annotations

import collections
import ctypes
import functools
import struct
import threading
import types
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cubeplug.backends.opencl import launch_path
from cubeplug.backends.opencl.compiler import OpenCLProgram, clone_program
from cubeplug.backends.opencl.storage import code_name
from cubeplug.plugin import (
    Compiled,
    Handle,
    LaunchError,
    Replay,
    Step,
    ValidationError,
    current_stream_id,
    unique_handles,
)

#: Copies of a command buffer a queue keeps when the device has no simultaneous use.
RING = 3

# cl_khr_command_buffer's constants (cl_ext.h).
_DEVICE_COMMAND_BUFFER_CAPABILITIES = 0x12A9
_CAPABILITY_SIMULTANEOUS_USE = 1 << 2
_COMMAND_BUFFER_FLAGS = 0x1293
_SIMULTANEOUS_USE = 1 << 0
_EVENT_COMMAND_EXECUTION_STATUS = 0x11D3

_P = ctypes.c_void_p
_INT = ctypes.c_int32
_UINT = ctypes.c_uint32
_SIZE = ctypes.c_size_t
_SIZE3 = ctypes.c_size_t * 3
_SYNC_P = ctypes.POINTER(ctypes.c_uint32)

#: What binding a step's arguments on a kernel raises when they do not set (unchecked launches).
_BIND_ERRORS = (ValueError, TypeError, RuntimeError, struct.error)


class CommandBufferError(Exception):
    """A command buffer entry point failed (``new_replay`` then pre-binds, a replay raises LaunchError)."""

    def __init__(self, call: str, code: int) -> None:
        super().__init__(f"{call} failed: {code_name(types.SimpleNamespace(code=code))} ({code})")
        self.code = code


# ---------------------------------------------------------------------- the extension through ctypes
class CommandBufferApi:
    """``cl_khr_command_buffer`` of one device: its entry points (ctypes) and its capabilities."""

    def __init__(self, lib: ctypes.CDLL, platform: int, device: int, version: tuple[int, int, int]) -> None:
        get = lib.clGetExtensionFunctionAddressForPlatform
        get.restype = _P
        get.argtypes = [_P, ctypes.c_char_p]

        def fn(name: str, restype: Any, *argtypes: Any) -> Any:
            address = get(platform, name.encode())
            if not address:
                raise LookupError(f"{name} is not exported by the platform")
            return ctypes.CFUNCTYPE(restype, *argtypes)(address)

        props = (_P,) if version >= (0, 9, 5) else ()  # the copy and fill commands' properties
        tail = (_UINT, _SYNC_P, _SYNC_P, _P)  # sync point wait list, sync point, mutable handle
        self.version = version
        self.with_properties = bool(props)
        self.create = fn("clCreateCommandBufferKHR", _P, _UINT, ctypes.POINTER(_P),
                         ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(_INT))
        self.ndrange = fn("clCommandNDRangeKernelKHR", _INT, _P, _P, _P, _P, _UINT, _P,
                          ctypes.POINTER(_SIZE), ctypes.POINTER(_SIZE), *tail)
        self.copy = fn("clCommandCopyBufferKHR", _INT, _P, _P, *props, _P, _P, _SIZE, _SIZE, _SIZE, *tail)
        self.fill = fn("clCommandFillBufferKHR", _INT, _P, _P, *props, _P, _P, _SIZE, _SIZE, _SIZE, *tail)
        self.finalize = fn("clFinalizeCommandBufferKHR", _INT, _P)
        self.release = fn("clReleaseCommandBufferKHR", _INT, _P)
        self.enqueue = fn("clEnqueueCommandBufferKHR", _INT, _UINT, _P, _P, _UINT, _P, ctypes.POINTER(_P))
        self.flush = lib.clFlush
        self.flush.argtypes, self.flush.restype = [_P], _INT
        self.wait_events = lib.clWaitForEvents
        self.wait_events.argtypes, self.wait_events.restype = [_UINT, ctypes.POINTER(_P)], _INT
        self.release_event = lib.clReleaseEvent
        self.release_event.argtypes, self.release_event.restype = [_P], _INT
        self.event_info = lib.clGetEventInfo
        self.event_info.argtypes = [_P, _UINT, _SIZE, _P, _P]
        self.event_info.restype = _INT
        info = lib.clGetDeviceInfo
        info.argtypes, info.restype = [_P, _UINT, _SIZE, _P, _P], _INT
        caps = ctypes.c_uint64(0)
        if info(device, _DEVICE_COMMAND_BUFFER_CAPABILITIES, 8, ctypes.byref(caps), None) != 0:
            caps.value = 0
        if version >= (0, 9, 7):
            # Since 0.9.7 every command buffer may be enqueued while pending; the flag is gone.
            self.simultaneous, self.flag = True, False
        else:
            #: Whether a command buffer may be enqueued again while pending, and whether it must be
            #: made with the simultaneous-use flag for it.
            self.simultaneous = self.flag = bool(caps.value & _CAPABILITY_SIMULTANEOUS_USE)


_apis: dict[int, CommandBufferApi | None] = {}
_apis_lock = threading.Lock()


def command_buffer_api(device: Any) -> CommandBufferApi | None:
    """The device's :class:`CommandBufferApi` (found once per device), or None where it has none:
    no ``cl_khr_command_buffer``, no version reported for it, or an entry point missing."""
    key = int(device.int_ptr)
    with _apis_lock:
        if key not in _apis:
            _apis[key] = _find_api(device)
        return _apis[key]


def _find_api(device: Any) -> CommandBufferApi | None:
    try:
        versions = {e.name: int(e.version) for e in device.extensions_with_version}
    except Exception:  # OpenCL < 3.0 reports no versions: the signatures cannot be told apart
        return None
    v = versions.get("cl_khr_command_buffer")
    lib = launch_path.opencl_library()
    if v is None or lib is None:
        return None
    version = (v >> 22, (v >> 12) & 0x3FF, v & 0xFFF)
    try:
        return CommandBufferApi(lib, int(device.platform.int_ptr), int(device.int_ptr), version)
    except (AttributeError, LookupError):
        return None


# ---------------------------------------------------------------------- the steps, resolved
@dataclass(frozen=True)
class _Launch:
    compiled: Compiled
    #: The ``cl.Buffer`` bound for each buffer (held here: a kernel argument does not hold it).
    mems: tuple[Any, ...]
    scalars: tuple[Any, ...]
    size: tuple[int, int, int]

    @property
    def prog(self) -> OpenCLProgram:
        program: OpenCLProgram = self.compiled.program
        return program


@dataclass(frozen=True)
class _Copy:
    src: Handle
    dst: Handle


@dataclass(frozen=True)
class _Fill:
    handle: Handle
    pattern: bytes


_Op = _Launch | _Copy | _Fill


def resolve_steps(server: Any, steps: Sequence[Step]) -> list[_Op] | None:
    """The steps as the commands a native replay queues, or None for steps it does not replay (the
    module's docstring says which)."""
    if server.red_zones is not None:
        return None
    ops: list[_Op] = []
    for step in steps:
        if step.is_launch:
            count, compiled = step.count, step.compiled
            assert count is not None and compiled is not None  # a launch step carries both
            if count.handle is not None:  # CubeCount.dynamic: the recorded replay reads it per run
                return None
            try:
                server.check_count(count.x, count.y, count.z)
            except ValidationError:
                return None
            lx, ly, lz = compiled.program.local
            mems = tuple(server.bound_buffer(h) for h in step.handles)
            ops.append(_Launch(compiled, mems, step.scalars, (count.x * lx, count.y * ly, count.z * lz)))
        elif step.is_copy:
            ops.append(_Copy(step.handles[0], step.handles[1]))
        else:
            pattern = server.fill_pattern(step.handles[0], step.pattern)
            if pattern is None:
                return None
            ops.append(_Fill(step.handles[0], pattern))
    return ops


def bind(clone: OpenCLProgram, launch: _Launch) -> None:
    """Set every argument of ``launch`` on ``clone`` (a kernel of the replay's own), as
    ``OpenCLServer.execute`` sets them."""
    if launch.mems:
        pairs = zip(clone.buffer_slots, launch.mems, strict=True)
        clone.set_buffers(tuple(x for pair in pairs for x in pair))
    if launch.scalars:
        args = list(clone.scalar_args)
        args[2::3] = launch.scalars
        clone.set_scalars(tuple(args))


def new_replay(server: Any, steps: Sequence[Step], command_buffers: bool, native: bool) -> Replay | None:
    """``server``'s replay of ``steps`` (see the module docstring); None: the recorded replay.
    ``command_buffers``: try ``cl_khr_command_buffer``; ``native``: the C loop when it is built."""
    import pyopencl as cl

    ops = resolve_steps(server, steps)
    if not ops:
        return None
    handles = unique_handles(steps)
    api = command_buffer_api(server.ctx.device) if command_buffers else None
    try:
        if api is not None:
            queue = server.multistream.streams.get(server.stream_id(current_stream_id())).stream
            try:
                return CommandBufferReplay(server, ops, handles, api, queue)
            except CommandBufferError:
                pass  # the driver refused to record these steps: pre-bound kernels replay them
        module = launch_path.load() if native else None
        return PreboundReplay(server, ops, handles, PythonBatch if module is None else module.Batch)
    except (cl.Error, *_BIND_ERRORS):
        return None  # arguments that do not set: the recorded replay raises as the launch does


# ---------------------------------------------------------------------- the replays
class _OpenCLReplay:
    """What both replays share: the ordering with the client's other work, and the release."""

    kind = ""

    def __init__(self, server: Any, ops: list[_Op], handles: tuple[Handle, ...]) -> None:
        self._server = server
        self._ms = server.multistream
        self._ops = ops  # holds the bound buffers
        self._handles = handles
        self._lock = threading.Lock()
        self._closed = False
        # A kernel object of the replay's own per launch, its arguments all set now and never again:
        # one per distinct kernel and arguments (a graph of 1000 launches of one kernel on the same
        # buffers binds one; clCreateKernel and setting arguments cost microseconds each).
        clones: dict[tuple[Any, ...], OpenCLProgram] = {}
        #: The bound kernel of each step (None: not a launch).
        self._kernels: list[OpenCLProgram | None] = []
        for op in ops:
            clone = None
            if isinstance(op, _Launch):
                scalars = tuple((type(v), repr(v)) for v in op.scalars)  # repr: -0.0 is not 0.0
                key = (id(op.compiled), tuple(map(id, op.mems)), scalars)
                clone = clones.get(key)
                if clone is None:
                    clone = clones[key] = clone_program(op.prog, op.compiled.kernel)
                    bind(clone, op)
            self._kernels.append(clone)
        self._clones = list(clones.values())

    def run(self, stream_id: int, times: int) -> None:
        """Queue the steps ``times`` times on the stream, after what their memory waits for."""
        with self._lock:
            if self._closed:
                raise LaunchError("this graph's replay was released (its client closed); capture again")
            if times <= 0:
                return
            ms = self._ms
            state, analysis = ms.enter(stream_id, self._handles)
            queue = state.stream
            self._enqueue(queue, times)
            if analysis is not None and analysis.pinned:
                ms.pin(analysis, queue)

    def _enqueue(self, queue: Any, times: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release the replay's driver objects. OpenCL keeps what an enqueued command uses alive
        until it completed, so this does not wait for a replay still queued."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._release()
            self._ops = []
            self._handles = ()
            for clone in self._clones:
                clone.forget_bindings()
            self._clones = []
            self._kernels = []

    def _release(self) -> None:
        raise NotImplementedError


class PythonBatch:
    """``_fastlaunch.Batch`` in Python (when the extension is not built): the same steps, the same
    ``run(queue, times)`` and the same RuntimeError for a driver error."""

    def __init__(self, steps: Sequence[Any]) -> None:
        import pyopencl as cl

        self._steps = tuple(steps)
        self._enqueue = cl.enqueue_nd_range_kernel
        self._error = cl.Error

    def run(self, queue: Any, times: int) -> None:
        enqueue = self._enqueue
        for _ in range(times):
            for i, step in enumerate(self._steps):
                if callable(step):
                    step(queue)
                    continue
                try:
                    enqueue(queue, step[0], step[1], step[2])
                except self._error as e:
                    raise RuntimeError("clEnqueueNDRangeKernel", i, e.code) from e


class PreboundReplay(_OpenCLReplay):
    """Kernels whose arguments were all set at seal, enqueued by a loop in C (see the module)."""

    kind = "pre-bound kernels"

    def __init__(self, server: Any, ops: list[_Op], handles: tuple[Handle, ...], batch: Any) -> None:
        super().__init__(server, ops, handles)
        items: list[Any] = []
        for op, clone in zip(ops, self._kernels, strict=True):
            if clone is not None:
                assert isinstance(op, _Launch)
                items.append((clone.kernel, op.size, clone.local))
            elif isinstance(op, _Copy):
                items.append(functools.partial(server.enqueue_copy, src=op.src, dst=op.dst))
            else:
                assert isinstance(op, _Fill)
                items.append(functools.partial(server.enqueue_fill, handle=op.handle, pattern=op.pattern))
        self._batch: Any = batch(items)

    def _enqueue(self, queue: Any, times: int) -> None:
        try:
            self._batch.run(queue, times)
        except RuntimeError as e:
            if len(e.args) != 3 or e.args[0] != "clEnqueueNDRangeKernel":
                raise
            op = self._ops[e.args[1]]
            assert isinstance(op, _Launch)
            name = code_name(types.SimpleNamespace(code=e.args[2]))
            raise LaunchError(
                f"replaying a launch of kernel {op.prog.name!r} on {op.size} units (cube dim "
                f"{op.prog.local}) failed: {name}"
            ) from None

    def _release(self) -> None:
        self._batch = None


class _QueueBuffers:
    """The command buffers of one queue: one with simultaneous use, else up to :data:`RING`
    copies, each with the event of its last enqueue."""

    __slots__ = ("buffers", "events", "order", "queue")

    def __init__(self, queue: Any) -> None:
        self.queue = queue  # kept alive while its command buffers are
        self.buffers: list[int] = []
        self.events: list[Any] = []  # ctypes c_void_p, or None
        self.order: collections.deque[int] = collections.deque()  # copies by enqueue, oldest first


class CommandBufferReplay(_OpenCLReplay):
    """The steps recorded into a ``cl_khr_command_buffer`` per queue (see the module)."""

    kind = "cl_khr_command_buffer"

    def __init__(
        self, server: Any, ops: list[_Op], handles: tuple[Handle, ...], api: CommandBufferApi, queue: Any
    ) -> None:
        super().__init__(server, ops, handles)
        self._api = api
        self._patterns: list[Any] = []  # the fill patterns' memory, alive while commands use it
        self._queues: dict[int, _QueueBuffers] = {}
        # The command buffers are released with the replay even if the graph is never closed; at
        # interpreter exit the server's release closes them first (release.py), not this finalizer.
        self._finalizer = weakref.finalize(self, _release_buffers, api, self._queues)
        self._finalizer.atexit = False
        self._record_for(queue)

    # ------------------------------------------------------------------ recording
    def _record_for(self, queue: Any) -> _QueueBuffers:
        qb = self._queues.get(int(queue.int_ptr))
        if qb is None:
            qb = _QueueBuffers(queue)
            qb.buffers.append(self._record(queue))
            qb.events.append(None)
            self._queues[int(queue.int_ptr)] = qb
        return qb

    def _record(self, queue: Any) -> int:
        """A finalised command buffer of the steps for ``queue`` (CommandBufferError if refused)."""
        api = self._api
        err = _INT(0)
        q = _P(int(queue.int_ptr))
        props = None
        if api.flag:
            props = (ctypes.c_uint64 * 3)(_COMMAND_BUFFER_FLAGS, _SIMULTANEOUS_USE, 0)
        cb = api.create(1, ctypes.byref(q), props, ctypes.byref(err))
        if err.value or not cb:
            raise CommandBufferError("clCreateCommandBufferKHR", err.value)
        try:
            pages = self._server.cl_storage.page
            extra = (None,) if api.with_properties else ()
            previous: Any = None
            for op, clone in zip(self._ops, self._kernels, strict=True):
                point = _UINT(0)
                # Each command waits on the one before: a command buffer orders by sync points only.
                wait = (1, ctypes.byref(previous)) if previous is not None else (0, None)
                if isinstance(op, _Launch):
                    assert clone is not None
                    code = api.ndrange(cb, None, None, clone.kernel.int_ptr, 3, None, _SIZE3(*op.size),
                                       _SIZE3(*clone.local), *wait, ctypes.byref(point), None)
                    call = "clCommandNDRangeKernelKHR"
                elif isinstance(op, _Copy):
                    rs, rd = op.src.memory().storage, op.dst.memory().storage
                    code = api.copy(cb, None, *extra, pages(rs.id).int_ptr, pages(rd.id).int_ptr,
                                    rs.offset + op.src.start, rd.offset + op.dst.start, op.src.size,
                                    *wait, ctypes.byref(point), None)
                    call = "clCommandCopyBufferKHR"
                else:
                    region = op.handle.memory().storage
                    pattern = ctypes.create_string_buffer(op.pattern, len(op.pattern))
                    self._patterns.append(pattern)
                    code = api.fill(cb, None, *extra, pages(region.id).int_ptr, pattern, len(op.pattern),
                                    region.offset + op.handle.start, op.handle.size,
                                    *wait, ctypes.byref(point), None)
                    call = "clCommandFillBufferKHR"
                if code:
                    raise CommandBufferError(call, code)
                previous = point
            code = api.finalize(cb)
            if code:
                raise CommandBufferError("clFinalizeCommandBufferKHR", code)
        except BaseException:
            api.release(cb)
            raise
        return int(cb)

    # ------------------------------------------------------------------ replaying
    def _enqueue(self, queue: Any, times: int) -> None:
        try:
            qb = self._record_for(queue)
            if self._api.simultaneous:
                cb, enqueue = qb.buffers[0], self._api.enqueue
                for _ in range(times):
                    code = enqueue(0, None, cb, 0, None, None)
                    if code:
                        raise CommandBufferError("clEnqueueCommandBufferKHR", code)
            else:
                for _ in range(times):
                    self._enqueue_copy(qb)
        except CommandBufferError as e:
            raise LaunchError(f"replaying the graph's command buffer failed: {e}") from None

    def _enqueue_copy(self, qb: _QueueBuffers) -> None:
        """Enqueue a copy of the command buffer that is not pending: one whose last enqueue
        completed, else a new one (up to RING), else the oldest once it completed."""
        api = self._api
        index = next((i for i, ev in enumerate(qb.events) if ev is None or _done(api, ev)), None)
        if index is None and len(qb.buffers) < RING:
            qb.buffers.append(self._record(qb.queue))
            qb.events.append(None)
            index = len(qb.buffers) - 1
        if index is None:
            index = qb.order[0]
            api.flush(int(qb.queue.int_ptr))  # the oldest must have been submitted to complete
            code = api.wait_events(1, ctypes.byref(qb.events[index]))
            if code:
                raise CommandBufferError("clWaitForEvents", code)
        ev = qb.events[index]
        if ev is not None:
            api.release_event(ev)
            qb.events[index] = None
        if index in qb.order:
            qb.order.remove(index)
        event = _P()
        code = api.enqueue(0, None, qb.buffers[index], 0, None, ctypes.byref(event))
        if code:
            raise CommandBufferError("clEnqueueCommandBufferKHR", code)
        qb.events[index] = event
        qb.order.append(index)

    def _release(self) -> None:
        self._finalizer()
        self._patterns = []


def _done(api: CommandBufferApi, event: Any) -> bool:
    """Whether the enqueue of ``event`` completed (or failed: its error is the queue's to report)."""
    status = _INT(1)
    if api.event_info(event, _EVENT_COMMAND_EXECUTION_STATUS, 4, ctypes.byref(status), None):
        return False
    return status.value <= 0


def _release_buffers(api: CommandBufferApi, queues: dict[int, _QueueBuffers]) -> None:
    """Release every queue's command buffers and events (a pending one completes first: OpenCL
    deletes a command buffer once it is released and no longer pending)."""
    for qb in queues.values():
        for ev in qb.events:
            if ev is not None:
                api.release_event(ev)
        for cb in qb.buffers:
            api.release(cb)
    queues.clear()
