"""The persistent pool and persistent windows: exact-size buckets, reuse, policies, cleanup."""

from __future__ import annotations

import pytest

from cubeplug.core.errors import BufferTooBig, ValidationError
from cubeplug.core.memory import AllocationMode, MemoryManagement, SliceToken
from cubeplug.core.memory.pages import PageSource
from cubeplug.core.memory.pools import PersistentPool
from tests.core.memory.conftest import FakeStorage, GiB, KiB, MiB, props


def reserve(pool: PersistentPool, size: int) -> SliceToken:
    return pool.try_reserve(size) or pool.alloc(size)


def kinds_in_use(mm: MemoryManagement) -> list[str]:
    return [r.kind for r in mm.report() if r.slices]


def test_exact_size_buckets(source: PageSource, storage: FakeStorage) -> None:
    pool = PersistentPool(source, GiB)
    a = reserve(pool, 1000)
    assert (a.storage.offset, a.storage.size) == (0, 1024) and storage.alloc_calls == [1024]
    page = a.storage.id
    del a
    assert pool.try_reserve(2000) is None, "no bucket of that size"
    b = reserve(pool, 1024)
    assert b.storage.id == page, "same padded size: the page is reused"
    c = reserve(pool, 900)
    assert c.storage.id != page and storage.alloc_calls == [1024, 1024]
    assert pool.usage().bytes_in_use == 1924 and pool.usage().number_allocs == 2
    del b, c


def test_size_zero_gets_a_page_of_its_own(source: PageSource, storage: FakeStorage) -> None:
    pool = PersistentPool(source, GiB)
    a = reserve(pool, 0)
    assert a.storage.size == 0 and storage.alloc_calls == [256]


def test_only_explicit_cleanup_frees_and_only_free_pages(source: PageSource, storage: FakeStorage) -> None:
    pool = PersistentPool(source, GiB)
    a, b = reserve(pool, KiB), reserve(pool, 2 * KiB)
    del a
    assert pool.cleanup(explicit=False) == 0 and storage.dealloc_calls == []
    assert pool.cleanup(explicit=True) == KiB
    assert list(storage.live.values()) == [2 * KiB]
    assert pool.report().pages == 1 and pool.count == 1
    del b


def test_windows_nest_and_the_innermost_wins(storage: FakeStorage) -> None:
    mm = MemoryManagement(storage, props())
    assert mm.mode is AllocationMode.AUTO
    with mm.persistent():
        a = mm.reserve(KiB)
        mm.push_mode(AllocationMode.AUTO)
        b = mm.reserve(3 * KiB)
        mm.pop_mode()
        with mm.persistent():
            c = mm.reserve(5 * KiB)
        d = mm.reserve(7 * KiB)
        assert mm.mode is AllocationMode.PERSISTENT
    e = mm.reserve(9 * KiB)
    assert mm.mode is AllocationMode.AUTO
    reports = {r.kind: r for r in mm.report() if r.slices}
    assert reports["persistent"].slices == 3 and reports["persistent"].in_use == (1 + 5 + 7) * KiB
    assert sum(r.in_use for r in mm.report() if r.kind == "sliced") == (3 + 9) * KiB
    # Persistent slices have pages of their own; the two auto ones share a sliced page.
    assert len({t.storage.id for t in (a, c, d)}) == 3
    assert b.storage.id == e.storage.id


def test_pop_without_a_window_is_an_error(storage: FakeStorage) -> None:
    mm = MemoryManagement(storage, props())
    with pytest.raises(ValidationError, match="pop_mode"):
        mm.pop_mode()
    with pytest.raises(ValidationError):
        mm.push_mode("persistent")  # type: ignore[arg-type]


def test_an_auto_reservation_reuses_a_free_persistent_slice_of_its_size(storage: FakeStorage) -> None:
    mm = MemoryManagement(storage, props())
    with mm.persistent():
        a = mm.reserve(3000)
    page = a.storage.id
    del a
    other = mm.reserve(5000)
    assert other.storage.id != page, "another size goes to the ladder"
    again = mm.reserve(3072)
    assert again.storage.id == page, "the same padded size takes the free persistent slice first"
    assert kinds_in_use(mm) == ["sliced", "persistent"]


def test_policy_disabled_ignores_windows(storage: FakeStorage) -> None:
    mm = MemoryManagement(storage, props(), persistent="disabled")
    with mm.persistent():
        assert mm.mode is AllocationMode.AUTO
        a = mm.reserve(KiB)
    assert kinds_in_use(mm) == ["sliced"]
    del a


def test_policy_enforced_makes_every_reservation_persistent(storage: FakeStorage) -> None:
    mm = MemoryManagement(storage, props(), persistent="enforced")
    assert mm.mode is AllocationMode.PERSISTENT
    tokens = [mm.reserve(n) for n in (0, KiB, 100 * MiB)]
    assert kinds_in_use(mm) == ["persistent"]
    assert mm.report()[-1].slices == 3
    with pytest.raises(BufferTooBig):
        mm.reserve(4 * GiB + 1)
    del tokens


def test_unknown_policy_is_rejected(storage: FakeStorage) -> None:
    with pytest.raises(ValidationError, match="enforced"):
        MemoryManagement(storage, props(), persistent="always")


def test_persistent_slices_survive_periodic_cleanup_but_not_explicit(storage: FakeStorage) -> None:
    mm = MemoryManagement(storage, props(), dealloc_period=5)
    with mm.persistent():
        a = mm.reserve(KiB)
    page = a.storage.id
    del a
    for _ in range(50):
        mm.reserve(64)
    assert page in storage.live, "idle checks leave persistent pages alone"
    assert mm.cleanup(explicit=True) >= KiB
    assert page not in storage.live
