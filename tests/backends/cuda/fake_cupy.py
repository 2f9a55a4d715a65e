"""A host-memory stand-in for the slice of CuPy the CUDA backend calls, to test its plumbing without a GPU.

Signatures follow CuPy 14.2's runtime bindings (cupy_backends/cuda/api/runtime.pyx), ``Stream``,
``Event``, ``RawModule``/``Function``, ``UnownedMemory``/``MemoryPointer`` and ``ndarray(shape,
dtype, memptr)``. Device memory is host memory, copies run at once (so stream order is trivially
kept) but every device-side address is checked to lie inside a live allocation, which catches
offset and pitch arithmetic bugs. Kernels run as python functions registered in :data:`KERNELS`
under their entry name; a source containing ``COMPILE_ERROR_HERE`` fails to compile like NVRTC does.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import re
import struct
import sys
import threading
import time
import types
from collections.abc import Callable
from typing import Any

import numpy as np


class CUDARuntimeError(RuntimeError):
    """cudaError_t status as CuPy raises it."""

    def __init__(self, status: int) -> None:
        self.status = status
        super().__init__(f"cudaError {status}")


class CUDADriverError(RuntimeError):
    """A driver error as CuPy raises it."""


class CompileException(Exception):
    """cupy.cuda.compiler.CompileException."""

    def __init__(
        self, msg: str, source: str, name: str, options: tuple[str, ...], backend: str = "nvrtc"
    ) -> None:
        self._msg = msg
        self.source = source
        self.name = name
        self.options = options
        super().__init__()

    def get_message(self) -> str:
        return self._msg

    def __str__(self) -> str:
        return self._msg


class PointerAttributes:
    def __init__(self, device: int, devicePointer: int, hostPointer: int, type: int) -> None:
        self.device = device
        self.devicePointer = devicePointer
        self.hostPointer = hostPointer
        self.type = type


_ids = itertools.count(0x1000)


class Runtime(types.ModuleType):
    """cupy.cuda.runtime over host memory."""

    CUDARuntimeError = CUDARuntimeError
    memcpyHostToHost, memcpyHostToDevice, memcpyDeviceToHost, memcpyDeviceToDevice, memcpyDefault = (
        0,
        1,
        2,
        3,
        4,
    )
    errorMemoryAllocation = 2
    cudaDevAttrMemoryPoolsSupported = 115

    def __init__(self, total: int = 1 << 30, devices: int = 1) -> None:
        super().__init__("cupy.cuda.runtime")
        self.total = total
        self.devices = devices
        self._current = threading.local()  # the current device is per thread, as in CUDA
        self.dev: dict[int, tuple[Any, int, int]] = {}  # ptr -> (buffer, size, device)
        self.host: dict[int, tuple[Any, int]] = {}
        self.events: dict[int, dict[str, Any]] = {}
        self.calls: list[str] = []
        self.frees = 0
        #: Streams in capture mode, each with the operations queued on it since (run by a graph).
        self.capturing: dict[int, list[Callable[[], None]]] = {}

    def deferred(self, stream: int, op: Callable[[], None]) -> bool:
        """Queue ``op`` in the capture of ``stream`` (True), or say it is not capturing (False)."""
        ops = self.capturing.get(stream)
        if ops is None:
            return False
        ops.append(op)
        return True

    # devices
    def getDeviceCount(self) -> int:
        return self.devices

    @property
    def device(self) -> int:
        """The calling thread's current device (0 until it sets one)."""
        return int(getattr(self._current, "device", 0))

    @device.setter
    def device(self, device: int) -> None:
        self._current.device = device

    def getDevice(self) -> int:
        return self.device

    def setDevice(self, device: int) -> None:
        if not 0 <= device < self.devices:
            raise CUDARuntimeError(101)
        self.device = device

    def getDeviceProperties(self, device: int) -> dict[str, Any]:
        return {
            "name": b"Fake GPU",
            "totalGlobalMem": self.total,
            "sharedMemPerBlock": 49152,
            "maxThreadsPerBlock": 1024,
            "maxThreadsDim": (1024, 1024, 64),
            "maxGridSize": (2**31 - 1, 65535, 65535),
            "warpSize": 32,
            "multiProcessorCount": 4,
            "major": 9,
            "minor": 0,
            "l2CacheSize": 1 << 20,
        }

    def deviceGetAttribute(self, attrib: int, device: int) -> int:
        return 1

    def driverGetVersion(self) -> int:
        return 13000

    def runtimeGetVersion(self) -> int:
        return 13000

    # memory
    def used(self) -> int:
        return sum(size for _, size, _ in self.dev.values())

    def malloc(self, size: int) -> int:
        if self.used() + size > self.total:
            raise CUDARuntimeError(2)
        buf = (ctypes.c_ubyte * size)()
        ptr = ctypes.addressof(buf)
        self.dev[ptr] = (buf, size, self.device)
        return ptr

    def free(self, ptr: int) -> None:
        if self.dev.pop(ptr, None) is None:
            raise CUDARuntimeError(1)
        self.frees += 1

    def memGetInfo(self) -> tuple[int, int]:
        return self.total - self.used(), self.total

    def hostAlloc(self, size: int, flags: int) -> int:
        buf = (ctypes.c_ubyte * size)()
        ptr = ctypes.addressof(buf)
        self.host[ptr] = (buf, size)
        return ptr

    def freeHost(self, ptr: int) -> None:
        if self.host.pop(ptr, None) is None:
            raise CUDARuntimeError(1)

    def pointerGetAttributes(self, ptr: int) -> PointerAttributes:
        if self._find(self.host, ptr) is not None:
            return PointerAttributes(-1, 0, ptr, 1)
        if self._find(self.dev, ptr) is not None:
            return PointerAttributes(0, ptr, 0, 2)
        return PointerAttributes(-2, 0, 0, 0)

    @staticmethod
    def _find(table: dict[int, Any], ptr: int) -> int | None:
        for start, entry in table.items():
            if start <= ptr < start + entry[1]:
                return start
        return None

    def check_device(self, ptr: int, n: int, what: str) -> None:
        """Raise unless [ptr, ptr + n) lies inside one device allocation."""
        start = self._find(self.dev, ptr)
        if start is None or ptr + n > start + self.dev[start][1]:
            raise AssertionError(f"{what}: {n} B at 0x{ptr:x} is outside every device allocation")

    def _check(self, dst: int, src: int, size: int, kind: int) -> None:
        if kind in (1, 3):
            self.check_device(dst, size, "copy destination")
        if kind in (2, 3):
            self.check_device(src, size, "copy source")

    def memcpy(self, dst: int, src: int, size: int, kind: int) -> None:
        self._check(dst, src, size, kind)
        ctypes.memmove(dst, src, size)

    def memcpyAsync(self, dst: int, src: int, size: int, kind: int, stream: int) -> None:
        assert isinstance(stream, int)
        self.calls.append(f"memcpyAsync kind={kind} size={size}")
        self._check(dst, src, size, kind)
        if not self.deferred(stream, lambda: ctypes.memmove(dst, src, size)):
            ctypes.memmove(dst, src, size)

    def memsetAsync(self, ptr: int, value: int, size: int, stream: int) -> None:
        assert isinstance(stream, int)
        self.calls.append(f"memsetAsync value={value} size={size}")
        self.check_device(ptr, size, "memset destination")
        if not self.deferred(stream, lambda: ctypes.memset(ptr, value, size)):
            ctypes.memset(ptr, value, size)

    def memcpy2DAsync(
        self, dst: int, dpitch: int, src: int, spitch: int, width: int, height: int, kind: int, stream: int
    ) -> None:
        assert width <= dpitch and width <= spitch, (width, dpitch, spitch)
        self.calls.append(f"memcpy2DAsync kind={kind} {width}x{height} dpitch={dpitch} spitch={spitch}")
        for row in range(height):
            self._check(dst + row * dpitch, src + row * spitch, width, kind)
            ctypes.memmove(dst + row * dpitch, src + row * spitch, width)

    def memcpyPeerAsync(
        self, dst: int, dstDevice: int, src: int, srcDevice: int, size: int, stream: int
    ) -> None:
        self.calls.append(f"memcpyPeerAsync size={size}")
        self._check(dst, src, size, 3)
        ctypes.memmove(dst, src, size)

    #: Whether devices reach each other's memory (False: copies between them are staged).
    peer_access = True

    def deviceCanAccessPeer(self, device: int, peer: int) -> int:
        return int(self.peer_access)

    def deviceEnablePeerAccess(self, peer: int) -> None:
        self.calls.append(f"deviceEnablePeerAccess {peer}")

    # streams and events
    def streamCreateWithFlags(self, flags: int) -> int:
        return next(_ids)

    def streamSynchronize(self, stream: int) -> None:
        pass

    def streamWaitEvent(self, stream: int, event: int, flags: int = 0) -> None:
        assert event in self.events, "waiting on an event that does not exist"

    def eventCreateWithFlags(self, flags: int) -> int:
        ptr = next(_ids)
        self.events[ptr] = {"flags": flags, "time": None}
        return ptr

    def eventDestroy(self, event: int) -> None:
        self.events.pop(event, None)

    def eventRecord(self, event: int, stream: int) -> None:
        self.events[event]["time"] = time.perf_counter()

    def eventSynchronize(self, event: int) -> None:
        assert event in self.events

    def eventQuery(self, event: int) -> int:
        return 0

    def eventElapsedTime(self, start: int, end: int) -> float:
        a, b = self.events[start], self.events[end]
        if a["flags"] & 2 or b["flags"] & 2:
            raise CUDARuntimeError(400)  # timing disabled
        return float((b["time"] - a["time"]) * 1e3)


