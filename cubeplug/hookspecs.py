"""Every hook a cubeplug backend plugin may implement (pluggy project ``"cubeplug"``).

A plugin is a module named by an entry point in the group ``cubeplug.backends``; it implements
some of these hooks with :data:`cubeplug.plugin.hookimpl`. The core calls the *factory* hooks only
on the plugin that registered the backend name in question, so registration order never decides
anything, and no hook is ever called on the per-launch hot path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

from cubeplug.core.backend import API_VERSION

if TYPE_CHECKING:
    from cubeplug.core.backend import BackendSpec
    from cubeplug.core.config import Config
    from cubeplug.core.server import ComputeServer
    from cubeplug.core.storage import ComputeStorage, MemoryProperties
    from cubeplug.core.stream import EventStreamBackend

PROJECT = "cubeplug"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

__all__ = ["API_VERSION", "PROJECT", "hookimpl", "hookspec"]


@hookspec
def cubeplug_backends() -> list[BackendSpec]:
    """Return the backends this plugin provides.

    Called on every plugin when the registry loads it; results are collected from all plugins.
    Each :class:`~cubeplug.plugin.BackendSpec` names the backend, its kernel dialects, its priority
    for auto-selection, its ``api_version`` and a cheap ``probe`` that never raises.
    """


@hookspec(firstresult=True)
def cubeplug_compute_storage(backend: str, device: int, config: Config) -> ComputeStorage:
    """Return the storage (raw device allocations) for ``device`` of ``backend``.

    :param backend: the backend name the plugin registered.
    :param device: the device index the selector chose.
    :param config: the effective configuration.

    Called once per client, only on the plugin that registered ``backend``. First result wins.
    """


@hookspec(firstresult=True)
def cubeplug_event_stream_backend(
    backend: str, device: int, config: Config
) -> EventStreamBackend[Any, Any] | None:
    """Return the native streams and events of ``device``, or None to use the core's scheduler.

    Backends with one queue (WebGPU, the CPU reference) return None. Called once per client, only on
    the plugin that registered ``backend``. First result wins.
    """


@hookspec(firstresult=True)
def cubeplug_compute_server(
    backend: str,
    device: int,
    config: Config,
    storage: ComputeStorage,
    streams: EventStreamBackend[Any, Any] | None,
) -> ComputeServer:
    """Return the server that executes work for ``device``, built on ``storage`` and ``streams``.

    Called once per client after the two hooks above, only on the plugin that registered
    ``backend``. First result wins.
    """


@hookspec(firstresult=True)
def cubeplug_memory_properties(backend: str, device: int, config: Config) -> MemoryProperties:
    """Return the memory properties (max page size, alignment) of ``device``.

    ``config`` carries the backend options (e.g. a platform filter that decides which device
    ``device`` is); an implementation may leave it out of its signature. Called by ``cubeplug doctor``
    and by tools, only on the plugin that registered ``backend``. First result wins.
    """


@hookspec(historic=True)
def cubeplug_configure(config: Config) -> None:
    """Receive the effective configuration once it is loaded.

    Historic: a plugin registered later is called with the configuration too. Called on every plugin.
    """


@hookspec
def cubeplug_diagnostics(backend: str) -> dict[str, Any]:
    """Return extra sections for ``cubeplug doctor`` about ``backend`` (name -> printable value).

    Called on every plugin by ``cubeplug doctor``; every result is shown. Must never raise.
    """


@hookspec
def cubeplug_kernel_compiled(backend: str, kernel: str, dialect: str, seconds: float) -> None:
    """Observe a kernel compilation (not a cache hit).

    Called on every plugin that implements it; costs nothing when none does.
    """


@hookspec
def cubeplug_out_of_memory(backend: str, requested: int, in_use: int, reserved: int) -> None:
    """Observe an allocation that failed even after cleanup, just before OutOfMemoryError is raised.

    Called on every plugin that implements it; costs nothing when none does.
    """


