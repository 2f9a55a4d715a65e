"""Clients of every backend the std kernels run on here: cpu always; opencl, webgpu and cuda when present.

Each is built through its plugin's hooks (as the registry builds it) with the autotune cache in a
temporary directory. A backend whose library or device is missing is skipped with the reason.
``CUBEPLUG_TEST_OPENCL`` picks the OpenCL device as a selector (``opencl:nvidia:0``; default
``opencl:0``), as in the OpenCL backend's tests.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

BACKENDS = ("cpu", "opencl", "webgpu", "cuda")


def skip_reason(name: str) -> str | None:
    """Why ``name`` cannot run here (None when it can)."""
    if name == "cpu":
        return None
    library = {"opencl": "pyopencl", "webgpu": "wgpu", "cuda": "cupy"}[name]
    try:
        importlib.import_module(library)
    except Exception as exc:
        extras = "'cubeplug[cuda13]' or 'cubeplug[cuda12]'" if name == "cuda" else f"'cubeplug[{name}]'"
        return f"{library} is not installed ({type(exc).__name__}); pip install {extras}"
    probe = importlib.import_module(f"cubeplug.backends.{name}.plugin").probe()
    return None if probe.ok else f"no {name} device: {probe.reason}"


def _device(name: str, config: Any) -> int:
    """The device index under test (and, for OpenCL, the platform filter from CUBEPLUG_TEST_OPENCL)."""
    if name != "opencl":
        return 0
    from cubeplug.registry.selection import parse_selector

    sel = parse_selector(os.environ.get("CUBEPLUG_TEST_OPENCL", "opencl:0"))
    if sel.filter is not None:
        config.backends["opencl"] = {"filter": sel.filter}
    return sel.device or 0


def make_client(name: str, **autotune: Any) -> Any:
    """A fresh client of ``name`` built through the plugin's hooks, with ``[autotune]`` overrides."""
    from cubeplug.core.client import ComputeClient
    from cubeplug.core.config import Config

    config = Config()
    for key, value in autotune.items():
        setattr(config.autotune, key, value)
    plugin = importlib.import_module(f"cubeplug.backends.{name}.plugin")
    device = _device(name, config)
    storage = plugin.cubeplug_compute_storage(backend=name, device=device, config=config)
    streams = None
    if hasattr(plugin, "cubeplug_event_stream_backend"):
        streams = plugin.cubeplug_event_stream_backend(backend=name, device=device, config=config)
    server = plugin.cubeplug_compute_server(
        backend=name, device=device, config=config, storage=storage, streams=streams
    )
    return ComputeClient(server)


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Keep every persisted tuning result of this test session in a temporary directory."""
    from cubeplug.core.tune import reset_persistent_caches

    old = os.environ.get("CUBEPLUG_CACHE_DIR")
    os.environ["CUBEPLUG_CACHE_DIR"] = str(tmp_path_factory.mktemp("autotune-cache"))
    reset_persistent_caches()
    yield
    reset_persistent_caches()
    if old is None:
        os.environ.pop("CUBEPLUG_CACHE_DIR", None)
    else:
        os.environ["CUBEPLUG_CACHE_DIR"] = old


@pytest.fixture(scope="session", params=BACKENDS)
def client(request: pytest.FixtureRequest) -> Iterator[Any]:
    """One client per backend for the whole session (kernels compile once; one device each)."""
    reason = skip_reason(request.param)
    if reason is not None:
        pytest.skip(reason)
    made = make_client(request.param, bench={"samples": 2, "warmup": 1, "progress": False})
    yield made
    made.close()