class Stream:
    """cupy.cuda.Stream(null=False, non_blocking=False, ptds=False, priority=None)."""

    def __init__(
        self, null: bool = False, non_blocking: bool = False, ptds: bool = False, priority: Any = None
    ) -> None:
        self.ptr = 0 if null else RUNTIME.streamCreateWithFlags(int(non_blocking))
        self.device_id = -1 if null else RUNTIME.device
        self.non_blocking = non_blocking

    def synchronize(self) -> None:
        RUNTIME.streamSynchronize(self.ptr)

    def begin_capture(self, mode: Any = None) -> None:
        assert self.ptr not in RUNTIME.capturing, "this stream captures already"
        RUNTIME.capturing[self.ptr] = []

    def end_capture(self) -> Graph:
        return Graph(RUNTIME.capturing.pop(self.ptr))

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class Graph:
    """cupy.cuda.Graph: the operations a capture queued, run in order at each launch."""

    def __init__(self, ops: list[Callable[[], None]]) -> None:
        self.ops = ops
        self.launches = 0

    def launch(self, stream: Any = None) -> None:
        self.launches += 1
        if not RUNTIME.deferred(stream.ptr if stream is not None else 0, self.run):
            self.run()

    def run(self) -> None:
        for op in self.ops:
            op()


class Event:
    """cupy.cuda.Event(block=False, disable_timing=False, interprocess=False)."""

    def __init__(self, block: bool = False, disable_timing: bool = False, interprocess: bool = False) -> None:
        self.ptr = RUNTIME.eventCreateWithFlags((1 if block else 0) | (2 if disable_timing else 0))

    @property
    def done(self) -> bool:
        return RUNTIME.eventQuery(self.ptr) == 0

    def record(self, stream: Any = None) -> None:
        RUNTIME.eventRecord(self.ptr, 0 if stream is None else stream.ptr)

    def synchronize(self) -> None:
        RUNTIME.eventSynchronize(self.ptr)


