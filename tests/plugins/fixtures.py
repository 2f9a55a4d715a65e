"""Shared fixtures of the plugin-system tests: a temporary site directory and an in-process plugin."""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cubeplug.core.backend import BackendSpec, Probe
from cubeplug.hookspecs import hookimpl
from cubeplug.registry import selection
from tests.plugins.distributions import MODULES, install

Installer = Callable[..., Path]


@functools.lru_cache(maxsize=1)
def other_builtins() -> tuple[str, ...]:
    """cubeplug's own backends other than cpu (real GPU backends), blocked to keep these tests hermetic."""
    from cubeplug.registry.plugins import PluginRegistry

    return tuple(n for n, e in PluginRegistry(env={}).entries().items() if e.builtin and n != "cpu")


def hermetic(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` plus ``CUBEPLUG_DISABLE`` naming the other built-in backends (added to any names given)."""
    env = dict(env or {})
    names = [n for n in env.get("CUBEPLUG_DISABLE", "").split(",") if n.strip()] + list(other_builtins())
    if names:
        env["CUBEPLUG_DISABLE"] = ",".join(names)
    return env


def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in list(os.environ):
        if var.startswith("CUBEPLUG_") or var == "DUMMY_UNAVAILABLE":
            monkeypatch.delenv(var)
    for var, value in hermetic().items():
        monkeypatch.setenv(var, value)


def disable(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """Set ``CUBEPLUG_DISABLE`` to ``names`` plus the other built-in backends."""
    env = hermetic({"CUBEPLUG_DISABLE": ",".join(names)})
    monkeypatch.setenv("CUBEPLUG_DISABLE", env["CUBEPLUG_DISABLE"])


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Installer]:
    """Install dummy distributions into a directory on sys.path; clean up modules and registries after."""
    _clean_env(monkeypatch)
    selection.reset()
    dirs: list[Path] = []

    def installer(*names: str, where: str = "site") -> Path:
        path = tmp_path / where
        if path not in dirs:
            monkeypatch.syspath_prepend(str(path))
            dirs.append(path)
        install(path, *names)
        importlib.invalidate_caches()
        return path

    yield installer
    selection.reset()
    for module in MODULES:
        sys.modules.pop(module, None)


class InProcess:
    """A plugin object registered in process."""

    def __init__(self, name: str = "inproc", probe: Callable[[], Probe] | None = None) -> None:
        self.name = name
        self._probe = probe or (lambda: Probe(True, "in process"))

    @hookimpl
    def cubeplug_backends(self) -> list[BackendSpec]:
        return [BackendSpec(self.name, "in-process test backend", ("python",), self._probe, kind="cpu")]

    @hookimpl
    def cubeplug_compute_storage(self, backend, device, config):  # type: ignore[no-untyped-def]
        from cubeplug.backends.cpu.storage import CpuStorage

        return CpuStorage()

    @hookimpl
    def cubeplug_compute_server(self, backend, device, config, storage, streams):  # type: ignore[no-untyped-def]
        from cubeplug.backends.cpu.server import CpuServer

        server = CpuServer(storage, config, device)
        server.backend = self.name
        return server
