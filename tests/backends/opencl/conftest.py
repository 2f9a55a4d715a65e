"""Fixtures of the OpenCL backend tests: a real OpenCL device (PoCL here, NVIDIA on the GPU machine).

``CUBEPLUG_TEST_OPENCL`` picks the device as a selector (``opencl:0``, ``opencl:nvidia:0``,
``opencl:pocl:0``); by default the first device of all platforms. Every test is skipped, with the
reason, when PyOpenCL or an OpenCL device is missing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")


def _skip_reason() -> str | None:
    try:
        import pyopencl  # noqa: F401
    except Exception as e:
        return f"PyOpenCL is not installed ({type(e).__name__}); pip install 'cubeplug[pocl]'"
    from cubeplug.backends.opencl.plugin import probe

    result = probe()
    return None if result.ok else f"no OpenCL device: {result.reason}"


SKIP_REASON = _skip_reason()
requires_opencl = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")


def test_selector() -> tuple[int, str | None]:
    """(device index, platform filter) of the device under test."""
    from cubeplug.registry.selection import parse_selector

    sel = parse_selector(os.environ.get("CUBEPLUG_TEST_OPENCL", "opencl:0"))
    return sel.device or 0, sel.filter


test_selector.__test__ = False  # type: ignore[attr-defined]


def make_config(**sections: Any) -> Any:
    """A Config for the device under test, with optional section overrides (``memory={"limit": ...}``)."""
    from cubeplug.core.config import Config

    config = Config()
    _, filt = test_selector()
    opts: dict[str, Any] = dict(sections.pop("opencl", {}))
    if filt is not None:
        opts.setdefault("filter", filt)
    config.backends["opencl"] = opts
    for section, values in sections.items():
        for key, value in values.items():
            setattr(getattr(config, section), key, value)
    return config


def make_client(**sections: Any) -> Any:
    """A fresh OpenCL client built through the plugin's hooks, as the registry builds it."""
    from cubeplug.backends.opencl import plugin
    from cubeplug.core.client import ComputeClient

    device, _ = test_selector()
    config = make_config(**sections)
    storage = plugin.cubeplug_compute_storage(backend="opencl", device=device, config=config)
    streams = plugin.cubeplug_event_stream_backend(backend="opencl", device=device, config=config)
    server = plugin.cubeplug_compute_server(
        backend="opencl", device=device, config=config, storage=storage, streams=streams
    )
    return ComputeClient(server)


@pytest.fixture
def client() -> Iterator[Any]:
    """A fresh OpenCL client, closed after the test."""
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