class CIntptr:
    """cupy.cuda.function.CIntptr: a pointer passed by value (``value`` is fake-only)."""

    def __init__(self, v: int) -> None:
        self.value = v


#: Python stand-ins for kernels, by entry name: fn(grid, block, args) with pointers as ints.
KERNELS: dict[str, Callable[..., None]] = {}


class Function:
    """cupy.cuda.function.Function."""

    def __init__(self, name: str, code: str = "") -> None:
        self.name = name
        self.ptr = next(_ids)
        self.launches = 0
        FUNCTIONS[self.ptr] = (name, _signature(name, code))

    def __call__(
        self,
        grid: tuple[int, ...],
        block: tuple[int, ...],
        args: Any,
        shared_mem: int = 0,
        stream: Any = None,
        enable_cooperative_groups: bool = False,
    ) -> None:
        assert isinstance(grid, tuple) and isinstance(block, tuple)
        assert stream is not None and isinstance(stream.ptr, int)
        values = [a.value if isinstance(a, CIntptr) else a for a in args]
        for v in values:
            assert isinstance(v, (int, np.generic)), f"unexpected kernel argument {v!r}"
        if any(g > m for g, m in zip(grid, (2**31 - 1, 65535, 65535), strict=False)):
            raise CUDADriverError("CUDA_ERROR_INVALID_VALUE: invalid argument")
        self.launches += 1
        run = functools.partial(KERNELS[self.name], tuple(max(1, g) for g in grid), block, values)
        if not RUNTIME.deferred(stream.ptr, run):
            run()


