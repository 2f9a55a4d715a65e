"""OpenCL transfer paths: uploads straight from staging arrays, pooled chunks, reads through staging."""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from cubeplug.backends.opencl import staging as staging_mod
from cubeplug.backends.opencl.devices import device_context
from cubeplug.backends.opencl.staging import StagingPool
from cubeplug.core.config import Config
from cubeplug.core.stream import current_stream_id
from tests.backends.opencl.conftest import requires_opencl

pytestmark = requires_opencl


def _data(size: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def _address(host: Any) -> int:
    return int(np.frombuffer(host, dtype=np.uint8).ctypes.data)


@contextlib.contextmanager
def gated(client: Any) -> Iterator[Any]:
    """Hold the calling thread's stream behind a user event until the block ends (or the gate opens)."""
    import pyopencl as cl

    server = client.server
    queue = server.multistream.streams.get(current_stream_id()).stream
    gate = cl.UserEvent(server.ctx.context)
    cl.enqueue_barrier(queue, wait_for=[gate])
    queue.flush()
    try:
        yield gate
    finally:
        open_gate(gate)


def open_gate(gate: Any) -> None:
    """Let the gated stream run."""
    import pyopencl as cl

    if gate.command_execution_status != cl.command_execution_status.COMPLETE:
        gate.set_status(cl.command_execution_status.COMPLETE)


class Spy:
    """Counts StagingPool.take calls (the snapshot path) and records the host side of each copy."""

    def __init__(self, client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        import pyopencl as cl

        server = client.server
        self.takes: list[int] = []
        self.chunks: list[Any] = []  # the buffers of the chunks taken
        self.allocations: list[int] = []
        self.hosts: list[tuple[int, int]] = []
        take, allocate, copy = server.staging.take, server.staging.allocate, server._copy

        def spy_take(nbytes: int) -> Any:
            self.takes.append(nbytes)
            chunk = take(nbytes)
            self.chunks.append(chunk.buffer)
            return chunk

        def spy_allocate(nbytes: int) -> Any:
            self.allocations.append(nbytes)
            return allocate(nbytes)

        def spy_copy(queue: Any, dst: Any, src: Any, **kw: Any) -> Any:
            host = src if isinstance(dst, cl.MemoryObjectHolder) else dst
            if not isinstance(host, cl.MemoryObjectHolder):
                self.hosts.append((_address(host), memoryview(host).nbytes))
            return copy(queue, dst, src, **kw)

        monkeypatch.setattr(server.staging, "take", spy_take)
        monkeypatch.setattr(server.staging, "allocate", spy_allocate)
        monkeypatch.setattr(server, "_copy", spy_copy)


# ---------------------------------------------------------------------------------------------- uploads
@pytest.mark.parametrize("size", [(64 << 10) + 12, (1 << 20) + 13, (8 << 20) + 1])
def test_staging_array_upload_makes_no_host_copy(client, monkeypatch, size) -> None:  # type: ignore[no-untyped-def]
    stage = client.reserve_staging([size])[0]
    stage[:] = _data(size)
    spy = Spy(client, monkeypatch)
    h = client.create(stage)
    view = stage[7 : size - 5]  # a view inside a staging array is copied straight from it too
    w = client.create(view)
    assert spy.takes == []  # no staging chunk: no snapshot
    assert spy.hosts == [(stage.ctypes.data, size), (stage.ctypes.data + 7, size - 12)]
    assert bytes(client.read_one(h)) == stage.tobytes()
    assert bytes(client.read_one(w)) == view.tobytes()


def test_staging_array_may_be_reused_once_create_returns(client) -> None:  # type: ignore[no-untyped-def]
    size = 1 << 20
    stage = client.reserve_staging([size])[0]
    expect = _data(size, 1)
    stage[:] = expect
    gates: list[Any] = []
    handles: list[Any] = []
    ready, finished = threading.Event(), threading.Event()

    def upload() -> None:
        with gated(client) as gate:
            gates.append(gate)
            ready.set()
            handles.append(client.create(stage))  # waits for the copy, which waits for the gate
            finished.set()

    worker = threading.Thread(target=upload)
    worker.start()
    try:
        assert ready.wait(30)
        time.sleep(0.3)
        assert not finished.is_set()  # the copy has not run: create has not returned
    finally:
        open_gate(gates[0])
        worker.join(60)
    assert finished.is_set()
    stage[:] = 0  # the copy completed when create returned: refilling the array changes nothing
    assert bytes(client.read_one(handles[0])) == expect.tobytes()


def test_small_staging_upload_is_snapshotted_without_waiting(client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    size = client.server.staging.direct_min - 1
    stage = client.reserve_staging([size])[0]
    expect = _data(size, 2)
    stage[:] = expect
    spy = Spy(client, monkeypatch)
    with gated(client):
        h = client.create(stage)  # returns at once although the stream cannot run yet
        stage[:] = 0
        assert spy.takes == [size]
    assert bytes(client.read_one(h)) == expect.tobytes()


def test_upload_chunk_is_held_until_its_copy_completed(client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    staging = client.server.staging
    staging.direct_pageable_min = None
    data = _data(5000, 3)
    spy = Spy(client, monkeypatch)

    def idle(buffer: Any) -> bool:
        return any(c.buffer is buffer for c in staging._free.get(8192, ()))

    with gated(client):
        h = client.create(data)  # returns at once: the upload was snapshotted
        data[:] = 0
        gc.collect()
        time.sleep(0.1)
        assert spy.takes == [5000] and not idle(spy.chunks[0])  # held until the copy ran
    client.server.sync_all()
    assert idle(spy.chunks[0])  # back in the pool once the copy completed
    assert bytes(client.read_one(h)) == _data(5000, 3).tobytes()


@pytest.mark.parametrize("size", [1, 4095, 4096, 3 * 4096 + 17, 9 * 4096 + 1])
def test_large_pageable_uploads_go_through_a_bounded_ring_of_pooled_chunks(client, monkeypatch, size) -> None:  # type: ignore[no-untyped-def]
    staging = client.server.staging
    staging.piece, staging.ring, staging.direct_pageable_min = 4096, 2, None
    data = _data(size, size)
    base = client.empty(size + 1024)
    dst = base.offset_start(512).offset_end(512)  # a view at an (aligned) offset
    spy = Spy(client, monkeypatch)
    client.server.write(current_stream_id(), dst, memoryview(data))
    client.server.sync_all()
    pieces = -(-size // 4096)
    assert len(spy.takes) == min(pieces, 2)  # never more chunks than the ring holds
    assert all(t <= 4096 for t in spy.takes)
    assert len(spy.hosts) == pieces
    first = len(spy.allocations)
    client.server.write(current_stream_id(), dst, memoryview(data[::-1].copy()))
    client.server.sync_all()
    assert len(spy.allocations) == first  # the second upload reused the pooled chunks
    got = client.read_one(base)
    assert bytes(got)[512 : 512 + size] == data[::-1].tobytes()


def test_big_pageable_upload_allocates_no_chunk_as_large(client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    staging = client.server.staging
    staging.direct_pageable_min = None
    size = staging.piece * staging.ring + (3 << 20) + 5
    data = _data(size, 4)
    spy = Spy(client, monkeypatch)
    h = client.create(data)
    assert max(spy.takes) <= staging.piece and len(spy.takes) <= staging.ring
    assert bytes(client.read_one(h)) == data.tobytes()


def test_pageable_upload_straight_on_host_memory_devices(client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    staging = client.server.staging
    unified = bool(client.server.ctx.limits["host_unified_memory"])
    expect = staging_mod.DIRECT_PAGEABLE_MIN if unified else None
    assert staging.direct_pageable_min == expect
    staging.direct_pageable_min = 1 << 20
    data = _data((1 << 20) + 3, 5)
    spy = Spy(client, monkeypatch)
    h = client.create(data)
    assert spy.takes == [] and spy.hosts == [(data.ctypes.data, data.nbytes)]
    assert bytes(client.read_one(h)) == data.tobytes()


# ---------------------------------------------------------------------------------------------- reads
def test_reads_through_staging_exact_at_odd_sizes_and_offsets(client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    staging = client.server.staging
    staging.read_max = 1 << 30
    data = _data(70001, 6)
    h = client.create(data)
    views = [
        h, h.offset_start(3), h.offset_start(257).offset_end(1001), h.offset_end(69999), h.offset_start(70001)
    ]
    expect = [data, data[3:], data[257:-1001], data[:2], data[70001:]]
    spy = Spy(client, monkeypatch)
    got = client.read(views)
    assert spy.takes == [sum(v.size for v in views)]  # one chunk for the whole read
    assert [bytes(g) for g in got] == [e.tobytes() for e in expect]
    assert all(isinstance(g, bytearray) for g in got)  # results own their bytes: the chunk went back
    chunk_size = 1 << (sum(v.size for v in views) - 1).bit_length()
    assert staging._free.get(chunk_size)  # the chunk is back in the pool before the result is seen


def test_read_async_holds_the_chunk_until_its_copies_completed(client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    staging = client.server.staging
    staging.read_max = 1 << 30
    data = _data(12345, 7)
    h = client.create(data)
    client.server.sync_all()
    spy = Spy(client, monkeypatch)

    def idle(buffer: Any) -> bool:
        return any(c.buffer is buffer for c in staging._free.get(16384, ()))

    with gated(client) as gate:
        future = client.read_async([h.offset_start(5)])  # returns at once: the stream is held
        time.sleep(0.2)
        assert not future.done()
        assert spy.takes == [12340] and not idle(spy.chunks[0])  # the pending read holds its chunk
        open_gate(gate)
        got = future.result(timeout=60)
        assert idle(spy.chunks[0])  # back in the pool before the result was set
    assert bytes(got[0]) == data[5:].tobytes()


def test_reads_above_the_threshold_go_straight_to_host_memory(client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    staging = client.server.staging
    staging.read_max = 4096
    a, b = _data(3000, 8), _data(2000, 9)
    ha, hb = client.create(a), client.create(b)
    spy = Spy(client, monkeypatch)
    got = client.read([ha, hb])  # 5000 B in all: above the threshold
    assert spy.takes == []
    assert [bytes(g) for g in got] == [a.tobytes(), b.tobytes()]
    got = client.read([ha])  # 3000 B: through a chunk
    assert spy.takes == [3000] and bytes(got[0]) == a.tobytes()


def test_read_threshold_follows_the_device_memory(client) -> None:  # type: ignore[no-untyped-def]
    unified = bool(client.server.ctx.limits["host_unified_memory"])
    expect = staging_mod.HOST_READ_STAGING_MAX if unified else staging_mod.READ_STAGING_MAX
    assert client.server.staging.read_max == expect
    size = expect + 1
    data = _data(size, 10)
    assert bytes(client.read_one(client.create(data))) == data.tobytes()


def test_a_staged_read_holds_its_chunk_until_released(client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``read_staged`` lands a view's bytes in a chunk on every device (``read_max`` aside), lends
    it until released (reads meanwhile take other chunks), then gives it back."""
    staging = client.server.staging
    staging.read_max = 0  # plain reads never go through a chunk: only the staged read's is seen
    data = _data(9000, 11)
    h = client.create(data)
    spy = Spy(client, monkeypatch)

    def idle(buffer: Any) -> bool:
        return any(c.buffer is buffer for c in staging._free.get(8192, ()))

    staged = client.server.read_staged(h.range(7, 8000), client.stream_id()).result(timeout=60)
    assert spy.takes == [8000] and bytes(staged.view) == data[7:8007].tobytes()
    assert not idle(spy.chunks[0])  # lent: not in the pool
    other = client.server.read_staged(h.range(1000, 5000), client.stream_id()).result(timeout=60)
    assert spy.chunks[1] is not spy.chunks[0]  # a second chunk: the first is still lent
    assert bytes(staged.view) == data[7:8007].tobytes()  # and still holds its bytes
    assert bytes(other.view) == data[1000:6000].tobytes()
    staged.release()
    gc.collect()
    assert idle(spy.chunks[0])  # back once released
    other.release()


# ---------------------------------------------------------------------------------------------- lent arrays
def test_lent_arrays_are_registered_while_mapped() -> None:
    pool = StagingPool(device_context(0, Config()))
    array = pool.lend(10000)
    assert array.nbytes == 10000
    assert pool.is_lent(memoryview(array)) and pool.is_lent(memoryview(array[100:200]))
    assert not pool.is_lent(memoryview(array.copy()))
    assert not pool.is_lent(memoryview(bytes(10)))
    other = pool.lend(4096)
    assert pool.is_lent(memoryview(other)) and len(pool._starts) == 2
    view = array[5:]
    del array
    gc.collect()
    assert pool.is_lent(memoryview(view))  # a view keeps the mapping, and the registration, alive
    del view, other
    gc.collect()
    assert pool._starts == [] and pool._lent == {}
    assert pool.lend(0).nbytes == 0 and pool._starts == []
