"""Fixtures of the WebGPU backend tests: a real adapter (lavapipe in CI, NVIDIA's Vulkan on the GPU machine).

``CUBEPLUG_TEST_WEBGPU`` picks the adapter index (``webgpu:0`` by default: discrete GPUs first, then
integrated, virtual and CPU adapters, native APIs before GL). Every test is skipped, with the
reason, when wgpu or an adapter is missing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")


def _skip_reason() -> str | None:
    try:
        import wgpu  # noqa: F401
    except Exception as e:
        return f"wgpu is not installed ({type(e).__name__}); pip install 'cubeplug[webgpu]'"
    from cubeplug.backends.webgpu.plugin import probe

    result = probe()
    return None if result.ok else f"no WebGPU adapter: {result.reason}"


SKIP_REASON = _skip_reason()
requires_webgpu = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")


def test_device() -> int:
    """The adapter index under test."""
    selector = os.environ.get("CUBEPLUG_TEST_WEBGPU", "webgpu:0")
    return int(selector.rsplit(":", 1)[1]) if ":" in selector else 0


test_device.__test__ = False  # type: ignore[attr-defined]


def make_config(**sections: Any) -> Any:
    """A Config with optional section overrides (``memory={"limit": ...}``, ``webgpu={...}``)."""
    from cubeplug.core.config import Config

    config = Config()
    config.backends["webgpu"] = dict(sections.pop("webgpu", {}))
    for section, values in sections.items():
        for key, value in values.items():
            setattr(getattr(config, section), key, value)
    return config


def make_client(**sections: Any) -> Any:
    """A fresh WebGPU client built through the plugin's hooks, as the registry builds it."""
    from cubeplug.backends.webgpu import plugin
    from cubeplug.core.client import ComputeClient

    device = test_device()
    config = make_config(**sections)
    storage = plugin.cubeplug_compute_storage(backend="webgpu", device=device, config=config)
    streams = plugin.cubeplug_event_stream_backend(backend="webgpu", device=device, config=config)
    server = plugin.cubeplug_compute_server(
        backend="webgpu", device=device, config=config, storage=storage, streams=streams
    )
    return ComputeClient(server)


@pytest.fixture(scope="module")
def shared_client() -> Iterator[Any]:
    """One WebGPU client for a whole test module (pipelines compile once)."""
    if SKIP_REASON is not None:
        pytest.skip(SKIP_REASON)
    c = make_client()
    yield c
    c.close()


@pytest.fixture
def client(shared_client: Any) -> Iterator[Any]:
    """The module's client, synced and checked for leftover asynchronous errors after each test."""
    yield shared_client
    shared_client.sync(all_streams=True)


@pytest.fixture
def fresh_client() -> Iterator[Any]:
    """A WebGPU client of its own (for memory figures and state), closed after the test."""
    if SKIP_REASON is not None:
        pytest.skip(SKIP_REASON)
    c = make_client()
    yield c
    c.close()


@pytest.fixture
def cpu_client() -> Iterator[Any]:
    """A fresh reference CPU client."""
    from cubeplug.backends.cpu.server import CpuServer
    from cubeplug.backends.cpu.storage import CpuStorage
    from cubeplug.core.client import ComputeClient

    c = ComputeClient(CpuServer(CpuStorage()))
    yield c
    c.close()
