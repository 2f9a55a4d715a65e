"""The launch path: one :class:`Launcher` per server owns every launch its client makes.

Users' guide: docs/kernels.md; design: docs/architecture.md ("The launch path").

The client's ``launch`` and ``launch_unchecked`` call the launcher's methods of the same names, and
nothing else launches. The launcher finds the thread's stream, takes the client's lock and runs the
kernel's *plan*: the checked (or unchecked) launch that :func:`~cubeplug.core.plans.make_plan`
generated for that kernel on this server, with the checks unrolled and, where the backend gives its
queueing as source (``ComputeServer.queue_code``), the queueing inlined. A kernel's first launch
in a mode, a profiled launch, and every argument a plan does not take inline go to the general
path (:func:`launch_general`), which gives the precise ValidationError or queues the launch.

A backend's faster path implements this same class: it subclasses :class:`Launcher` and is made by
its server's ``new_launcher`` (the OpenCL backend's launcher in C is one); everything it does not
take itself goes to the methods here. The rule for what takes a plan is here and in
``make_plan``, nowhere else.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from cubeplug.core.array import Array
from cubeplug.core.backend import Capabilities
from cubeplug.core.errors import ValidationError, describe
from cubeplug.core.handle import Handle
from cubeplug.core.kernel import DTYPES, CubeCount, ExecutionMode, Kernel
from cubeplug.core.memory.guard import RedZones
from cubeplug.core.plans import Plan, QueueCode, make_plan
from cubeplug.core.profile import ProfileDuration, ProfileLog
from cubeplug.core.stream import current_stream_id, thread_streams

_CHECKED = ExecutionMode.CHECKED
_UNCHECKED = ExecutionMode.UNCHECKED


@dataclass(frozen=True, slots=True)
class Compiled:
    """A kernel compiled for one device: the backend's object and the dialect it came from."""

    kernel: Kernel
    dialect: str
    program: Any


class LaunchingServer(Protocol):
    """What a launcher uses of its server (:class:`cubeplug.core.server.ComputeServer` is one)."""

    backend: str
    capabilities: Capabilities
    #: The checked-memory mode's red zones, or None (launches are then recorded one by one).
    red_zones: RedZones | None

    def stream_id(self, current: int) -> int: ...
    def compile_kernel(self, kernel: Kernel, mode: ExecutionMode) -> Compiled: ...
    def queue_code(self, kernel: Kernel, compiled: Compiled) -> QueueCode | None: ...
    def check_handle(self, handle: Any, what: str = "handle") -> Handle: ...
    def check_count(self, x: int, y: int, z: int) -> None: ...
    def execute(
        self, stream_id: int, compiled: Compiled, count: CubeCount, buffers: Sequence[Any],
        scalars: Sequence[Any],
    ) -> None: ...  # fmt: skip
    def profile_start(self, stream_id: int) -> int: ...
    def profile_end(self, pid: int) -> ProfileDuration: ...


@dataclass(frozen=True)
class LaunchSettings:
    """What a client lends the launcher of its server."""

    #: The client's lock (:class:`~cubeplug.core.channel.DeviceHandle`): held around the server's work.
    lock: threading.RLock
    #: True under the "single" streaming policy: every thread launches on stream 0.
    single: bool
    #: The mode of ``launch`` (``[compilation] check_mode``); ``launch_unchecked`` is always unchecked.
    mode: ExecutionMode
    #: Where profiled launches are recorded; None unless ``[profiling] level`` asks for it (then
    #: every launch takes the general path, timed on the device).
    profile: ProfileLog | None = None


