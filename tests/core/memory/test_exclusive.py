"""The exclusive pool: one reservation per page, running-average page sizes, reuse and idle strikes."""

from __future__ import annotations

import pytest

from cubeplug.core.memory import MemoryManagement, PoolOptions, SliceToken
from cubeplug.core.memory.pages import PageSource
from cubeplug.core.memory.pools import ExclusivePool
from cubeplug.core.memory.pools.exclusive import IDLE_STRIKES
from tests.core.memory.conftest import FakeStorage, KiB, MiB, props


def reserve(pool: ExclusivePool, size: int) -> SliceToken:
    token = pool.try_reserve(size) or pool.alloc(size)
    assert token is not None
    return token


def test_accepts_up_to_max_alloc_size(source: PageSource) -> None:
    pool = ExclusivePool(source, 4 * KiB)
    assert pool.accepts(0) and pool.accepts(4 * KiB) and not pool.accepts(4 * KiB + 1)
    zero = ExclusivePool(source, 0)
    assert zero.accepts(0) and not zero.accepts(1)


def test_one_reservation_per_page(source: PageSource, storage: FakeStorage) -> None:
    pool = ExclusivePool(source, MiB)
    a = reserve(pool, 1000)
    b = reserve(pool, 1000)
    assert a.storage.id != b.storage.id
    assert (a.storage.offset, a.storage.size) == (0, 1024)
    assert storage.alloc_calls == [1024, 1024]
    usage = pool.usage()
    assert (usage.number_allocs, usage.bytes_in_use, usage.bytes_padding, usage.bytes_reserved) == (
        2,
        2000,
        48,
        2048,
    )


def test_size_zero_gets_an_alignment_sized_page_and_an_empty_region(
    source: PageSource, storage: FakeStorage
) -> None:
    pool = ExclusivePool(source, 0)
    a = reserve(pool, 0)
    assert (a.storage.offset, a.storage.size) == (0, 0)
    assert storage.alloc_calls == [256]
    page = a.storage.id
    del a
    assert reserve(pool, 0).storage.id == page


