"""Downloads of the CUDA backend (issue 6): exact bytes on every path, one host copy, no zero fill.

Three paths: a read of at most ``READ_CHUNK`` bytes (one pinned block), a staged read split into
pinned chunks, and a read of more than ``SNAPSHOT_MIN`` bytes (or ``staging_max_bytes``) copied on
the device first and then by the driver straight into its result (what CuPy's ``ndarray.get()``
does), on the completer thread. The helpers of :mod:`cubeplug.backends.cuda.staging`
are tested on their own first. Server tests run on the fake runtime and on the GPU (marker ``gpu``)
unless they spy on the fake.
"""

from __future__ import annotations

import ctypes
import mmap
import threading
import tracemalloc
from typing import Any

import numpy as np
import pytest

from cubeplug import DeviceLostError, OutOfMemoryError
from cubeplug.backends.cuda import staging, transfers
from cubeplug.backends.cuda.staging import (
    MIN_BLOCK,
    Piece,
    PinnedBlock,
    StagedChunk,
    drain_chunks,
    plan_chunks,
)
from cubeplug.core import hostmem
from cubeplug.core.hostmem import HUGEPAGE_MIN, host_address, host_buffer, host_copy
from tests.backends.cuda.kernels import ADD_ONE


def no_zero_fill(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make ``bytearray(n)`` (a zero-filled buffer) fail in the staging and transfer modules."""
    filled: list[int] = []

    def spy(*args: Any) -> bytearray:
        if args and isinstance(args[0], int) and args[0] > 0:
            filled.append(args[0])
            raise AssertionError(f"bytearray({args[0]}) zero-fills a buffer that a copy overwrites")
        return bytearray(*args)

    monkeypatch.setattr(staging, "bytearray", spy, raising=False)
    monkeypatch.setattr(hostmem, "bytearray", spy, raising=False)
    monkeypatch.setattr(transfers, "bytearray", spy, raising=False)
    return filled


# ---------------------------------------------------------------------- host buffers
@pytest.mark.parametrize("n", [0, 1, 7, 4095, 4096, 4097, HUGEPAGE_MIN - 1, HUGEPAGE_MIN + 3])
def test_host_buffer_is_a_writable_bytearray_made_without_a_fill(monkeypatch, n) -> None:  # type: ignore[no-untyped-def]
    assert hostmem._new_bytearray is not None  # CPython: uninitialised bytearrays are available
    filled = no_zero_fill(monkeypatch)
    buf = host_buffer(n)
    assert type(buf) is bytearray and len(buf) == n and not filled
    if n:
        view = np.frombuffer(buf, dtype=np.uint8)
        assert view.flags.writeable
        view[:] = np.arange(n, dtype=np.uint64).astype(np.uint8)
        assert buf[-1] == (n - 1) % 256 and buf[0] == 0


def test_host_buffer_without_the_c_api_falls_back_to_bytearray(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(hostmem, "_new_bytearray", None)
    buf = host_buffer(100)
    assert type(buf) is bytearray and bytes(buf) == bytes(100)


def test_large_host_buffers_are_advised_for_huge_pages(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    calls: list[tuple[int, int, int]] = []
    monkeypatch.setattr(hostmem, "_madvise_fn", lambda a, n, advice: calls.append((a, n, advice)) or 0)
    small = host_buffer(HUGEPAGE_MIN - 1)
    assert calls == [] and len(small) == HUGEPAGE_MIN - 1
    n = HUGEPAGE_MIN + 12345
    buf = host_buffer(n)
    address = host_address(memoryview(buf))
    ((start, length, advice),) = calls
    assert advice == getattr(mmap, "MADV_HUGEPAGE", 14)
    assert start % 4096 == 0 and length % 4096 == 0 and length > 0
    assert address <= start < address + 4096 and start + length <= address + n
    assert address + n - (start + length) < 4096  # every whole page of the buffer


def test_advise_hugepages_really_calls_madvise_on_linux() -> None:
    if hostmem._madvise_fn is None:
        pytest.skip("no madvise on this platform")
    arr = np.empty(HUGEPAGE_MIN + 100, dtype=np.uint8)
    hostmem.advise_hugepages(arr.ctypes.data, arr.nbytes)  # must not raise, whatever THP says
    arr[:] = 1
    assert int(arr.sum()) == arr.nbytes


@pytest.mark.parametrize("n", [0, 1, 1000, HUGEPAGE_MIN + 5])
def test_host_copy_is_one_exact_copy(monkeypatch, n) -> None:  # type: ignore[no-untyped-def]
    src = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    out = host_copy(src)
    assert type(out) is bytearray and bytes(out) == src.tobytes()
    if n:
        src[0] ^= 0xFF
        assert out[0] != src[0]  # a copy, not a view


# ---------------------------------------------------------------------- chunk plans
def test_plan_chunks_example() -> None:
    plan = plan_chunks([5, 0, 7, 2], 4)
    assert plan == [
        (4, [Piece(0, 0, 0, 4)]),
        (4, [Piece(0, 4, 0, 1), Piece(2, 0, 1, 3)]),
        (4, [Piece(2, 3, 0, 4)]),
        (2, [Piece(3, 0, 0, 2)]),
    ]
    assert plan_chunks([0, 0], 4) == [] and plan_chunks([3], 8) == [(3, [Piece(0, 0, 0, 3)])]


@pytest.mark.parametrize("seed", range(20))
def test_plan_chunks_covers_every_byte_once(seed) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    sizes = [int(s) for s in rng.integers(0, 50, int(rng.integers(1, 8)))]
    chunk = int(rng.integers(1, 40))
    plan = plan_chunks(sizes, chunk)
    seen = [np.zeros(n, dtype=int) for n in sizes]
    for k, (nbytes, pieces) in enumerate(plan):
        assert 0 < nbytes <= chunk and (nbytes == chunk or k == len(plan) - 1)
        assert [p.into for p in pieces] == list(np.cumsum([0] + [p.nbytes for p in pieces])[:-1])
        assert sum(p.nbytes for p in pieces) == nbytes
        for p in pieces:
            assert p.nbytes > 0
            seen[p.item][p.at : p.at + p.nbytes] += 1
    assert all((s == 1).all() for s in seen)
    assert len(plan) == -(-sum(sizes) // chunk)


# ---------------------------------------------------------------------- draining chunks
class Blocks:
    """Host memory standing in for pinned blocks."""

    def __init__(self) -> None:
        self.keep: list[Any] = []

    def block(self, data: np.ndarray) -> PinnedBlock:
        buf = (ctypes.c_ubyte * max(MIN_BLOCK, data.nbytes))()
        self.keep.append(buf)
        block = PinnedBlock(ctypes.addressof(buf), len(buf))
        block.array[: data.nbytes] = data
        return block


def staged(sizes: list[int], chunk: int, data: list[np.ndarray], blocks: Blocks) -> list[StagedChunk]:
    """What the device's copies leave in the blocks of a staged read."""
    chunks = []
    for k, (nbytes, pieces) in enumerate(plan_chunks(sizes, chunk)):
        content = np.zeros(nbytes, dtype=np.uint8)
        for p in pieces:
            content[p.into : p.into + p.nbytes] = data[p.item][p.at : p.at + p.nbytes]
        chunks.append(StagedChunk(blocks.block(content), pieces, f"event{k}"))
    return chunks


@pytest.mark.parametrize("chunk", [1, 3, 64, 4096, 1 << 20])
def test_drain_chunks_rebuilds_each_result_with_one_copy_per_byte(monkeypatch, chunk) -> None:  # type: ignore[no-untyped-def]
    sizes = [1, 0, 4097, 3, 0, 9000, HUGEPAGE_MIN + 7]
    if chunk < 64:
        sizes = sizes[:6]  # keep the number of pieces small
    rng = np.random.default_rng(chunk)
    data = [rng.integers(0, 256, n, dtype=np.uint8) for n in sizes]
    blocks = Blocks()
    chunks = staged(sizes, chunk, data, blocks)
    filled = no_zero_fill(monkeypatch)
    log: list[str] = []
    made: list[int] = []
    real_buffer = staging.host_buffer

    def counted_buffer(n: int) -> bytearray:
        made.append(n)
        return real_buffer(n)

    monkeypatch.setattr(staging, "host_buffer", counted_buffer)
    names = {id(c.block): f"block{k}" for k, c in enumerate(chunks)}
    outs = drain_chunks(chunks, sizes, log.append, lambda b: log.append("give " + names[id(b)]))
    assert [bytes(o) for o in outs] == [d.tobytes() for d in data]
    assert all(type(o) is bytearray for o in outs) and not filled
    # A buffer is made once per result split over chunks (then filled piece by piece), and per
    # huge-page-sized whole result; smaller whole results are bytearray copies of the block.
    split = {p.item for c in chunks for p in c.pieces if p.nbytes != sizes[p.item]}
    whole_big = [i for i, n in enumerate(sizes) if n >= HUGEPAGE_MIN and i not in split]
    assert sorted(made) == sorted(sizes[i] for i in [*split, *whole_big])
    # The first event was waited for by the future; each later one just before its chunk is copied,
    # and each block goes back as soon as it was copied out.
    expect: list[str] = ["give block0"]
    for k in range(1, len(chunks)):
        expect += [f"event{k}", f"give block{k}"]
    assert log == expect


def test_drain_chunks_stops_at_a_failed_event() -> None:
    sizes = [10, 10, 10]
    data = [np.full(n, i, dtype=np.uint8) for i, n in enumerate(sizes)]
    blocks = Blocks()
    chunks = staged(sizes, 10, data, blocks)
    given: list[PinnedBlock] = []

    def wait(event: str) -> None:
        if event == "event1":
            raise DeviceLostError("the kernel before this read faulted")

    with pytest.raises(DeviceLostError):
        drain_chunks(chunks, sizes, wait, given.append)
    assert given == [chunks[0].block]  # the failed chunk and the later ones stay out of the pool


# ---------------------------------------------------------------------- through the server
def spy_copies(client: Any) -> list[tuple[int, int, int, int]]:
    """Record (dst, src, size, kind) of every copy the server queues."""
    server = client.server
    real = server._memcpy
    calls: list[tuple[int, int, int, int]] = []

    def memcpy(dst: int, src: int, size: int, kind: int, stream: int) -> None:
        calls.append((dst, src, size, kind))
        real(dst, src, size, kind, stream)

    server._memcpy = memcpy
    return calls


def views_end_to_end(client: Any, sizes: list[int], seed: int) -> tuple[np.ndarray, list[Any]]:
    """Random bytes in one allocation, and a view of it per size, laid end to end."""
    data = np.random.default_rng(seed).integers(0, 256, sum(sizes), dtype=np.uint8)
    whole = client.create(data)
    views, at = [], 0
    for n in sizes:
        views.append(whole.offset_start(at).offset_end(data.size - at - n))
        at += n
    return data, views


PATHS = {  # the pinned paths at every size the tests read (no device copy), then the device copy
    "one block": ({}, 1 << 30),
    "chunks": ({}, 1000),  # chunks of 1000 B: most results straddle chunk boundaries
    "device copy": ({"staging_max_bytes": 0}, None),  # every read past the staging limit
}


@pytest.fixture(params=list(PATHS))
def path_client(request, make_client, monkeypatch):  # type: ignore[no-untyped-def]
    options, chunk = PATHS[request.param]
    if chunk is not None:
        monkeypatch.setattr(transfers, "READ_CHUNK", chunk)
        monkeypatch.setattr(transfers, "SNAPSHOT_MIN", 1 << 30)
    return make_client(**options)


def test_reads_are_exact_at_odd_sizes_and_offsets(path_client) -> None:  # type: ignore[no-untyped-def]
    client = path_client
    data = np.random.default_rng(6).integers(0, 256, 12_345, dtype=np.uint8)
    h = client.create(data)
    cases = [(0, 0), (1, 0), (0, 1), (3, 5), (999, 1001), (1000, 1000), (4097, 17), (12_344, 0)]
    views = [h.offset_start(a).offset_end(b) for a, b in cases]
    expect = [data[a : data.size - b].tobytes() for a, b in cases]
    for view, want in zip(views, expect, strict=True):
        got = client.read_one(view)
        assert type(got) is bytearray and bytes(got) == want
    empty = h.offset_start(12_345)
    got_all = client.read([*views, empty, views[3]])
    assert [bytes(g) for g in got_all] == [*expect, b"", expect[3]]
    assert len({id(g) for g in got_all}) == len(got_all)  # distinct, independent results
    np.testing.assert_array_equal(client.to_numpy(h, "u8"), data)


def test_reads_past_the_huge_page_threshold_are_exact(path_client) -> None:  # type: ignore[no-untyped-def]
    client = path_client
    n = HUGEPAGE_MIN + 4099
    data = np.random.default_rng(7).integers(0, 256, n, dtype=np.uint8)
    h = client.create(data)
    got = client.read([h.offset_start(3), h.offset_start(5).offset_end(7)])
    assert bytes(got[0]) == data[3:].tobytes() and bytes(got[1]) == data[5:-7].tobytes()


def test_reads_come_after_the_streams_earlier_work(path_client) -> None:  # type: ignore[no-untyped-def]
    client = path_client
    n = 3000
    h = client.create(np.arange(n, dtype=np.int32))
    for _ in range(3):
        client.launch(ADD_ONE, -(-n // 256), [h], [n])
    fut = client.read_async([h, h.offset_start(4 * 1001)])
    np.testing.assert_array_equal(np.frombuffer(fut.result()[0], np.int32), np.arange(n) + 3)
    np.testing.assert_array_equal(np.frombuffer(fut.result()[1], np.int32), np.arange(1001, n) + 3)


@pytest.mark.parametrize(
    "options, chunk",
    [({}, None), ({}, 1 << 20), ({"staging_max_bytes": 0}, None)],
    ids=["device copy", "1 MiB chunks", "device copy below the staging limit"],
)
def test_a_read_allocates_one_host_copy_of_its_bytes(make_client, monkeypatch, options, chunk) -> None:  # type: ignore[no-untyped-def]
    if chunk is not None:  # pinned chunks: the read stays below the device-copy threshold
        monkeypatch.setattr(transfers, "READ_CHUNK", chunk)
        monkeypatch.setattr(transfers, "SNAPSHOT_MIN", 1 << 30)
    client = make_client(**options)
    n = 2 * HUGEPAGE_MIN + 1
    h = client.create(np.ones(n, dtype=np.uint8))
    client.read_one(h)  # warm up: pinned blocks, threads
    tracemalloc.start()
    try:
        got = client.read_one(h)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(got) == n
    assert peak < 1.25 * n, f"a read of {n} B peaked at {peak} B of host allocations"


def test_the_driver_path_copies_straight_into_the_results(mode, make_client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    client = make_client(staging_max_bytes="1MiB")
    sizes = [(1 << 20) + 1, HUGEPAGE_MIN + 3, 0, 5]
    data, views = views_end_to_end(client, sizes, seed=8)
    filled = no_zero_fill(monkeypatch)
    calls = spy_copies(client)
    got = client.read(views)
    d2h = [c for c in calls if c[3] == 2]
    nonempty = [i for i, n in enumerate(sizes) if n]
    # One device-to-host copy per non-empty handle, into the very bytearray that is returned.
    assert [(dst, size) for dst, _, size, _ in d2h] == [
        (host_address(memoryview(got[i])), sizes[i]) for i in nonempty
    ]
    assert not any(client.server.pinned.contains(dst, 1) for dst, *_ in d2h)
    assert not filled and all(type(g) is bytearray for g in got)
    at = 0
    for g, n in zip(got, sizes, strict=True):
        assert bytes(g) == data[at : at + n].tobytes()
        at += n
    # to_numpy over such a read is a view of the result: the driver's copy is the only host write.
    calls.clear()
    arr = client.to_numpy(views[1], "u8")
    ((dst, _, _, _),) = [c for c in calls if c[3] == 2]
    assert arr.ctypes.data == dst and arr.flags.writeable


def test_a_large_read_snapshots_the_bytes_and_downloads_them_outside_the_lock(mode, make_client) -> None:  # type: ignore[no-untyped-def]
    client = make_client(staging_max_bytes="64KiB")
    n = 1 << 18
    h = client.create(np.arange(n, dtype=np.int32))
    before = client.memory_usage().number_allocs
    gate = threading.Event()
    client.server._completer.submit(_Blocker(gate))  # the completer thread waits: no download yet
    calls = spy_copies(client)
    fut = client.read_async([h, h.offset_start(4 * 1000)])
    assert [(size, kind) for _, _, size, kind in calls] == [(4 * n, 3), (4 * (n - 1000), 3)], (
        "under the lock, only device copies"
    )
    client.launch(ADD_ONE, -(-n // 256), [h], [n])  # queued after the read: not in its bytes
    assert not fut.done() and client.memory_usage().number_allocs == before + 1  # the device copy
    gate.set()
    got = fut.result(timeout=30)
    np.testing.assert_array_equal(np.frombuffer(got[0], np.int32), np.arange(n))
    np.testing.assert_array_equal(np.frombuffer(got[1], np.int32), np.arange(1000, n))
    assert [(size, kind) for _, _, size, kind in calls[2:]] == [(4 * n, 2), (4 * (n - 1000), 2)]
    assert client.memory_usage().number_allocs == before, "the copy is given back after the download"
    np.testing.assert_array_equal(client.to_numpy(h, "i32"), np.arange(n) + 1)


@pytest.mark.parametrize("limit, pinned", [("64KiB", False), ("64MiB", True)])
def test_a_large_read_without_room_for_its_device_copy(mode, make_client, monkeypatch, limit, pinned) -> None:  # type: ignore[no-untyped-def]
    # Up to staging_max_bytes through pinned memory (still asynchronous); beyond, the driver's way.
    client = make_client(staging_max_bytes=limit)
    data = np.random.default_rng(11).integers(0, 256, (4 << 20) + 3, dtype=np.uint8)
    h = client.create(data)
    server = client.server

    def full(nbytes: int, stream_id: int) -> Any:
        raise OutOfMemoryError(nbytes, in_use=0, reserved=0, limit=None)

    monkeypatch.setattr(server, "empty", full)
    calls = spy_copies(client)
    assert bytes(client.read_one(h)) == data.tobytes()
    d2h = [(dst, size) for dst, _, size, kind in calls if kind == 2]
    assert d2h and all(server.pinned.contains(dst, size) == pinned for dst, size in d2h)


class _Blocker:
    """A completer task that holds the completer thread until ``gate`` is set."""

    def __init__(self, gate: threading.Event) -> None:
        self.gate = gate

    def resolve(self) -> None:
        assert self.gate.wait(30)


def test_staged_reads_go_through_pinned_chunks_with_an_event_each(mode, make_client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(transfers, "READ_CHUNK", 4096)
    client = make_client()
    server = client.server
    sizes = [5000, 1, 0, 9000]
    data, views = views_end_to_end(client, sizes, seed=9)
    filled = no_zero_fill(monkeypatch)
    calls = spy_copies(client)
    flushes: list[Any] = []
    real_flush = server.streams.flush
    monkeypatch.setattr(server.streams, "flush", lambda s: flushes.append(real_flush(s)) or flushes[-1])
    got = client.read(views)
    chunks = -(-sum(sizes) // 4096)
    d2h = [c for c in calls if c[3] == 2]
    assert all(server.pinned.contains(dst, size) for dst, _, size, _ in d2h)
    assert sum(size for _, _, size, _ in d2h) == sum(sizes)
    assert len(flushes) == chunks  # one event per chunk, nothing else recorded
    assert not filled
    at = 0
    for g, n in zip(got, sizes, strict=True):
        assert type(g) is bytearray and bytes(g) == data[at : at + n].tobytes()
        at += n


def test_a_small_read_is_one_copy_one_block_one_event(make_client, mode, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    client = make_client()
    server = client.server
    h = client.create(np.arange(1024, dtype=np.uint32).view(np.uint8)[:1024])
    client.sync()  # the upload's pinned block is free again
    client.read_one(h)  # warm up the pool
    idle = server.pinned.idle_bytes()
    calls = spy_copies(client)
    flushes: list[Any] = []
    real_flush = server.streams.flush
    monkeypatch.setattr(server.streams, "flush", lambda s: flushes.append(real_flush(s)) or flushes[-1])
    advised: list[int] = []
    monkeypatch.setattr(hostmem, "_madvise_fn", lambda a, n, advice: advised.append(n) or 0)
    got = client.read_one(h)
    assert bytes(got) == np.arange(1024, dtype=np.uint32).view(np.uint8)[:1024].tobytes()
    ((dst, _, size, kind),) = calls
    assert kind == 2 and size == 1024 and server.pinned.contains(dst, 1024)
    assert len(flushes) == 1 and advised == []
    assert server.pinned.idle_bytes() == idle  # the block went back, no new one


# ---------------------------------------------------------------------- fake only: the waiter and errors
@pytest.mark.parametrize("chunk", [None, 1000])
def test_read_async_returns_before_the_device_finished(monkeypatch, make_client, mode, chunk) -> None:  # type: ignore[no-untyped-def]
    if mode != "fake":
        pytest.skip("holds the fake's events back")
    if chunk is not None:
        monkeypatch.setattr(transfers, "READ_CHUNK", chunk)
    client = make_client()
    server = client.server
    data = np.random.default_rng(10).integers(0, 256, 5000, dtype=np.uint8)
    h = client.create(data)
    release = threading.Event()
    waited: list[Any] = []
    real_wait = server.streams.wait_event_sync

    def held_wait(event: Any) -> None:
        waited.append(event)
        assert release.wait(10)
        real_wait(event)

    monkeypatch.setattr(server.streams, "wait_event_sync", held_wait)
    calls = spy_copies(client)
    fut = client.read_async([h])  # returns with every copy queued, none of the results built
    assert not fut.done()
    assert sum(size for _, _, size, kind in calls if kind == 2) == data.size
    release.set()
    assert bytes(fut.result(timeout=10)[0]) == data.tobytes()
    assert len(waited) == (1 if chunk is None else 5)


def test_a_failing_copy_is_a_cubeplug_error_and_blocks_go_back(monkeypatch, make_client, mode) -> None:  # type: ignore[no-untyped-def]
    if mode != "fake":
        pytest.skip("injects a CUDA error")
    monkeypatch.setattr(transfers, "READ_CHUNK", 4096)
    client = make_client()
    server = client.server
    h = client.create(np.zeros(3 * 4096, dtype=np.uint8))
    real = server._memcpy
    count = [0]

    def failing(dst: int, src: int, size: int, kind: int, stream: int) -> None:
        count[0] += kind == 2
        if kind == 2 and count[0] == 2:
            raise server._rt.CUDARuntimeError(700)
        real(dst, src, size, kind, stream)

    server._memcpy = failing
    before = server.pinned.idle_bytes()
    with pytest.raises(DeviceLostError, match="device-to-host copy"):
        client.read_one(h)
    assert server.pinned.idle_bytes() == before + 2 * 4096  # both blocks taken came back
    server._memcpy = real
    assert bytes(client.read_one(h)) == bytes(3 * 4096)


@pytest.mark.parametrize("path", ["one block", "staged"])
def test_a_failing_copy_into_one_block_gives_the_block_back(monkeypatch, make_client, mode, path) -> None:  # type: ignore[no-untyped-def]
    """A small read (two handles: the second copy fails) and a staged read share the one-block copy:
    either way the CUDA error is a cubeplug error and the block returns to the pool."""
    if mode != "fake":
        pytest.skip("injects a CUDA error")
    client = make_client()
    server = client.server
    a, b = client.create(np.ones(1000, dtype=np.uint8)), client.create(np.ones(24, dtype=np.uint8))
    client.read([a, b])  # warm up the pool: the 1 KiB block is idle now
    client.sync()
    real = server._memcpy
    count = [0]

    def failing(dst: int, src: int, size: int, kind: int, stream: int) -> None:
        count[0] += kind == 2
        if kind == 2 and count[0] == (2 if path == "one block" else 1):
            raise server._rt.CUDARuntimeError(700)
        real(dst, src, size, kind, stream)

    server._memcpy = failing
    before = server.pinned.idle_bytes()
    with pytest.raises(DeviceLostError, match="device-to-host copy"):
        if path == "one block":
            client.read([a, b])
        else:
            server.read_staged(a, client.stream_id())
    assert server.pinned.idle_bytes() == before  # the block taken came back
    server._memcpy = real
    assert [bytes(x) for x in client.read([a, b])] == [bytes([1]) * 1000, bytes([1]) * 24]
