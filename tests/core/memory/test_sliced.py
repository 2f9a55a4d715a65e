"""The sliced pool: the 20 % rule, first fit with split, coalescing, exact-size reuse, cleanup, caps."""

from __future__ import annotations

import gc
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cubeplug.core.memory import PoolOptions, SliceToken
from cubeplug.core.memory.pages import PageSource
from cubeplug.core.memory.pools import SlicedPool
from tests.core.memory.conftest import FakeStorage, KiB, check_in_storage, check_no_overlap

PAGE = 10 * KiB


def reserve(pool: SlicedPool, size: int) -> SliceToken:
    """Reserve as memory management does: reuse, else a new page."""
    token = pool.try_reserve(size) or pool.alloc(size)
    assert token is not None
    return token


def spans(t: SliceToken) -> tuple[int, int]:
    return t.storage.offset, t.storage.size


@pytest.mark.parametrize(
    ("size", "accepted"),
    [
        (0, True),
        (2 * KiB, True),  # up to max_slice_size
        (2 * KiB + 1, False),
        (8 * KiB, False),  # leaves exactly 20 % of the page: not less than 20 %
        (8 * KiB + 1, True),  # leaves just under 20 %
        (PAGE, True),
        (PAGE + 1, False),
    ],
)
def test_accepts_max_slice_or_within_20_percent_of_a_page(
    source: PageSource, size: int, accepted: bool
) -> None:
    pool = SlicedPool(source, PAGE, 2 * KiB)
    assert pool.accepts(size) is accepted
    assert PoolOptions.sliced(PAGE, 2 * KiB).accepts(size) is accepted


@pytest.mark.parametrize("size", [2 * KiB + 1, 8 * KiB + 1, PAGE])
def test_without_near_full_only_sizes_up_to_the_largest_slice(source: PageSource, size: int) -> None:
    assert not SlicedPool(source, PAGE, 2 * KiB, near_full=False).accepts(size)
    assert not PoolOptions.sliced(PAGE, 2 * KiB, near_full=False).accepts(size)
    assert SlicedPool(source, PAGE, 2 * KiB, near_full=False).accepts(2 * KiB)


def test_a_20_percent_size_takes_a_page_of_its_own(source: PageSource, storage: FakeStorage) -> None:
    pool = SlicedPool(source, PAGE, 2 * KiB)
    big = reserve(pool, 9 * KiB + 1)
    assert spans(big) == (0, 9 * KiB + 256)
    assert storage.alloc_calls == [PAGE]
    assert pool.layout() == [[(0, 9 * KiB + 256, True), (9 * KiB + 256, 768, False)]]


def test_slices_are_aligned_and_split_off_the_page(source: PageSource, storage: FakeStorage) -> None:
    pool = SlicedPool(source, PAGE, 2 * KiB)
    a = reserve(pool, 1)
    b = reserve(pool, 300)
    c = reserve(pool, 0)
    assert [spans(t) for t in (a, b, c)] == [(0, 256), (256, 512), (768, 256)]
    assert storage.alloc_calls == [PAGE], "one page holds all three"
    assert pool.layout() == [[(0, 256, True), (256, 512, True), (768, 256, True), (1024, PAGE - 1024, False)]]
    usage = pool.usage()
    assert (usage.number_allocs, usage.bytes_in_use, usage.bytes_padding, usage.bytes_reserved) == (
        3,
        301,
        255 + 212 + 256,
        PAGE,
    )


def test_first_fit_takes_the_lowest_free_slice_and_splits_it(source: PageSource) -> None:
    pool = SlicedPool(source, PAGE, 4 * KiB)
    a, b, c, d = (reserve(pool, KiB) for _ in range(4))
    del a, c
    # Free: [0, 1K), [2K, 3K) and the tail [4K, 10K). A 512 B slice goes to the first one.
    e = reserve(pool, 512)
    assert spans(e) == (0, 512)
    assert pool.layout()[0][:3] == [(0, 512, True), (512, 512, False), (KiB, KiB, True)]
    # 1.5 KiB fits in neither 512 B hole nor the freed [2K, 3K): it goes to the tail at 4K.
    f = reserve(pool, 1536)
    assert spans(f) == (4 * KiB, 1536)
    del b, d


