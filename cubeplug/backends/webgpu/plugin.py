"""Hook implementations of the WebGPU backend: the entry point ``webgpu = cubeplug.backends.webgpu.plugin``.

Adapters are enumerated once per process and filtered by ``[backends.webgpu]``: ``power_preference``
(``high-performance`` / ``low-power``), ``backend_type`` (``vulkan`` / ``metal`` / ``d3d12`` / ``gl``)
and ``adapter`` (a case-insensitive part of the adapter's name); a selector's filter
(``webgpu:vulkan:0``, ``webgpu:nvidia``) matches the API or any part of the adapter's description.
``webgpu:N`` is the N-th adapter left, native APIs before GL and the preferred adapter type first.
The device is requested with the limits cubeplug uses at the adapter's values and with the
features it can use.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from cubeplug.plugin import (
    BackendSpec,
    BackendUnavailableError,
    ComputeStorage,
    Config,
    ConfigError,
    MemoryProperties,
    Probe,
    check_option_keys,
    hookimpl,
)

NAME = "webgpu"
INSTALL_HINT = "pip install 'cubeplug[webgpu]' (wgpu>=0.31,<0.33) and a Vulkan, Metal or D3D12 driver"

#: Limits requested at the adapter's value (what cubeplug's pools, bindings and launches rely on).
LIMITS = (
    "max-buffer-size",
    "max-storage-buffer-binding-size",
    "max-storage-buffers-per-shader-stage",
    "min-storage-buffer-offset-alignment",
    "max-dynamic-storage-buffers-per-pipeline-layout",
    "max-compute-invocations-per-workgroup",
    "max-compute-workgroup-size-x",
    "max-compute-workgroup-size-y",
    "max-compute-workgroup-size-z",
    "max-compute-workgroups-per-dimension",
    "max-compute-workgroup-storage-size",
    "max-bindings-per-bind-group",
)
#: Features requested where the adapter has them.
FEATURES = ("timestamp-query", "shader-f16", "shader-f64", "shader-int64")

_POWER = ("high-performance", "low-power")
_BACKENDS = {"vulkan": "Vulkan", "metal": "Metal", "d3d12": "D3D12", "gl": "OpenGL", "opengl": "OpenGL"}
_OPTIONS = {
    "power_preference": ", ".join(_POWER),
    "backend_type": "vulkan, metal, d3d12, gl",
    "adapter": "any part of an adapter name",
    "filter": "an API or any part of an adapter's description (the selector's filter)",
}


@dataclass(frozen=True)
class AdapterChoice:
    """Options that select adapters: power preference, backend type, a name filter."""

    power_preference: str = "high-performance"
    backend_type: str | None = None
    name: str | None = None
    filter: str | None = None


def adapter_choice(config: Config | None) -> AdapterChoice:
    """The ``[backends.webgpu]`` options, checked; ConfigError names a bad key or value."""
    options = config.backend_options(NAME) if config is not None else {}
    check_option_keys(NAME, options, _OPTIONS)
    power = str(options.get("power_preference", "high-performance")).lower()
    if power not in _POWER:
        raise ConfigError(
            f"[backends.webgpu] power_preference = {power!r} is not valid",
            key="backends.webgpu.power_preference",
            allowed=_OPTIONS["power_preference"],
        )
    backend = options.get("backend_type")
    if backend is not None and str(backend).lower() not in _BACKENDS:
        raise ConfigError(
            f"[backends.webgpu] backend_type = {backend!r} is not valid",
            key="backends.webgpu.backend_type",
            allowed=_OPTIONS["backend_type"],
        )
    name = options.get("adapter")
    filt = options.get("filter")
    return AdapterChoice(
        power,
        _BACKENDS[str(backend).lower()] if backend is not None else None,
        str(name) if name else None,
        str(filt) if filt else None,
    )


@contextlib.contextmanager
def _runtime_dir() -> Iterator[None]:
    """``XDG_RUNTIME_DIR`` set for the block only, where it is unset, and unset again after it.

    Mesa's Vulkan drivers (lavapipe) print ``error: XDG_RUNTIME_DIR is invalid or not set`` once per
    adapter when they enumerate with it unset (Wayland's client library looks for its socket); they
    read it only then. The process environment is the user's: it is left as it was found.
    """
    if os.environ.get("XDG_RUNTIME_DIR") or not os.path.isdir("/tmp"):
        yield
        return
    previous = os.environ.get("XDG_RUNTIME_DIR")  # set but empty, or unset
    os.environ["XDG_RUNTIME_DIR"] = "/tmp"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("XDG_RUNTIME_DIR", None)
        else:
            os.environ["XDG_RUNTIME_DIR"] = previous


@functools.lru_cache(maxsize=1)
def _all_adapters() -> tuple[Any, ...]:
    import wgpu

    with _runtime_dir():
        return tuple(wgpu.gpu.enumerate_adapters_sync())


def adapters(choice: AdapterChoice) -> list[Any]:
    """The adapters ``choice`` selects, in index order."""
    kinds = ["DiscreteGPU", "IntegratedGPU", "VirtualGPU", "CPU"]
    if choice.power_preference == "low-power":
        kinds = ["IntegratedGPU", "DiscreteGPU", "VirtualGPU", "CPU"]
    found = []
    for a in _all_adapters():
        info = a.info
        if choice.backend_type is not None and info.get("backend_type") != choice.backend_type:
            continue
        text = " ".join(str(info.get(k, "")) for k in ("device", "description", "vendor")).lower()
        if choice.name is not None and choice.name.lower() not in text:
            continue
        if choice.filter is not None:
            wanted = choice.filter.lower()
            api = str(info.get("backend_type", "")).lower()
            if wanted not in text and wanted != api and _BACKENDS.get(wanted, "").lower() != api:
                continue
        found.append(a)

    def rank(a: Any) -> tuple[int, int]:
        info = a.info
        api = 1 if info.get("backend_type") == "OpenGL" else 0
        kind = info.get("adapter_type", "")
        return api, kinds.index(kind) if kind in kinds else len(kinds)

    return sorted(found, key=rank)


def describe(adapter: Any) -> str:
    """One line naming an adapter and its API."""
    info = adapter.info
    return f"{info.get('device', '?')} ({info.get('adapter_type', '?')}) via {info.get('backend_type', '?')}"


def select_adapter(device: int, config: Config | None) -> Any:
    """The adapter of ``webgpu:device``; BackendUnavailableError lists the ones there are."""
    choice = adapter_choice(config)
    try:
        found = adapters(choice)
    except ImportError as e:
        raise BackendUnavailableError(f"wgpu is not installed: {INSTALL_HINT}") from e
    except Exception as e:
        raise BackendUnavailableError(f"wgpu found no usable adapter ({type(e).__name__}: {e})") from e
    if not 0 <= device < len(found):
        names = "; ".join(f"webgpu:{i} = {describe(a)}" for i, a in enumerate(found)) or "none"
        raise BackendUnavailableError(f"webgpu:{device} does not exist; adapters matching {choice}: {names}")
    return found[device]


def open_device(adapter: Any) -> tuple[Any, frozenset[str]]:
    """A GPUDevice with cubeplug's limits at the adapter's values and the useful features."""
    limits = {k: adapter.limits[k] for k in LIMITS if k in adapter.limits}
    wanted = [f for f in FEATURES if f in adapter.features]
    try:
        device = adapter.request_device_sync(required_features=wanted, required_limits=limits)
    except Exception:
        # Some drivers refuse a feature they list; fall back to the portable ones.
        wanted = [f for f in wanted if f in ("timestamp-query", "shader-f16")]
        try:
            device = adapter.request_device_sync(required_features=wanted, required_limits=limits)
        except Exception as e:
            name = adapter.info.get("device", "?") if hasattr(adapter, "info") else "?"
            raise BackendUnavailableError(
                f"the WebGPU adapter {name!r} cannot create a compute device here: "
                f"{str(e).strip().splitlines()[-1]}; pick another adapter with [backends.webgpu] backend_type"
            ) from e
    return device, frozenset(str(f) for f in device.features)


def probe() -> Probe:
    """Import wgpu and enumerate adapters (once per process); never raises."""
    import importlib.util

    if importlib.util.find_spec("wgpu") is None:
        return Probe.unavailable(f"wgpu is not installed: {INSTALL_HINT}")
    try:
        found = adapters(AdapterChoice())
    except Exception as e:
        return Probe.unavailable(f"wgpu could not enumerate adapters ({type(e).__name__}: {e})")
    if not found:
        return Probe.unavailable(
            "wgpu found no adapter: install a Vulkan (e.g. mesa-vulkan-drivers), Metal or D3D12 driver"
        )
    import wgpu

    # webgpu:0 is the best adapter (GPUs first); a CPU one is software (lavapipe, SwiftShader, WARP)
    software = found[0].info.get("adapter_type") == "CPU"
    return Probe(True, f"wgpu {wgpu.__version__}", tuple(describe(a) for a in found), software=software)


@hookimpl
def cubeplug_backends() -> list[BackendSpec]:
    """The WebGPU backend (wgpu-py): WGSL kernels on Vulkan, Metal, D3D12 or GL."""
    return [
        BackendSpec(
            name=NAME,
            description="WebGPU through wgpu-py (WGSL kernels; Vulkan, Metal, D3D12)",
            dialects=("wgsl",),
            probe=probe,
            priority=25,
            install_hint=INSTALL_HINT,
            kind="gpu",
        )
    ]


#: Mesa's llvmpipe (lavapipe) ends every shader loop after 65,535 iterations, silently: a loop of
#: 100,000 iterations counted 65,535 on Mesa 22.3.6 (LLVM 15), so longer loops compute wrong results.
LLVMPIPE_LOOP_LIMIT = 65535
_log = logging.getLogger("cubeplug.webgpu")
_warned: set[str] = set()


def adapter_warnings(adapter: Any) -> list[str]:
    """What a user of this adapter must know that no error will tell them."""
    if "llvmpipe" not in str(adapter.info.get("device", "")).lower():
        return []
    return [
        f"{describe(adapter)} ends every shader loop after {LLVMPIPE_LOOP_LIMIT:,} iterations (a Mesa "
        "llvmpipe limit), silently: a kernel whose loops run longer computes wrong results. Use a GPU "
        "adapter or the cpu backend, or spread such loops over more units"
    ]


@hookimpl
def cubeplug_compute_storage(backend: str, device: int, config: Config) -> ComputeStorage | None:
    """GPUBuffer pages of a freshly requested device of the selected adapter."""
    if backend != NAME:
        return None
    from cubeplug.backends.webgpu.storage import WgpuStorage, memory_properties

    adapter = select_adapter(device, config)
    for warning in adapter_warnings(adapter):
        if warning not in _warned:  # once per process
            _warned.add(warning)
            _log.warning(warning)
    gpu_device, _ = open_device(adapter)
    return WgpuStorage(gpu_device, memory_properties(dict(gpu_device.limits)), adapter)


@hookimpl
def cubeplug_event_stream_backend(backend: str, device: int, config: Config) -> None:
    """WebGPU has one queue: the core scheduler orders the virtual streams."""
    return None


@hookimpl
def cubeplug_compute_server(
    backend: str, device: int, config: Config, storage: ComputeStorage, streams: Any
) -> Any:
    """The WebGPU server over the storage's device."""
    if backend != NAME:
        return None
    from cubeplug.backends.webgpu.server import WgpuServer
    from cubeplug.backends.webgpu.storage import WgpuStorage

    assert isinstance(storage, WgpuStorage)
    return WgpuServer(storage, config, device)


@hookimpl
def cubeplug_memory_properties(backend: str, device: int) -> MemoryProperties | None:
    """Pages up to the largest storage binding, aligned to the storage offset alignment."""
    if backend != NAME:
        return None
    from cubeplug.backends.webgpu.storage import memory_properties

    return memory_properties(dict(select_adapter(device, None).limits))


@hookimpl
def cubeplug_diagnostics(backend: str) -> dict[str, Any]:
    """The adapters wgpu sees, for ``cubeplug doctor``."""
    if backend != NAME:
        return {}
    result = probe()
    out: dict[str, Any] = {"webgpu adapters": "; ".join(result.devices) or result.reason}
    if result.ok:
        warnings = adapter_warnings(adapters(AdapterChoice())[0])
        if warnings:
            out["warnings"] = warnings
    return out
