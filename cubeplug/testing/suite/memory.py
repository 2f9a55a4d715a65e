"""Memory: usage figures, cleanup returning reserved bytes, persistent windows, fragmentation.

Each test uses a fresh client, so its figures start from nothing but what the backend itself holds.
The memory limit is in :mod:`cubeplug.testing.suite.bad_input` (out of memory is a bad input).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cubeplug.core.memory import MemoryUsage
from cubeplug.testing.waiting import wait_until

KiB = 1 << 10
MiB = 1 << 20


def _usage(client: Any) -> MemoryUsage:
    usage = client.memory_usage()
    assert isinstance(usage, MemoryUsage)
    assert min(usage.number_allocs, usage.bytes_in_use, usage.bytes_padding, usage.bytes_reserved) >= 0
    assert usage.bytes_in_use + usage.bytes_padding <= usage.bytes_reserved, usage
    return usage


def _settled(client: Any, baseline: MemoryUsage) -> None:
    """Wait until in-use figures are back to ``baseline`` (work that held the memory has completed)."""
    client.sync(all_streams=True)
    wait_until(
        lambda: (
            _usage(client).bytes_in_use == baseline.bytes_in_use
            and _usage(client).number_allocs == baseline.number_allocs
        ),
        f"memory in use returns to {baseline} once the handles are gone",
    )


class TestMemory:
    """The figures users read, and what cleanup and persistent windows do to them."""

    def test_usage_figures(self, cubeplug_fresh_client: Any) -> None:
        c = cubeplug_fresh_client
        base = _usage(c)
        sizes = [100_003, 1, 4 * KiB, 3 * MiB]
        handles = [c.create(np.zeros(n, np.uint8)) for n in sizes]
        usage = _usage(c)
        assert usage.number_allocs == base.number_allocs + len(sizes)
        assert usage.bytes_in_use == base.bytes_in_use + sum(sizes)
        views = [h.offset_start(1) for h in handles[:2]]  # views share their allocation
        assert _usage(c).number_allocs == usage.number_allocs
        del handles, views
        _settled(c, base)

    def test_cleanup_returns_reserved_bytes(self, cubeplug_fresh_client: Any) -> None:
        c = cubeplug_fresh_client
        c.memory_cleanup()
        base = _usage(c)
        handles = [c.create(np.full(n, 1, np.uint8)) for n in (MiB, 5 * MiB, 300 * KiB, 17, 40 * MiB)]
        grown = _usage(c)
        assert grown.bytes_reserved > base.bytes_reserved
        del handles
        _settled(c, base)
        c.memory_cleanup()
        assert _usage(c).bytes_reserved <= base.bytes_reserved

    def test_cleanup_keeps_live_handles(self, cubeplug_fresh_client: Any) -> None:
        c = cubeplug_fresh_client
        keep = c.create(np.arange(MiB // 4, dtype=np.uint32))
        drop = [c.create(np.zeros(MiB, np.uint8)) for _ in range(4)]
        del drop
        c.sync(all_streams=True)
        c.memory_cleanup()
        assert _usage(c).bytes_reserved >= keep.size
        np.testing.assert_array_equal(c.to_numpy(keep, "u32"), np.arange(MiB // 4, dtype=np.uint32))

    def test_persistent_windows(self, cubeplug_fresh_client: Any) -> None:
        c = cubeplug_fresh_client
        empty = _usage(c)
        size = 3 * MiB + 5
        with c.persistent_memory():
            with c.persistent_memory():  # windows nest
                inner = c.create(np.full(size, 7, np.uint8))
            outer = c.create(np.full(size, 9, np.uint8))
        after = c.create(np.full(size, 11, np.uint8))  # outside every window: the ordinary pools
        assert [h.size for h in (inner, outer, after)] == [size] * 3
        assert [int(c.to_numpy(h, "u8").min()) for h in (inner, outer, after)] == [7, 9, 11]
        allocs = _usage(c).number_allocs
        del inner
        c.sync(all_streams=True)
        wait_until(lambda: _usage(c).number_allocs == allocs - 1, "a dropped persistent handle is freed")
        reserved = _usage(c).bytes_reserved
        with c.persistent_memory():
            again = c.create(np.full(size, 13, np.uint8))
        assert _usage(c).bytes_reserved == reserved, "a free persistent page of the exact size is reused"
        c.memory_cleanup()  # live persistent handles keep their pages and data
        assert (c.to_numpy(again, "u8") == 13).all() and (c.to_numpy(outer, "u8") == 9).all()
        del again, outer, after
        _settled(c, empty)
        c.memory_cleanup()
        assert _usage(c).bytes_reserved <= empty.bytes_reserved

    def test_fragmentation(self, cubeplug_fresh_client: Any) -> None:
        c = cubeplug_fresh_client
        slot = 64 * KiB
        handles = {i: c.create(np.full(slot // 4, i, np.uint32)) for i in range(64)}
        c.sync(all_streams=True)
        full = _usage(c)
        for i in range(0, 64, 2):  # free every other slice: holes of one slot each
            del handles[i]
        c.sync(all_streams=True)
        wait_until(lambda: _usage(c).number_allocs == full.number_allocs - 32, "freed slices are released")
        for i in range(0, 64, 2):  # the holes are reused: nothing new is reserved
            handles[i] = c.create(np.full(slot // 4, 1000 + i, np.uint32))
        refilled = _usage(c)
        assert refilled.bytes_reserved == full.bytes_reserved, (full, refilled)
        big = c.create(np.full(4 * slot // 4, 5, np.uint32))  # larger than any hole
        for i, h in handles.items():
            want = 1000 + i if i % 2 == 0 else i
            assert (c.to_numpy(h, "u32") == want).all(), f"slot {i} corrupted"
        assert (c.to_numpy(big, "u32") == 5).all()
        assert _usage(c).bytes_in_use == refilled.bytes_in_use + big.size
