"""OpenCL storage: aligned pages allocated at call time, cached sub-buffers, pinned staging chunks."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from cubeplug import BufferTooBig, OutOfMemoryError
from cubeplug.backends.opencl import storage as storage_mod
from cubeplug.backends.opencl.devices import device_context
from cubeplug.backends.opencl.staging import StagingPool
from cubeplug.backends.opencl.storage import OpenCLStorage
from cubeplug.core.config import Config
from tests.backends.opencl.conftest import make_client, requires_opencl

pytestmark = requires_opencl


@pytest.fixture
def storage() -> OpenCLStorage:
    return OpenCLStorage(device_context(0, Config()))


def test_alignment_is_the_base_address_alignment(storage) -> None:  # type: ignore[no-untyped-def]
    assert storage.alignment >= 256
    assert storage.alignment == max(256, storage.ctx.limits["base_address_alignment"])
    props = storage_mod.memory_properties(storage.ctx)
    assert props.alignment == storage.alignment and props.max_page_size == storage.max_allocation


def test_pages_and_sub_buffers(storage) -> None:  # type: ignore[no-untyped-def]
    h = storage.alloc(4096)
    page = storage.page(h.id)
    assert page.size == 4096 and storage.reserved() == 4096
    assert storage.get(h) is page
    sub = storage.bind(h.id, storage.alignment, 100)
    assert sub is not page and sub.size == 100
    assert storage.bind(h.id, storage.alignment, 100) is sub  # cached
    assert storage.bind(h.id, storage.alignment, 0) is page  # nothing to bind: the page
    # A region at the page's start binds the page itself: no sub-buffer at origin 0 (NVIDIA's driver
    # crashes releasing several of those).
    assert storage.bind(h.id, 0, 100) is page and (0, 100) not in storage._subs.get(h.id, {})
    storage.dealloc(h.id)
    assert storage.reserved() == 0
    storage.dealloc(h.id)  # twice is harmless


def test_sub_buffer_cache_is_bounded(storage, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(storage_mod, "SUB_BUFFER_CACHE", 4)
    h = storage.alloc(16 * storage.alignment)
    for i in range(1, 10):
        storage.bind(h.id, i * storage.alignment, 8)
    assert len(storage._subs[h.id]) <= 4


def test_zero_size_page(storage) -> None:  # type: ignore[no-untyped-def]
    h = storage.alloc(0)
    assert h.size == 0 and storage.page(h.id).size == storage.alignment


def test_too_big_and_out_of_memory(storage) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(BufferTooBig):
        storage.alloc(storage.max_allocation + 1)
    storage.total = storage.reserved() + 1024
    with pytest.raises(OutOfMemoryError) as info:
        storage.alloc(4096)
    err = info.value
    assert err.requested == 4096 and err.device_total == storage.total
    assert "global memory" in str(err)
    free, total = storage.memory_info()  # type: ignore[misc]
    assert total == storage.total and 0 <= free <= total


def test_memory_limit_is_honoured() -> None:
    c = make_client(memory={"limit": 4 << 20})
    try:
        keep = c.create(np.arange(8, dtype=np.int32))
        with pytest.raises(OutOfMemoryError):
            c.empty(64 << 20)
        np.testing.assert_array_equal(c.to_numpy(keep, "i32"), np.arange(8))
    finally:
        c.close()


def test_staging_pool_reuses_chunks() -> None:
    pool = StagingPool(device_context(0, Config()), keep=64 << 10)
    chunk = pool.take(5000)
    assert chunk.size == 8192 and chunk.array.nbytes == 8192
    chunk.array[:5] = 7
    buffer = chunk.buffer
    del chunk
    gc.collect()
    again = pool.take(6000)
    assert again.buffer is buffer  # the idle chunk was reused
    big = pool.take(1 << 20)
    del big, again
    gc.collect()
    assert pool._idle <= 64 << 10  # chunks beyond the keep limit were released
    pool.clear()
    assert pool._idle == 0


class Released:
    """Stands in for a sub-buffer: records when the storage lets go of it."""

    def __init__(self, name: int, log: list[int]) -> None:
        self.name, self.log = name, log

    def __del__(self) -> None:
        self.log.append(self.name)


@pytest.mark.parametrize("how", ["dealloc", "close", "cache full"])
def test_sub_buffers_are_released_newest_first(storage, monkeypatch, how) -> None:  # type: ignore[no-untyped-def]
    # NVIDIA's driver crashes releasing sub-buffers in the order they were made (a handle's region,
    # then a view of it ending at the same byte): the storage releases them in reverse.
    monkeypatch.setattr(storage_mod, "SUB_BUFFER_CACHE", 3)
    align = storage.alignment
    h = storage.alloc(8 * align)
    for i in range(1, 4):
        storage.bind(h.id, i * align, align)
    log: list[int] = []
    subs = storage._subs[h.id]
    for offset, size in list(subs):
        subs[offset, size] = Released(offset // align, log)
    if how == "dealloc":
        storage.dealloc(h.id)
    elif how == "close":
        storage.close()
    else:
        storage.bind(h.id, 5 * align, align)  # the cache is full: it starts again
    gc.collect()
    assert log == [3, 2, 1]