class RawKernel:
    def __init__(self, name: str, code: str = "") -> None:
        self.kernel = Function(name, code)


#: Loaded functions by handle: (entry name, struct code of each parameter).
FUNCTIONS: dict[int, tuple[str, list[str]]] = {}
_C_CODES = {
    "float": "f",
    "f32": "f",
    "double": "d",
    "f64": "d",
    "half": "e",
    "f16": "e",
    "__half": "e",
    "int": "i",
    "i32": "i",
    "unsigned int": "I",
    "u32": "I",
    "long long": "q",
    "i64": "q",
    "unsigned long long": "Q",
    "u64": "Q",
    "bool": "?",
    "u8": "B",
    "i8": "b",
    "i16": "h",
    "u16": "H",
}


def _signature(name: str, code: str) -> list[str]:
    """The struct code of each parameter of ``name`` in a C source ("P" for pointers)."""
    m = re.search(rf"\b{name}\s*\(([^)]*)\)", code)
    if m is None or not m.group(1).strip():
        return []
    codes = []
    for param in m.group(1).split(","):
        param = " ".join(param.replace("GLOBAL", " ").replace("const", " ").split())
        if "*" in param:
            codes.append("P")
        else:
            codes.append(_C_CODES[param.rsplit(" ", 1)[0]])
    return codes


_NP = {
    "f": np.float32,
    "d": np.float64,
    "e": np.float16,
    "i": np.int32,
    "I": np.uint32,
    "q": np.int64,
    "Q": np.uint64,
    "?": np.bool_,
    "B": np.uint8,
    "b": np.int8,
    "h": np.int16,
    "H": np.uint16,
}


def launchKernel(
    f: int,
    gx: int,
    gy: int,
    gz: int,
    bx: int,
    by: int,
    bz: int,
    shared: int,
    stream: int,
    kernel_params: int,
    extra: int,
) -> None:
    """cupy.cuda.driver.launchKernel: decodes the packed parameters with the kernel's C signature."""
    for v in (f, gx, gy, gz, bx, by, bz, shared, stream, kernel_params, extra):
        assert type(v) is int, f"launchKernel takes ints, got {v!r}"
    name, codes = FUNCTIONS[f]
    values: list[Any] = []
    if codes:
        slots = (ctypes.c_void_p * len(codes)).from_address(kernel_params)
        for i, code in enumerate(codes):
            if code == "P":
                values.append(struct.unpack("<Q", ctypes.string_at(slots[i], 8))[0])
            else:
                size = struct.calcsize("<" + code)
                values.append(_NP[code](struct.unpack("<" + code, ctypes.string_at(slots[i], size))[0]))
    if gx < 1 or gy < 1 or gz < 1 or gy > 65535 or gz > 65535:
        raise CUDADriverError("CUDA_ERROR_INVALID_VALUE: invalid argument")
    run = functools.partial(KERNELS[name], (gx, gy, gz), (bx, by, bz), values)  # values decoded now
    if not RUNTIME.deferred(stream, run):
        run()


