"""Device loss on a real adapter: ``GPUDevice.destroy()`` loses the device the way a driver reset does."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from cubeplug import DeviceLostError, Kernel
from cubeplug.backends.webgpu.health import DeviceHealth, is_lost_error
from tests.backends.webgpu.conftest import make_client, requires_webgpu
from tests.backends.webgpu.kernels import ADD_ONE, FILL, SLOW

pytestmark = requires_webgpu

#: What wgpu-native says when a call reaches a lost device.
LOST_MESSAGE = "Validation Error\n\nCaused by:\n  In wgpuDeviceCreateBuffer\n    Parent device is lost"


@pytest.fixture
def lost_client() -> Iterator[Any]:
    """A client of its own whose device is destroyed (lost) after some work ran on it."""
    client = make_client()
    x = client.create(np.zeros(64, np.int32))
    client.launch(ADD_ONE, 1, [x], [64])
    assert client.to_numpy(x, "i32").sum() == 64
    client.server.gpu.destroy()
    yield client, x
    client.close()  # a lost client closes quietly (there is nothing left to wait for)
    assert not client.server.storage.buffers, "closing a lost client releases its buffers"


def test_a_lost_device_error_says_what_to_do(lost_client) -> None:  # type: ignore[no-untyped-def]
    client, x = lost_client
    client.launch(ADD_ONE, 1, [x], [64])  # queued: nothing reaches the device yet
    with pytest.raises(DeviceLostError, match="was lost") as info:
        client.sync()
    assert "create a new one" in str(info.value) and "Parent device is lost" in str(info.value)


def _first_calls(client: Any, x: Any) -> dict[str, Callable[[], Any]]:
    return {
        "sync": client.sync,
        "flush": lambda: (client.launch(ADD_ONE, 1, [x], [64]), client.flush()),
        "read": lambda: client.read_one(x),
        "read_async": lambda: client.read_async([x]).result(timeout=30),
        "create": lambda: client.create(np.ones(1 << 20, np.float32)),
        "write": lambda: client.server.write(0, x, memoryview(bytes(x.size))),
        "copy": lambda: (client.to_client(x, client), client.sync()),
        "compile": lambda: client.launch(FILL, 1, [client.empty(256)], [1.0, 64]),
        "sync_all": lambda: client.sync(all_streams=True),
    }


FIRST_CALLS = ["sync", "flush", "read", "read_async", "create", "write", "copy", "compile", "sync_all"]


@pytest.mark.parametrize("first", FIRST_CALLS)
def test_the_first_call_that_touches_a_lost_device_raises_and_so_do_later_ones(lost_client, first) -> None:  # type: ignore[no-untyped-def]
    client, x = lost_client
    calls = _first_calls(client, x)
    assert sorted(calls) == sorted(FIRST_CALLS)
    with pytest.raises(DeviceLostError):
        calls.pop(first)()
    assert client.server.health.reason is not None
    for name, call in calls.items():
        with pytest.raises(DeviceLostError):
            call()
            pytest.fail(f"{name} after {first} did not raise DeviceLostError")
    client.memory_usage()  # host-side bookkeeping keeps working
    x.drop()


def test_a_device_lost_while_a_thread_waits_in_sync_ends_the_wait() -> None:
    client = make_client()
    n = 1 << 12
    x = client.create(np.zeros(n, np.int32))
    client.launch(SLOW, n // 64, [x], [1])  # compiled before the device goes
    client.sync()
    rounds = 60_000 if str(client.properties["adapter_type"]).lower() == "cpu" else 1 << 20
    started = threading.Event()
    outcome: list[BaseException | None] = []

    def launch_and_sync() -> None:
        for _ in range(4):
            client.launch(SLOW, n // 64, [x], [rounds])
        started.set()
        try:
            client.sync()
            outcome.append(None)
        except BaseException as e:
            outcome.append(e)

    syncing = threading.Thread(target=launch_and_sync)
    syncing.start()
    assert started.wait(30)
    time.sleep(0.1)  # let the sync begin waiting
    client.server.gpu.destroy()
    syncing.join(60)
    assert not syncing.is_alive(), "a wait on a destroyed device must end"
    # The wait noticed the loss, or the device finished the work before it went; either way the
    # next call says that the device is gone.
    assert outcome and (outcome[0] is None or isinstance(outcome[0], DeviceLostError)), outcome
    with pytest.raises(DeviceLostError):
        client.read_one(x)
    client.close()


def test_a_wait_probes_the_device_and_ends_when_it_is_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mapping that never resolves (wgpu 0.32 after destroy) ends with DeviceLostError, not a hang."""
    from cubeplug.backends.webgpu import reads

    monkeypatch.setattr(reads, "WAIT_STEP", 0.01)

    class Pending:
        """A promise that never resolves."""

        _thread_event = threading.Event()

        def sync_wait(self) -> None:
            raise AssertionError("not reached: the device is lost")

    client = make_client()
    try:
        health = client.server.health
        health.device.destroy()
        with pytest.raises(DeviceLostError, match="Parent device is lost"):
            reads.wait_promise(Pending(), health)
    finally:
        client.close()