class Launcher:
    """Every launch of one client on its server: the stream, the lock, the plans, the checks."""

    def __init__(self, server: LaunchingServer, settings: LaunchSettings) -> None:
        self.server = server
        self.settings = settings
        self._acquire = settings.lock.acquire
        self._release = settings.lock.release
        self._single = settings.single
        #: The generated checked launch of each kernel, made by its first checked launch.
        self.checked_plans: dict[Kernel, Plan] = {}
        #: The generated unchecked launches, by kernel.
        self.unchecked_plans: dict[Kernel, Plan] = {}
        #: What each plan launches: the kernel compiled in the plan's mode.
        self.compiled: dict[tuple[Kernel, ExecutionMode], Compiled] = {}
        # Profiled launches, and those of the checked-memory mode (each one is recorded), take the
        # first-launch path every time: no plans then (both are fixed for the client's life).
        self._zones = server.red_zones
        one_by_one = settings.profile is not None or self._zones is not None
        self._plans = {} if one_by_one else self.plans(settings.mode is _CHECKED)
        self._unchecked = {} if one_by_one else self.unchecked_plans

    def plans(self, checked: bool) -> dict[Kernel, Plan]:
        """The plans of one mode, by kernel (a dict the launcher fills: read it, never write it)."""
        return self.checked_plans if checked else self.unchecked_plans

    # ------------------------------------------------------------------ the hot path
    def launch(
        self,
        kernel: Kernel,
        count: CubeCount | int | tuple[int, ...],
        buffers: Sequence[Handle] = (),
        scalars: Sequence[Any] = (),
    ) -> None:
        """Launch ``kernel`` on ``count`` cubes in the client's mode (checked unless configured not)."""
        if type(count) is not CubeCount:
            count = as_count(count)
        try:  # the thread's stream, inlined (this is the hot path)
            sid = 0 if self._single else thread_streams.stack[-1]
        except AttributeError:
            sid = self.server.stream_id(current_stream_id())
        try:
            plan = self._plans.get(kernel)  # an atomic read: plans are added under the lock
        except TypeError:  # not hashable, so not a Kernel: the general path says so
            plan = None
        if plan is None:
            self.launch_first(kernel, count, buffers, scalars, self.settings.mode, sid)
            return
        try:  # the kernel's generated launch (core/plans.py)
            # Not ``with``: half the cost on the hot paths. Taken inside the ``try``: a signal is
            # handled only after a call returns, so a KeyboardInterrupt can never leave it held.
            self._acquire()
            plan(self.server, count, buffers, scalars, sid)
        except TypeError:  # no cost unless raised: buffers or scalars that are no sequences say so
            check_arguments(kernel, buffers, scalars)
            raise
        finally:
            self._release()

    def launch_unchecked(
        self,
        kernel: Kernel,
        count: CubeCount | int | tuple[int, ...],
        buffers: Sequence[Handle] = (),
        scalars: Sequence[Any] = (),
    ) -> None:
        """Launch without validating the arguments (the caller vouches for them)."""
        # launch's twin, not sharing a helper with it: each is one frame above the plan.
        if type(count) is not CubeCount:
            count = as_count(count)
        try:
            sid = 0 if self._single else thread_streams.stack[-1]
        except AttributeError:
            sid = self.server.stream_id(current_stream_id())
        try:
            plan = self._unchecked.get(kernel)
        except TypeError:
            plan = None
        if plan is None:
            self.launch_first(kernel, count, buffers, scalars, _UNCHECKED, sid)
            return
        try:
            self._acquire()  # inside the ``try``, as in launch
            plan(self.server, count, buffers, scalars, sid)
        except TypeError:
            check_arguments(kernel, buffers, scalars)
            raise
        finally:
            self._release()

    # ------------------------------------------------------------------ first and profiled launches
    def launch_first(
        self,
        kernel: Kernel,
        count: CubeCount,
        buffers: Sequence[Handle],
        scalars: Sequence[Any],
        mode: ExecutionMode,
        sid: int,
    ) -> None:
        """A launch with no plan yet (the kernel's first in ``mode``), or a profiled one."""
        if not isinstance(kernel, Kernel):  # also keeps an unhashable value out of the dicts
            raise ValidationError(f"launch takes a cubeplug.Kernel, got {type(kernel).__name__}")
        check_arguments(kernel, buffers, scalars)
        if self._zones is not None:
            self._zones.launched(kernel.name)
        profile = self.settings.profile
        with self.settings.lock:
            plan = self.plan(kernel, mode)
            if profile is None:
                plan(self.server, count, buffers, scalars, sid)
                return
            server = self.server
            pid = server.profile_start(sid)
            try:
                plan(server, count, buffers, scalars, sid)
            finally:
                duration = server.profile_end(pid)
        profile.record(kernel.name, duration)

    def plan(self, kernel: Kernel, mode: ExecutionMode) -> Plan:
        """The plan of ``kernel`` in ``mode``: made (and the kernel checked against the device and
        compiled) on its first launch. Call under the lock."""
        if not isinstance(kernel, Kernel):  # also keeps an unhashable value out of the dicts
            raise ValidationError(f"launch takes a cubeplug.Kernel, got {type(kernel).__name__}")
        plans = self.plans(mode is _CHECKED)
        plan = plans.get(kernel)
        if plan is not None:
            return plan
        server = self.server
        # In both modes (once per plan, nothing per launch): a dtype the device lacks would otherwise
        # reach its compiler (PoCL's "unknown type name f16"), not a refusal naming the dtype.
        check_dtypes(server, kernel)
        if mode is _CHECKED:
            check_kernel(server, kernel)
        compiled = self.compiled[kernel, mode] = server.compile_kernel(kernel, mode)
        general = launch_general if mode is _CHECKED else launch_unchecked_general
        plan = plans[kernel] = make_plan(
            kernel, compiled, server.capabilities.offset_alignment, general,
            server.queue_code(kernel, compiled), checked=mode is _CHECKED,
            max_count=server.capabilities.max_cube_count,
        )  # fmt: skip
        return plan

    def tables(self) -> list[dict[Any, Any]]:
        """Every table of this launcher that holds compiled kernels (the plans; a backend's launcher
        adds its own), for a backend that releases its driver objects in a fixed order."""
        return [self.checked_plans, self.unchecked_plans]

    def compiled_for(self, kernel: Kernel, checked: bool = True) -> Compiled | None:
        """What the plan of ``kernel`` in a mode launches (None before its first launch in it)."""
        return self.compiled.get((kernel, _CHECKED if checked else _UNCHECKED))

    def refuse(self, stand_in: Any, lock: threading.RLock) -> None:
        """Send every later launch to ``stand_in``, the closed client's stand-in server, which raises
        saying why (closed, or inherited through ``fork``), under the client's ``lock`` (a forked
        child's is new: a thread of the parent may have held the old one). Nothing is released: in a
        forked child the parent's objects must be left alone."""
        self.server = stand_in
        self.settings = replace(self.settings, lock=lock)
        self._acquire, self._release = lock.acquire, lock.release
        self._plans = self._unchecked = {}

    def close(self, stand_in: Any) -> None:
        """The client closed: refuse later launches (:meth:`refuse`) and forget every plan, so that
        nothing here keeps the server's compiled kernels alive."""
        self.refuse(stand_in, self.settings.lock)
        self.checked_plans.clear()
        self.unchecked_plans.clear()
        self.compiled.clear()


