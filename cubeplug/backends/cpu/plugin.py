"""Hook implementations of the CPU backend: the entry point ``cpu = cubeplug.backends.cpu.plugin``.

The backend offers ``[backends.cpu] devices`` devices (env ``CUBEPLUG_BACKENDS_CPU_DEVICES``, default
1): each ``cpu:<i>`` is a client of its own (its own memory and worker thread), so that code for
several devices (peer copies, collectives) runs and is tested on any machine.
"""

from __future__ import annotations

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

NAME = "cpu"
#: The most devices ``[backends.cpu] devices`` may ask for: each is a worker thread and a memory pool.
MAX_DEVICES = 64
#: The keys of ``[backends.cpu]``.
OPTIONS = ("devices",)
#: The device count of the configuration last handed to ``cubeplug_configure`` (what the probe lists).
_configured = 1


def device_count(config: Config) -> int:
    """``[backends.cpu] devices`` of ``config``, or ConfigError saying what is allowed."""
    options = config.backend_options(NAME)
    check_option_keys(NAME, options, OPTIONS)
    value = options.get("devices", 1)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DEVICES:
        raise ConfigError(
            f"bad value for backends.cpu.devices: {value!r} is not a device count",
            key="backends.cpu.devices",
            allowed=f"an integer from 1 to {MAX_DEVICES}",
        )
    return value


def probe() -> Probe:
    """The CPU backend needs only numpy, so it is always available; it lists its configured devices."""
    import platform

    name = platform.processor() or platform.machine() or "cpu"
    return Probe(True, "numpy on the host CPU", (name,) * _configured)


@hookimpl
def cubeplug_configure(config: Config) -> None:
    """Remember the device count the probe lists (a bad value is reported when a client is built)."""
    global _configured
    try:
        _configured = device_count(config)
    except ConfigError:
        _configured = 1


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


def _check_device(device: int, config: Config) -> None:
    count = device_count(config)
    if not 0 <= device < count:
        raise BackendUnavailableError(
            f"the cpu backend has {count} device{'s' if count > 1 else ''} (cpu:0 to cpu:{count - 1}); "
            f"cpu:{device} does not exist: set [backends.cpu] devices (or CUBEPLUG_BACKENDS_CPU_DEVICES) "
            f"to {device + 1} or more for more devices"
        )


@hookimpl
def cubeplug_compute_storage(backend: str, device: int, config: Config) -> ComputeStorage | None:
    """Numpy-backed storage."""
    if backend != NAME:
        return None
    _check_device(device, config)
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