def test_pages_follow_the_running_average(source: PageSource, storage: FakeStorage) -> None:
    pool = ExclusivePool(source, 64 * MiB)
    expected = 0.0
    held = []
    for _ in range(300):
        expected = 0.99 * expected + 0.01 * (4 * MiB)
        token = reserve(pool, 4 * MiB)
        del token
    assert pool.average == pytest.approx(expected)
    assert storage.alloc_calls == [4 * MiB], "the same page is reused every time"
    held.append(reserve(pool, 4 * MiB))  # keep the 4 MiB page busy
    # Small sizes get pages of the average, at most twice their size.
    expected = 0.99 * (0.99 * expected + 0.01 * 4 * MiB) + 0.01 * (3 * MiB)
    held.append(reserve(pool, 3 * MiB))
    avg_page = -(-int(expected) // 256) * 256
    assert 3 * MiB < avg_page < 4 * MiB
    assert storage.alloc_calls[-1] == avg_page, "a page of the running average"
    held.append(reserve(pool, MiB))
    assert storage.alloc_calls[-1] == 2 * MiB, "bounded by twice the size"
    held.append(reserve(pool, 8 * MiB))
    assert storage.alloc_calls[-1] == 8 * MiB, "never smaller than the size"
    assert pool.page_size_for(10) == 512, "twice the padded size when the average is larger"


def test_reuse_needs_a_page_between_the_size_and_twice_it(source: PageSource, storage: FakeStorage) -> None:
    pool = ExclusivePool(source, 64 * MiB)
    a = reserve(pool, 4 * KiB)
    page = a.storage.id
    del a
    small = reserve(pool, KiB)
    assert small.storage.id != page, "a 4 KiB page is too large for 1 KiB"
    half = reserve(pool, 2 * KiB)
    assert half.storage.id == page and half.storage.size == 2 * KiB
    del half
    big = reserve(pool, 4 * KiB + 1)
    assert big.storage.id != page, "too small"
    again = reserve(pool, 4 * KiB)
    assert again.storage.id == page and again.storage.size == 4 * KiB


def test_reuse_picks_the_page_with_the_fewest_idle_strikes(source: PageSource) -> None:
    pool = ExclusivePool(source, 64 * MiB)
    a = reserve(pool, 4 * KiB)
    b = reserve(pool, 4 * KiB)
    page_a, page_b = a.storage.id, b.storage.id
    del a
    pool.cleanup(explicit=False)  # a: 1 strike; b: in use
    pool.cleanup(explicit=False)  # a: 2 strikes
    del b
    pool.cleanup(explicit=False)  # a: 3, b: 1
    assert sorted(idle for _, _, idle in pool.page_sizes()) == [1, 3]
    c = reserve(pool, 4 * KiB)
    assert c.storage.id == page_b
    d = reserve(pool, 4 * KiB)
    assert d.storage.id == page_a


def test_a_free_page_is_freed_at_the_fifth_idle_check(source: PageSource, storage: FakeStorage) -> None:
    pool = ExclusivePool(source, 64 * MiB)
    a = reserve(pool, 4 * KiB)
    busy = reserve(pool, 4 * KiB)
    page = a.storage.id
    del a
    for i in range(1, IDLE_STRIKES):
        assert pool.cleanup(explicit=False) == 0
        assert page in storage.live and pool.page_sizes()[0] == (4 * KiB, False, i)
    assert pool.cleanup(explicit=False) == 4 * KiB
    assert storage.dealloc_calls == [page]
    assert pool.page_sizes() == [(4 * KiB, True, 0)], "the busy page stays, with no strikes"
    assert pool.usage().bytes_reserved == 4 * KiB
    del busy


def test_reuse_clears_strikes(source: PageSource, storage: FakeStorage) -> None:
    pool = ExclusivePool(source, 64 * MiB)
    a = reserve(pool, 4 * KiB)
    del a
    for _ in range(IDLE_STRIKES - 1):
        pool.cleanup(explicit=False)
    b = reserve(pool, 4 * KiB)
    del b
    for _ in range(IDLE_STRIKES - 1):
        pool.cleanup(explicit=False)
    assert storage.dealloc_calls == [], "the reuse in between restarted the count"
    pool.cleanup(explicit=False)
    assert len(storage.dealloc_calls) == 1


def test_explicit_cleanup_frees_every_free_page(source: PageSource, storage: FakeStorage) -> None:
    pool = ExclusivePool(source, 64 * MiB)
    tokens = [reserve(pool, n * KiB) for n in (1, 2, 3)]
    keep = tokens.pop()
    del tokens
    assert pool.cleanup(explicit=True) == 3 * KiB
    assert list(storage.live.values()) == [3 * KiB]
    del keep


def test_max_pages_caps_the_pool(source: PageSource) -> None:
    pool = ExclusivePool(source, MiB, max_pages=2)
    a, b = reserve(pool, KiB), reserve(pool, KiB)
    assert pool.try_reserve(KiB) is None and pool.alloc(KiB) is None
    del a
    assert pool.try_reserve(KiB) is not None
    del b


def test_memory_management_runs_an_idle_check_every_fifth_of_the_dealloc_period() -> None:
    storage = FakeStorage()
    pools = [PoolOptions.exclusive(MiB)]
    mm = MemoryManagement(storage, props(), pools=pools, dealloc_period=10)  # a check every 2 reservations
    a = mm.reserve(64 * KiB)
    page = a.storage.id
    del a
    b = mm.reserve(KiB)  # 2 reservations: check 1 (64 KiB page: 1 strike)
    kept = [b]
    for _ in range(7):  # reservations 3..9: checks at 4, 6, 8 -> 4 strikes
        kept.append(mm.reserve(KiB))
    assert page in storage.live
    kept.append(mm.reserve(KiB))  # reservation 10: the fifth check frees the page
    assert storage.dealloc_calls == [page]
    assert mm.reservations == 10
