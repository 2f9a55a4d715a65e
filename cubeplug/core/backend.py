"""What a backend says about itself: BackendSpec, Probe and Capabilities (docs/plugins.md).

A plugin returns :class:`BackendSpec` records from ``cubeplug_backends``; the core reads them to list,
probe and auto-select backends without building anything. A server reports :class:`Capabilities`,
which the conformance suite uses to skip what a backend lacks (never by backend name).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cubeplug.core.kernel import COUNT_MAX

#: The hook API version this cubeplug implements; a BackendSpec must declare the same major.
API_VERSION = 1


@dataclass(frozen=True)
class Probe:
    """A cheap answer to "can this backend run here?": never raises, says why not."""

    ok: bool
    reason: str = ""
    devices: tuple[str, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)
    #: True when the device a plain selector gets (device 0) is no GPU but a software or CPU
    #: implementation of the API (Mesa's lavapipe, SwiftShader, PoCL's CPU device). Auto-selection
    #: passes such a backend over for the CPU backend unless ``[backend] order`` names it; asked for
    #: by name, it is used as any other.
    software: bool = False

    @classmethod
    def unavailable(cls, reason: str, **details: Any) -> Probe:
        """A failed probe with the reason and the remedy in one sentence."""
        return cls(False, reason, (), dict(details))


@dataclass(frozen=True)
class BackendSpec:
    """A backend a plugin provides: its name, dialects, priority and how to probe it."""

    name: str
    description: str
    dialects: tuple[str, ...]
    probe: Callable[[], Probe]
    priority: int = 0
    api_version: int = API_VERSION
    install_hint: str = ""
    kind: str = "gpu"
    #: Whether a client of this backend can be made in a child process forked after the parent used
    #: the backend; None: only for ``kind == "cpu"`` (GPU drivers generally do not survive fork).
    fork_safe: bool | None = None

    @property
    def survives_fork(self) -> bool:
        """True when a forked child may build a client of this backend after its parent used it."""
        return self.kind == "cpu" if self.fork_safe is None else self.fork_safe


@dataclass(frozen=True)
class Capabilities:
    """What a backend's device can do; the conformance suite gates tests on these fields."""

    dtypes: frozenset[str]
    multi_queue: bool = False
    device_timing: bool = False
    fp16: bool = False
    fp64: bool = False
    int64: bool = False
    atomics: bool = True
    dynamic_count: bool = True
    staging: bool = False
    pitched_tensors: bool = False
    max_alloc_bytes: int = 0
    offset_alignment: int = 1
    max_cube_dim: tuple[int, int, int] = (1024, 1024, 64)
    max_cube_threads: int = 1024
    #: The most cubes a launch may run along x, y and z (what CubeCount itself allows by default).
    max_cube_count: tuple[int, int, int] = (COUNT_MAX, COUNT_MAX, COUNT_MAX)
    #: Bytes of shared memory (CUDA ``__shared__``, OpenCL ``__local``, WGSL ``var<workgroup>``) one
    #: cube may use; cubeplug.lang rejects a kernel whose ``cl.shared`` arrays need more. A backend
    #: that does not say gets 16 KiB, the least WebGPU guarantees.
    max_shared_bytes: int = 16384

    def has(self, name: str) -> bool:
        """True when the named capability is present (a true flag or a non-zero figure)."""
        return bool(getattr(self, name))


@dataclass(frozen=True)
class DeviceInfo:
    """Which device a server drives: its backend, index, name and vendor."""

    backend: str
    index: int
    name: str
    vendor: str = ""
    driver: str = ""

    def __str__(self) -> str:
        return f"{self.backend}:{self.index} ({self.name})"
