"""The OpenCL plugin: probe, device listing and selection, options, hooks, import hygiene."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cubeplug import BackendUnavailableError
from cubeplug.backends.opencl import devices, plugin
from cubeplug.core.config import Config
from tests.backends.opencl.conftest import make_client, requires_opencl


def test_importing_the_plugin_imports_no_pyopencl() -> None:
    code = (
        "import sys, cubeplug.backends.opencl.plugin, cubeplug.backends.opencl.storage, "
        "cubeplug.backends.opencl.stream, cubeplug.backends.opencl.compiler, "
        "cubeplug.backends.opencl.server; "
        "assert 'pyopencl' not in sys.modules, 'pyopencl imported at module import time'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_spec() -> None:
    (spec,) = plugin.cubeplug_backends()
    assert spec.name == "opencl" and spec.dialects == ("opencl", "c")
    assert 0 < spec.priority < 25 and spec.kind == "gpu"
    assert "pocl" in spec.install_hint
    assert plugin.cubeplug_compute_storage(backend="cuda", device=0, config=Config()) is None


def test_probe_never_raises() -> None:
    result = plugin.probe()
    assert isinstance(result.ok, bool) and result.reason


@requires_opencl
def test_memory_properties_hook() -> None:
    props = plugin.cubeplug_memory_properties(backend="opencl", device=0)
    assert props is not None and props.alignment >= 256 and props.max_page_size > 0


@requires_opencl
def test_diagnostics() -> None:
    diag = plugin.cubeplug_diagnostics(backend="opencl")
    assert "pyopencl" in diag and diag["opencl devices"]
    assert plugin.cubeplug_diagnostics(backend="cpu") == {}


@requires_opencl
def test_selector_filter_picks_the_platform() -> None:
    first = devices.usable_devices()[0]
    needle = str(first.platform.vendor).split()[-1].lower()
    c = make_client(opencl={"filter": needle})
    try:
        assert c.device.name == str(first.name).strip() or c.device.index == 0
    finally:
        c.close()


@requires_opencl
def test_through_the_registry_with_a_selector() -> None:
    import cubeplug
    from cubeplug.registry import selection

    first = devices.usable_devices()[0]
    needle = str(first.platform.vendor).split()[-1].lower()
    selection.reset()
    try:
        cubeplug.register_backend(plugin)
        c = cubeplug.client(f"opencl:{needle}:0")
        assert c.backend == "opencl" and c.device.name == str(first.name).strip()
        h = c.create(b"registry")
        assert bytes(c.read_one(h)) == b"registry"
        with pytest.raises(BackendUnavailableError, match="does not exist"):
            cubeplug.client("opencl:no-such-platform:0")
    finally:
        selection.reset()
