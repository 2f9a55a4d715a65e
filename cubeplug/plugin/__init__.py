"""Everything a backend imports of cubeplug, in one place: the plugin surface and the backend toolkit.

A backend plugin is a module named by an entry point in the group ``cubeplug.backends``; it
implements the hooks of :mod:`cubeplug.hookspecs` with :data:`hookimpl`, returns
:class:`BackendSpec` records, and builds a :class:`ComputeStorage`, optionally an
:class:`EventStreamBackend`, and a :class:`ComputeServer` subclass for a device (docs/plugins.md).

The built-in backends import cubeplug through this package only, as a third-party backend does, so
each of them could ship as a distribution of its own. Besides the contract (the classes above, the
kernel and handle types, the errors) it holds the pieces every backend needs:

- launching and streams: :class:`MultiStream` over an :class:`EventStreamBackend`, or the
  :class:`Scheduler` of a single-queue device; :class:`Launcher`, :class:`LaunchSettings` and
  :class:`QueueCode` for a faster launch path; :class:`Step`, :class:`Replay` and
  :func:`unique_handles` for a native replay of captured graphs (``ComputeServer.new_replay``);
  :data:`thread_streams` and :func:`current_stream_id`;
- host memory: :func:`host_buffer`, :func:`host_copy`, :func:`host_copies`, :func:`host_address`,
  :func:`staging_sizes`, and :class:`StagingPool` (:mod:`cubeplug.plugin.staging`) for staging blocks;
- completing reads off the caller's thread: :class:`Completer` and :class:`EventFuture`
  (:mod:`cubeplug.plugin.completer`);
- describing the device: :func:`device_setup` and :func:`check_option_keys`
  (:mod:`cubeplug.plugin.device`);
- the ``c`` dialect's shared prelude (:mod:`cdialect`), the ``wgsl`` dialect's conventions
  (:mod:`wgsl`) and the cache folder (:func:`cache_dir`).
"""

from __future__ import annotations

from cubeplug.core import cdialect, wgsl
from cubeplug.core.backend import API_VERSION, BackendSpec, Capabilities, DeviceInfo, Probe
from cubeplug.core.collective import Call, Collectives, Group, Member, Round, portable
from cubeplug.core.config import Config
from cubeplug.core.errors import (
    BackendUnavailableError,
    BufferTooBig,
    CollectiveAbortedError,
    CollectiveError,
    CollectiveMismatchError,
    CollectiveTimeoutError,
    CollectiveUnavailableError,
    CompileError,
    ConfigError,
    CubeplugError,
    DeviceLostError,
    LaunchError,
    OutOfMemoryError,
    PluginError,
    ValidationError,
    describe,
)
from cubeplug.core.handle import Handle, Tensor, check_shape, contiguous_strides, view_dims
from cubeplug.core.hostmem import StagedRead, host_address, host_buffer, host_copies, host_copy, staging_sizes
from cubeplug.core.kernel import DTYPES, Buffer, CubeCount, ExecutionMode, Kernel, Scalar, dtype_of
from cubeplug.core.launcher import Launcher, LaunchSettings
from cubeplug.core.memory import SliceToken
from cubeplug.core.paths import cache_dir
from cubeplug.core.plans import QueueCode
from cubeplug.core.replay import Replay, Step, unique_handles
from cubeplug.core.scheduler import Scheduler
from cubeplug.core.server import Compiled, ComputeServer, repeated_byte
from cubeplug.core.storage import ComputeStorage, MemoryProperties, StorageHandle, next_storage_id
from cubeplug.core.stream import (
    EventStreamBackend,
    MultiStream,
    StreamState,
    current_stream_id,
    thread_streams,
)
from cubeplug.hookspecs import hookimpl
from cubeplug.plugin.completer import Completer, EventFuture, call_when_done
from cubeplug.plugin.device import DeviceSetup, check_option_keys, device_setup
from cubeplug.plugin.staging import MIN_BLOCK, StagingPool, size_class

__all__ = [
    "API_VERSION",
    "DTYPES",
    "MIN_BLOCK",
    "BackendSpec",
    "BackendUnavailableError",
    "Buffer",
    "BufferTooBig",
    "Call",
    "Capabilities",
    "CollectiveAbortedError",
    "CollectiveError",
    "CollectiveMismatchError",
    "CollectiveTimeoutError",
    "CollectiveUnavailableError",
    "Collectives",
    "CompileError",
    "Compiled",
    "Completer",
    "Group",
    "Member",
    "Round",
    "ComputeServer",
    "ComputeStorage",
    "Config",
    "ConfigError",
    "CubeCount",
    "CubeplugError",
    "DeviceInfo",
    "DeviceLostError",
    "DeviceSetup",
    "EventFuture",
    "EventStreamBackend",
    "ExecutionMode",
    "Handle",
    "Kernel",
    "LaunchError",
    "LaunchSettings",
    "Launcher",
    "MemoryProperties",
    "MultiStream",
    "OutOfMemoryError",
    "PluginError",
    "Probe",
    "QueueCode",
    "Replay",
    "Scalar",
    "Scheduler",
    "SliceToken",
    "StagedRead",
    "StagingPool",
    "Step",
    "StorageHandle",
    "StreamState",
    "Tensor",
    "ValidationError",
    "cache_dir",
    "call_when_done",
    "cdialect",
    "check_option_keys",
    "check_shape",
    "contiguous_strides",
    "current_stream_id",
    "describe",
    "device_setup",
    "dtype_of",
    "hookimpl",
    "host_address",
    "host_buffer",
    "host_copies",
    "host_copy",
    "next_storage_id",
    "portable",
    "repeated_byte",
    "size_class",
    "staging_sizes",
    "thread_streams",
    "unique_handles",
    "view_dims",
    "wgsl",
]
