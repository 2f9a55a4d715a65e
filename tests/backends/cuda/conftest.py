"""Fixtures of the CUDA backend tests: a client on the fake runtime (everywhere) or on the real GPU.

``mode`` is "fake" (tests/backends/cuda/fake_cupy.py stands in for CuPy: runs on any machine) or
"gpu" (CuPy on a CUDA device: marked ``gpu``, skipped with the reason where there is none). Run the
GPU half alone with ``pytest -m gpu tests/backends/cuda``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.backends.cuda import fake_cupy


def gpu_skip_reason() -> str | None:
    """Why the real-GPU tests cannot run here (None when they can)."""
    from cubeplug.backends.cuda.device import probe

    result = probe()
    return None if result.ok else f"CuPy not installed / no CUDA device: {result.reason}"


@pytest.fixture(params=[pytest.param("fake"), pytest.param("gpu", marks=pytest.mark.gpu)])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """ "fake" (the host-memory runtime) or "gpu" (the real device, skipped without one)."""
    if request.param == "fake":
        fake_cupy.install(monkeypatch)
    else:
        reason = gpu_skip_reason()
        if reason is not None:
            pytest.skip(reason)
    yield request.param


@pytest.fixture
def make_client(mode: str) -> Iterator[Callable[..., Any]]:
    """A factory of CUDA clients (``make_client(**backend_options)``); every client is closed after."""
    from cubeplug.backends.cuda.server import CudaServer
    from cubeplug.backends.cuda.storage import CudaStorage
    from cubeplug.backends.cuda.stream import CudaStreams
    from cubeplug.core.client import ComputeClient
    from cubeplug.core.config import Config

    made: list[Any] = []

    def make(device: int = 0, memory_limit: Any = None, **options: Any) -> Any:
        config = Config()
        if options:
            config.backends["cuda"] = dict(options)
        config.memory.limit = memory_limit
        client = ComputeClient(CudaServer(CudaStorage(device), CudaStreams(device), config, device))
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@pytest.fixture
def client(make_client: Callable[..., Any]) -> Any:
    """A CUDA client with the default options."""
    return make_client()


@pytest.fixture
def cp(mode: str) -> Any:
    """The ``cupy`` module of the mode (the fake's or the real one)."""
    import cupy

    return cupy
