"""OpenCL fills and device copies use the API's own commands: clEnqueueFillBuffer, clEnqueueCopyBuffer."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.backends.opencl.conftest import requires_opencl

pytestmark = requires_opencl


@pytest.fixture
def fills(client: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[bytes, int, int]]:
    """Each ``enqueue_fill_buffer`` as (pattern, offset, size), the command still run."""
    import pyopencl as cl

    calls: list[tuple[bytes, int, int]] = []
    real = cl.enqueue_fill_buffer

    def spy(queue: Any, mem: Any, pattern: Any, offset: int, size: int, **kw: Any) -> Any:
        calls.append((bytes(memoryview(pattern).cast("B")), offset, size))
        return real(queue, mem, pattern, offset, size, **kw)

    monkeypatch.setattr(cl, "enqueue_fill_buffer", spy)
    return calls


def test_fill_is_enqueue_fill_buffer(client: Any, fills: list[tuple[bytes, int, int]]) -> None:
    h = client.create(np.zeros(256, np.int32))
    client.fill(h, 0x01020304, "i32")
    assert [f[0] for f in fills] == [bytes([4, 3, 2, 1])] and fills[0][2] == 1024
    client.fill(h.offset_start(4).offset_end(4), 0, "f64")  # zeros: one byte, any offset
    assert fills[-1][0] == b"\0" and fills[-1][1] % 8 == 4 and fills[-1][2] == 1016
    client.fill(h, -1, "i64")  # one repeated byte
    assert fills[-1][0] == b"\xff"
    np.testing.assert_array_equal(client.to_numpy(h, "i32"), np.full(256, -1))


def test_fill_at_an_offset_off_the_pattern_falls_back_to_a_write(
    client: Any, fills: list[tuple[bytes, int, int]]
) -> None:
    h = client.create(np.zeros(64, np.uint8))
    client.fill(h.offset_start(2).offset_end(2), 0x0A0B0C0D, "u32")  # OpenCL wants offset % 4 == 0
    assert fills == []
    want = np.zeros(64, np.uint8)
    want[2:62] = np.frombuffer(np.full(15, 0x0A0B0C0D, np.uint32).tobytes(), np.uint8)
    np.testing.assert_array_equal(client.to_numpy(h, "u8"), want)
    client.fill(h.offset_start(4).offset_end(4), 0x0A0B0C0D, "u32")
    assert len(fills) == 1 and fills[0][2] == 56


def test_copy_is_enqueue_copy_within_one_page(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    server = client.server
    calls: list[dict[str, Any]] = []
    real = server._copy

    def spy(queue: Any, dst: Any, src: Any, **kw: Any) -> Any:
        calls.append(dict(kw, same=dst is src))
        return real(queue, dst, src, **kw)

    monkeypatch.setattr(server, "_copy", spy)
    h = client.create(np.arange(1024, dtype=np.int32))
    calls.clear()  # the upload
    client.copy(h.offset_end(2048).offset_start(3), h.offset_start(2048 + 3))
    assert len(calls) == 1 and calls[0]["same"] and calls[0]["byte_count"] == 2045
    got = client.to_numpy(h, "u8")
    src = np.arange(1024, dtype=np.int32).view(np.uint8)
    np.testing.assert_array_equal(got[2048 + 3 :], src[3:2048])