class RawModule:
    """cupy.RawModule(code=..., options=...): compiles at get_function."""

    def __init__(
        self,
        *,
        code: str | None = None,
        path: str | None = None,
        options: tuple[str, ...] = (),
        backend: str = "nvrtc",
        **kw: Any,
    ) -> None:
        assert isinstance(options, tuple)
        self.code = code or ""
        self.options = options

    def get_function(self, name: str) -> RawKernel:
        lines = self.code.splitlines()
        for i, line in enumerate(lines, 1):
            if "COMPILE_ERROR_HERE" in line:
                log = (
                    f'/tmp/tmpabc/0123abcd.cu({i}): error: identifier "COMPILE_ERROR_HERE" is undefined\n\n'
                    "1 error detected"
                )
                raise CompileException(log, self.code, "0123abcd.cu", self.options)
        if f"{name}(" not in self.code:
            raise CUDADriverError("CUDA_ERROR_NOT_FOUND: named symbol not found")
        return RawKernel(name, self.code)


class UnownedMemory:
    def __init__(self, ptr: int, size: int, owner: Any, device_id: int = -1) -> None:
        self.ptr, self.size, self._owner, self.device_id = ptr, size, owner, device_id


class MemoryPointer:
    def __init__(self, mem: Any, offset: int) -> None:
        self.mem = mem
        self.ptr = mem.ptr + offset

    def copy_from_device_async(self, src: MemoryPointer, size: int, stream: Any = None) -> None:
        RUNTIME.memcpyAsync(self.ptr, src.ptr, size, 3, 0)


class FakeRawKernel:
    """cupy.RawKernel(code, name): runs the registered python stand-in."""

    def __init__(self, code: str, name: str, options: tuple[str, ...] = ()) -> None:
        self.name = name

    def __call__(self, grid: tuple[int, ...], block: tuple[int, ...], args: Any, **kw: Any) -> None:
        values = [a.data.ptr if isinstance(a, ndarray) else a for a in args]
        KERNELS[self.name]((*grid, 1, 1)[:3], (*block, 1, 1)[:3], values)


class MemoryPool:
    def malloc(self, size: int) -> MemoryPointer:
        buf = (ctypes.c_ubyte * size)()
        return MemoryPointer(UnownedMemory(ctypes.addressof(buf), size, buf, 0), 0)


def alloc_pinned_memory(size: int) -> Any:
    """A buffer over pinned host memory."""
    return RUNTIME.host[RUNTIME.hostAlloc(size, 0)][0]


class Device:
    def __init__(self, device: int = -1) -> None:
        self.id = device

    def synchronize(self) -> None:
        pass


class ndarray:
    """cupy.ndarray(shape, dtype, memptr): enough for views, CAI and ``get()``."""

    def __init__(self, shape: Any, dtype: Any = float, memptr: MemoryPointer | None = None) -> None:
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape)) * self.dtype.itemsize
        self._owned = 0
        if memptr is None:
            self._owned = ptr = RUNTIME.malloc(max(1, self.nbytes))
            memptr = MemoryPointer(UnownedMemory(ptr, self.nbytes, None, 0), 0)
        self.data = memptr

    def __del__(self) -> None:
        if self._owned:
            RUNTIME.dev.pop(self._owned, None)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.data.ptr, False),
            "version": 3,
            "strides": None,
            "stream": 1,
        }

    def _host(self) -> np.ndarray:
        if self.nbytes == 0:
            return np.empty(self.shape, self.dtype)
        RUNTIME.check_device(self.data.ptr, self.nbytes, "ndarray")
        raw = np.ctypeslib.as_array((ctypes.c_ubyte * self.nbytes).from_address(self.data.ptr))
        return raw.view(self.dtype).reshape(self.shape)

    def get(self) -> np.ndarray:
        return self._host().copy()

    def set_host(self, values: np.ndarray) -> None:
        self._host()[...] = values

    def set(self, arr: np.ndarray, stream: Any = None) -> None:
        self.set_host(arr.reshape(self.shape))


