"""Copies between the cuda backend and another (cpu here): the cuda side reads into a block of its
pinned pool (``read_staged``), which the other side writes from and which goes back at release;
the other way the cuda side writes from the source's staging memory through its pinned blocks. On
the fake runtime everywhere, and on a GPU (marked ``gpu``: ``pytest -m gpu tests/backends/cuda``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import cubeplug
from cubeplug.core import client as client_module
from tests.multi.test_between_backends import Spy


def test_cuda_to_cpu_and_back_through_pinned_memory(
    make_client: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_module, "HOST_PIECE", 4100)
    gpu, cpu = make_client(), cubeplug.client("cpu")
    pinned = gpu.server.pinned
    lent: list[bool] = []
    real = gpu.server.read_staged

    def read_staged(handle: Any, stream_id: int) -> Any:
        future = real(handle, stream_id)
        staged = future.result()
        address = int(np.frombuffer(staged.view, np.uint8).ctypes.data)
        lent.append(pinned.contains(address, staged.view.nbytes))
        return future

    monkeypatch.setattr(gpu.server, "read_staged", read_staged)
    spy = Spy(monkeypatch, gpu.server)  # counts reads and releases, on top of the pinned check
    data = np.random.default_rng(5).standard_normal(2 * 1025 + 1).astype(np.float32)
    h = gpu.create(data)
    moved = gpu.to_client(h, cpu)
    np.testing.assert_array_equal(cpu.to_numpy(moved, "f32"), data)
    assert spy.reads == spy.released == 3 and lent == [True, True, True]
    back = cpu.to_client(moved, gpu)  # cpu's plain read, written through cuda's pinned blocks
    np.testing.assert_array_equal(gpu.to_numpy(back, "f32"), data)
    dst = gpu.create(np.zeros(data.size + 2, np.float32))
    cpu.copy_to(moved, gpu, dst.offset_start(4).offset_end(4))
    got = gpu.to_numpy(dst, "f32")
    np.testing.assert_array_equal(got[1:-1], data)
    assert got[0] == 0 and got[-1] == 0


def test_a_failed_wait_gives_the_pinned_block_back(
    make_client: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the wait for the copy into the pinned block fails (a sticky CUDA error), no StagedRead
    exists to give the block back: the read's future does."""
    gpu = make_client()
    h = gpu.create(np.arange(256, dtype=np.float32))
    given: list[Any] = []
    real_give = gpu.server.pinned.give

    def broken_wait(event: Any) -> None:
        raise RuntimeError("sticky error")

    with monkeypatch.context() as mp:  # undone before the client closes (it waits on events too)
        mp.setattr(gpu.server.pinned, "give", lambda b, *a: (given.append(b), real_give(b, *a)))
        mp.setattr(gpu.server.streams, "wait_event_sync", broken_wait)
        future = gpu.server.read_staged(h, gpu.stream_id())
        with pytest.raises(RuntimeError, match="sticky error"):
            future.result(timeout=10)
        deadline = time.monotonic() + 10  # the future's callbacks run just after its waiters wake
        while not given and time.monotonic() < deadline:
            time.sleep(0.01)
    assert len(given) == 1


def test_a_handle_beyond_the_staging_limit_is_read_the_plain_way(make_client: Callable[..., Any]) -> None:
    gpu = make_client(staging_max_bytes="4KiB")
    data = np.arange(2048, dtype=np.float32)  # 8 KiB
    staged = gpu.server.read_staged(gpu.create(data), gpu.stream_id()).result()
    assert not gpu.server.pinned.contains(int(np.frombuffer(staged.view, np.uint8).ctypes.data), 8192)
    np.testing.assert_array_equal(np.frombuffer(staged.view, np.float32), data)
    staged.release()


def test_a_staged_read_of_a_view_is_lent_until_released(make_client: Callable[..., Any]) -> None:
    """The bytes of a view at an odd offset, in a pinned block that stays out of the pool (reads
    meanwhile use other blocks and leave it intact) until released."""
    gpu = make_client()
    pinned = gpu.server.pinned
    data = np.random.default_rng(8).integers(0, 256, 9000, dtype=np.uint8)
    h = gpu.create(data)
    gpu.sync()
    idle = pinned.idle_bytes()
    staged = gpu.server.read_staged(h.range(13, 4000), gpu.stream_id()).result(timeout=30)
    address = int(np.frombuffer(staged.view, np.uint8).ctypes.data)
    assert pinned.contains(address, 4000) and bytes(staged.view) == data[13:4013].tobytes()
    for _ in range(3):  # reads of the same size class take other blocks
        assert bytes(gpu.read_one(h.range(100, 3000))) == data[100:3100].tobytes()
    assert bytes(staged.view) == data[13:4013].tobytes()
    held = pinned.idle_bytes()
    staged.release()
    assert pinned.idle_bytes() == held + 4096 and held >= idle  # back at release
