"""Which OpenCL devices the backend offers, and the shared context of each.

Devices of all platforms are numbered together, GPUs and accelerators first, then in platform
order, after the filters of :mod:`cubeplug.backends.opencl.options`. A device is offered only when
it can compile: the first time a process looks at a device it builds a tiny probe kernel on it, and
a device whose build fails (the pip PoCL 3.0 names no target CPU that its LLVM 14 knows on some
processors: "unknown target CPU 'generic'") is left out of ``opencl:N`` numbering, of
``cubeplug.client("opencl")`` and of auto-selection. ``cubeplug doctor`` and ``cubeplug list
--probe`` show it with the compiler's message and the remedy, and asking for it by name raises
:class:`BackendUnavailableError` saying the same.

When two platforms offer the same device (two PoCL installs: the pip wheel's and the
distribution's), only the working one with the newest driver is offered; the other is *shadowed*
and shown as such. Devices of one platform are never shadowed by each other (two GPUs are two
devices).

The probe reuses the context that the device's clients share. Its outcome is kept for the process
and on disk (:mod:`cubeplug.backends.opencl.probe_cache`), since a build costs 40-60 ms per device
even with a warm PoCL kernel cache (1.4 s cold with PoCL 3.1); ``python
bench/probes/opencl_device_probe.py`` measures what it adds to the first client of a process.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from cubeplug.backends.opencl import probe_cache
from cubeplug.backends.opencl.options import OpenCLOptions, describe_filter, options
from cubeplug.plugin import BackendUnavailableError, Config

INSTALL_HINT = "pip install 'cubeplug[opencl]' (or 'cubeplug[pocl]' for a CPU OpenCL driver)"
#: What to do about a PoCL that cannot compile: the distributions' PoCL 3.1 (LLVM 15) knows the
#: processors on which the pip PoCL 3.0 (LLVM 14) fails.
POCL_REMEDY = "install your distribution's pocl-opencl-icd (apt-get install pocl-opencl-icd), or PoCL >= 3.1"
#: Built once per device and process: uses what every cubeplug kernel uses (a global pointer, a
#: scalar argument, the global id, float arithmetic).
PROBE_SOURCE = (
    "__kernel void cubeplug_probe(__global float* x, float a, unsigned int n) {\n"
    "    size_t i = get_global_id(0);\n"
    "    if (i < n) x[i] = x[i] * a + 1.0f;\n"
    "}\n"
)
#: How much of a compiler's message a status carries.
MESSAGE_LIMIT = 300


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


@dataclass(frozen=True)
class DeviceStatus:
    """One device of a platform that matched the filters, and whether the backend offers it."""

    device: Any
    platform: str
    name: str
    driver: str
    #: ``gpu``, ``cpu``, ``accelerator``, ``custom`` or ``default``.
    kind: str
    #: The compiler's message when the probe kernel failed to build; None when it built.
    error: str | None = None
    #: The label of the device offered in this one's place (the same device, a newer driver).
    shadowed_by: str | None = None

    @property
    def usable(self) -> bool:
        """Offered: it compiles and no newer driver offers the same device."""
        return self.error is None and self.shadowed_by is None

    @property
    def label(self) -> str:
        """``name [platform driver]``: tells two installs of one platform apart."""
        return f"{self.name} [{self.platform} {self.driver}]"

    @property
    def remedy(self) -> str:
        """What a user can do about a device that cannot compile."""
        if "pocl" in self.platform.lower() or "portable computing language" in self.platform.lower():
            return POCL_REMEDY
        return f"update or reinstall the OpenCL driver of {self.platform}"

    @property
    def reason(self) -> str:
        """Why the device is not offered ("" when it is)."""
        if self.error is not None:
            return f"cannot compile OpenCL C ({self.error}); {self.remedy}"
        if self.shadowed_by is not None:
            return f"the same device as {self.shadowed_by}, whose driver is newer: that one is used"
        return ""


def _device_type_name(kind: int) -> str:
    names = [(4, "gpu"), (2, "cpu"), (8, "accelerator"), (16, "custom")]
    return next((n for bit, n in names if kind & bit), "default")


def _platforms() -> list[Any]:
    """The OpenCL platforms; none when no ICD is installed."""
    import pyopencl as cl

    try:
        return list(cl.get_platforms())
    except cl.Error:  # no ICD installed: clGetPlatformIDs fails with PLATFORM_NOT_FOUND_KHR
        return []


def _matches(platform: Any, needle: str | None) -> bool:
    if not needle:
        return True
    needle = needle.lower()
    return any(needle in str(getattr(platform, a, "")).lower() for a in ("name", "vendor", "version"))


def list_devices(platform: str | None = None, device_type: str = "all") -> list[Any]:
    """Every device (``pyopencl.Device``) of the platforms that match, in platform order, unprobed."""
    import pyopencl as cl

    kind = getattr(cl.device_type, device_type.upper(), cl.device_type.ALL)
    found: list[Any] = []
    for p in _platforms():
        if not _matches(p, platform):
            continue
        try:
            found.extend(p.get_devices(device_type=kind))
        except cl.Error:  # a platform with no device of that type
            continue
    return found


def driver_key(version: str) -> tuple[tuple[int, ...], int]:
    """An order on driver versions: ``3.1+debian`` > ``3.0`` > ``3.0-rc2``; unparsable sorts first."""
    match = re.match(r"\D*?(\d+(?:\.\d+)*)(.*)", version)
    if match is None:
        return ((), 0)
    numbers = tuple(int(n) for n in match.group(1).split("."))
    numbers += (0,) * (4 - len(numbers))
    prerelease = re.search(r"(?i)(rc|alpha|beta|pre|dev|git)", match.group(2)) is not None
    return (numbers, 0 if prerelease else 1)


# Probe results and shared contexts by device (its int_ptr), for the life of the process.
_probed: dict[int, str | None] = {}
_shared: dict[int, Any] = {}
_contexts: dict[int, DeviceContext] = {}
_lock = threading.RLock()


def shared_context(device: Any) -> Any:
    """The ``pyopencl.Context`` of ``device`` that every client of it shares (made once)."""
    import pyopencl as cl

    key = int(device.int_ptr)
    with _lock:
        context = _shared.get(key)
        if context is None:
            context = _shared[key] = cl.Context(devices=[device])
        return context


def _first_error(log: str, fallback: str) -> str:
    line = next((ln.strip() for ln in log.splitlines() if "error" in ln.lower()), "")
    text = line or log.strip() or fallback
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


def compile_error(device: Any) -> str | None:
    """None when the probe kernel builds on ``device``, else the compiler's message.

    Kept for the process, and on disk (:mod:`probe_cache`) so that later processes build nothing.
    """
    import pyopencl as cl

    key = int(device.int_ptr)
    with _lock:
        if key in _probed:
            return _probed[key]
        found, error = probe_cache.lookup(device, PROBE_SOURCE)
        if found:
            _probed[key] = error
            return error
        try:
            context = shared_context(device)
        except cl.Error as e:
            _probed[key] = _first_error("", f"cannot open a context: {e}")
            return _probed[key]
        program = cl._cl._Program(context, PROBE_SOURCE)
        try:
            program.build(b"", [device])
            error = None
        except cl.Error as e:
            log = ""
            if e.code == cl.status_code.BUILD_PROGRAM_FAILURE:
                log = str(program.get_build_info(device, cl.program_build_info.LOG))
            error = _first_error(log, f"{e.routine}: {e.code}")
            e.__traceback__ = None  # PyOpenCL's frame holds the program: release it with the error
        del program
        if error is not None:
            _shared.pop(key, None)  # nothing will run there: let the driver free the context
        _probed[key] = error
        probe_cache.store(device, PROBE_SOURCE, error)
        return error


def survey(platform: str | None = None, device_type: str = "all") -> list[DeviceStatus]:
    """Every device of the matching platforms, in platform order, each with why it is (not) offered."""
    found: list[DeviceStatus] = []
    groups: dict[tuple[str, str, int, int], list[int]] = {}
    counted: dict[tuple[int, str, int], int] = {}
    for dev in list_devices(platform, device_type):
        plat = dev.platform
        kind = _device_type_name(int(dev.type))
        vendor = int(getattr(dev, "vendor_id", 0))
        # The same device through two installs of one platform: same platform name, type, vendor
        # and position among that platform's devices of that type and vendor.
        within = (int(plat.int_ptr), kind, vendor)
        position = counted.get(within, 0)
        counted[within] = position + 1
        groups.setdefault((str(plat.name).strip(), kind, vendor, position), []).append(len(found))
        found.append(
            DeviceStatus(
                dev,
                str(plat.name).strip(),
                str(dev.name).strip(),
                str(dev.driver_version).strip(),
                kind,
                error=compile_error(dev),
            )
        )
    for members in groups.values():
        working = [i for i in members if found[i].error is None]
        if len(working) < 2:
            continue
        best = max(working, key=lambda i: (driver_key(found[i].driver), -i))
        for i in working:
            if i != best:
                status = found[i]
                found[i] = dataclasses.replace(status, shadowed_by=found[best].label)
    return found


def offered(statuses: list[DeviceStatus]) -> list[DeviceStatus]:
    """The devices offered, in the order ``opencl:N`` numbers them: GPUs and accelerators first (so
    that ``opencl:0`` is no CPU device while a GPU is there), then platform order."""
    return sorted((s for s in statuses if s.usable), key=lambda s: s.kind not in ("gpu", "accelerator"))


def usable_devices(platform: str | None = None, device_type: str = "all") -> list[Any]:
    """The devices the backend offers, in the order ``opencl:N`` numbers them."""
    return [s.device for s in offered(survey(platform, device_type))]


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


def _missing(device: int, opts: OpenCLOptions, statuses: list[DeviceStatus]) -> BackendUnavailableError:
    """Why ``opencl:device`` cannot be had: the devices offered, and those left out with their reasons."""
    usable = offered(statuses)
    names = ", ".join(f"opencl:{i} = {s.name}" for i, s in enumerate(usable)) or "none"
    broken = [s for s in statuses if s.error is not None]
    if broken and device >= len(usable):
        reasons = "; ".join(f"{s.label} {s.reason}" for s in broken)
        return BackendUnavailableError(
            f"opencl:{device} ({describe_filter(opts)}) is not usable: {reasons}. Devices offered: {names}"
        )
    return BackendUnavailableError(
        f"opencl:{device} does not exist ({describe_filter(opts)}); devices: {names}. "
        f"Install a driver (e.g. {INSTALL_HINT}) or pick another index"
    )


def device_context(device: int, config: Config) -> DeviceContext:
    """The shared context of offered device ``device`` after the config's filters.

    BackendUnavailableError when there is no such device, or when the one asked for cannot compile
    (with the compiler's message and the remedy).
    """
    if isinstance(device, bool) or not isinstance(device, int) or device < 0:
        raise BackendUnavailableError(f"OpenCL device indices are non-negative ints, got {device!r}")
    opts = options(config)
    try:
        import pyopencl as cl
    except ImportError as e:
        raise BackendUnavailableError(f"the opencl backend needs PyOpenCL: {INSTALL_HINT}") from e
    statuses = survey(opts.platform, opts.device_type)
    usable = [s.device for s in offered(statuses)]
    if device >= len(usable):
        raise _missing(device, opts, statuses)
    dev = usable[device]
    key = int(dev.int_ptr)
    with _lock:
        ctx = _contexts.get(key)
        if ctx is None:
            try:
                context = shared_context(dev)
                alloc_queue = cl.CommandQueue(context, dev)
            except cl.Error as e:
                raise BackendUnavailableError(f"cannot open an OpenCL context on {dev.name}: {e}") from e
            ctx = DeviceContext(device, dev, context, _limits(dev), alloc_queue)
            _contexts[key] = ctx
    return ctx
