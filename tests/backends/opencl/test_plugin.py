"""The OpenCL plugin: probe, device listing and selection, options, hooks, import hygiene."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cubeplug import BackendUnavailableError, ConfigError
from cubeplug.backends.opencl import plugin
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


def _config(**opts: object) -> Config:
    config = Config()
    config.backends["opencl"] = dict(opts)
    return config


def test_options_validation() -> None:
    assert plugin.options(Config()) == plugin.OpenCLOptions()
    assert plugin.options(_config(platform="PoCL", device_type="CPU")).device_type == "cpu"
    assert plugin.options(_config(filter="pocl", platform="nvidia")).platform == "pocl"
    assert plugin.options(_config(filter="gpu")).device_type == "gpu"
    with pytest.raises(ConfigError, match="unknown key 'platfrom'"):
        plugin.options(_config(platfrom="pocl"))
    with pytest.raises(ConfigError, match="device_type"):
        plugin.options(_config(device_type="tpu"))
    with pytest.raises(ConfigError, match="profiling"):
        plugin.options(_config(profiling="yes"))
    with pytest.raises(ConfigError, match="platform"):
        plugin.options(_config(platform=""))


@requires_opencl
def test_devices_across_platforms_and_filters() -> None:
    everything = plugin.list_devices()
    assert everything
    first = everything[0]
    needle = str(first.platform.vendor).split()[-1]
    assert first in plugin.list_devices(platform=needle.upper())
    assert plugin.list_devices(platform="no-such-platform-xyz") == []
    kind = plugin._device_type_name(int(first.type))
    if kind in ("gpu", "cpu", "accelerator"):
        assert first in plugin.list_devices(device_type=kind)


@requires_opencl
def test_device_context_is_shared_and_bad_indices_fail() -> None:
    a = plugin.device_context(0, Config())
    assert plugin.device_context(0, Config()) is a
    count = len(plugin.list_devices())
    with pytest.raises(BackendUnavailableError, match=f"opencl:{count} does not exist"):
        plugin.device_context(count, Config())
    with pytest.raises(BackendUnavailableError, match="no-such"):
        plugin.device_context(0, _config(platform="no-such"))
    with pytest.raises(BackendUnavailableError):
        plugin.device_context(-1, Config())


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
    first = plugin.list_devices()[0]
    needle = str(first.platform.vendor).split()[-1].lower()
    c = make_client(opencl={"filter": needle})
    try:
        assert c.device.name == str(first.name).strip() or c.device.index == 0
    finally:
        c.close()


@requires_opencl
def test_through_the_registry_with_a_selector() -> None:
    import cubeplug
    from cubeplug.core import selection

    first = plugin.list_devices()[0]
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
