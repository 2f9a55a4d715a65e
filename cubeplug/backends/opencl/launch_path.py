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
from types import ModuleType
from typing import Any

from cubeplug.core.handle import Handle
from cubeplug.core.kernel import CubeCount, Kernel
from cubeplug.core.memory.slice_token import SliceToken
from cubeplug.core.storage import StorageHandle
from cubeplug.core.stream import StreamState, _local

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
    lib = _opencl_library()
    if lib is None:
        return None, "no OpenCL library found in this process; launches run in Python"
    try:
        enqueue = ctypes.cast(lib.clEnqueueNDRangeKernel, ctypes.c_void_p).value
        set_arg = ctypes.cast(lib.clSetKernelArg, ctypes.c_void_p).value
        _fastlaunch.init(Handle, SliceToken, StorageHandle, StreamState, CubeCount, enqueue, set_arg)
    except (AttributeError, TypeError, ValueError) as e:
        return None, f"unusable ({e}); launches run in Python"
    return _fastlaunch, f"in use, through {getattr(lib, '_name', '?')}"


def _opencl_library() -> ctypes.CDLL | None:
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


def launcher(server: Any, client: Any, checked: bool, method: Any) -> Any | None:
    """A stand-in for ``client``'s ``method`` (``launch`` or ``launch_unchecked``) whose common case
    runs in C; None when the extension is not in use. ``checked``: the plans ``method`` uses."""
    module = load()
    if module is None:
        return None
    entries: dict[Kernel, Any] = {}
    server._natives.plans.append(entries)  # released with the server's plans (see server._release)
    return module.Launcher(
        client_ref=weakref.ref(client),
        fallback=method,
        lock=client._lock,
        local=None if client._single else _local,
        server=server,
        slots=server.multistream.streams.slots,
        max_streams=server.multistream.max_streams,
        max_count=server.capabilities.max_cube_count,
        entries=entries,
        on_miss=functools.partial(entry, weakref.ref(server), checked),
    )


def entry(server_ref: Any, checked: bool, kernel: Kernel) -> Any:
    """The launcher's entry for ``kernel`` once it has a plan: an ``Entry``; None while it has no
    plan yet; False for a kernel the launcher never takes (it then always goes to Python)."""
    server = server_ref()
    module = load()
    if server is None or module is None or not isinstance(kernel, Kernel):
        return None
    plans = server.launch_plans if checked else server.unchecked_plans
    compiled = (server._checked_kernels if checked else server._compiled).get(kernel)
    if kernel not in plans or compiled is None:
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
        alignment=server._align,
        checked=checked,
        last_buffers=prog.last_buffers,
        last_scalars=prog.last_scalars,
        pages=server._pages,
        bind=server._bind,
        on_error=functools.partial(_enqueue_again, server_ref, prog),
    )


def _enqueue_again(server_ref: Any, prog: Any, queue: Any, size: tuple[int, int, int]) -> None:
    """After a driver error in C: the same enqueue through PyOpenCL, which raises the error that
    :meth:`OpenCLServer._launch_error` reports (or succeeds, if the cause has gone)."""
    server = server_ref()
    if server is None:
        raise ReferenceError("the server of this launch was garbage-collected")
    try:
        server._enqueue(queue, prog.kernel, size, prog.local)
    except server._cl.Error as e:
        prog.forget_bindings()
        raise server._launch_error(prog, size, e) from e
