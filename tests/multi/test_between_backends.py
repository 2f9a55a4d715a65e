"""Copies between backends (``to_client``, ``copy_to``): through each source's staging memory
(``ComputeServer.read_staged``: a mapped ``ALLOC_HOST_PTR`` chunk on OpenCL, a mapped MAP_READ
buffer on WebGPU, CUDA pinned memory, the plain read on cpu), in pieces, into views at any offset,
ordered on both streams; every lent staging buffer is given back. The CUDA side runs on the fake
runtime here (tests/backends/cuda/test_staged_reads.py) and on a GPU (marked ``gpu``)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import numpy as np
import pytest

import cubeplug
from cubeplug.core import client as client_module
from cubeplug.core.hostmem import StagedRead
from tests.std.conftest import skip_reason

BACKENDS = ["cpu", "opencl", "webgpu"]


def make(backend: str) -> Any:
    """A client of ``backend``: skipped only where its library or device is missing (PoCL and
    lavapipe run here: a client that fails to start there is a failure, not a skip)."""
    reason = skip_reason(backend)
    if reason is not None:
        pytest.skip(reason)
    return cubeplug.client(backend)


class Spy:  # (tests/backends/cuda/test_staged_reads.py uses it too)
    """Counts a server's staged reads and the releases of what they lent."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, server: Any) -> None:
        self.reads = 0
        self.released = 0
        self.kinds: set[str] = set()
        real = server.read_staged

        def read_staged(handle: Any, stream_id: int) -> Future[StagedRead]:
            self.reads += 1
            future = real(handle, stream_id)
            out: Future[StagedRead] = Future()

            def done(f: Future[StagedRead]) -> None:
                if f.exception() is not None:
                    out.set_exception(f.exception())  # type: ignore[arg-type]
                    return
                staged = f.result()
                self.kinds.add(type(staged.view.obj).__name__)

                def release() -> None:
                    self.released += 1
                    staged.release()

                out.set_result(StagedRead(staged.view, release))

            future.add_done_callback(done)
            return out

        monkeypatch.setattr(server, "read_staged", read_staged)


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """Pieces of 4 KiB + 4 B, so that a copy of a few pieces has a short last one."""
    monkeypatch.setattr(client_module, "HOST_PIECE", 4100)
    yield 4100


PAIRS = [(s, d) for s in BACKENDS for d in BACKENDS if s != d]


@pytest.mark.parametrize(("src_backend", "dst_backend"), PAIRS)
def test_to_client_and_copy_to_between_backends(
    src_backend: str, dst_backend: str, monkeypatch: pytest.MonkeyPatch, small_pieces: int
) -> None:
    a, b = make(src_backend), make(dst_backend)
    spy = Spy(monkeypatch, a.server)
    data = np.random.default_rng(7).integers(0, 2**31, 3 * 1025 + 3, dtype=np.int32)
    h = a.create(data)
    moved = a.to_client(h, b)
    np.testing.assert_array_equal(b.to_numpy(moved, "i32"), data)
    assert spy.reads == 4 and spy.released == 4  # 3 whole pieces and one of 12 B
    # into a view at an odd offset, from a view at another, after work queued on the source's stream
    src = a.create(np.concatenate([np.zeros(1, np.uint8), data.view(np.uint8)])).offset_start(1)
    a.fill(src.offset_end(src.size - 8), 7, "u8")  # queued before the copy: the copy must see it
    dst_all = b.create(np.zeros(data.nbytes + 5, np.uint8))
    dst = dst_all.offset_start(3).offset_end(2)
    a.copy_to(src, b, dst)
    got = b.to_numpy(dst_all, "u8")
    want = data.view(np.uint8).copy()
    want[:8] = 7
    np.testing.assert_array_equal(got[3:-2], want)
    assert not got[:3].any() and not got[-2:].any()
    assert spy.released == spy.reads == 8
    if src_backend == "opencl":
        assert spy.kinds == {"ndarray"}, spy.kinds  # the mapped chunk's array, not a fresh bytearray
    if src_backend == "webgpu":  # the lent mapping, not a copy of it
        assert spy.kinds and not spy.kinds & {"bytearray", "bytes"}, spy.kinds
    if src_backend == "cpu":
        assert spy.kinds <= {"bytearray", "bytes"}, spy.kinds  # the plain fallback


@pytest.mark.parametrize("backend", ["opencl", "webgpu"])
def test_a_staged_read_is_lent_until_released(backend: str) -> None:
    """The staging memory goes back to its pool at release, and the next read reuses it."""
    c = make(backend)
    data = np.arange(1000, dtype=np.float32)
    h = c.create(data)
    pool = c.server.queue.staging if backend == "webgpu" else c.server.staging
    misses: list[int] = []  # staging memory the pool did not have back: a new buffer each
    reuse = pool.reuse

    def counted(size: int) -> Any:
        got = reuse(size)
        if got is None:
            misses.append(size)
        return got

    pool.reuse = counted
    first = c.server.read_staged(h, c.stream_id()).result()
    np.testing.assert_array_equal(np.frombuffer(first.view, np.float32), data)
    first.release()
    first.release()  # once only
    assert first.view.nbytes == 0
    allocated = len(misses)
    for _ in range(5):  # reads after releases keep working, on the buffers the releases gave back
        staged = c.server.read_staged(h, c.stream_id()).result()
        np.testing.assert_array_equal(np.frombuffer(staged.view, np.float32), data)
        staged.release()
    assert len(misses) == allocated, misses
    empty = c.server.read_staged(c.create(b""), c.stream_id()).result()
    assert empty.view.nbytes == 0
    empty.release()


def test_a_large_copy_between_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pieces of the default size (several of them), the last one short."""
    a, b = make("opencl"), make("webgpu")
    n = 2 * client_module.HOST_PIECE + 4096
    data = np.random.default_rng(3).integers(0, 255, n, dtype=np.uint8)
    spy = Spy(monkeypatch, a.server)
    moved = a.to_client(a.create(data), b)
    assert spy.reads == spy.released == 3
    np.testing.assert_array_equal(b.to_numpy(moved, "u8"), data)
