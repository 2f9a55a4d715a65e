"""Device enumeration (``cubeplug.devices``, ``device_count``) and the CPU backend's several devices."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import cubeplug
from cubeplug.core.errors import BackendUnavailableError, ConfigError, PluginError, ValidationError
from cubeplug.registry import selection
from tests.std.conftest import skip_reason


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """Clients, registry and config forgotten before and after (the device count is config)."""
    selection.reset()
    yield monkeypatch
    monkeypatch.delenv("CUBEPLUG_BACKENDS_CPU_DEVICES", raising=False)
    selection.reset()


def test_default_is_one_cpu_device(fresh: pytest.MonkeyPatch) -> None:
    fresh.delenv("CUBEPLUG_BACKENDS_CPU_DEVICES", raising=False)
    assert cubeplug.device_count("cpu") == 1
    assert [d.selector for d in cubeplug.devices("cpu")] == ["cpu:0"]
    with pytest.raises(BackendUnavailableError, match=r"cpu:1 does not exist.*CUBEPLUG_BACKENDS_CPU_DEVICES"):
        cubeplug.client("cpu:1")


def test_env_gives_several_cpu_devices(fresh: pytest.MonkeyPatch) -> None:
    fresh.setenv("CUBEPLUG_BACKENDS_CPU_DEVICES", "3")
    listed = cubeplug.devices("cpu")
    assert [d.selector for d in listed] == ["cpu:0", "cpu:1", "cpu:2"]
    assert cubeplug.device_count("cpu") == 3
    assert cubeplug.enumerate_devices("cpu") == listed  # the seed's name
    clients = [cubeplug.client(d.selector) for d in listed]
    assert [c.device.index for c in clients] == [0, 1, 2]
    assert len({id(c.server) for c in clients}) == 3  # one server (memory, worker) per device
    assert cubeplug.client("cpu:2") is clients[2]
    with pytest.raises(BackendUnavailableError, match=r"3 devices \(cpu:0 to cpu:2\); cpu:3"):
        cubeplug.client("cpu:3")


def test_every_usable_backend_is_listed(fresh: pytest.MonkeyPatch) -> None:
    fresh.setenv("CUBEPLUG_BACKENDS_CPU_DEVICES", "2")
    everything = cubeplug.devices()
    assert {"cpu:0", "cpu:1"} <= {d.selector for d in everything}
    assert cubeplug.device_count() == len(everything)
    for device in everything:  # each selector selects the device it names
        assert selection.select(device.selector).device == device.index
        assert str(device).startswith(device.selector)


def test_unknown_backend_raises(fresh: pytest.MonkeyPatch) -> None:
    with pytest.raises((PluginError, BackendUnavailableError), match="nosuch"):
        cubeplug.devices("nosuch")


@pytest.mark.parametrize("value", ["0", "-1", "many", "65"])
def test_bad_device_count_is_a_config_error(fresh: pytest.MonkeyPatch, value: str) -> None:
    fresh.setenv("CUBEPLUG_BACKENDS_CPU_DEVICES", value)
    with pytest.raises(ConfigError, match=r"backends.cpu.devices.*integer from 1 to 64"):
        cubeplug.client("cpu")


def test_unknown_cpu_option_is_a_config_error(fresh: pytest.MonkeyPatch) -> None:
    fresh.setenv("CUBEPLUG_BACKENDS_CPU_DEVICE", "2")  # a typo of DEVICES
    with pytest.raises(ConfigError, match="unknown key 'device' in \\[backends.cpu\\]"):
        cubeplug.client("cpu")
    fresh.delenv("CUBEPLUG_BACKENDS_CPU_DEVICE")


def test_peer_to_client_between_cpu_devices(fresh: pytest.MonkeyPatch) -> None:
    """A copy between two devices lands on the destination, after the work that wrote the source."""
    fresh.setenv("CUBEPLUG_BACKENDS_CPU_DEVICES", "2")
    a, b = cubeplug.client("cpu:0"), cubeplug.client("cpu:1")
    data = np.arange(1001, dtype=np.float32)
    src = a.create(np.zeros_like(data))
    a.write(src, data)  # queued on a's stream: the transfer must come after it
    moved = a.to_client(src.offset_start(4), b)
    assert moved.owner is b.server
    np.testing.assert_array_equal(b.to_numpy(moved, "f32"), data[1:])
    back = b.to_client(moved, a)
    np.testing.assert_array_equal(a.to_numpy(back, "f32"), data[1:])


def test_copy_to_views_and_the_host_path(fresh: pytest.MonkeyPatch) -> None:
    """``copy_to`` into a view of another client: device to device between cpu devices, through the
    host between backends (OpenCL and WebGPU where usable here)."""
    fresh.setenv("CUBEPLUG_BACKENDS_CPU_DEVICES", "2")
    a, b = cubeplug.client("cpu:0"), cubeplug.client("cpu:1")
    src = a.create(np.arange(10, dtype=np.int32))
    dst = b.create(np.zeros(12, dtype=np.int32))
    a.copy_to(src.offset_start(8), b, dst.offset_start(8).offset_end(8))  # 8 elements into the middle
    np.testing.assert_array_equal(b.to_numpy(dst, "i32"), [0, 0, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0])
    with pytest.raises(ValidationError, match="the sizes must match"):
        a.copy_to(src, b, dst)
    for name in ("opencl", "webgpu"):
        if skip_reason(name) is not None:  # only where its library or device is missing, not here
            continue
        other = cubeplug.client(name)
        into = other.create(np.zeros(10, dtype=np.int32))
        a.copy_to(src, other, into)  # no device path between backends: a read and a write
        np.testing.assert_array_equal(other.to_numpy(into, "i32"), np.arange(10))
        back = a.create(np.zeros(10, dtype=np.int32))
        other.copy_to(into, a, back)
        np.testing.assert_array_equal(a.to_numpy(back, "i32"), np.arange(10))
