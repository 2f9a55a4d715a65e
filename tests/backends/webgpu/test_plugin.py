"""The WebGPU plugin: its spec, probe, adapter selection and configuration."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cubeplug import BackendUnavailableError, ConfigError
from cubeplug.backends.webgpu import plugin
from tests.backends.webgpu.conftest import make_client, make_config, requires_webgpu


def test_backend_spec() -> None:
    (spec,) = plugin.cubeplug_backends()
    assert spec.name == "webgpu" and spec.dialects == ("wgsl",) and spec.priority == 25
    assert "wgpu" in spec.install_hint
    assert plugin.cubeplug_compute_storage(backend="cpu", device=0, config=make_config()) is None
    assert plugin.cubeplug_event_stream_backend(backend="webgpu", device=0, config=make_config()) is None


def test_importing_the_backend_does_not_import_wgpu() -> None:
    code = (
        "import sys\n"
        "import cubeplug.backends.webgpu.plugin, cubeplug.backends.webgpu.server\n"
        "import cubeplug.backends.webgpu.storage, cubeplug.backends.webgpu.queue\n"
        "import cubeplug.backends.webgpu.reads\n"
        "import cubeplug.backends.webgpu.compiler\n"
        "assert 'wgpu' not in sys.modules, 'wgpu was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_bad_options_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown option"):
        plugin.adapter_choice(make_config(webgpu={"colour": "red"}))
    with pytest.raises(ConfigError, match="power_preference"):
        plugin.adapter_choice(make_config(webgpu={"power_preference": "fast"}))
    with pytest.raises(ConfigError, match="backend_type"):
        plugin.adapter_choice(make_config(webgpu={"backend_type": "glide"}))
    choice = plugin.adapter_choice(make_config(webgpu={"backend_type": "Vulkan", "adapter": "x"}))
    assert choice.backend_type == "Vulkan" and choice.name == "x"


@requires_webgpu
def test_probe_and_adapter_selection() -> None:
    result = plugin.probe()
    assert result.ok and result.devices
    with pytest.raises(BackendUnavailableError, match="webgpu:99 does not exist"):
        plugin.select_adapter(99, make_config())
    with pytest.raises(BackendUnavailableError, match="does not exist"):
        plugin.select_adapter(0, make_config(webgpu={"adapter": "no such adapter anywhere"}))
    first = plugin.select_adapter(0, make_config())
    api = first.info["backend_type"].lower()
    assert (
        plugin.select_adapter(0, make_config(webgpu={"filter": api})).info["backend_type"]
        == first.info["backend_type"]
    )
    with pytest.raises(BackendUnavailableError):
        plugin.select_adapter(0, make_config(webgpu={"filter": "no-such-gpu"}))
    name = first.info["device"].split()[0]
    assert plugin.select_adapter(0, make_config(webgpu={"adapter": name.upper()})) is not None
    props = plugin.cubeplug_memory_properties(backend="webgpu", device=0)
    assert props is not None and props.alignment == first.limits["min-storage-buffer-offset-alignment"]
    assert "webgpu adapters" in plugin.cubeplug_diagnostics(backend="webgpu")


@requires_webgpu
def test_gl_adapter_where_present() -> None:
    from tests.backends.webgpu.kernels import ADD_ONE

    if not plugin.adapters(plugin.AdapterChoice(backend_type="OpenGL")):
        pytest.skip("wgpu lists no GL adapter on this machine")
    import numpy as np

    from cubeplug import BackendUnavailableError

    try:
        c = make_client(webgpu={"backend_type": "gl"})
    except BackendUnavailableError as e:
        # Seen on the GPU machine: its GL driver lacks compute shaders ("Parent device is lost").
        assert "cannot create a compute device" in str(e)
        pytest.skip(f"the GL adapter here has no compute device: {e}")
    try:
        assert c.properties["backend_type"] == "OpenGL"
        x = c.create(np.zeros(256, np.int32))
        for _ in range(3):
            c.launch(ADD_ONE, 4, [x], [256])
        assert c.to_numpy(x, "i32").sum() == 3 * 256
    finally:
        c.close()


@requires_webgpu
def test_through_the_registry_with_a_selector() -> None:
    import cubeplug
    from cubeplug.registry import selection

    first = plugin.select_adapter(0, make_config())
    api = str(first.info["backend_type"]).lower()
    selection.reset()
    try:
        cubeplug.register_backend(plugin)
        c = cubeplug.client(f"webgpu:{api}:0")
        assert c.backend == "webgpu" and c.properties["backend_type"] == first.info["backend_type"]
        h = c.create(b"registry")
        assert bytes(c.read_one(h)) == b"registry"
        with pytest.raises(BackendUnavailableError, match="does not exist"):
            cubeplug.client("webgpu:no-such-adapter:0")
    finally:
        selection.reset()


@requires_webgpu
@pytest.mark.parametrize("given", [None, "", "/run/user/1234"])
def test_enumerating_adapters_leaves_the_environment_as_it_was(given: str | None) -> None:
    """Issue 17: enumerating adapters set the process-wide XDG_RUNTIME_DIR when it was unset."""
    code = (
        "import os, sys\n"
        "before = os.environ.get('XDG_RUNTIME_DIR')\n"
        "from cubeplug.backends.webgpu import plugin\n"
        "assert plugin.probe().ok\n"
        "import cubeplug\n"
        "c = cubeplug.client('webgpu')\n"
        "assert bytes(c.read_one(c.create(b'abcd'))) == b'abcd'\n"
        "c.close()\n"
        "after = os.environ.get('XDG_RUNTIME_DIR')\n"
        "assert after == before, (before, after)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    if given is not None:
        env["XDG_RUNTIME_DIR"] = given
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    if given is None:  # and lavapipe's complaint about it stays quiet all the same
        assert "XDG_RUNTIME_DIR" not in done.stderr


class _Adapter:
    def __init__(self, device: str, kind: str) -> None:
        self.info = {"device": device, "adapter_type": kind, "backend_type": "Vulkan", "vendor": ""}


@pytest.mark.parametrize(
    ("adapters", "software"),
    [
        ([("llvmpipe (LLVM 15)", "CPU")], True),
        ([("NVIDIA H100", "DiscreteGPU"), ("llvmpipe (LLVM 15)", "CPU")], False),
        ([("llvmpipe (LLVM 15)", "CPU"), ("Intel Iris Xe", "IntegratedGPU")], False),  # GPUs rank first
    ],
)
def test_probe_says_whether_webgpu_0_is_a_software_adapter(
    monkeypatch: pytest.MonkeyPatch, adapters: list[tuple[str, str]], software: bool
) -> None:
    pytest.importorskip("wgpu")
    fakes = tuple(_Adapter(d, k) for d, k in adapters)
    monkeypatch.setattr(plugin, "_all_adapters", lambda: fakes)
    result = plugin.probe()
    assert result.ok and result.software is software
    assert result.devices[0].endswith("via Vulkan") and ("CPU" in result.devices[0]) is software


def test_doctor_warns_about_llvmpipes_loop_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wgpu")
    fakes = (_Adapter("llvmpipe (LLVM 15.0.6, 256 bits)", "CPU"),)
    monkeypatch.setattr(plugin, "_all_adapters", lambda: fakes)
    (warning,) = plugin.cubeplug_diagnostics(backend="webgpu")["warnings"]
    assert "65,535 iterations" in warning and "llvmpipe" in warning
    monkeypatch.setattr(plugin, "_all_adapters", lambda: (_Adapter("NVIDIA H100", "DiscreteGPU"), *fakes))
    assert "warnings" not in plugin.cubeplug_diagnostics(backend="webgpu")  # webgpu:0 is the GPU
    assert plugin.adapter_warnings(fakes[0]) == [warning]


@requires_webgpu
def test_opening_an_llvmpipe_device_logs_the_warning_once(caplog: pytest.LogCaptureFixture) -> None:
    adapter = plugin.select_adapter(0, None)
    expected = plugin.adapter_warnings(adapter)
    plugin._warned.clear()
    with caplog.at_level("WARNING", logger="cubeplug.webgpu"):
        first, second = make_client(), make_client()
    first.close()
    second.close()
    logged = [r.getMessage() for r in caplog.records if r.name == "cubeplug.webgpu"]
    assert logged == expected  # once, and only on llvmpipe
