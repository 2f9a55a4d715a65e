"""Everything a backend author imports, in one module (docs/plugins.md).

A backend plugin is a module named by an entry point in the group ``cubeplug.backends``; it
implements the hooks of :mod:`cubeplug.hookspecs` with :data:`hookimpl`, returns
:class:`BackendSpec` records, and builds a :class:`ComputeStorage`, optionally an
:class:`EventStreamBackend`, and a :class:`ComputeServer` subclass for a device.
"""

from __future__ import annotations

from cubeplug.core.backend import API_VERSION, BackendSpec, Capabilities, DeviceInfo, Probe
from cubeplug.core.errors import (
    BackendUnavailableError,
    BufferTooBig,
    CompileError,
    ConfigError,
    CubeplugError,
    DeviceLostError,
    LaunchError,
    OutOfMemoryError,
    PluginError,
    ValidationError,
)
from cubeplug.core.handle import Handle
from cubeplug.core.kernel import Buffer, CubeCount, ExecutionMode, Kernel, Scalar
from cubeplug.core.scheduler import Scheduler
from cubeplug.core.server import Compiled, ComputeServer
from cubeplug.core.storage import ComputeStorage, MemoryProperties, StorageHandle, next_storage_id
from cubeplug.core.stream import EventStreamBackend, MultiStream
from cubeplug.hookspecs import hookimpl

__all__ = [
    "API_VERSION",
    "BackendSpec",
    "BackendUnavailableError",
    "Buffer",
    "BufferTooBig",
    "Capabilities",
    "CompileError",
    "Compiled",
    "ComputeServer",
    "ComputeStorage",
    "ConfigError",
    "CubeCount",
    "CubeplugError",
    "DeviceInfo",
    "DeviceLostError",
    "EventStreamBackend",
    "ExecutionMode",
    "Handle",
    "Kernel",
    "LaunchError",
    "MemoryProperties",
    "MultiStream",
    "OutOfMemoryError",
    "PluginError",
    "Probe",
    "Scalar",
    "Scheduler",
    "StorageHandle",
    "ValidationError",
    "hookimpl",
    "next_storage_id",
]
