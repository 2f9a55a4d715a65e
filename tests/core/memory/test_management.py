"""Memory management: the ladder, routing, spills, cleanup, the OOM policy, the shared limit, figures."""

from __future__ import annotations

import gc
import sys
import threading
import weakref

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, precondition, rule

from cubeplug.core.errors import BufferTooBig, OutOfMemoryError, ValidationError
from cubeplug.core.memory import (
    MemoryLimit,
    MemoryManagement,
    MemoryUsage,
    PoolOptions,
    SliceToken,
    default_pools,
)
from cubeplug.core.storage import MemoryProperties
from tests.core.memory.conftest import (
    FakeStorage,
    GiB,
    KiB,
    MiB,
    check_in_storage,
    check_no_overlap,
    props,
)

E, S = PoolOptions.exclusive, PoolOptions.sliced


# ---------------------------------------------------------------------------------- the ladder
@pytest.mark.parametrize(
    ("max_page", "alignment", "ladder"),
    [
        (16 * MiB, 256, [E(0), E(16 * MiB)]),
        (32 * MiB, 256, [E(0), S(8 * MiB, 4 * MiB), E(32 * MiB)]),
        (
            4 * GiB,
            256,
            [
                E(0),
                S(16 * MiB, MiB),
                S(64 * MiB, 8 * MiB),
                S(256 * MiB, 64 * MiB),
                S(GiB, 512 * MiB),
                E(4 * GiB),
            ],
        ),
        # Page sizes are aligned up: 100e6 / 4 = 25e6 -> 25_000_192.
        (100_000_000, 256, [E(0), S(25_000_192, 12_500_096), E(100_000_000)]),
        (
            80 * GiB,
            256,
            [
                E(0),
                S(20 * MiB, 320 * KiB),
                S(80 * MiB, 2560 * KiB),
                S(320 * MiB, 20 * MiB),
                S(1280 * MiB, 160 * MiB),
                S(5 * GiB, 1280 * MiB),
                S(20 * GiB, 10 * GiB),
                E(80 * GiB),
            ],
        ),
    ],
)
def test_default_ladder(max_page: int, alignment: int, ladder: list[PoolOptions]) -> None:
    assert default_pools(max_page, alignment) == ladder


def test_a_max_slice_size_caps_the_sliced_pools() -> None:
    # The 1 GiB pool would only repeat the 256 MiB one's 16 MiB: dropped; pages above 16 MiB take
    # no near-full reservation (it would be above the cap).
    assert default_pools(4 * GiB, 256, 16 * MiB) == [
        E(0),
        S(16 * MiB, MiB),
        S(64 * MiB, 8 * MiB, near_full=False),
        S(256 * MiB, 16 * MiB, near_full=False),
        E(4 * GiB),
    ]


@pytest.mark.parametrize("bad", [0, -1])
def test_a_max_slice_size_below_one_byte_is_refused(bad: int) -> None:
    with pytest.raises(ValidationError, match="max_slice_size is a positive byte count"):
        default_pools(4 * GiB, 256, bad)


def test_the_properties_max_slice_size_gives_larger_reservations_pages_of_their_own(
    storage: FakeStorage,
) -> None:
    capped = MemoryProperties(max_page_size=4 * GiB, alignment=256, max_slice_size=16 * MiB)
    mm = MemoryManagement(storage, capped)
    assert mm.pool_options == tuple(default_pools(4 * GiB, 256, 16 * MiB))
    # 13 and 16 MiB fill most of a 16 MiB page; 12 MiB does not; above 16 MiB: the exclusive tail.
    sizes = (13 * MiB, 12 * MiB, 16 * MiB, 16 * MiB + 1, 60 * MiB, 900 * MiB)
    assert [pool_of(mm, n) for n in sizes] == [1, 3, 1, 4, 4, 4]
    a, b = mm.reserve(20 * MiB), mm.reserve(20 * MiB)
    assert a.storage.id != b.storage.id


def pool_of(mm: MemoryManagement, size: int) -> int:
    """The index in the ladder of the pool that serves ``size``."""
    token = mm.reserve(size)
    used = [i for i, r in enumerate(mm.report()) if r.slices]
    del token
    mm.cleanup(explicit=True)
    assert len(used) == 1
    return used[0]


