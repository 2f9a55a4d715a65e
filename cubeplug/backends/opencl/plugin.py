"""Hook implementations of the OpenCL backend: the entry point ``opencl = cubeplug.backends.opencl.plugin``.

Devices of all platforms are numbered together, in platform order, after the optional filters of
``[backends.opencl]``: ``platform`` (a case-insensitive substring of the platform's name, vendor or
version, e.g. ``"pocl"`` or ``"nvidia"``) and ``device_type`` (``all``, ``gpu``, ``cpu``,
``accelerator``). The selector ``opencl:<filter>:N`` arrives as ``filter`` and takes the place of
``platform`` (or of ``device_type`` when it is ``gpu``, ``cpu`` or ``accelerator``). ``profiling``
(default true) opens the queues with profiling so that ``client.profile`` times on the device.
``native_launch`` (default true) launches through the compiled launcher when it is built
(``launch_path.py``); false keeps every launch in Python.
One OpenCL context per device is shared by every client.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from cubeplug.core.backend import BackendSpec, Probe
from cubeplug.core.config import Config
from cubeplug.core.errors import BackendUnavailableError, ConfigError
from cubeplug.core.storage import ComputeStorage, MemoryProperties
from cubeplug.hookspecs import hookimpl

NAME = "opencl"
PRIORITY = 20
INSTALL_HINT = "pip install 'cubeplug[opencl]' (or 'cubeplug[pocl]' for a CPU OpenCL driver)"
DEVICE_TYPES = ("all", "gpu", "cpu", "accelerator", "default")
OPTIONS = ("platform", "device_type", "profiling", "native_launch", "filter")


@dataclass(frozen=True)
class OpenCLOptions:
    """The validated ``[backends.opencl]`` options."""

    platform: str | None = None
    device_type: str = "all"
    profiling: bool = True
    #: Launch through the compiled launcher (launch_path.py) when it is built; false: Python only.
    native_launch: bool = True


def options(config: Config) -> OpenCLOptions:
    """The ``[backends.opencl]`` options of ``config``; ConfigError naming a bad key or value."""
    raw = config.backend_options(NAME)
    where = "[backends.opencl]"
    for key in raw:
        if key not in OPTIONS:
            raise ConfigError(f"unknown key {key!r} in {where}", key=key, allowed=", ".join(OPTIONS))
    platform = raw.get("platform")
    selector_filter = raw.get("filter")
    if isinstance(selector_filter, str) and selector_filter.lower() in DEVICE_TYPES[1:4]:
        raw["device_type"] = selector_filter  # opencl:gpu:0 filters by device type
    elif selector_filter:
        platform = selector_filter
    if platform is not None and (not isinstance(platform, str) or not platform.strip()):
        raise ConfigError(f"{where} platform must be a non-empty string, got {platform!r}", key="platform")
    device_type = str(raw.get("device_type", "all")).lower()
    if device_type not in DEVICE_TYPES:
        raise ConfigError(
            f"{where} device_type {raw.get('device_type')!r} is not valid",
            key="device_type", allowed=", ".join(DEVICE_TYPES),
        )
    flags = {key: raw.get(key, True) for key in ("profiling", "native_launch")}
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise ConfigError(f"{where} {key} must be true or false, got {value!r}", key=key)
    return OpenCLOptions(platform.strip() if platform else None, device_type, **flags)


def _matches(platform: Any, needle: str | None) -> bool:
    if not needle:
        return True
    needle = needle.lower()
    return any(needle in str(getattr(platform, a, "")).lower() for a in ("name", "vendor", "version"))


def list_devices(platform: str | None = None, device_type: str = "all") -> list[Any]:
    """Every OpenCL device (``pyopencl.Device``) of the platforms that match, in platform order."""
    import pyopencl as cl

    try:
        platforms = cl.get_platforms()
    except cl.Error:  # no ICD installed: clGetPlatformIDs fails with PLATFORM_NOT_FOUND_KHR
        return []
    kind = getattr(cl.device_type, device_type.upper(), cl.device_type.ALL)
    found: list[Any] = []
    for p in platforms:
        if not _matches(p, platform):
            continue
        try:
            found.extend(p.get_devices(device_type=kind))
        except cl.Error:  # a platform with no device of that type
            continue
    return found


def describe_filter(opts: OpenCLOptions) -> str:
    """The device filter in words, for error messages."""
    parts = []
    if opts.platform:
        parts.append(f"platform matching {opts.platform!r}")
    if opts.device_type != "all":
        parts.append(f"type {opts.device_type}")
    return " and ".join(parts) or "no filter"


@dataclass
class DeviceContext:
    """One OpenCL device with its context and the limits read from it once."""

    index: int
    device: Any
    context: Any
    limits: dict[str, Any] = field(default_factory=dict)
    #: Queue used by the storage to force allocations and by no launch.
    alloc_queue: Any = None

    @property
    def name(self) -> str:
        """The device's name."""
        return str(self.device.name).strip()