# ---------------------------------------------------------------------------------------- checks
def launch_general(
    server: LaunchingServer,
    kernel: Kernel,
    compiled: Compiled,
    count: CubeCount,
    buffers: Sequence[Any],
    scalars: Sequence[Any],
    stream_id: int,
) -> None:
    """A checked launch with every check in full: ValidationError saying what is wrong, else queued.
    (The server is an argument, not captured by the plans: a server caching them is in no cycle.)"""
    check_arguments(kernel, buffers, scalars)
    buffers = unwrap_arrays(kernel, buffers, checked=True)
    check_buffers(server, kernel, buffers)
    if count.handle is not None:
        check_dynamic(server, count.handle)
    scalars = kernel.check_scalars(scalars)
    execute_unless_empty(server, stream_id, compiled, count, buffers, scalars)


def launch_unchecked_general(
    server: LaunchingServer,
    kernel: Kernel,
    compiled: Compiled,
    count: CubeCount,
    buffers: Sequence[Any],
    scalars: Sequence[Any],
    stream_id: int,
) -> None:
    """An unchecked launch the plan does not take inline: queued as given (once buffers and scalars
    are known to be lists: ``None`` is no empty list)."""
    check_arguments(kernel, buffers, scalars)
    buffers = unwrap_arrays(kernel, buffers)
    execute_unless_empty(server, stream_id, compiled, count, buffers, scalars)


def execute_unless_empty(
    server: LaunchingServer,
    stream_id: int,
    compiled: Compiled,
    count: CubeCount,
    buffers: Sequence[Any],
    scalars: Sequence[Any],
) -> None:
    """The server's ``execute``, unless a static count has a zero (nothing to run); ValidationError
    for a static count beyond the device's limits."""
    if count.handle is None:
        if not (count.x and count.y and count.z):
            return
        server.check_count(count.x, count.y, count.z)
    server.execute(stream_id, compiled, count, buffers, scalars)


def check_dtypes(server: LaunchingServer, kernel: Kernel) -> None:
    """ValidationError naming the first dtype ``kernel`` uses (a param's, or its source's:
    :attr:`Kernel.uses_dtypes`) that the device does not declare."""
    dtypes = server.capabilities.dtypes
    lacking = kernel.lacking(dtypes)
    if lacking is not None:
        raise ValidationError(
            f"kernel {kernel.name!r}: {lacking[1]}, which {server.backend} does not support on this "
            f"device (it supports {', '.join(sorted(dtypes))})"
        )


def check_kernel(server: LaunchingServer, kernel: Kernel) -> None:
    """ValidationError when a checked launch's device cannot run ``kernel``: too large a cube."""
    limit = server.capabilities.max_cube_threads
    threads = kernel.cube_dim[0] * kernel.cube_dim[1] * kernel.cube_dim[2]
    if limit and threads > limit:
        raise ValidationError(
            f"kernel {kernel.name!r} cube_dim {kernel.cube_dim} has {threads} units; this device "
            f"allows at most {limit} per cube"
        )