@pytest.mark.parametrize(
    ("size", "pool"),
    [
        (0, 0),
        (1, 1),
        (MiB, 1),
        (MiB + 1, 2),
        (13 * MiB, 1),  # leaves 3 MiB of a 16 MiB page: under 20 %
        (12 * MiB, 3),  # leaves 4 MiB: not under 20 %, and above 8 MiB
        (8 * MiB, 2),
        (60 * MiB, 2),  # 20 % rule of the 64 MiB pool
        (64 * MiB, 2),
        (512 * MiB, 4),
        (600 * MiB, 5),
        (900 * MiB, 4),
        (4 * GiB, 5),
    ],
)
def test_routing(storage: FakeStorage, size: int, pool: int) -> None:
    mm = MemoryManagement(storage, props(4 * GiB))
    assert pool_of(mm, size) == pool


def test_routing_with_16_mib_pages_has_no_sliced_pool(storage: FakeStorage) -> None:
    mm = MemoryManagement(storage, props(16 * MiB))
    assert [pool_of(mm, n) for n in (0, 1, MiB, 16 * MiB)] == [0, 1, 1, 1]


def test_too_big_for_every_pool(storage: FakeStorage) -> None:
    mm = MemoryManagement(storage, props(4 * GiB))
    with pytest.raises(BufferTooBig) as info:
        mm.reserve(4 * GiB + 1)
    assert isinstance(info.value, ValidationError)
    assert (info.value.requested, info.value.max_size) == (4 * GiB + 1, 4 * GiB)
    assert storage.alloc_calls == []


def test_a_capped_full_pool_spills_to_the_next_that_accepts(storage: FakeStorage) -> None:
    pools = [S(4 * KiB, KiB, max_pages=1), E(512), S(8 * KiB, 2 * KiB), E(MiB)]
    mm = MemoryManagement(storage, props(MiB), pools=pools)
    first = [mm.reserve(KiB) for _ in range(4)]
    assert storage.alloc_calls == [4 * KiB]
    spilled = mm.reserve(KiB)  # E(512) does not take 1 KiB: the next sliced pool does
    assert storage.alloc_calls == [4 * KiB, 8 * KiB]
    assert [r.slices for r in mm.report()] == [4, 0, 1, 0, 0]
    del first[0]
    back = mm.reserve(KiB)
    assert [r.slices for r in mm.report()] == [4, 0, 1, 0, 0], "room again in the first pool"
    del spilled, back


def test_every_pool_capped_and_full_is_out_of_memory(storage: FakeStorage) -> None:
    mm = MemoryManagement(storage, props(MiB), pools=[S(4 * KiB, KiB, max_pages=1)])
    held = [mm.reserve(KiB) for _ in range(4)]
    with pytest.raises(OutOfMemoryError, match="capped"):
        mm.reserve(KiB)
    held.pop()
    assert mm.reserve(KiB).storage.id == held[0].storage.id


# ---------------------------------------------------------------------------------- cleanup and figures
def test_cleanup_returns_the_reserved_bytes(storage: FakeStorage) -> None:
    mm = MemoryManagement(storage, props(4 * GiB))
    tokens = [mm.reserve(n) for n in (0, 100, MiB, 5 * MiB, 100 * MiB, GiB - 1)]
    reserved = mm.usage().bytes_reserved
    assert reserved == storage.alive == 256 + 16 * MiB + 64 * MiB + 2 * GiB  # 100 MiB: a 1 GiB page
    assert mm.cleanup(explicit=True) == 0, "everything is in use"
    keep = tokens.pop(2)
    del tokens
    assert mm.cleanup(explicit=True) == reserved - 16 * MiB
    assert mm.usage() == MemoryUsage(1, MiB, 0, 16 * MiB)
    del keep
    assert mm.cleanup(explicit=True) == 16 * MiB
    assert mm.usage() == MemoryUsage(0, 0, 0, 0) and storage.live == {}


def test_usage_figures(storage: FakeStorage) -> None:
    mm = MemoryManagement(storage, props(4 * GiB))
    a, b = mm.reserve(1000), mm.reserve(0)
    usage = mm.usage()
    assert usage == MemoryUsage(2, 1000, 24, 16 * MiB + 256)
    assert sum(r.reserved for r in mm.report()) == usage.bytes_reserved
    assert str(usage) == "2 allocations, 1000 B in use (+24 B padding), 16.00 MiB reserved (0.0 % used)"
    assert usage + MemoryUsage(1, 2, 3, 4) == MemoryUsage(3, 1002, 27, 16 * MiB + 260)
    assert "sliced pool (pages of 16.00 MiB, slices up to 1.00 MiB): 1 page" in str(mm.report()[1])
    del a, b
    assert mm.usage() == MemoryUsage(0, 0, 0, 16 * MiB + 256)


