"""Plugin discovery and the registry's records: entry points, plugins, backends, listing rows.

Reading the entry points of the group ``cubeplug.backends`` imports nothing; a :class:`PluginEntry`
then carries its plugin's load state (not loaded, loaded, failed, blocked), a :class:`Backend` the
spec a loaded plugin registered, a :class:`BackendStatus` one row of ``cubeplug list``, for the
registry (:mod:`cubeplug.registry.plugins`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from cubeplug.core.backend import BackendSpec
from cubeplug.core.errors import CubeplugError, PluginError
from cubeplug.core.version import __version__
from cubeplug.registry.settings import read_toml

GROUP = "cubeplug.backends"
OWN_DIST = "cubeplug"
IN_PROCESS = "(in-process)"
#: Backends cubeplug knows of, with the pip command that provides them.
KNOWN_EXTRAS = {
    "cuda": "pip install 'cubeplug[cuda12]' (CUDA 12) or 'cubeplug[cuda13]' (CUDA 13)",
    "opencl": "pip install 'cubeplug[opencl]' (or 'cubeplug[pocl]' for the PoCL CPU driver)",
    "pocl": "pip install 'cubeplug[pocl]'",
    "webgpu": "pip install 'cubeplug[webgpu]'",
}
def canon(dist: str | None) -> str:
    return re.sub(r"[-_.]+", "-", dist or "").lower()


def names_in(value: str | None) -> set[str]:
    return {v.strip() for v in (value or "").split(",") if v.strip()}


@dataclass(eq=False)
class PluginEntry:
    """One plugin: an entry point of the group (or an in-process registration) and its load state."""

    name: str
    value: str
    dist: str | None = None
    version: str | None = None
    ep: metadata.EntryPoint | None = None
    status: str = "not loaded"  # not loaded | loaded | failed | blocked
    reason: str = ""
    error: PluginError | None = None
    plugin: Any = None
    backends: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """``dist==version`` (or what is known of it)."""
        if self.dist is None:
            return "?"
        return self.dist if self.version is None else f"{self.dist}=={self.version}"

    @property
    def builtin(self) -> bool:
        """True for the backends cubeplug itself registers."""
        return canon(self.dist) == OWN_DIST


# ---------------------------------------------------------------------------------------- discovery
def entry_points() -> Iterable[tuple[metadata.EntryPoint, str | None, str | None]]:
    """The group's entry points with their distribution, plus cubeplug's own when run from a source tree."""
    found = []
    own = False
    for ep in metadata.entry_points(group=GROUP):
        dist = getattr(ep, "dist", None)
        name = dist.metadata["Name"] if dist is not None else None
        own = own or canon(name) == OWN_DIST
        found.append((ep, name, dist.version if dist is not None else None))
    if not own:
        found.extend(source_tree_entry_points())
    return found


def source_tree_entry_points() -> list[tuple[metadata.EntryPoint, str | None, str | None]]:
    """cubeplug's own entry points read from its pyproject when cubeplug runs uninstalled from a checkout."""
    try:
        metadata.distribution(OWN_DIST)
        return []  # installed: its entry points are the truth
    except metadata.PackageNotFoundError:
        pass
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    try:
        project = read_toml(pyproject).get("project", {}) if pyproject.is_file() else {}
    except CubeplugError:
        return []
    if project.get("name") != OWN_DIST:
        return []
    table = project.get("entry-points", {}).get(GROUP, {})
    version = f"{__version__} (source tree)"
    return [(metadata.EntryPoint(n, v, GROUP), OWN_DIST, version) for n, v in table.items()]


def unknown_backend_message(name: str, installed: Iterable[str]) -> str:
    """An error message for an unknown backend: the installed ones, and the pip extra for a known one."""
    names = ", ".join(sorted(installed)) or "none"
    hint = KNOWN_EXTRAS.get(name)
    if hint:
        return f"backend {name!r} is not installed: {hint}. Installed backends: {names}"
    return f"unknown backend {name!r}. Installed backends: {names}"


@dataclass(frozen=True)
class Backend:
    """A registered backend: its spec and the plugin entry that provides it."""

    spec: BackendSpec
    entry: PluginEntry

    @property
    def name(self) -> str:
        """The backend's name."""
        return self.spec.name


@dataclass(frozen=True)
class BackendStatus:
    """One row of ``cubeplug list``: name, dist==version, status and reason."""

    name: str
    dist: str
    status: str  # ok | failed | blocked | unavailable | not probed
    reason: str = ""
    entry_point: str = ""
    kind: str = ""
    priority: int | None = None
    description: str = ""
    devices: tuple[str, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)
