"""The OpenCL client's launch in C: loading ``_fastlaunch`` and making its launcher and entries.

On PoCL a raw ``enqueue_nd_range_kernel`` costs one to three microseconds, and the Python launch
path (client, generated plan, inlined queueing) adds about 0.9 us to it: more than the 1.2x the
backend aims for. The C launcher (``_fastlaunch.c``) does the same work for the common case in one
C call, with ``clSetKernelArg`` and ``clEnqueueNDRangeKernel`` of the ICD loader PyOpenCL itself
uses (1.00-1.06x a raw enqueue on PoCL here, paired: bench/results/logs/opencl-pocl-runs.log).
Everything else goes to the Python method, so behaviour is the same with or without it.
``[backends.opencl] native_launch = false`` (or ``CUBEPLUG_BACKENDS_OPENCL_NATIVE_LAUNCH=false``)
turns it off, and :func:`status` says whether it is in use and why not.

The extension is optional: an install without a C compiler has the Python path only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
import threading
import weakref
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from cubeplug.plugin import (
    CubeCount,
    ExecutionMode,
    Handle,
    Kernel,
    Launcher,
    LaunchSettings,
    SliceToken,
    StorageHandle,
    StreamState,
    thread_streams,
)

_lock = threading.Lock()
_loaded: tuple[ModuleType | None, str] | None = None


def load() -> ModuleType | None:
    """The initialised ``_fastlaunch`` module, or None when it is not built or finds no OpenCL."""
    global _loaded
    with _lock:
        if _loaded is None:
            _loaded = _load()
        return _loaded[0]


def status() -> str:
    """Whether the compiled launcher is in use here, in words (why not, when it is not)."""
    load()
    assert _loaded is not None
    return _loaded[1]


def _load() -> tuple[ModuleType | None, str]:
    try:
        from cubeplug.backends.opencl import _fastlaunch  # type: ignore[attr-defined]
    except ImportError as e:
        return None, f"not built ({e}); launches run in Python"
    lib = opencl_library()
    if lib is None:
        return None, "no OpenCL library found in this process; launches run in Python"
    try:
        enqueue = ctypes.cast(lib.clEnqueueNDRangeKernel, ctypes.c_void_p).value
        set_arg = ctypes.cast(lib.clSetKernelArg, ctypes.c_void_p).value
        _fastlaunch.init(Handle, SliceToken, StorageHandle, StreamState, CubeCount, enqueue, set_arg)
    except (AttributeError, TypeError, ValueError) as e:
        return None, f"unusable ({e}); launches run in Python"
    return _fastlaunch, f"in use, through {getattr(lib, '_name', '?')}"


def opencl_library() -> ctypes.CDLL | None:
    """The OpenCL library PyOpenCL loaded (its wheels bundle an ICD loader), else the system's."""
    import pyopencl

    if sys.platform.startswith("linux"):
        try:
            with open("/proc/self/maps") as f:
                paths = {line.split()[-1] for line in f if "libOpenCL" in line and "/" in line}
        except OSError:
            paths = set()
        here = os.path.dirname(os.path.dirname(pyopencl.__file__))
        for path in sorted(paths, key=lambda p: not p.startswith(here)):
            try:
                return ctypes.CDLL(path)
            except OSError:
                continue
    name = ctypes.util.find_library("OpenCL")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


@dataclass(frozen=True)
class NativeParts:
    """What the C launcher needs of its server, handed over by the server itself."""

    #: The device's offset alignment (bytes).
    alignment: int
    #: The storage's pages, by id (the C code binds a page, or a sub-buffer from ``bind``).
    pages: Any
    #: ``bind(page id, offset, size)``: the ``cl.Buffer`` of a region.
    bind: Any
    #: ``relaunch(prog, queue, size)``: the enqueue again through PyOpenCL after a driver error.
    relaunch: Any


def make_launcher(server: Any, settings: LaunchSettings, parts: NativeParts) -> Launcher | None:
    """A :class:`NativeLauncher` for ``server``'s client; None when the extension is not in use."""
    module = load()
    if module is None:
        return None
    return NativeLauncher(server, settings, module, parts)


class NativeLauncher(Launcher):
    """The core's :class:`~cubeplug.core.launcher.Launcher` with ``launch`` and ``launch_unchecked``
    in C: each takes the common case (a kernel with a plan, plain arguments, the streams' common
    case) in one C call and hands everything else to the core's method of the same name."""

    def __init__(self, server: Any, settings: LaunchSettings, module: ModuleType, parts: NativeParts) -> None:
        super().__init__(server, settings)
        me = weakref.ref(self)
        streams = server.multistream
        #: The C launchers' entries by kernel: checked, then unchecked (they hold the cl kernels).
        self.entries: tuple[dict[Kernel, Any], dict[Kernel, Any]] = ({}, {})
        default_checked = settings.mode is ExecutionMode.CHECKED
        for name, checked, entries in (
            ("launch", default_checked, self.entries[0 if default_checked else 1]),
            ("launch_unchecked", False, self.entries[1]),
        ):
            fast = module.Launcher(
                client_ref=me,  # the fallback's self: the core's method, on this launcher
                fallback=getattr(Launcher, name),
                lock=settings.lock,
                local=None if settings.single else thread_streams,
                server=server,
                slots=streams.streams.slots,
                max_streams=streams.max_streams,
                max_count=server.capabilities.max_cube_count,
                entries=entries,
                on_miss=functools.partial(_entry, me, checked, parts),
            )
            setattr(self, name, fast)  # this launcher's own methods, in C

    def tables(self) -> list[dict[Any, Any]]:
        return [*super().tables(), *self.entries]

    def refuse(self, stand_in: Any, lock: Any) -> None:
        # Closed C launchers hand every call to the core's methods, which reach the stand-in.
        for fast in (self.launch, self.launch_unchecked):
            closer = getattr(fast, "close", None)
            if closer is not None:
                closer()
        super().refuse(stand_in, lock)

    def close(self, stand_in: Any) -> None:
        super().close(stand_in)
        for entries in self.entries:
            entries.clear()


def _entry(launcher_ref: Any, checked: bool, parts: NativeParts, kernel: Kernel) -> Any:
    """The C launcher's entry for ``kernel`` once it has a plan: an ``Entry``; None while it has no
    plan yet; False for a kernel the launcher never takes (it then always goes to Python)."""
    launcher = launcher_ref()
    module = load()
    if launcher is None or module is None or not isinstance(kernel, Kernel):
        return None
    compiled = launcher.compiled_for(kernel, checked)
    if kernel not in launcher.plans(checked) or compiled is None:
        return None
    prog = compiled.program
    dtypes = tuple(p.dtype for p in kernel.scalar_params)
    # The scalar dtypes the launcher sets itself (not f16 or bool), and its most buffers and scalars.
    limit = module.MAX_ARGS
    if len(prog.buffer_slots) > limit or len(dtypes) > limit or not module.SCALAR_DTYPES.issuperset(dtypes):
        return False
    return module.Entry(
        cl_kernel=prog.kernel,
        local=prog.local,
        buffer_slots=prog.buffer_slots,
        itemsizes=kernel.buffer_itemsizes,
        scalar_slots=prog.scalar_slots,
        scalar_dtypes=dtypes,
        alignment=parts.alignment,
        checked=checked,
        last_buffers=prog.last_buffers,
        last_scalars=prog.last_scalars,
        pages=parts.pages,
        bind=parts.bind,
        on_error=functools.partial(parts.relaunch, prog),
    )
