"""Hook implementations: the entry point ``template = cubeplug_template.plugin`` names this module.

Keep this module cheap to import: no device library at module level, only inside the hooks and the
probe. cubeplug calls the factory hooks only on this plugin, and only for the backend name it registered.
"""

from __future__ import annotations

from typing import Any

from cubeplug.plugin import API_VERSION, BackendSpec, BackendUnavailableError, Probe, hookimpl
from cubeplug_template import NAME


def probe() -> Probe:
    """Say cheaply whether the backend can run here, and why not; never raise."""
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy is a dependency
        return Probe.unavailable("numpy is not installed: pip install numpy")
    return Probe(True, f"host memory, numpy {numpy.__version__}", ("host",))


@hookimpl
def cubeplug_backends() -> list[BackendSpec]:
    """Describe the backend: name, kernel dialects, auto-selection priority, hook API version."""
    return [
        BackendSpec(
            name=NAME,
            description="template backend: host memory, python kernels, runs work immediately",
            dialects=("python",),
            probe=probe,
            priority=-10,  # below the reference CPU backend: auto-selection never prefers it
            api_version=API_VERSION,
            install_hint="pip install cubeplug-backend-template",
            kind="cpu",
        )
    ]


def _check_device(device: int) -> None:
    if device != 0:
        raise BackendUnavailableError(
            f"the {NAME} backend has one device, {NAME}:0; {NAME}:{device} does not exist"
        )


@hookimpl
def cubeplug_compute_storage(backend: str, device: int, config: Any) -> Any:
    """Raw allocations for the device (here: numpy pages in host memory)."""
    _check_device(device)
    from cubeplug_template.storage import HostStorage

    return HostStorage()


@hookimpl
def cubeplug_event_stream_backend(backend: str, device: int, config: Any) -> None:
    """Native streams and events; None: this backend has one queue (see queue.py)."""
    return None


@hookimpl
def cubeplug_compute_server(backend: str, device: int, config: Any, storage: Any, streams: Any) -> Any:
    """The server executing work for the device, over the storage built above."""
    from cubeplug_template.server import TemplateServer

    return TemplateServer(storage, config, device)


@hookimpl
def cubeplug_memory_properties(backend: str, device: int) -> Any:
    """Page size and alignment the memory pools use."""
    from cubeplug_template.storage import memory_properties

    return memory_properties()


@hookimpl
def cubeplug_diagnostics(backend: str) -> dict[str, Any]:
    """Extra lines for ``cubeplug doctor`` (only about this backend); never raise."""
    if backend != NAME:
        return {}
    from cubeplug_template.storage import memory_properties

    return {"template": {"max page size": memory_properties().max_page_size}}
