"""Clients for the bench: selectors to clients (registering built-in backends not installed as entry
points), which backends are usable here, and what to say about a device."""

from __future__ import annotations

import importlib
import platform
from importlib import metadata
from typing import Any

from cubeplug.registry.plugins import register_backend, registry
from cubeplug.registry.selection import client, parse_selector

#: Backends shipped inside cubeplug, in the order ``--all`` measures them.
BUILTIN = ("cuda", "opencl", "webgpu", "cpu")
#: Distributions whose versions every bench report records.
_DISTRIBUTIONS = ("cubeplug", "numpy", "pluggy", "platformdirs", "pyopencl", "wgpu", "rich", "matplotlib")


def ensure_registered(name: str) -> None:
    """Register a built-in backend in this process when no entry point provides it."""
    if name in BUILTIN and name not in registry().names():
        register_backend(importlib.import_module(f"cubeplug.backends.{name}.plugin"))


def make_client(selector: str | None, **overrides: Any) -> Any:
    """The client of ``selector`` (None: auto-selection), with config overrides for this bench."""
    if selector is not None:
        ensure_registered(parse_selector(selector).backend)
    return client(selector, **overrides)


def usable_backends() -> list[str]:
    """Every backend whose probe passes here: built-ins first, then installed plugins."""
    for name in BUILTIN:
        try:
            ensure_registered(name)
        except Exception:  # a broken built-in is reported by `cubeplug doctor`, not here
            continue
    reg = registry()
    names = [n for n in BUILTIN if n in reg.names()] + [n for n in reg.names() if n not in BUILTIN]
    usable = []
    for name in names:
        try:
            if reg.probe(name).ok:
                usable.append(name)
        except Exception:
            continue
    return usable


def is_gpu(client: Any) -> bool:
    """True when the client drives a GPU (not a CPU device such as PoCL, lavapipe or the cpu backend)."""
    props = client.properties
    kind = props.get("device_type") or props.get("adapter_type")
    if not kind:  # no device type reported: the backend's declared kind ("gpu" or "cpu")
        try:
            kind = registry().backend(client.backend).spec.kind
        except Exception:
            kind = "cpu" if client.backend == "cpu" else "gpu"
    return "cpu" not in str(kind).lower()


def describe(client: Any) -> dict[str, Any]:
    """The device as the report shows it."""
    info = client.device
    return {
        "backend": client.backend,
        "index": info.index,
        "name": info.name,
        "vendor": info.vendor,
        "driver": info.driver,
        "kind": "gpu" if is_gpu(client) else "cpu",
        "device_timing": bool(client.capabilities.device_timing),
        "max_alloc_bytes": int(client.capabilities.max_alloc_bytes),
    }


def versions() -> dict[str, str]:
    """Python, the platform and the version of every relevant distribution ("-" when absent)."""
    out = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
    }
    for dist in _DISTRIBUTIONS:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "-"
    for dist in ("cupy-cuda13x", "cupy-cuda12x", "cupy"):
        try:
            out["cupy"] = f"{metadata.version(dist)} ({dist})"
            break
        except metadata.PackageNotFoundError:
            continue
    return out
