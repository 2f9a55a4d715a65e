"""WebGPU fills and device copies use the API's own commands: clear_buffer, write_buffer and
copy_buffer_to_buffer (through a scratch buffer within one page); the byte-copy kernel only where
their alignment rules do not hold."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.backends.webgpu.conftest import requires_webgpu

pytestmark = requires_webgpu


@pytest.fixture
def commands(fresh_client: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """Each ``clear_buffer`` and ``copy_buffer_to_buffer`` the device's encoders record, still run."""
    cls = type(fresh_client.server.gpu.create_command_encoder())
    calls: list[tuple[Any, ...]] = []
    clear, copy = cls.clear_buffer, cls.copy_buffer_to_buffer

    def clear_spy(self: Any, buffer: Any, offset: int = 0, size: Any = None) -> None:
        calls.append(("clear", buffer, offset, size))
        clear(self, buffer, offset, size)

    def copy_spy(self: Any, src: Any, src_offset: int, dst: Any, dst_offset: int, size: Any = None) -> None:
        calls.append(("copy", src, src_offset, dst, dst_offset, size))
        copy(self, src, src_offset, dst, dst_offset, size)

    monkeypatch.setattr(cls, "clear_buffer", clear_spy)
    monkeypatch.setattr(cls, "copy_buffer_to_buffer", copy_spy)
    return calls


def test_zero_fill_is_clear_buffer(fresh_client: Any, commands: list[tuple[Any, ...]]) -> None:
    c = fresh_client
    h = c.create(np.arange(256, dtype=np.int32))
    c.fill(h.offset_start(16).offset_end(16), 0, "f64")
    np.testing.assert_array_equal(c.to_numpy(h, "i32")[4:-4], np.zeros(248))
    clears = [x for x in commands if x[0] == "clear"]
    assert len(clears) == 1 and clears[0][3] == 992
    c.fill(h, 7, "i32")  # a value: write_buffer of the pattern
    np.testing.assert_array_equal(c.to_numpy(h, "i32"), np.full(256, 7))
    assert c.server._copy is None  # no byte-copy kernel so far
    c.fill(h.offset_start(2).offset_end(2), 0, "u16")  # offset not a multiple of 4: the unaligned write
    assert len([x for x in commands if x[0] == "clear"]) == 1
    want = np.full(256, 7, np.int32).view(np.uint8)
    want[2:-2] = 0
    np.testing.assert_array_equal(c.to_numpy(h, "u8"), want)


def test_copy_within_one_page_goes_through_the_scratch(
    fresh_client: Any, commands: list[tuple[Any, ...]]
) -> None:
    c = fresh_client
    server = c.server
    h = c.create(np.arange(2048, dtype=np.int32))
    commands.clear()
    c.copy(h.offset_end(4096), h.offset_start(4096))  # first half onto the second, one page
    np.testing.assert_array_equal(c.to_numpy(h, "i32"), np.tile(np.arange(1024), 2))
    copies = [x for x in commands if x[0] == "copy"]
    scratch = server._scratch
    assert scratch is not None
    assert copies[0][3] is scratch and copies[1][1] is scratch and copies[0][5] == 4096
    assert server._copy is None  # no kernel
    a, b = c.create(np.ones(100, np.int32)), c.create(np.zeros(100, np.int32))
    c.copy(a, b)
    np.testing.assert_array_equal(c.to_numpy(b, "i32"), np.ones(100))
    assert server._copy is None


def test_scratch_grows_and_is_released_with_the_server(commands: list[tuple[Any, ...]]) -> None:
    from tests.backends.webgpu.conftest import make_client

    c = make_client()
    h = c.create(np.arange(1 << 18, dtype=np.int32))  # 1 MiB
    c.copy(h.offset_end(1 << 19), h.offset_start(1 << 19))
    assert c.server._scratch.size >= 1 << 19
    c.sync()
    c.close()
    assert c.server._scratch is None


def test_unaligned_copy_keeps_the_kernel(fresh_client: Any) -> None:
    c = fresh_client
    h = c.create(np.arange(256, dtype=np.uint8))
    c.copy(h.offset_start(1).offset_end(128), h.offset_start(129))
    got = c.to_numpy(h, "u8")
    np.testing.assert_array_equal(got[129:], np.arange(1, 128))
    assert c.server._copy is not None