def check_arguments(kernel: Kernel, buffers: Any, scalars: Any) -> None:
    """ValidationError when a launch's ``buffers`` or ``scalars`` is not a list (or another sized
    sequence): what a TypeError raised inside a launch plan means. Returns when both are fine."""
    for what, value, items in (("buffers", buffers, "Handles"), ("scalars", scalars, "values")):
        if isinstance(value, (str, bytes, Mapping, Handle)) or not isinstance(value, Collection):
            raise ValidationError(
                f"kernel {kernel.name!r}: {what} must be a list of {items}, got {describe(value)}; "
                f"pass [] when the kernel takes none"
            )


def unwrap_arrays(kernel: Kernel, buffers: Sequence[Any], checked: bool = False) -> Sequence[Any]:
    """``buffers`` with each :class:`~cubeplug.Array` replaced by its handle (the plans take only
    plain Handles, so Arrays reach this general path); ValidationError for a non-contiguous one,
    and (``checked``) for one whose dtype is not its parameter's."""
    if not any(type(b) is Array for b in buffers):
        return buffers
    params = kernel.buffer_params
    out: list[Any] = []
    for i, b in enumerate(buffers):
        if type(b) is Array:
            name = params[i].name if i < len(params) else str(i)
            if checked and i < len(params) and DTYPES[params[i].dtype] != b.dtype:
                raise ValidationError(
                    f"kernel {kernel.name!r}: buffer {name!r} takes {params[i].dtype}, got an Array "
                    f"of {b.dtype}; convert it with client.asarray(array, {params[i].dtype!r})"
                )
            if not b.is_contiguous:
                raise ValidationError(
                    f"kernel {kernel.name!r}: buffer {name!r} is a non-contiguous Array view "
                    f"(shape {b.shape}, strides {b.strides}); a buffer is linear memory: pass "
                    f"view.copy() (contiguous), or take it as a Tensor parameter in cubeplug.lang"
                )
            b = b.handle
        out.append(b)
    return out


def check_buffers(server: LaunchingServer, kernel: Kernel, buffers: Sequence[Handle]) -> None:
    """ValidationError unless ``buffers`` are as many live handles of ``server`` as the kernel takes,
    each at an aligned offset and a whole number of elements long."""
    params = kernel.buffer_params
    if len(buffers) != len(params):
        names = ", ".join(p.name for p in params) or "none"
        raise ValidationError(
            f"kernel {kernel.name!r} takes {len(params)} buffers ({names}), got {len(buffers)}"
        )
    align = server.capabilities.offset_alignment
    for param, itemsize, handle in zip(params, kernel.buffer_itemsizes, buffers):
        server.check_handle(handle, f"buffer {param.name!r}")
        start = handle.start
        if start % align:
            raise ValidationError(
                f"buffer {param.name!r} is bound at byte offset {start}; {server.backend} needs "
                f"offsets aligned to {align} B"
            )
        if (handle.nbytes - start - handle.end) % itemsize:
            raise ValidationError(
                f"buffer {param.name!r} ({param.dtype}) has {handle.size} B, not a multiple of its "
                f"element size {itemsize} B"
            )


def check_dynamic(server: LaunchingServer, handle: Handle) -> None:
    """ValidationError unless ``handle`` can hold a dynamic count on this server (three u32)."""
    server.check_handle(handle, "CubeCount.dynamic handle")
    if handle.size < 12:
        raise ValidationError(
            f"CubeCount.dynamic needs a handle of at least 12 B (three u32), got {handle.size}"
        )
    if not server.capabilities.dynamic_count:
        raise ValidationError(f"{server.backend} does not support CubeCount.dynamic")


#: Counts given as ints or tuples, converted once (a static CubeCount is never changed after it is
#: made); cleared when it reaches :data:`_COUNT_CACHE_SIZE` entries.
_counts: dict[Any, CubeCount] = {}
_COUNT_CACHE_SIZE = 1024


def as_count(count: Any) -> CubeCount:
    """``count`` (an int or a 1-3 tuple) as a CubeCount; ValidationError for anything else."""
    # Only plain ints are cached (1.0, True and numpy ints hash like them, and some must raise).
    plain = type(count) is int or (type(count) is tuple and all(type(v) is int for v in count))
    if plain:
        cached = _counts.get(count)
        if cached is not None:
            return cached
    if isinstance(count, (int, np.integer)) and not isinstance(count, bool):
        made = CubeCount(int(count))
    elif isinstance(count, tuple) and 1 <= len(count) <= 3:
        made = CubeCount(*count)
    else:
        raise ValidationError(f"count must be a CubeCount, an int or a 1-3 tuple, got {count!r}")
    if plain:
        if len(_counts) >= _COUNT_CACHE_SIZE:
            _counts.clear()
        _counts[count] = made
    return made
