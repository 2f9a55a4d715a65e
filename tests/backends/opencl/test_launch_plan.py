"""The checked launch inlined in the kernel's plan (OpenCLServer.queue_code) against execute."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from cubeplug import Buffer, Kernel, Scalar
from tests.backends.opencl.conftest import make_client, requires_opencl

pytestmark = requires_opencl

AXPY = Kernel(
    "axpy_plan",
    [Buffer("x", "f32", "read"), Buffer("y", "f32"), Scalar("a", "f32"), Scalar("n", "u32")],
    {"c": "KERNEL axpy_plan(GLOBAL const float* x, GLOBAL float* y, float a, unsigned int n) "
          "{ unsigned int i = ABSOLUTE_POS_X; if (i < n) y[i] += a * x[i]; }"},
    cube_dim=64,
)


@pytest.fixture
def client() -> Any:
    c = make_client()
    yield c
    c.close()


def count_execute(client: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Calls of the server's execute (which still queues): the launches the plan did not inline."""
    calls: list[int] = []
    execute = client.server.execute

    def counted(*args: Any) -> None:
        calls.append(args[0])
        execute(*args)

    monkeypatch.setattr(client.server, "execute", counted)
    return calls


def test_plain_launches_on_the_threads_own_memory_are_inlined(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = client.create(np.arange(512, dtype=np.float32))
    y = client.create(np.ones(512, dtype=np.float32))
    client.launch(AXPY, 8, [x, y], [1.0, 512])  # the first launch builds the plan
    calls = count_execute(client, monkeypatch)
    align = client.server.memory_properties.alignment
    xv, yv = x.offset_start(align), y.offset_start(align)  # views: bound as sub-buffers
    n = 512 - align // 4
    for a in (2.0, 2.0, -0.0, 0.5):
        client.launch(AXPY, 8, [x, y], [a, 512])
        client.launch(AXPY, 8, [xv, yv], [a, n])
    src = np.arange(512, dtype=np.float32)
    expect = np.ones(512, np.float32) + src  # the first launch
    for a in (2.0, 2.0, -0.0, 0.5):
        expect += a * src
        expect[align // 4:] += a * src[align // 4:]
    assert client.to_numpy(y, "f32").tolist() == expect.tolist()
    assert calls == [], "every one of these launches was queued by the plan itself"


def test_memory_of_another_threads_stream_goes_through_execute(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = client.create(np.arange(256, dtype=np.float32))
    y = client.create(np.zeros(256, dtype=np.float32))
    client.launch(AXPY, 4, [x, y], [1.0, 256])
    calls = count_execute(client, monkeypatch)
    slots = client.server.multistream.max_streams
    other: list[Any] = []
    while not other or other[-1].stream % slots == y.stream % slots:  # threads' streams may share a slot
        t = threading.Thread(target=lambda: other.append(client.create(np.full(256, 2, np.float32))))
        t.start()
        t.join()
    z = other[-1]
    client.launch(AXPY, 4, [z, y], [1.0, 256])  # z belongs to the other thread's stream: waits, pins
    assert len(calls) == 1
    assert client.to_numpy(y, "f32").tolist() == (np.arange(256) + 2).tolist()


def test_a_page_released_and_reallocated_is_bound_again(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    x = client.create(np.ones(256, dtype=np.float32))
    y = client.create(np.zeros(256, dtype=np.float32))
    client.launch(AXPY, 4, [x, y], [1.0, 256])
    del x, y
    client.memory_cleanup()  # the pages go: the kernel forgets what it bound
    calls = count_execute(client, monkeypatch)
    x = client.create(np.full(256, 3, np.float32))
    y = client.create(np.zeros(256, dtype=np.float32))
    client.launch(AXPY, 4, [x, y], [1.0, 256])
    assert client.to_numpy(y, "f32").tolist() == [3.0] * 256 and calls == []


def test_unchecked_launches_are_inlined_too(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    x = client.create(np.arange(256, dtype=np.float32))
    y = client.create(np.zeros(256, dtype=np.float32))
    client.launch_unchecked(AXPY, 4, [x, y], [1.0, 256])  # the first builds the unchecked plan
    calls = count_execute(client, monkeypatch)
    client.launch_unchecked(AXPY, 4, [x, y], [np.float32(2.0), np.uint32(256)])  # numpy scalars as given
    client.launch_unchecked(AXPY, 4, (x, y), (0.5, 128))
    assert calls == []
    expect = np.arange(256) * 3.0
    expect[:128] += np.arange(128) * 0.5
    assert client.to_numpy(y, "f32").tolist() == expect.tolist()