def test_alignment_is_a_multiple_of_storage_and_device_alignment() -> None:
    storage = FakeStorage(alignment=96)
    mm = MemoryManagement(storage, props(4 * GiB, alignment=64))
    assert mm.alignment == 192
    tokens = [mm.reserve(n) for n in (1, 200, 1000)]
    check_in_storage(storage, tokens, 192)


# ---------------------------------------------------------------------------------- out of memory
def test_oom_cleans_up_flushes_and_retries(storage: FakeStorage) -> None:
    storage.capacity, storage.deferred = 20 * MiB, True
    mm = MemoryManagement(storage, props(4 * GiB))
    a = mm.reserve(MiB)  # a 16 MiB page
    page = a.storage.id
    del a
    big = mm.reserve(12 * MiB)  # 256 MiB pool: no room; tail: 12 MiB + 16 MiB > 20 MiB; cleanup frees
    assert storage.dealloc_calls == [page] and storage.flushes == 1
    assert storage.failed_allocs == [256 * MiB, 12 * MiB, 256 * MiB]
    assert mm.usage() == MemoryUsage(1, 12 * MiB, 0, 12 * MiB)
    del big


def test_oom_collects_garbage_before_the_retry(storage: FakeStorage) -> None:
    storage.capacity = 20 * MiB
    mm = MemoryManagement(storage, props(4 * GiB))

    class Box:
        pass

    gc.disable()
    try:
        box = Box()
        box.self = box  # type: ignore[attr-defined]
        box.token = mm.reserve(MiB)  # type: ignore[attr-defined]
        del box  # only the garbage collector frees the cycle
        assert mm.usage().number_allocs == 1
        big = mm.reserve(12 * MiB)
    finally:
        gc.enable()
    assert mm.usage().number_allocs == 1 and big.storage.size == 12 * MiB


def test_oom_raises_with_figures_and_calls_back(storage: FakeStorage) -> None:
    storage.capacity = 20 * MiB
    calls: list[tuple[int, int, int]] = []
    mm = MemoryManagement(storage, props(4 * GiB), on_oom=lambda *a: calls.append(a))
    keep = mm.reserve(MiB)
    with pytest.raises(OutOfMemoryError) as info:
        mm.reserve(12 * MiB)
    e = info.value
    assert isinstance(e, MemoryError) and isinstance(e.__cause__, OutOfMemoryError)
    assert (e.requested, e.in_use, e.reserved, e.limit) == (12 * MiB, MiB, 16 * MiB, None)
    assert (e.device_free, e.device_total) == (4 * MiB, 20 * MiB)
    assert "device refused" in str(e)
    assert calls == [(12 * MiB, MiB, 16 * MiB)]
    assert mm.usage() == MemoryUsage(1, MiB, 0, 16 * MiB), "nothing changed"
    del keep


def test_a_failing_oom_callback_still_raises_out_of_memory(storage: FakeStorage) -> None:
    storage.fail_next = 1000

    def boom(*args: int) -> None:
        raise RuntimeError("observer failed")

    mm = MemoryManagement(storage, props(4 * GiB), on_oom=boom)
    with pytest.raises(OutOfMemoryError):
        mm.reserve(KiB)


def test_an_oom_in_a_sliced_pool_spills_to_the_exclusive_tail(storage: FakeStorage) -> None:
    storage.capacity = 8 * MiB  # no 16 MiB page fits
    mm = MemoryManagement(storage, props(4 * GiB))
    small = mm.reserve(4)
    assert small.storage.size == 256 and storage.alloc_calls == [256]
    assert storage.failed_allocs == [16 * MiB], "larger sliced pages are not even tried"
    del small


def test_a_token_after_a_spill_is_freed_without_the_garbage_collector(storage: FakeStorage) -> None:
    storage.capacity = 8 * MiB
    mm = MemoryManagement(storage, props(4 * GiB))
    gc.disable()
    try:
        token = mm.reserve(4)  # the 16 MiB page fails: the tail serves it
        ref = weakref.ref(token)
        del token
        assert ref() is None, "no reference cycle holds the token"
        assert mm.usage().number_allocs == 0
    finally:
        gc.enable()