def test_adjacent_free_slices_coalesce(source: PageSource, storage: FakeStorage) -> None:
    pool = SlicedPool(source, PAGE, 4 * KiB)
    a, b, c, keep = (reserve(pool, KiB) for _ in range(4))
    del a, b, c
    assert [s for s in pool.layout()[0] if not s[2]] == [
        (0, KiB, False),
        (KiB, KiB, False),
        (2 * KiB, KiB, False),
        (4 * KiB, 6 * KiB, False),
    ]
    # 3 KiB fits only in the three freed slices merged: offset 0, no new page.
    merged = reserve(pool, 3 * KiB)
    assert spans(merged) == (0, 3 * KiB)
    assert storage.alloc_calls == [PAGE]
    assert pool.layout() == [[(0, 3 * KiB, True), (3 * KiB, KiB, True), (4 * KiB, 6 * KiB, False)]]
    del keep


def test_coalescing_spans_the_whole_page_after_everything_is_freed(source: PageSource) -> None:
    pool = SlicedPool(source, PAGE, PAGE)
    tokens = [reserve(pool, KiB) for _ in range(10)]
    assert pool.layout()[0] == [(i * KiB, KiB, True) for i in range(10)]
    del tokens
    whole = reserve(pool, PAGE)
    assert spans(whole) == (0, PAGE)
    assert pool.layout() == [[(0, PAGE, True)]]


def test_an_exact_size_free_slice_is_reused_before_splitting_a_larger_one(source: PageSource) -> None:
    pool = SlicedPool(source, PAGE, 4 * KiB)
    a, b, c = (reserve(pool, KiB) for _ in range(3))
    first = b.storage
    del b
    again = reserve(pool, KiB)
    assert again.storage == first, "the just-freed slice of the same size comes back"
    assert again.storage is first, "its StorageHandle is reused as is"
    del a, c, again


def test_a_live_token_keeps_its_slice(source: PageSource) -> None:
    pool = SlicedPool(source, PAGE, PAGE)
    a = reserve(pool, PAGE)
    alias = a
    del a
    gc.collect()
    assert pool.try_reserve(KiB) is None, "the slice is still referenced"
    assert pool.usage().number_allocs == 1
    del alias
    assert pool.try_reserve(KiB) is not None


def test_new_page_when_no_slice_fits(source: PageSource, storage: FakeStorage) -> None:
    pool = SlicedPool(source, PAGE, 6 * KiB)
    a = reserve(pool, 6 * KiB)
    b = reserve(pool, 6 * KiB)
    assert storage.alloc_calls == [PAGE, PAGE]
    assert a.storage.id != b.storage.id and spans(b) == (0, 6 * KiB)
    c = reserve(pool, 4 * KiB)
    assert c.storage.id == a.storage.id and spans(c) == (6 * KiB, 4 * KiB), "first page first"


def test_cleanup_frees_only_fully_free_pages_and_only_when_explicit(
    source: PageSource, storage: FakeStorage
) -> None:
    pool = SlicedPool(source, PAGE, 6 * KiB)
    a = reserve(pool, 6 * KiB)
    b = reserve(pool, 6 * KiB)
    page_b = b.storage.id
    del b
    assert pool.cleanup(explicit=False) == 0
    assert storage.dealloc_calls == []
    assert pool.cleanup(explicit=True) == PAGE
    assert storage.dealloc_calls == [page_b]
    assert pool.usage().bytes_reserved == PAGE and source.reserved == PAGE
    check_in_storage(storage, [a], 256)
    del a
    assert pool.cleanup(explicit=True) == PAGE
    assert pool.usage().bytes_reserved == 0 and storage.live == {}
    # The pool still works after dropping every page.
    c = reserve(pool, KiB)
    assert spans(c) == (0, KiB) and len(storage.alloc_calls) == 3


def test_max_pages_caps_the_pool(source: PageSource) -> None:
    pool = SlicedPool(source, PAGE, 6 * KiB, max_pages=1)
    a = reserve(pool, 6 * KiB)
    assert pool.try_reserve(6 * KiB) is None
    assert pool.alloc(6 * KiB) is None, "a full capped pool says so instead of allocating"
    del a


