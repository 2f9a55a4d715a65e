"""cubeplug: a GPU compute runtime whose backends are plugins.

``cubeplug.client()`` picks a backend (CUDA, OpenCL, WebGPU, the CPU reference, or any installed
plugin) by argument, ``cubeplug.use()``, environment, config file or auto-selection. Importing
cubeplug imports no GPU library and no backend module.
"""

from __future__ import annotations

import importlib
from types import ModuleType as _ModuleType
from typing import TYPE_CHECKING, Any

from cubeplug.core.errors import (
    BackendUnavailableError,
    BufferTooBig,
    CaptureError,
    CompileError,
    ConfigError,
    CubeplugError,
    DeviceLostError,
    LaunchError,
    MemoryCorruptionError,
    OutOfMemoryError,
    PluginError,
    ValidationError,
)
from cubeplug.core.handle import Handle, Tensor
from cubeplug.core.kernel import Buffer, CubeCount, ExecutionMode, Kernel, KernelId, Scalar
from cubeplug.core.profile import ProfileDuration
from cubeplug.core.version import __version__

if TYPE_CHECKING:
    from cubeplug.core.array import Array
    from cubeplug.core.client import ComputeClient
    from cubeplug.core.graph import Graph
    from cubeplug.core.memory import MemoryUsage
    from cubeplug.registry.plugins import register_backend
    from cubeplug.registry.selection import (
        Device,
        Selector,
        client,
        device_count,
        devices,
        enumerate_devices,
        from_dlpack,
        parse_selector,
        use,
    )

__all__ = [
    "Array",
    "BackendUnavailableError",
    "Buffer",
    "BufferTooBig",
    "CaptureError",
    "CompileError",
    "ComputeClient",
    "ConfigError",
    "CubeCount",
    "CubeplugError",
    "Device",
    "DeviceLostError",
    "ExecutionMode",
    "Graph",
    "Handle",
    "Kernel",
    "KernelId",
    "LaunchError",
    "MemoryCorruptionError",
    "MemoryUsage",
    "OutOfMemoryError",
    "PluginError",
    "ProfileDuration",
    "Scalar",
    "Selector",
    "Tensor",
    "ValidationError",
    "__version__",
    "client",
    "device_count",
    "devices",
    "enumerate_devices",
    "from_dlpack",
    "parse_selector",
    "lang",
    "register_backend",
    "use",
]

# Names resolved on first use, so that `import cubeplug` stays cheap (no registry, no client, no
# numpy-heavy module, no GPU library: bench/bench_import.py measures it).
_LAZY = {
    "Array": "cubeplug.core.array",
    "ComputeClient": "cubeplug.core.client",
    "Graph": "cubeplug.core.graph",
    "MemoryUsage": "cubeplug.core.memory",
    "client": "cubeplug.registry.selection",
    "use": "cubeplug.registry.selection",
    "Device": "cubeplug.registry.selection",
    "devices": "cubeplug.registry.selection",
    "device_count": "cubeplug.registry.selection",
    "enumerate_devices": "cubeplug.registry.selection",
    "from_dlpack": "cubeplug.registry.selection",
    "parse_selector": "cubeplug.registry.selector",
    "Selector": "cubeplug.registry.selector",
    "register_backend": "cubeplug.registry.plugins",
}
_LAZY_MODULES = {"lang": "cubeplug.lang"}


def __getattr__(name: str) -> Any:
    if name in _LAZY_MODULES:
        mod = importlib.import_module(_LAZY_MODULES[name])
        globals()[name] = mod
        return mod
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cubeplug' has no attribute {name!r}")
    if module == "cubeplug.registry.selection":
        # The clients it makes run their collectives through the portable implementation unless
        # the backend has its own: importing it installs it in the core (docs/architecture.md).
        importlib.import_module("cubeplug.collectives")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names (``__all__``) and the submodules already imported, not typing helpers."""
    modules = {k for k, v in globals().items() if isinstance(v, _ModuleType) and not k.startswith("_")}
    return sorted(set(__all__) | modules)