# ---------------------------------------------------------------------------------- the limit
def test_the_limit_is_shared_by_two_managements(storage: FakeStorage) -> None:
    limit = MemoryLimit(40 * MiB)
    mm1 = MemoryManagement(storage, props(4 * GiB), limit=limit)
    mm2 = MemoryManagement(storage, props(4 * GiB), limit=limit)
    a1, a2 = mm1.reserve(MiB), mm2.reserve(MiB)
    assert limit.used == 32 * MiB == mm1.usage().bytes_reserved + mm2.usage().bytes_reserved
    b1 = mm1.reserve(512 * KiB)
    assert limit.used == 32 * MiB, "room in mm1's page: nothing new counted"
    with pytest.raises(OutOfMemoryError) as info:
        mm1.reserve(10 * MiB)
    assert info.value.limit == 40 * MiB and "memory limit" in str(info.value)
    assert storage.failed_allocs == [], "the limit refused before the storage was asked"
    del a2
    mm2.cleanup(explicit=True)
    assert limit.used == 16 * MiB
    c1 = mm1.reserve(10 * MiB)
    assert limit.used == 26 * MiB == mm1.usage().bytes_reserved
    del a1, b1, c1
    mm1.cleanup(explicit=True)
    assert limit.used == 0 and storage.live == {}


def test_reclaim_frees_the_other_managements_pages_before_the_retry(storage: FakeStorage) -> None:
    limit = MemoryLimit(40 * MiB)
    mm2 = MemoryManagement(storage, props(4 * GiB), limit=limit)
    mm1 = MemoryManagement(storage, props(4 * GiB), limit=limit, reclaim=lambda: mm2.cleanup(True))
    a1 = mm1.reserve(MiB)
    a2 = mm2.reserve(MiB)
    del a2  # mm2 keeps its free page until it is cleaned up
    c1 = mm1.reserve(10 * MiB)
    assert limit.used == 26 * MiB and mm2.usage().bytes_reserved == 0
    del a1, c1


# 14 MiB fills a sliced page of 16 MiB (within 20 % of it); 600 MiB gets an exclusive page
@pytest.mark.parametrize("size", [14 * MiB, 600 * MiB])
def test_queued_memory_is_released_before_a_pool_grows(storage: FakeStorage, size: int) -> None:
    queued: list[SliceToken] = []  # what a queue of tasks would hold until it is submitted
    calls: list[int] = []

    def release(wait: bool) -> bool:
        assert not wait  # growth, not out of memory
        calls.append(len(queued))
        held = bool(queued)
        queued.clear()
        return held

    mm = MemoryManagement(storage, props(4 * GiB), release_queued=release)
    a = mm.reserve(size)
    assert calls == [0]  # the first page: nothing was queued
    queued.append(a)
    del a  # dropped by its owner while its task is queued
    calls.clear()
    pages = len(storage.alloc_calls)
    b = mm.reserve(size)
    assert calls == [1] and len(storage.alloc_calls) == pages  # the queued page was lent again
    c = mm.reserve(size)  # nothing queued: the release says so, and the pool grows
    assert calls == [1, 0] and len(storage.alloc_calls) == pages + 1
    assert b.storage.id != c.storage.id or b.storage.offset != c.storage.offset
    del b, c


def test_a_release_that_frees_nothing_still_grows_the_pool(storage: FakeStorage) -> None:
    calls: list[bool] = []

    def release(wait: bool) -> bool:
        calls.append(wait)
        return True  # work was queued, but freed nothing

    mm = MemoryManagement(storage, props(4 * GiB), release_queued=release)
    a = mm.reserve(600 * MiB)
    b = mm.reserve(600 * MiB)
    assert a.storage.id != b.storage.id and len(storage.alloc_calls) == 2
    assert calls and not any(calls), calls  # asked before each growth, without waiting
    del a, b


def test_a_small_limit_still_serves_small_and_medium_sizes() -> None:
    storage = FakeStorage(alignment=64)
    mm = MemoryManagement(storage, props(4 * GiB, alignment=64), limit=MemoryLimit.parse(8 * MiB))
    keep = mm.reserve(4)
    big = mm.reserve(6 * MiB)
    with pytest.raises(OutOfMemoryError) as info:
        mm.reserve(6 * MiB)
    assert info.value.requested == 6 * MiB and info.value.limit == 8 * MiB
    del big
    again = mm.reserve(6 * MiB)
    assert again.storage.size == 6 * MiB
    del keep