def test_tokens_dropped_in_other_threads_are_freed(source: PageSource) -> None:
    pool = SlicedPool(source, 1 << 20, 1 << 20)
    tokens = [reserve(pool, KiB) for _ in range(500)]
    chunks = [tokens[i::4] for i in range(4)]
    del tokens

    def drop(chunk: list[SliceToken]) -> None:
        while chunk:
            chunk.pop()

    threads = [threading.Thread(target=drop, args=(c,)) for c in chunks]
    del chunks
    for t in threads:
        t.start()
    live = [reserve(pool, KiB) for _ in range(200)]  # reserves while the others free
    for t in threads:
        t.join()
    check_no_overlap(live)
    assert pool.usage().number_allocs == 200
    assert pool.usage().bytes_in_use == 200 * KiB


def test_a_drain_stops_when_another_thread_took_the_last_freed_slice(source: PageSource) -> None:
    """A client's lock-free ``empty`` may pop the deque between a drain's test and its ``popleft``."""
    pool = SlicedPool(source, 1 << 20, 1 << 20)
    kept = reserve(pool, KiB)
    freed = pool._freed

    class Raced(type(freed)):  # type: ignore[misc]
        def __len__(self) -> int:  # the drain's test sees a record another thread then takes
            return 1

    pool._freed = Raced()
    try:
        pool._drain()  # returns instead of raising IndexError
        assert pool.usage().number_allocs == 1
    finally:
        pool._freed = freed
    del kept
    assert pool.usage().number_allocs == 0


def test_the_reuse_entry_protocol_lends_the_slice_freed_first_or_puts_it_back(source: PageSource) -> None:
    pool = SlicedPool(source, 1 << 20, 1 << 20)
    small, big = reserve(pool, 300), reserve(pool, 3 * KiB)
    small_region, big_region = small.storage, big.storage
    freed, padded, _ = pool.reuse_entry(300)
    assert padded == 512  # the pool's 256-byte alignment
    del big, small  # freed in that order: the big slice is at the left
    record = freed.popleft()
    assert record.size != padded
    freed.appendleft(record)  # another size: back where it was, still lent
    assert [r.storage for r in freed] == [big_region, small_region]
    assert pool.usage().number_allocs == 0  # a drain takes both back
    assert reserve(pool, 3 * KiB).storage is big_region
    assert reserve(pool, 300).storage is small_region


ops = st.lists(
    st.one_of(
        st.tuples(st.just("reserve"), st.integers(0, PAGE)),
        st.tuples(st.just("release"), st.integers(0, 1000)),
        st.tuples(st.just("cleanup"), st.booleans()),
    ),
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(ops=ops, alignment=st.sampled_from([1, 64, 256]))
def test_random_sequences_keep_slices_disjoint_and_figures_consistent(
    ops: list[tuple[str, int]], alignment: int
) -> None:
    storage = FakeStorage(alignment=alignment)
    pool = SlicedPool(PageSource(storage), PAGE, 3 * KiB)
    live: list[tuple[SliceToken, int]] = []
    for op, arg in ops:
        if op == "reserve":
            if not pool.accepts(arg):
                continue
            live.append((reserve(pool, arg), arg))
        elif op == "release" and live:
            live.pop(arg % len(live))
        elif op == "cleanup":
            pool.cleanup(explicit=bool(arg))
        tokens = [t for t, _ in live]
        check_no_overlap(tokens)
        check_in_storage(storage, tokens, alignment)
        usage = pool.usage()
        assert usage.number_allocs == len(live)
        assert usage.bytes_in_use == sum(n for _, n in live)
        assert usage.bytes_in_use + usage.bytes_padding == sum(t.storage.size for t in tokens)
        assert usage.bytes_reserved == storage.alive
        for page in pool.layout():
            offsets = [o for o, _, _ in page]
            ends = [o + s for o, s, _ in page]
            assert offsets[0] == 0 and ends[-1] == pool.page_size and offsets[1:] == ends[:-1]
        del tokens
    live.clear()
    assert pool.usage().bytes_in_use == 0 and pool.usage().number_allocs == 0
    pool.cleanup(explicit=True)
    assert pool.usage().bytes_reserved == 0 and storage.live == {}