class FakeDevice:
    """A device that refuses buffers once ``lost`` is set, as wgpu does."""

    lost = False

    def create_buffer(self, **_: Any) -> Any:
        if self.lost:
            raise RuntimeError(LOST_MESSAGE)
        return type("Buffer", (), {"destroy": lambda self: None})()


def test_lost_device_messages_are_recognised() -> None:
    device = FakeDevice()
    health = DeviceHealth(device, name="llvmpipe")
    # An error of a working device is not a loss (the probe finds the device alive).
    assert health.lost(RuntimeError("Validation Error: binding 0 is too small")) is None
    assert health.reason is None
    health.check()
    health.probe()
    error = health.lost(RuntimeError(LOST_MESSAGE))
    assert isinstance(error, DeviceLostError) and is_lost_error(error)
    assert health.reason == "Parent device is lost, wgpuDeviceCreateBuffer"
    assert "'llvmpipe'" in str(error) and "create a new one" in str(error)
    health.lost(RuntimeError("Could not map buffer (device lost)"))
    assert health.reason == "Parent device is lost, wgpuDeviceCreateBuffer"  # the first reason is kept
    with pytest.raises(DeviceLostError):
        health.check()


def test_an_error_that_does_not_say_lost_is_checked_with_a_probe() -> None:
    device = FakeDevice()
    health = DeviceHealth(device)
    device.lost = True
    destroyed = RuntimeError("In wgpuBufferUnmap\n    Buffer with '' label has been destroyed")
    assert isinstance(health.lost(destroyed), DeviceLostError)
    assert health.reason == "Parent device is lost, wgpuDeviceCreateBuffer"


def test_raise_lost_raises_only_for_a_lost_device() -> None:
    health = DeviceHealth(FakeDevice())
    health.raise_lost(RuntimeError("Validation Error: binding 0 is too small"))  # returns
    cause = RuntimeError(LOST_MESSAGE)
    with pytest.raises(DeviceLostError) as info:
        health.raise_lost(cause)
    assert info.value.__cause__ is cause and health.reason is not None


def test_a_kernel_compiled_before_the_loss_is_not_run_after_it(lost_client) -> None:  # type: ignore[no-untyped-def]
    client, x = lost_client
    client.server.health.mark("destroyed by the test")
    with pytest.raises(DeviceLostError, match="destroyed by the test"):
        client.launch_unchecked(ADD_ONE, 1, [x], [64])
    unknown = Kernel("never_compiled", [], {"wgsl": "@compute @workgroup_size(1) fn never_compiled() {}"})
    with pytest.raises(DeviceLostError):
        client.launch(unknown, 1)
