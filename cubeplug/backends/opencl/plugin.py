"""Hook implementations of the OpenCL backend: the entry point ``opencl = cubeplug.backends.opencl.plugin``.

Which devices are offered, and how they are numbered, is :mod:`cubeplug.backends.opencl.devices`
(only devices that can compile, one per device when two platforms offer the same one); the
``[backends.opencl]`` options are :mod:`cubeplug.backends.opencl.options`. One OpenCL context per
device is shared by every client.
"""

from __future__ import annotations

from typing import Any

from cubeplug.backends.opencl.devices import INSTALL_HINT, DeviceStatus, device_context, offered, survey
from cubeplug.backends.opencl.options import NAME, options
from cubeplug.plugin import BackendSpec, ComputeStorage, Config, MemoryProperties, Probe, hookimpl

PRIORITY = 20


def _left_out(statuses: list[DeviceStatus]) -> list[str]:
    return [f"{s.label}: {s.reason}" for s in statuses if not s.usable]


def probe() -> Probe:
    """Whether PyOpenCL imports and at least one OpenCL device can compile; never raises."""
    try:
        import pyopencl  # noqa: F401
    except Exception as e:
        return Probe.unavailable(f"PyOpenCL is not installed ({type(e).__name__}); {INSTALL_HINT}")
    try:
        statuses = survey()
    except Exception as e:
        return Probe.unavailable(f"listing OpenCL devices failed: {type(e).__name__}: {e}")
    if not statuses:
        return Probe.unavailable(f"no OpenCL platform or device is installed; {INSTALL_HINT}")
    usable = offered(statuses)
    left_out = _left_out(statuses)
    details: dict[str, Any] = {"left out": left_out} if left_out else {}
    if not usable:
        return Probe.unavailable(
            "no OpenCL device can compile: " + "; ".join(left_out), **details
        )
    reason = f"{len(usable)} OpenCL device(s)"
    if left_out:
        reason += f"; left out: {'; '.join(left_out)}"
    # opencl:0 on the CPU (PoCL's pthread device, Intel's CPU runtime) is no GPU
    software = usable[0].kind not in ("gpu", "accelerator")
    return Probe(True, reason, tuple(s.label for s in usable), details, software=software)


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
    """Every device PyOpenCL sees, which ``opencl:N`` it is or why it is left out; never raises."""
    if backend != NAME:
        return {}
    try:
        import pyopencl as cl

        statuses = survey()
        rows = [f"opencl:{i} = {s.label}" for i, s in enumerate(offered(statuses))]
        rows += [f"left out: {s.label}: {s.reason}" for s in statuses if not s.usable]
        return {"pyopencl": cl.VERSION_TEXT, "opencl devices": rows or ["none"]}
    except Exception as e:
        return {"pyopencl": f"unavailable: {type(e).__name__}: {e}"}