@pytest.mark.parametrize(
    ("text", "total", "expected"),
    [
        (12345, None, 12345),
        ("12345", None, 12345),
        ("2GiB", None, 2 * GiB),
        ("2 gib", None, 2 * GiB),
        ("1.5G", None, 3 * GiB // 2),
        ("512 MB", None, 512_000_000),
        ("64k", None, 64 * KiB),
        ("80%", 10 * GiB, 8 * GiB),
        ("12.5 %", 1000, 125),
    ],
)
def test_limit_parse(text: int | str, total: int | None, expected: int) -> None:
    assert MemoryLimit.parse(text, total).bytes == expected


@pytest.mark.parametrize(
    ("text", "total"),
    [
        ("lots", None),
        ("2 GiBs", None),
        ("-5", None),
        ("0", None),
        ("80%", None),
        ("150%", 100),
        ("0%", 100),
        (True, None),
        (2.5, None),
        ("", None),
        (0, None),
    ],
)
def test_limit_parse_rejects_garbage(text: object, total: int | None) -> None:
    with pytest.raises(ValidationError):
        MemoryLimit.parse(text, total)  # type: ignore[arg-type]


def test_limit_is_thread_safe() -> None:
    limit = MemoryLimit(1000)
    granted: list[int] = []

    def work() -> None:
        mine = 0
        for _ in range(2000):
            if limit.try_acquire(3):
                mine += 1
                limit.release(3)
        granted.append(mine)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert limit.used == 0 and sum(granted) == 16000
    assert limit.try_acquire(1000) and not limit.try_acquire(1) and limit.available == 0


# ---------------------------------------------------------------------------------- threads
def test_tokens_dropped_in_other_threads_while_reserving(storage: FakeStorage) -> None:
    mm = MemoryManagement(storage, props(128 * MiB), dealloc_period=20)
    sizes = [0, 100, 4 * KiB, MiB, 3 * MiB, 20 * MiB, 50 * MiB]
    doomed = [mm.reserve(sizes[i % len(sizes)]) for i in range(700)]
    chunks = [doomed[i::3] for i in range(3)]
    del doomed

    def drop(chunk: list[SliceToken]) -> None:
        while chunk:
            chunk.pop()

    threads = [threading.Thread(target=drop, args=(c,)) for c in chunks]
    del chunks
    for t in threads:
        t.start()
    live = [(mm.reserve(sizes[i % len(sizes)]), sizes[i % len(sizes)]) for i in range(300)]
    for t in threads:
        t.join()
    tokens = [t for t, _ in live]
    check_no_overlap(tokens)
    check_in_storage(storage, tokens, 256)
    usage = mm.usage()
    assert usage.number_allocs == 300 and usage.bytes_in_use == sum(n for _, n in live)


# ---------------------------------------------------------------------------------- properties
SIZES = st.one_of(
    st.sampled_from(
        [
            0,
            1,
            255,
            256,
            257,
            4 * KiB,
            MiB,
            2 * MiB,
            2 * MiB + 1,
            7 * MiB,
            8 * MiB,
            16 * MiB,
            30 * MiB,
            32 * MiB,
            100 * MiB,
            128 * MiB,
        ]
    ),
    st.integers(0, 128 * MiB),
    st.integers(0, 64 * KiB),
)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("reserve"), SIZES),
        st.tuples(st.just("release"), st.integers(0, 1000)),
        st.tuples(st.just("cleanup"), st.booleans()),
        st.tuples(st.just("persistent"), st.booleans()),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(ops=OPS, deferred=st.booleans())
