"""CPU storage: aligned pages, regions, errors."""

from __future__ import annotations

import pytest

from cubeplug.backends.cpu.storage import ALIGNMENT, CpuStorage, memory_properties
from cubeplug.core.errors import OutOfMemoryError


def test_pages_are_aligned_and_regions_view_them() -> None:
    s = CpuStorage()
    handles = [s.alloc(n) for n in (1, 100, 4096)]
    for h in handles:
        assert s.get(h).ctypes.data % ALIGNMENT == 0
    region = handles[1].region(10, 20)
    s.get(handles[1])[:] = range(100)
    assert list(s.get(region)) == list(range(10, 30))
    s.dealloc(handles[0].id)
    assert s.reserved() == 4196


def test_impossible_allocation_is_out_of_memory() -> None:
    with pytest.raises(OutOfMemoryError, match="host allocation failed"):
        CpuStorage().alloc(1 << 60)


def test_memory_properties() -> None:
    props = memory_properties()
    assert props.alignment == ALIGNMENT
    assert 64 << 20 <= props.max_page_size <= 4 << 30


def test_a_dropped_client_releases_its_server_and_worker_thread() -> None:
    import gc
    import threading
    import weakref

    from tests.conftest import make_cpu_client

    gc.collect()
    before = threading.active_count()
    client = make_cpu_client()
    h = client.create(b"data")
    assert bytes(client.read_one(h)) == b"data"
    server = weakref.ref(client.server)
    del client, h
    # No reference cycle holds the server: it goes at once, without the cycle collector.
    assert server() is None
    for _ in range(100):
        if threading.active_count() <= before:
            break
        threading.Event().wait(0.01)
    assert threading.active_count() <= before
