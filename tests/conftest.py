"""Fixtures shared by the whole suite."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")


def make_cpu_client(**config_overrides: object):  # type: ignore[no-untyped-def]
    """A fresh CPU client (not the process-wide cached one), with optional config section overrides."""
    from cubeplug.backends.cpu.server import CpuServer
    from cubeplug.backends.cpu.storage import CpuStorage
    from cubeplug.core.client import ComputeClient
    from cubeplug.core.config import Config

    config = Config()
    for dotted, value in config_overrides.items():
        section, key = dotted.split("__")
        setattr(getattr(config, section), key, value)
    return ComputeClient(CpuServer(CpuStorage(), config))


@pytest.fixture
def cpu_client() -> Iterator[object]:
    """A fresh CPU client, closed after the test."""
    client = make_cpu_client()
    yield client
    client.close()