_contexts: dict[int, DeviceContext] = {}
_contexts_lock = threading.Lock()


def _limits(device: Any) -> dict[str, Any]:
    """What the backend needs to know of a device, read once."""
    exts = set(str(device.extensions).split())
    version = str(device.version)
    fp16 = "cl_khr_fp16" in exts
    fp64 = "cl_khr_fp64" in exts or bool(getattr(device, "double_fp_config", 0))
    try:
        item_sizes = tuple(int(s) for s in device.max_work_item_sizes)
    except Exception:  # pragma: no cover - every driver answers this
        item_sizes = (1024, 1024, 64)
    return {
        "name": str(device.name).strip(),
        "vendor": str(device.vendor).strip(),
        "platform": str(device.platform.name).strip(),
        "platform_version": str(device.platform.version).strip(),
        "version": version.strip(),
        "driver_version": str(device.driver_version).strip(),
        "opencl_c_version": str(getattr(device, "opencl_c_version", "")).strip(),
        "device_type": _device_type_name(int(device.type)),
        "compute_units": int(device.max_compute_units),
        "max_work_group_size": int(device.max_work_group_size),
        "max_work_item_sizes": item_sizes,
        "local_memory": int(device.local_mem_size),
        "max_allocation": int(device.max_mem_alloc_size),
        "global_memory": int(device.global_mem_size),
        "base_address_alignment": max(1, int(device.mem_base_addr_align) // 8),
        "host_unified_memory": bool(getattr(device, "host_unified_memory", False)),
        "fp16": fp16,
        "fp64": fp64,
        "int64_atomics": "cl_khr_int64_base_atomics" in exts,
        "int32_atomics": "cl_khr_global_int32_base_atomics" in exts or not version.startswith("OpenCL 1.0"),
        "profiling_timer_resolution_ns": int(getattr(device, "profiling_timer_resolution", 0)),
        "extensions": tuple(sorted(exts)),
    }


def _device_type_name(kind: int) -> str:
    names = [(4, "gpu"), (2, "cpu"), (8, "accelerator"), (16, "custom")]
    return next((n for bit, n in names if kind & bit), "default")


def device_context(device: int, config: Config) -> DeviceContext:
    """The shared context of device ``device`` after the config's filters; BackendUnavailableError if none."""
    if isinstance(device, bool) or not isinstance(device, int) or device < 0:
        raise BackendUnavailableError(f"OpenCL device indices are non-negative ints, got {device!r}")
    opts = options(config)
    try:
        import pyopencl as cl
    except ImportError as e:
        raise BackendUnavailableError(f"the opencl backend needs PyOpenCL: {INSTALL_HINT}") from e
    found = list_devices(opts.platform, opts.device_type)
    if device >= len(found):
        names = ", ".join(f"opencl:{i} = {str(d.name).strip()}" for i, d in enumerate(found)) or "none"
        raise BackendUnavailableError(
            f"opencl:{device} does not exist ({describe_filter(opts)}); devices: {names}. "
            f"Install a driver (e.g. {INSTALL_HINT}) or pick another index"
        )
    dev = found[device]
    key = int(dev.int_ptr)
    with _contexts_lock:
        ctx = _contexts.get(key)
        if ctx is None:
            try:
                context = cl.Context(devices=[dev])
                alloc_queue = cl.CommandQueue(context, dev)
            except cl.Error as e:
                raise BackendUnavailableError(f"cannot open an OpenCL context on {dev.name}: {e}") from e
            ctx = DeviceContext(device, dev, context, _limits(dev), alloc_queue)
            _contexts[key] = ctx
    return ctx


def probe() -> Probe:
    """Whether PyOpenCL imports and at least one OpenCL device exists; never raises."""
    try:
        import pyopencl  # noqa: F401
    except Exception as e:
        return Probe.unavailable(f"PyOpenCL is not installed ({type(e).__name__}); {INSTALL_HINT}")
    try:
        found = list_devices()
    except Exception as e:
        return Probe.unavailable(f"listing OpenCL devices failed: {type(e).__name__}: {e}")
    if not found:
        return Probe.unavailable(f"no OpenCL platform or device is installed; {INSTALL_HINT}")
    names = tuple(f"{str(d.name).strip()} [{str(d.platform.name).strip()}]" for d in found)
    return Probe(True, f"{len(found)} OpenCL device(s)", names)


@hookimpl
def cubeplug_backends() -> list[BackendSpec]:
    """The OpenCL backend: priority between the CPU reference and the native GPU backends."""
    return [
        BackendSpec(
            name=NAME,
            description="OpenCL through PyOpenCL (any platform: NVIDIA, AMD, Intel, PoCL)",
            dialects=("opencl", "c"),
            probe=probe,
            priority=PRIORITY,
            install_hint=INSTALL_HINT,
            kind="gpu",
        )
    ]


@hookimpl
def cubeplug_compute_storage(backend: str, device: int, config: Config) -> ComputeStorage | None:
    """Pages of ``cl.Buffer`` on the device, allocated at call time."""
    if backend != NAME:
        return None
    from cubeplug.backends.opencl.storage import OpenCLStorage

    return OpenCLStorage(device_context(device, config))


@hookimpl
def cubeplug_event_stream_backend(backend: str, device: int, config: Config) -> Any:
    """One in-order command queue per stream, markers as events."""
    if backend != NAME:
        return None
    from cubeplug.backends.opencl.stream import OpenCLStreams

    return OpenCLStreams(device_context(device, config), profiling=options(config).profiling)


@hookimpl
def cubeplug_compute_server(
    backend: str, device: int, config: Config, storage: ComputeStorage, streams: Any
) -> Any:
    """The OpenCL server over the storage and the queues."""
    if backend != NAME:
        return None
    from cubeplug.backends.opencl.server import OpenCLServer
    from cubeplug.backends.opencl.storage import OpenCLStorage
    from cubeplug.backends.opencl.stream import OpenCLStreams

    assert isinstance(storage, OpenCLStorage)
    if streams is None:
        streams = OpenCLStreams(storage.ctx, profiling=options(config).profiling)
    assert isinstance(streams, OpenCLStreams)
    return OpenCLServer(storage, streams, config)


@hookimpl
def cubeplug_memory_properties(backend: str, device: int) -> MemoryProperties | None:
    """Pages up to the device's largest allocation, aligned to its base address alignment."""
    if backend != NAME:
        return None
    from cubeplug.backends.opencl.storage import memory_properties

    return memory_properties(device_context(device, Config()))


@hookimpl
def cubeplug_diagnostics(backend: str) -> dict[str, Any]:
    """Platforms and devices as PyOpenCL sees them (for ``cubeplug doctor``); never raises."""
    if backend != NAME:
        return {}
    try:
        import pyopencl as cl

        rows = [f"{i}: {str(d.name).strip()} [{str(d.platform.name).strip()}]"
                for i, d in enumerate(list_devices())]
        return {"pyopencl": cl.VERSION_TEXT, "opencl devices": rows or ["none"]}
    except Exception as e:
        return {"pyopencl": f"unavailable: {type(e).__name__}: {e}"}