def test_random_sequences_keep_slices_disjoint_and_figures_consistent(
    ops: list[tuple[str, int]], deferred: bool
) -> None:
    storage = FakeStorage(deferred=deferred)
    limit = MemoryLimit(1 << 40)
    mm = MemoryManagement(storage, props(128 * MiB), limit=limit, dealloc_period=10)
    live: list[tuple[SliceToken, int]] = []
    windows = 0
    for op, arg in ops:
        if op == "reserve":
            live.append((mm.reserve(arg), arg))
        elif op == "release" and live:
            live.pop(arg % len(live))
        elif op == "cleanup":
            mm.cleanup(explicit=bool(arg))
            storage.flush()
        elif op == "persistent":
            if arg:
                mm.push_mode(mm.mode.PERSISTENT)
                windows += 1
            elif windows:
                mm.pop_mode()
                windows -= 1
        tokens = [t for t, _ in live]
        check_no_overlap(tokens)
        check_in_storage(storage, tokens, 256)
        usage = mm.usage()
        assert usage.number_allocs == len(live)
        assert usage.bytes_in_use == sum(n for _, n in live)
        assert usage.bytes_in_use + usage.bytes_padding == sum(t.storage.size for t in tokens)
        assert usage.bytes_reserved == storage.alive == limit.used
        del tokens
    live.clear()
    assert mm.usage().bytes_in_use == 0 and mm.usage().number_allocs == 0
    mm.cleanup(explicit=True)
    assert mm.usage().bytes_reserved == 0 and storage.alive == 0 and limit.used == 0


class MemoryMachine(RuleBasedStateMachine):
    """Reservations, releases (here and in other threads), cleanups, windows and OOM on a small device."""

    tokens = Bundle("tokens")

    def __init__(self) -> None:
        super().__init__()
        self.storage = FakeStorage(capacity=400 * MiB, deferred=True)
        self.limit = MemoryLimit(300 * MiB)
        self.mm = MemoryManagement(self.storage, props(128 * MiB), limit=self.limit, dealloc_period=10)
        self.live: dict[int, tuple[SliceToken, int]] = {}
        self.windows = 0

    @rule(target=tokens, size=SIZES)
    def reserve(self, size: int) -> int:
        before = self.mm.usage()
        try:
            token = self.mm.reserve(size)
        except OutOfMemoryError as e:
            assert e.requested == size and e.limit == 300 * MiB
            after = self.mm.usage()
            assert (e.in_use, e.reserved) == (after.bytes_in_use, after.bytes_reserved)
            assert after.bytes_in_use == before.bytes_in_use, "a failed reservation holds nothing"
            return -1
        self.live[id(token)] = (token, size)
        return id(token)

    @rule(key=consumes(tokens))
    def release(self, key: int) -> None:
        self.live.pop(key, None)

    @rule(key=consumes(tokens))
    def release_in_another_thread(self, key: int) -> None:
        entry = [self.live.pop(key, None)]
        thread = threading.Thread(target=entry.clear)
        del entry  # the thread's list holds the last reference
        thread.start()
        thread.join()

    @rule(explicit=st.booleans())
    def cleanup(self, explicit: bool) -> None:
        before = self.mm.usage().bytes_reserved
        freed = self.mm.cleanup(explicit)
        assert self.mm.usage().bytes_reserved == before - freed
        if explicit:
            pages = {sid for sid in self.storage.live if sid not in self.storage.pending}
            assert pages == {t.storage.id for t, _ in self.live.values()}, "only pages in use are left"

    @rule()
    def flush(self) -> None:
        self.storage.flush()

    @rule()
    def open_persistent_window(self) -> None:
        self.mm.push_mode(self.mm.mode.PERSISTENT)
        self.windows += 1

    @precondition(lambda self: self.windows > 0)
    @rule()
    def close_window(self) -> None:
        self.mm.pop_mode()
        self.windows -= 1

    @invariant()
    def slices_are_disjoint_aligned_and_on_live_pages(self) -> None:
        tokens = [t for t, _ in self.live.values()]
        check_no_overlap(tokens)
        check_in_storage(self.storage, tokens, 256)

    @invariant()
    def figures_are_consistent(self) -> None:
        usage = self.mm.usage()
        assert usage.number_allocs == len(self.live)
        assert usage.bytes_in_use == sum(n for _, n in self.live.values())
        assert usage.bytes_in_use + usage.bytes_padding == sum(t.storage.size for t, _ in self.live.values())
        assert usage.bytes_reserved == self.storage.alive == self.limit.used <= 300 * MiB
        assert sum(r.reserved for r in self.mm.report()) == usage.bytes_reserved

    def teardown(self) -> None:
        self.live.clear()
        usage = self.mm.usage()
        assert usage.bytes_in_use == 0 and usage.number_allocs == 0
        self.mm.cleanup(explicit=True)
        assert self.mm.usage().bytes_reserved == 0 and self.storage.alive == 0 and self.limit.used == 0


MemoryMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
TestMemoryMachine = MemoryMachine.TestCase


# ---------------------------------------------------------------------------------- exact reuse
def test_a_size_a_sliced_pool_serves_gets_an_exact_reuse_entry(storage: FakeStorage) -> None:
    mm = MemoryManagement(storage, props(4 * GiB))
    mm.reserve(1000)  # the route is made
    assert 1000 not in mm.reuse
    mm.reserve(1000)  # served by the first pool of its route, a sliced one: the entry is made
    freed, padded, release = mm.reuse[1000]
    token = mm.reserve(1000)
    record = token.record
    del token
    assert padded == 1024 and list(freed) == [record], "a dying token queues its record there"
    assert release.__self__ is freed  # type: ignore[attr-defined]
    tail = MemoryManagement(storage, props(4 * GiB), pools=[S(16 * KiB, 4 * KiB), E(4 * MiB)])
    for _ in range(2):
        tail.reserve(MiB)  # an exclusive pool: no entry
    assert MiB not in tail.reuse


def test_a_freed_slice_of_another_size_takes_the_general_path(storage: FakeStorage) -> None:
    mm = MemoryManagement(storage, props(4 * GiB))
    for _ in range(2):
        mm.reserve(4 * KiB)  # fills the exact-reuse entry of 4 KiB
    mm.usage()  # takes the freed slices back
    small, big = mm.reserve(KiB), mm.reserve(4 * KiB)
    big_storage = big.storage
    del small, big  # freed: [1 KiB slice, 4 KiB slice]; the first does not fit 4 KiB
    again = mm.reserve(4 * KiB)
    assert again.storage == big_storage, "the exact-size free slice is still found"
    assert mm.usage().number_allocs == 1
    check_no_overlap([again, mm.reserve(KiB)])


def test_exact_reuse_stops_while_persistent_memory_is_in_play(storage: FakeStorage) -> None:
    mm = MemoryManagement(storage, props(4 * GiB))
    for _ in range(2):
        mm.reserve(KiB)  # the cache now serves 1 KiB from the sliced pool
    with mm.persistent():
        kept = mm.reserve(KiB)
    assert [r.kind for r in mm.report() if r.slices] == ["persistent"]
    del kept  # a free persistent page of exactly 1 KiB now exists
    again = mm.reserve(KiB)
    assert [r.kind for r in mm.report() if r.slices] == ["persistent"], "persistent pages come first"
    del again
    mm.cleanup(explicit=True)  # no persistent page any more: the sliced pool serves again
    token = mm.reserve(KiB)
    assert [r.kind for r in mm.report() if r.slices] == ["sliced"]
    del token


def test_reservations_count_for_the_idle_checks(storage: FakeStorage) -> None:
    pools = [S(16 * KiB, 4 * KiB), E(4 * MiB)]
    mm = MemoryManagement(storage, props(4 * GiB), pools=pools, dealloc_period=10)
    big = mm.reserve(MiB)
    del big  # a free exclusive page: five idle checks free it
    for _ in range(8):
        token = mm.reserve(KiB)
        del token
    assert mm.reservations == 9
    assert [r.pages for r in mm.report()][:2] == [1, 1], "4 checks (at 2, 4, 6, 8): not yet freed"
    mm.reserve(KiB)
    assert [r.pages for r in mm.report()][:2] == [1, 0], "the 5th check (at 10) freed the idle page"


def test_a_token_no_pool_lent_dies_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    raised: list[object] = []  # what a failing finalizer would report (it cannot raise)
    monkeypatch.setattr(sys, "unraisablehook", raised.append)
    token = SliceToken(FakeStorage().alloc(256))
    ref = weakref.ref(token)
    del token
    assert ref() is None and raised == []


def test_tokens_in_a_reference_cycle_come_back_at_the_next_collection(storage: FakeStorage) -> None:
    mm = MemoryManagement(storage, props(4 * GiB))

    class Holder:
        token: SliceToken
        me: object

    gc.disable()
    try:
        h = Holder()
        h.token, h.me = mm.reserve(KiB), h
        del h
        assert mm.usage().number_allocs == 1, "a cycle keeps the token until a collection"
        gc.collect()
        assert mm.usage().number_allocs == 0
    finally:
        gc.enable()
