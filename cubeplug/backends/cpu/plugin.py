"""Hook implementations of the CPU backend: the entry point ``cpu = cubeplug.backends.cpu.plugin``."""

from __future__ import annotations

from typing import Any

from cubeplug.plugin import (
    BackendSpec,
    BackendUnavailableError,
    ComputeStorage,
    Config,
    MemoryProperties,
    Probe,
    hookimpl,
)

NAME = "cpu"


def probe() -> Probe:
    """The CPU backend needs only numpy, so it is always available."""
    import platform

    return Probe(True, "numpy on the host CPU", (platform.processor() or platform.machine() or "cpu",))


@hookimpl
def cubeplug_backends() -> list[BackendSpec]:
    """The reference CPU backend: lowest priority, always available."""
    return [
        BackendSpec(
            name=NAME,
            description="reference CPU backend (numpy, python kernels)",
            dialects=("python",),
            probe=probe,
            priority=0,
            install_hint="included with cubeplug",
            kind="cpu",
        )
    ]


def _check_device(device: int) -> None:
    if device != 0:
        raise BackendUnavailableError(f"the cpu backend has one device, cpu:0; cpu:{device} does not exist")


@hookimpl
def cubeplug_compute_storage(backend: str, device: int, config: Config) -> ComputeStorage | None:
    """Numpy-backed storage."""
    if backend != NAME:
        return None
    _check_device(device)
    from cubeplug.backends.cpu.storage import CpuStorage

    return CpuStorage()


@hookimpl
def cubeplug_compute_server(
    backend: str, device: int, config: Config, storage: ComputeStorage, streams: Any
) -> Any:
    """The CPU server over the storage; the core scheduler orders its virtual streams."""
    if backend != NAME:
        return None
    from cubeplug.backends.cpu.server import CpuServer
    from cubeplug.backends.cpu.storage import CpuStorage

    assert isinstance(storage, CpuStorage)
    return CpuServer(storage, config, device)


@hookimpl
def cubeplug_memory_properties(backend: str, device: int) -> MemoryProperties | None:
    """Pages up to a quarter of host memory, cache-line aligned."""
    if backend != NAME:
        return None
    from cubeplug.backends.cpu.storage import memory_properties

    return memory_properties()
