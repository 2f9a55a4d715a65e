"""The batching single-queue path: one submit per flush, the scalar arena, queued writes, failures."""

from __future__ import annotations

import numpy as np
import pytest

from cubeplug import CubeCount, LaunchError
from cubeplug.backends.webgpu import queue as wgpu_queue
from cubeplug.core.stream import current_stream_id
from tests.backends.webgpu.conftest import requires_webgpu
from tests.backends.webgpu.kernels import ADD_ONE, AXPY, FILL, WIDE

pytestmark = requires_webgpu


def test_one_submit_per_flush_never_per_dispatch(client) -> None:  # type: ignore[no-untyped-def]
    x = client.create(np.zeros(256, np.int32))
    client.sync()
    queue = client.server.queue
    before = queue.submits
    scheduler = client.server.scheduler
    age, scheduler.max_age = scheduler.max_age, None  # batches by count only (ages: the next test)
    try:
        for _ in range(1000):
            client.launch(ADD_ONE, 4, [x], [256])
    finally:
        scheduler.max_age = age
    client.flush()
    submits = queue.submits - before
    assert submits <= -(-1000 // scheduler.max_tasks) + 1, submits
    np.testing.assert_array_equal(client.to_numpy(x, "i32"), np.full(256, 1000, np.int32))


def test_batches_cut_short_by_age_run_every_launch_once(client) -> None:  # type: ignore[no-untyped-def]
    scheduler = client.server.scheduler
    if client.properties.get("adapter_type") == "CPU":
        assert scheduler.max_age is None  # lavapipe runs one submission at a time: no early submits
    x = client.create(np.zeros(256, np.int32))
    client.sync()
    before = client.server.queue.submits
    age, scheduler.max_age = scheduler.max_age, 1e-9  # every second task submits its batch
    try:
        for _ in range(100):
            client.launch(ADD_ONE, 4, [x], [256])
    finally:
        scheduler.max_age = age
    assert client.server.queue.submits - before >= 40
    np.testing.assert_array_equal(client.to_numpy(x, "i32"), np.full(256, 100, np.int32))


def test_bind_groups_are_reused_for_a_repeated_binding_set(client) -> None:  # type: ignore[no-untyped-def]
    x = client.create(np.zeros(64, np.int32))
    client.launch(ADD_ONE, 1, [x], [64])
    cached = len(client.server.bind_groups.cache)
    for i in range(50):
        client.launch(ADD_ONE, 1, [x], [i])  # other scalars, same bindings
    assert len(client.server.bind_groups.cache) == cached
    view = x.offset_start(client.capabilities.offset_alignment)
    client.launch(ADD_ONE, 1, [view], [8])  # another binding set: one more bind group
    assert len(client.server.bind_groups.cache) == cached + 1
    assert client.to_numpy(x, "i32")[0] == 1 + sum(1 for i in range(50) if i > 0)


def test_pipelines_are_cached_per_kernel(client) -> None:  # type: ignore[no-untyped-def]
    x = client.create(np.zeros(64, np.int32))
    client.launch(ADD_ONE, 1, [x], [64])
    cache = client.server.compile_cache
    misses = cache.misses
    for _ in range(10):
        client.launch(ADD_ONE, 1, [x], [64])
        client.launch_unchecked(ADD_ONE, 1, [x], [64])
    assert cache.misses <= misses + 1  # at most the unchecked variant compiles once


def test_scalar_arena_overflow_splits_the_batch(client) -> None:  # type: ignore[no-untyped-def]
    # 600 launches with distinct 160 B scalar blocks do not fit one 64 KiB arena: the batch is split.
    sched = client.server.scheduler
    old = sched.max_tasks
    sched.max_tasks = 10_000
    try:
        out = client.create(np.zeros(600, np.uint32))
        client.sync()
        before = client.server.queue.submits
        for i in range(600):
            client.launch(WIDE, 1, [out], [i, *range(1, 39), 1000 + i])
        client.flush()
        assert client.server.queue.submits - before >= 2
    finally:
        sched.max_tasks = old
    np.testing.assert_array_equal(client.to_numpy(out, "u32"), np.arange(600) * 2 + 1000)


def test_many_indirect_dispatches_in_one_batch(client) -> None:  # type: ignore[no-untyped-def]
    sched = client.server.scheduler
    old = sched.max_tasks
    sched.max_tasks = 10_000
    try:
        counts = client.create(np.array([1, 1, 1], np.uint32))
        x = client.create(np.zeros(64, np.int32))
        n = wgpu_queue.INDIRECT_SLOTS + 44
        for _ in range(n):
            client.launch(ADD_ONE, CubeCount.dynamic(counts), [x], [64])
    finally:
        sched.max_tasks = old
    np.testing.assert_array_equal(client.to_numpy(x, "i32"), np.full(64, n, np.int32))


#: Above the sliced pools' sizes of every adapter here (lavapipe's largest binding is 128 MiB):
#: an exclusive page each.
BIG = 40 << 20


def test_outputs_dropped_while_queued_are_lent_again(client) -> None:  # type: ignore[no-untyped-def]
    """A queued task holds its output's memory until submitted; before a pool grows the queued tasks
    are submitted, so a loop that drops each output gets its memory back, not a page per call."""
    scheduler, pages = client.server.scheduler, client.server.storage.buffers
    age, scheduler.max_age = scheduler.max_age, None  # batches by count: the loop stays queued
    try:
        kept = []
        before = len(pages)
        for i in range(10):
            out = client.empty(BIG)
            client.launch(FILL, 1, [out], [float(i), 64])
            if i in (3, 9):
                kept.append(out)
        grown = len(pages) - before
    finally:
        scheduler.max_age = age
    assert grown <= 3, grown  # 10 without the release: one page per call
    for value, out in zip((3.0, 9.0), kept, strict=True):
        head = client.to_numpy(out, "f32")[:65]
        np.testing.assert_array_equal(head[:64], np.full(64, value, np.float32))


def test_memory_lent_again_after_a_release_follows_its_queued_readers(client) -> None:  # type: ignore[no-untyped-def]
    """The task that reads a dropped input runs before the input's memory gets new bytes."""
    scheduler = client.server.scheduler
    n = BIG // 4
    age, scheduler.max_age = scheduler.max_age, None
    try:
        x = client.create(np.ones(n, np.float32))
        client.sync()
        client.memory_cleanup()  # no free page of that size but x's, once x is dropped
        y = client.create(np.zeros(n, np.float32))
        client.launch(AXPY, 512, [x, y], [1.0, 512 * 128])  # queued: y[:65536] = x[:65536]
        page = x.memory().storage.id
        del x
        z = client.create(np.full(n, 2.0, np.float32))  # lent x's page: after the queued read
        assert z.memory().storage.id == page
    finally:
        scheduler.max_age = age
    expected = np.zeros(n, np.float32)
    expected[: 512 * 128] = 1.0
    np.testing.assert_array_equal(client.to_numpy(y, "f32"), expected)
    np.testing.assert_array_equal(client.to_numpy(z, "f32"), np.full(n, 2.0, np.float32))


def test_queued_write_keeps_stream_order(client) -> None:  # type: ignore[no-untyped-def]
    server = client.server
    sid = server.stream_id(current_stream_id())
    x = client.create(np.zeros(64, np.int32))
    client.launch(ADD_ONE, 1, [x], [64])  # queued, not submitted
    server.write(sid, x, memoryview(np.full(64, 10, np.int32)).cast("B"))  # must land after the launch
    client.launch(ADD_ONE, 1, [x], [64])
    np.testing.assert_array_equal(client.to_numpy(x, "i32"), np.full(64, 11, np.int32))
    # Unaligned and odd-sized writes go through the byte-copy kernel.
    b = client.create(bytes(64))
    server.write(sid, b.offset_start(3).offset_end(6), memoryview(b"abcdefg"))
    assert bytes(client.read_one(b)) == bytes(3) + b"abcdefg" + bytes(54)


def test_a_failed_batch_surfaces_at_flush_and_fails_its_reads(fresh_client) -> None:  # type: ignore[no-untyped-def]
    client = fresh_client
    server = client.server
    x = client.create(np.zeros(64, np.int32))
    sid = server.stream_id(current_stream_id())
    # A task whose pipeline is not a pipeline makes encoding fail.
    server.scheduler.register(sid, (wgpu_queue.DISPATCH, None, None, None, 1, 1, 1, ()))
    future = server.read_async([x], sid)
    with pytest.raises(LaunchError):
        future.result(timeout=30)
    with pytest.raises(LaunchError):
        client.flush()
    # The client keeps working.
    client.launch(ADD_ONE, 1, [x], [64])
    assert client.to_numpy(x, "i32").sum() == 64


def test_staging_buffers_are_pooled(client) -> None:  # type: ignore[no-untyped-def]
    x = client.create(np.arange(1000, dtype=np.float32))
    client.read_one(x)
    pool = client.server.queue.staging
    created = []
    original = pool.device.create_buffer

    def counting(**kw):  # type: ignore[no-untyped-def]
        created.append(kw)
        return original(**kw)

    pool.device = type("D", (), {"create_buffer": staticmethod(counting)})()
    try:
        for _ in range(20):
            client.read_one(x)
    finally:
        pool.device = client.server.gpu
    assert len(created) <= 1


def test_timestamp_markers(client) -> None:  # type: ignore[no-untyped-def]
    if not client.capabilities.device_timing:
        pytest.skip("the adapter has no timestamp-query feature")
    n = 1 << 18
    x = client.create(np.zeros(n, np.float32))
    # A pipeline's first dispatch is slow (H100, Vulkan: 0.90 ms, where the 20 after it took 0.13 ms
    # in all): warm it, or the small loop times that.
    client.launch(FILL, 1, [x], [1.0, 64])
    client.sync()
    _, small = client.profile(lambda: client.launch(FILL, 1, [x], [1.0, 64]))
    _, large = client.profile(lambda: [client.launch(FILL, n // 64, [x], [1.0, n]) for _ in range(20)])
    assert small.method == large.method == "device"
    assert large.seconds() > small.seconds() > 0


def test_system_timing_without_timestamp_queries(fresh_client) -> None:  # type: ignore[no-untyped-def]
    client = fresh_client
    client.server.queue.query_set = None  # as on an adapter without the timestamp-query feature
    x = client.create(np.zeros(64, np.int32))
    _, duration = client.profile(lambda: client.launch(ADD_ONE, 1, [x], [64]))
    assert duration.method == "system" and duration.seconds() > 0


def test_zero_size_bindings(client) -> None:  # type: ignore[no-untyped-def]
    from tests.backends.webgpu.kernels import NOOP

    empty = client.empty(0)
    client.launch(NOOP, 1, [empty], [])
    client.launch(ADD_ONE, 1, [empty], [0])
    assert bytes(client.read_one(empty)) == b"" and client.to_client(empty, client).size == 0
