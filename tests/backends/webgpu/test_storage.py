"""WebGPU storage: GPUBuffer pages, their limits and errors."""

from __future__ import annotations

import pytest

from cubeplug import BufferTooBig
from cubeplug.backends.webgpu.storage import WgpuStorage, memory_properties
from tests.backends.webgpu.conftest import requires_webgpu


def test_memory_properties_from_limits() -> None:
    props = memory_properties(
        {
            "max-storage-buffer-binding-size": 134217728,
            "max-buffer-size": 2147483647,
            "min-storage-buffer-offset-alignment": 32,
        }
    )
    assert props.max_page_size == 134217728 and props.alignment == 32
    # The page size is capped by the buffer size and rounded down to the alignment.
    capped = memory_properties(
        {
            "max-storage-buffer-binding-size": 1 << 30,
            "max-buffer-size": (1 << 28) + 100,
            "min-storage-buffer-offset-alignment": 256,
        }
    )
    assert capped.max_page_size == 1 << 28 and capped.alignment == 256


@requires_webgpu
def test_alloc_get_dealloc_and_limits() -> None:
    from cubeplug.backends.webgpu.plugin import open_device, select_adapter

    device, _ = open_device(select_adapter(0, None))
    props = memory_properties(dict(device.limits))
    storage = WgpuStorage(device, props)
    assert storage.alignment == device.limits["min-storage-buffer-offset-alignment"]
    h = storage.alloc(1001)
    buffer, offset, size = storage.get(h.region(64, 100))
    assert buffer.size == 1004 and offset == 64 and size == 100
    assert storage.reserved() == 1004
    forgotten = []
    storage.on_dealloc = forgotten.append
    storage.dealloc(h.id)
    storage.dealloc(h.id)  # twice is harmless
    assert forgotten == [h.id] and storage.reserved() == 0
    with pytest.raises(BufferTooBig):
        storage.alloc(props.max_page_size + 1)
    zero = storage.alloc(0)
    assert storage.get(zero)[0].size == 4
    storage.close()
    assert storage.reserved() == 0
