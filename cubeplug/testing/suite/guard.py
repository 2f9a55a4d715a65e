"""The checked-memory mode (``[memory] guard = true``): red zones around every allocation, read back
at each sync; a kernel that writes past its buffer is named instead of silently corrupting a
neighbour (core/memory/guard.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cubeplug.core.errors import LaunchError, MemoryCorruptionError
from cubeplug.core.handle import Handle
from cubeplug.core.memory.guard import PATTERN
from cubeplug.testing import gates, kernels


def _guarded(cubeplug_new_client: Any) -> Any:
    return cubeplug_new_client(memory={"guard": True})


def _raw(h: Any) -> Any:
    """The whole allocation behind a guarded handle, red zones included (what no user holds)."""
    return Handle(h.memory(), h.owner, h.nbytes, h.stream)


class TestRedZones:
    """Red zones on every backend: transparent to correct code, loud for an overrun."""

    def test_correct_work_is_unchanged(self, cubeplug_new_client: Any) -> None:
        c = _guarded(cubeplug_new_client)
        offset = max(16, int(c.capabilities.offset_alignment))  # a view the backend can bind
        data = np.arange(offset // 4 + 100, dtype=np.uint32)
        h = c.create(data)
        assert h.size == data.nbytes
        view = h.offset_start(offset)
        c.write(view, np.zeros(view.size // 4, np.uint32))
        if gates.compiles_suite_dialect(c):
            c.launch(kernels.FILL, kernels.cubes(16), [h], [7, 16])
        c.sync()  # checks the zones: nothing overran
        got = c.to_numpy(h, "u32")
        expect = data.copy()
        expect[(view.start - h.start) // 4 :] = 0
        if gates.compiles_suite_dialect(c):
            expect[:16] = 7 + np.arange(16)
        np.testing.assert_array_equal(got, expect)
        c.close()

    def test_a_write_into_a_zone_is_named_at_the_next_sync(self, cubeplug_new_client: Any) -> None:
        c = _guarded(cubeplug_new_client)
        h = c.create(np.ones(64, np.uint32))
        neighbour = c.create(np.full(64, 5, np.uint32))
        after = _raw(h).offset_start(h.start + h.size)  # the zone after the allocation
        c.write(after.offset_end(after.size - 4), b"\0\0\0\0")  # what an overrun would do
        with pytest.raises(MemoryCorruptionError, match=r"after an allocation of 256 B") as info:
            c.sync()
        assert info.value.nbytes == 256
        c.sync()  # armed again: the damage is reported once
        np.testing.assert_array_equal(c.to_numpy(h, "u32"), np.ones(64, np.uint32))
        np.testing.assert_array_equal(c.to_numpy(neighbour, "u32"), np.full(64, 5, np.uint32))
        c.close()

    def test_a_kernel_writing_past_its_buffer_is_named(self, cubeplug_new_client: Any) -> None:
        c = _guarded(cubeplug_new_client)
        k = gates.kernel(c, kernels.FILL)
        h = c.create(np.zeros(64, np.uint32))
        neighbour = c.create(np.full(64, 5, np.uint32))
        ran = True
        try:  # 8 elements past the end: C writes them, numpy refuses, WebGPU clamps the access
            c.launch_unchecked(k, kernels.cubes(72), [h], [1, 72])
            c.sync()
        except MemoryCorruptionError as e:
            assert k.name in str(e) and e.kernels[-1] == k.name
        except LaunchError:
            ran = False  # refused at the access itself (the cpu backend's numpy kernels)
        c.sync()
        # Whatever the backend did, the zone after the buffer holds the pattern again: written and
        # reported (then armed again), or never written. An overrun the check missed fails here.
        after = _raw(h).offset_start(h.start + h.size)
        assert set(c.read_one(after)) == {PATTERN}, "a write past the buffer went unreported"
        if ran:
            np.testing.assert_array_equal(c.to_numpy(h, "u32"), 1 + np.arange(64, dtype=np.uint32))
        np.testing.assert_array_equal(c.to_numpy(neighbour, "u32"), np.full(64, 5, np.uint32))
        c.close()

    def test_freed_memory_is_no_longer_watched(self, cubeplug_new_client: Any) -> None:
        c = _guarded(cubeplug_new_client)
        for _ in range(3):
            h = c.create(np.ones(64, np.uint32))
            h.drop()
        c.sync()
        c.memory_cleanup()
        assert c.memory_usage().bytes_in_use == 0
        c.close()
