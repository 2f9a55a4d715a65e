"""Hook implementations of the CUDA backend: the entry point ``cuda = cubeplug.backends.cuda.plugin``.

Nothing here imports CuPy at module import; the probe looks for it with ``importlib.util.find_spec``
first, so listing backends on a machine without CuPy costs nothing and says what to install.
"""

from __future__ import annotations

from typing import Any

from cubeplug.backends.cuda.device import INSTALL_HINT, check_device, probe
from cubeplug.plugin import BackendSpec, ComputeStorage, Config, MemoryProperties, hookimpl

NAME = "cuda"


@hookimpl
def cubeplug_backends() -> list[BackendSpec]:
    """The CUDA backend: NVIDIA GPUs through CuPy; highest priority for auto-selection."""
    return [
        BackendSpec(
            name=NAME,
            description="NVIDIA GPUs through CuPy (CUDA runtime, NVRTC kernels, CUDA streams)",
            dialects=("cuda", "c"),
            probe=probe,
            priority=100,
            install_hint=INSTALL_HINT,
            kind="gpu",
        )
    ]


@hookimpl
def cubeplug_compute_storage(backend: str, device: int, config: Config) -> ComputeStorage | None:
    """Raw cudaMalloc pages on ``cuda:device``."""
    if backend != NAME:
        return None
    check_device(device)
    from cubeplug.backends.cuda.options import parse_options
    from cubeplug.backends.cuda.storage import CudaStorage

    parse_options(config.backend_options(NAME))  # fail early, before touching the device
    return CudaStorage(device)


@hookimpl
def cubeplug_event_stream_backend(backend: str, device: int, config: Config) -> Any:
    """Non-blocking CUDA streams and events of ``cuda:device``."""
    if backend != NAME:
        return None
    from cubeplug.backends.cuda.stream import CudaStreams

    return CudaStreams(device)


@hookimpl
def cubeplug_compute_server(
    backend: str, device: int, config: Config, storage: ComputeStorage, streams: Any
) -> Any:
    """The CUDA server over the storage and the streams."""
    if backend != NAME:
        return None
    from cubeplug.backends.cuda.server import CudaServer
    from cubeplug.backends.cuda.storage import CudaStorage

    assert isinstance(storage, CudaStorage)
    return CudaServer(storage, streams, config, device)


@hookimpl
def cubeplug_memory_properties(backend: str, device: int) -> MemoryProperties | None:
    """Pages up to a quarter of device memory, 256-byte aligned (``[backends.cuda] max_page_size``)."""
    if backend != NAME:
        return None
    from cubeplug.backends.cuda.storage import memory_properties

    return memory_properties(device)


@hookimpl
def cubeplug_diagnostics(backend: str) -> dict[str, Any]:
    """CuPy, CUDA and launch-path facts for ``cubeplug doctor``; never raises."""
    if backend != NAME:
        return {}
    out: dict[str, Any] = {}
    result = probe()
    out["cuda.probe"] = result.reason
    if not result.ok:
        return out
    try:
        import cupy

        from cubeplug.backends.cuda.launch import driver_available

        out["cuda.cupy"] = cupy.__version__
        out["cuda.devices"] = ", ".join(f"cuda:{i} {name}" for i, name in enumerate(result.devices))
        out["cuda.launch_path"] = (
            "driver (cuda.bindings)" if driver_available() else "cupy (cuda.bindings missing)"
        )
    except Exception as e:
        out["cuda.error"] = f"{type(e).__name__}: {e}"
    return out
