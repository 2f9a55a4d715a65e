"""CUDA devices through CuPy's runtime bindings: probing, properties and the current-device guard.

The CUDA runtime keeps a *current device* per host thread and allocates, creates streams and launches
on it. :class:`DeviceGuard` makes a server's device current in the calling thread at the cost of a
thread-local lookup on a one-GPU machine (a ``cudaGetDevice`` where there are several).
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from cubeplug.plugin import BackendUnavailableError, Probe

INSTALL_HINT = "pip install 'cubeplug[cuda12]' (CUDA 12) or 'cubeplug[cuda13]' (CUDA 13)"


def probe() -> Probe:
    """Whether CuPy imports and sees a CUDA device; never raises, says why not."""
    if "cupy" not in sys.modules and importlib.util.find_spec("cupy") is None:
        return Probe.unavailable(f"CuPy is not installed; {INSTALL_HINT}")
    try:
        from cupy.cuda import runtime

        count = runtime.getDeviceCount()
        names = tuple(_name(runtime.getDeviceProperties(i)) for i in range(count))
        driver = runtime.driverGetVersion()
    except Exception as e:  # CUDARuntimeError, ImportError of a broken install, ...
        return Probe.unavailable(f"no usable CUDA device: {type(e).__name__}: {e}")
    if count == 0:
        return Probe.unavailable("CuPy found no CUDA device on this machine")
    return Probe(True, f"{count} CUDA device(s), driver {_version(driver)}", names, {"driver": driver})


def device_count() -> int:
    """Number of CUDA devices (0 when CuPy or the driver is missing)."""
    try:
        from cupy.cuda import runtime

        return int(runtime.getDeviceCount())
    except Exception:
        return 0


def check_device(device: int) -> None:
    """BackendUnavailableError unless ``cuda:device`` exists here."""
    probe_result = probe()
    if not probe_result.ok:
        raise BackendUnavailableError(f"the cuda backend cannot run here: {probe_result.reason}")
    count = len(probe_result.devices)
    if not 0 <= device < count:
        raise BackendUnavailableError(
            f"cuda:{device} does not exist; this machine has {count} CUDA device(s): cuda:0..cuda:{count - 1}"
        )


@dataclass(frozen=True)
class DeviceProperties:
    """What the server reports about one device."""

    index: int
    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    shared_memory_per_block: int
    max_threads_per_block: int
    max_block_dim: tuple[int, int, int]
    max_grid_dim: tuple[int, int, int]
    warp_size: int
    total_memory: int
    l2_cache_size: int
    driver_version: str
    runtime_version: str
    memory_pools: bool

    def as_dict(self) -> dict[str, Any]:
        """The properties as the plain dict ``client.properties`` shows."""
        return {
            "name": self.name,
            "compute_capability": f"{self.compute_capability[0]}.{self.compute_capability[1]}",
            "sm_count": self.sm_count,
            "shared_memory_per_block": self.shared_memory_per_block,
            "max_threads_per_block": self.max_threads_per_block,
            "max_block_dim": self.max_block_dim,
            "max_grid_dim": self.max_grid_dim,
            "warp_size": self.warp_size,
            "total_memory": self.total_memory,
            "l2_cache_size": self.l2_cache_size,
            "driver_version": self.driver_version,
            "runtime_version": self.runtime_version,
            "memory_pools_supported": self.memory_pools,
        }


def query(device: int) -> DeviceProperties:
    """Read a device's properties through the runtime."""
    from cupy.cuda import runtime

    p = runtime.getDeviceProperties(device)
    try:
        pools = bool(runtime.deviceGetAttribute(runtime.cudaDevAttrMemoryPoolsSupported, device))
    except Exception:
        pools = False
    return DeviceProperties(
        index=device,
        name=_name(p),
        compute_capability=(int(p["major"]), int(p["minor"])),
        sm_count=int(p["multiProcessorCount"]),
        shared_memory_per_block=int(p["sharedMemPerBlock"]),
        max_threads_per_block=int(p["maxThreadsPerBlock"]),
        max_block_dim=_dim3(p["maxThreadsDim"]),
        max_grid_dim=_dim3(p["maxGridSize"]),
        warp_size=int(p["warpSize"]),
        total_memory=int(p["totalGlobalMem"]),
        l2_cache_size=int(p.get("l2CacheSize", 0)),
        driver_version=_version(runtime.driverGetVersion()),
        runtime_version=_version(runtime.runtimeGetVersion()),
        memory_pools=pools,
    )


def _name(props: dict[str, Any]) -> str:
    name = props.get("name", b"?")
    return name.decode(errors="replace") if isinstance(name, bytes) else str(name)


def _dim3(values: Any) -> tuple[int, int, int]:
    v = tuple(int(x) for x in values)
    return (v[0], v[1], v[2])


def _version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


class DeviceGuard:
    """Makes one device current in the calling thread before CUDA work is issued."""

    def __init__(self, device: int) -> None:
        self.device = device
        self._local = threading.local()
        self._multi = device_count() > 1
        #: More than one device: the current device must be checked before every call.
        self.multi = self._multi
        if self._multi:
            from cupy.cuda import runtime

            self._get, self._set = runtime.getDevice, runtime.setDevice

    def __call__(self) -> None:
        """Make the device current (cheap when it already is)."""
        if self._multi:
            if self._get() != self.device:
                self._set(self.device)
        elif not self._local.__dict__:
            from cupy.cuda import runtime

            # cudaSetDevice also creates the primary context and makes it current in this thread,
            # which the driver-API launch path needs. (Thread-local: a new thread starts unready
            # even when it reuses a dead thread's id.)
            runtime.setDevice(self.device)
            self._local.ready = True

    def ready(self) -> bool:
        """True when this thread has the device current already (single-device case)."""
        return bool(self._local.__dict__)


# Two guards of the current device, which differ in what they restore (either one in the other's
# place would cost a call per use, or leave a wrong device current):
# - on_device(d) makes ``d`` current for a body that keeps it so (an allocation, a compilation) and
#   undoes only its own change: with ``d`` current already (the usual case on the allocation path,
#   which is hot) it costs one getDevice and restores nothing, trusting the body.
# - current_device_kept() sets nothing and restores whatever the body changed (the NCCL calls of a
#   round, each made on its own server's device): one getDevice more, after the body, always.
# on_device(runtime.getDevice()) is no current_device_kept: it would leave the body's last device
# current. tests/backends/cuda/test_units.py pins both behaviours.
@contextmanager
def current_device_kept() -> Iterator[None]:
    """Run a block that may make other devices current (each server's guard does), then give the
    calling thread back the device that was current before it (whatever the block left current)."""
    from cupy.cuda import runtime

    prev = runtime.getDevice()
    try:
        yield
    finally:
        if runtime.getDevice() != prev:
            runtime.setDevice(prev)


@contextmanager
def on_device(device: int) -> Iterator[None]:
    """Run a block with ``device`` current, restoring the previous device after if this changed it
    (the block must not change the device itself: see the note above)."""
    from cupy.cuda import runtime

    prev = runtime.getDevice()
    if prev != device:
        runtime.setDevice(device)
    try:
        yield
    finally:
        if prev != device:
            runtime.setDevice(prev)