def asarray(a: Any) -> ndarray:
    host = np.ascontiguousarray(a)
    out = ndarray(host.shape, host.dtype)
    out.set_host(host)
    return out


def empty(shape: Any, dtype: Any = float) -> ndarray:
    return ndarray(shape if isinstance(shape, tuple) else (shape,), dtype)


def ones(shape: Any, dtype: Any = float) -> ndarray:
    out = empty(shape, dtype)
    out.set_host(np.ones(out.shape, out.dtype))
    return out


def empty_like(a: ndarray) -> ndarray:
    return ndarray(a.shape, a.dtype)


def get_elapsed_time(start: Event, end: Event) -> float:
    return RUNTIME.eventElapsedTime(start.ptr, end.ptr)


_POOL = MemoryPool()


def get_current_stream() -> Stream:
    return _NULL_STREAM


def device_view(ptr: int, dtype: Any, count: int) -> np.ndarray:
    """A numpy view of ``count`` elements of device memory at ``ptr`` (bounds-checked)."""
    dt = np.dtype(dtype)
    ptr = int(ptr)
    RUNTIME.check_device(ptr, count * dt.itemsize, "kernel access")
    if count == 0:
        return np.empty(0, dt)
    raw = np.ctypeslib.as_array((ctypes.c_ubyte * (count * dt.itemsize)).from_address(ptr))
    return raw.view(dt)


RUNTIME = Runtime()
_NULL_STREAM: Stream


def install(monkeypatch: Any, total: int = 1 << 30) -> Runtime:
    """Install the fake as ``cupy`` (and hide ``cuda.bindings``) for one test; returns its runtime."""
    global RUNTIME, _NULL_STREAM
    RUNTIME = Runtime(total)
    cupy = types.ModuleType("cupy")
    cuda = types.ModuleType("cupy.cuda")
    function = types.ModuleType("cupy.cuda.function")
    compiler = types.ModuleType("cupy.cuda.compiler")
    driver = types.ModuleType("cupy.cuda.driver")
    driver.launchKernel = launchKernel  # type: ignore[attr-defined]
    function.CIntptr = CIntptr  # type: ignore[attr-defined]
    function.Function = Function  # type: ignore[attr-defined]
    compiler.CompileException = CompileException  # type: ignore[attr-defined]
    for name, value in {
        "runtime": RUNTIME,
        "function": function,
        "compiler": compiler,
        "Stream": Stream,
        "Event": Event,
        "Graph": Graph,
        "UnownedMemory": UnownedMemory,
        "MemoryPointer": MemoryPointer,
        "get_current_stream": get_current_stream,
        "alloc_pinned_memory": alloc_pinned_memory,
        "Device": Device,
        "get_elapsed_time": get_elapsed_time,
        "driver": driver,
    }.items():
        setattr(cuda, name, value)
    for name, value in {
        "cuda": cuda,
        "RawModule": RawModule,
        "ndarray": ndarray,
        "asarray": asarray,
        "RawKernel": FakeRawKernel,
        "empty": empty,
        "ones": ones,
        "empty_like": empty_like,
        "get_default_memory_pool": lambda: _POOL,
        "float32": np.float32,
        "uint8": np.uint8,
        "__version__": "0.0+fake",
    }.items():
        setattr(cupy, name, value)
    _NULL_STREAM = Stream(null=True)
    for name, module in {
        "cupy": cupy,
        "cupy.cuda": cuda,
        "cupy.cuda.runtime": RUNTIME,
        "cupy.cuda.function": function,
        "cupy.cuda.compiler": compiler,
        "cupy.cuda.driver": driver,
    }.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setitem(sys.modules, "cuda", None)  # no cuda-python: the CuPy launch path
    return RUNTIME
