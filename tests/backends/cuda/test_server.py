"""Behaviour of the CUDA backend through ComputeClient: every client call, every dtype, bad inputs.

Each test runs twice: on the fake runtime (any machine) and on the GPU (marker ``gpu``; skipped with
the reason when CuPy or a device is missing).
"""

from __future__ import annotations

import gc
import threading
from concurrent.futures import Future

import numpy as np
import pytest

from cubeplug import BufferTooBig, CompileError, CubeCount, OutOfMemoryError, ValidationError
from cubeplug.core.kernel import DTYPES
from cubeplug.core.stream import current_stream_id
from tests.backends.cuda.kernels import (
    ADD_ONE,
    AXPY,
    BROKEN,
    COPY4,
    COUNT,
    ENTRY,
    FILL,
    MIXED,
    NATIVE,
    NO_ENTRY,
    WRITE_COUNT,
    bump_kernel,
    store_kernel,
)
from tests.backends.sync_stall import assert_sync_does_not_stall


def f32(*v: float) -> np.ndarray:
    return np.array(v, dtype=np.float32)


def blocks(n: int, per: int) -> int:
    return max(1, -(-n // per))


# ---------------------------------------------------------------------- identity
def test_properties_name_the_device(client) -> None:  # type: ignore[no-untyped-def]
    props = client.properties
    for key in (
        "sm_count",
        "compute_capability",
        "shared_memory_per_block",
        "max_threads_per_block",
        "warp_size",
        "total_memory",
        "driver_version",
        "runtime_version",
        "max_page_size",
        "launch_path",
        "pitch_alignment",
    ):
        assert key in props, key
    assert client.backend == "cuda"
    assert client.device.index == 0 and client.device.vendor == "NVIDIA"
    assert props["max_page_size"] <= props["total_memory"] // 4 + 1
    caps = client.capabilities
    assert caps.device_timing and caps.staging and caps.pitched_tensors and caps.multi_queue
    assert set(caps.dtypes) == set(DTYPES)


# ---------------------------------------------------------------------- memory and transfers
@pytest.mark.parametrize("size", [0, 1, 3, 4095, (1 << 20) + 1])
def test_create_read_round_trip(client, size) -> None:  # type: ignore[no-untyped-def]
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    h = client.create(data)
    assert h.size == size
    assert bytes(client.read_one(h)) == data


def test_create_accepts_arrays_bytes_and_memoryviews(client) -> None:  # type: ignore[no-untyped-def]
    arr = np.arange(12, dtype=np.float64).reshape(3, 4).T
    h = client.create(arr)
    np.testing.assert_array_equal(client.to_numpy(h, "f64", (4, 3)), arr)
    assert bytes(client.read_one(client.create(bytearray(b"abc")))) == b"abc"
    assert bytes(client.read_one(client.create(memoryview(b"xyz")))) == b"xyz"


def test_create_copies_at_call_time(client) -> None:  # type: ignore[no-untyped-def]
    arr = f32(1, 2, 3)
    h = client.create(arr)
    arr[:] = 0
    np.testing.assert_array_equal(client.to_numpy(h, "f32"), [1, 2, 3])


def test_read_many_async_and_callbacks(client) -> None:  # type: ignore[no-untyped-def]
    a, b, empty = client.create(b"aa"), client.create(b"bbb"), client.empty(0)
    assert [bytes(x) for x in client.read([a, b, empty])] == [b"aa", b"bbb", b""]
    fut = client.read_async([b])
    assert isinstance(fut, Future)
    seen = threading.Event()
    fut.add_done_callback(lambda f: seen.set())
    assert bytes(fut.result(timeout=30)[0]) == b"bbb"
    assert seen.wait(30)


def test_large_transfers_skip_staging(make_client) -> None:  # type: ignore[no-untyped-def]
    client = make_client(staging_max_bytes="1MiB")
    data = np.random.default_rng(0).integers(0, 256, 3 << 20, dtype=np.uint8)
    h = client.create(data)
    np.testing.assert_array_equal(np.frombuffer(client.read_one(h), np.uint8), data)


def test_views_with_offsets(client) -> None:  # type: ignore[no-untyped-def]
    h = client.create(bytes(range(100)))
    v = h.offset_start(16).offset_end(20)
    assert bytes(client.read_one(v)) == bytes(range(16, 80))
    copy = client.to_client(v.offset_start(16), client)  # a device copy of a view
    assert bytes(client.read_one(copy)) == bytes(range(32, 80))


def test_memory_usage_cleanup_and_persistent(mode, client) -> None:  # type: ignore[no-untyped-def]
    before = client.memory_usage()
    handles = [client.empty(64 << 20) for _ in range(3)]
    mid = client.memory_usage()
    assert mid.bytes_in_use >= before.bytes_in_use + 3 * (64 << 20)
    assert mid.bytes_reserved >= mid.bytes_in_use
    del handles
    gc.collect()
    client.memory_cleanup()
    after = client.memory_usage()
    assert after.bytes_reserved < mid.bytes_reserved
    if mode == "fake":
        import cupy

        assert cupy.cuda.runtime.frees > 0
    with client.persistent_memory(), client.persistent_memory():
        p = client.create(f32(1, 2))
    np.testing.assert_array_equal(client.to_numpy(p, "f32"), [1, 2])


def test_reserve_staging_is_pinned_and_uploads(mode, client) -> None:  # type: ignore[no-untyped-def]
    import cupy

    bufs = client.reserve_staging([16, 1 << 20, 0])
    assert [b.nbytes for b in bufs] == [16, 1 << 20, 0]
    attrs = cupy.cuda.runtime.pointerGetAttributes(bufs[1].ctypes.data)
    assert int(attrs.type) == 1  # cudaMemoryTypeHost: page-locked
    bufs[1][:] = np.arange(1 << 20, dtype=np.uint64).astype(np.uint8)
    expect = bufs[1].copy()
    h = client.create(bufs[1])
    bufs[1][:] = 0  # the staging buffer may be reused once create returned
    np.testing.assert_array_equal(np.frombuffer(client.read_one(h), np.uint8), expect)
    with pytest.raises(ValidationError):
        client.reserve_staging([-1])
    del bufs
    gc.collect()
    client.memory_cleanup()


# ---------------------------------------------------------------------- launches
def test_fill_and_axpy_checked_and_unchecked(client) -> None:  # type: ignore[no-untyped-def]
    n = 1000
    y = client.empty(4 * n)
    client.launch(FILL, CubeCount(blocks(n, 256)), [y], [1.5, n])
    x = client.create(np.arange(n, dtype=np.float32))
    client.launch_unchecked(AXPY, blocks(n, 128), [x, y], [2.0, n])
    np.testing.assert_array_equal(client.to_numpy(y, "f32"), 1.5 + 2 * np.arange(n, dtype=np.float32))


def test_buffers_bind_with_their_offsets(client) -> None:  # type: ignore[no-untyped-def]
    base = client.create(np.zeros(64, dtype=np.float32))
    view = base.offset_start(64).offset_end(64)  # elements 16..47
    client.launch(FILL, 1, [view], [3.0, 32])
    out = client.to_numpy(base, "f32")
    np.testing.assert_array_equal(out[16:48], 3.0)
    assert out[:16].sum() == 0 and out[48:].sum() == 0


def test_unaligned_offset_is_refused_and_nothing_breaks(client) -> None:  # type: ignore[no-untyped-def]
    h = client.create(np.arange(16, dtype=np.float32))
    with pytest.raises(ValidationError, match="16 B"):
        client.launch(FILL, 1, [h.offset_start(4)], [0.0, 1])
    np.testing.assert_array_equal(client.to_numpy(h, "f32"), np.arange(16))


@pytest.mark.parametrize("dt", sorted(DTYPES))
def test_every_dtype_as_scalar_and_buffer(client, dt) -> None:  # type: ignore[no-untyped-def]
    np_dt = DTYPES[dt]
    n = 100
    value = np_dt.type(True) if dt == "bool" else np_dt.type(5)
    out = client.empty(n * np_dt.itemsize)
    client.launch(store_kernel(dt), blocks(n, 64), [out], [value, n])
    got = client.to_numpy(out, np_dt)
    np.testing.assert_array_equal(got, np.full(n, value, dtype=np_dt))
    client.launch(bump_kernel(dt), blocks(n, 64), [out], [n])
    expect = np.full(n, False) if dt == "bool" else np.full(n, 6, dtype=np_dt)
    np.testing.assert_array_equal(client.to_numpy(out, np_dt), expect.astype(np_dt))


def test_scalars_keep_declared_order(client) -> None:  # type: ignore[no-untyped-def]
    out, out2 = client.empty(8), client.empty(16)
    client.launch(MIXED, 1, [out, out2], [2.5, -(2**40), 200])
    assert client.to_numpy(out, "f64")[0] == 2.5
    np.testing.assert_array_equal(client.to_numpy(out2, "i64"), [-(2**40), 200])


def test_vector_and_atomic_buffers(client) -> None:  # type: ignore[no-untyped-def]
    src = client.create(np.arange(64, dtype=np.float32))
    dst = client.empty(64 * 4)
    client.launch(COPY4, 1, [src, dst], [16])
    np.testing.assert_array_equal(client.to_numpy(dst, "f32"), np.arange(64))
    counter = client.create(np.zeros(1, dtype=np.uint32))
    client.launch(COUNT, 8, [counter], [1000])
    assert client.to_numpy(counter, "u32")[0] == 1000


def test_native_cuda_dialect_defines_and_entry(client) -> None:  # type: ignore[no-untyped-def]
    x = client.create(f32(1, 2, 3))
    client.launch(NATIVE, 1, [x], [3.0, 3])
    np.testing.assert_array_equal(client.to_numpy(x, "f32"), [6, 12, 18])
    y = client.create(np.zeros(5, dtype=np.int32))
    client.launch(ENTRY, 1, [y], [5])
    np.testing.assert_array_equal(client.to_numpy(y, "i32"), 7)


def test_compile_error_has_log_and_line_and_client_survives(client) -> None:  # type: ignore[no-untyped-def]
    h = client.create(f32(1))
    with pytest.raises(CompileError) as info:
        client.launch(BROKEN, 1, [h])
    err = info.value
    assert err.backend == "cuda" and err.kernel == "broken"
    assert "COMPILE_ERROR_HERE" in err.log
    assert err.line is not None and "COMPILE_ERROR_HERE" in err.source.splitlines()[err.line - 1]
    assert "COMPILE_ERROR_HERE" in err.dump()
    with pytest.raises(CompileError, match="no kernel named 'missing'"):
        client.launch(NO_ENTRY, 1, [h])
    client.launch(FILL, 1, [h], [4.0, 1])
    assert client.to_numpy(h, "f32")[0] == 4.0


def test_dynamic_and_empty_counts(client) -> None:  # type: ignore[no-untyped-def]
    out = client.create(np.zeros(3, dtype=np.uint32))
    count = client.create(np.array([3, 2, 1], dtype=np.uint32))
    client.launch(WRITE_COUNT, CubeCount.dynamic(count), [out])
    np.testing.assert_array_equal(client.to_numpy(out, "u32"), [3, 2, 1])
    zero = client.create(np.array([0, 4, 1], dtype=np.uint32))
    marker = client.create(np.full(3, 9, dtype=np.uint32))
    client.launch(WRITE_COUNT, CubeCount.dynamic(zero), [marker])
    client.launch(WRITE_COUNT, CubeCount(0, 5), [marker])
    np.testing.assert_array_equal(client.to_numpy(marker, "u32"), [9, 9, 9])


def test_300_chained_launches_are_exact(client) -> None:  # type: ignore[no-untyped-def]
    n = 4096
    x = client.create(np.zeros(n, dtype=np.int32))
    for _ in range(300):
        client.launch(ADD_ONE, blocks(n, 256), [x], [n])
    np.testing.assert_array_equal(client.to_numpy(x, "i32"), 300)


def test_flush_sync_and_profile(client) -> None:  # type: ignore[no-untyped-def]
    x = client.create(np.zeros(1 << 16, dtype=np.int32))
    client.launch(ADD_ONE, 256, [x], [1 << 16])
    client.flush()
    client.sync()
    client.sync(all_streams=True)
    _, duration = client.profile(lambda: client.launch(ADD_ONE, 256, [x], [1 << 16]))
    assert duration.method == "device" and duration.seconds() >= 0
    assert int(client.to_numpy(x, "i32")[7]) == 2


def test_grid_beyond_the_device_is_a_validation_error_and_client_survives(client) -> None:  # type: ignore[no-untyped-def]
    out = client.create(np.zeros(3, dtype=np.uint32))
    with pytest.raises(ValidationError, match="exceeds"):  # checked against max_cube_count (issue 17)
        client.launch(WRITE_COUNT, CubeCount(1, 70000), [out])
    client.launch(WRITE_COUNT, CubeCount(2), [out])
    np.testing.assert_array_equal(client.to_numpy(out, "u32"), [2, 1, 1])


# ---------------------------------------------------------------------- bad inputs and limits
def test_unchecked_launches_refuse_values_that_do_not_pack(client) -> None:  # type: ignore[no-untyped-def]
    keep = client.create(f32(1, 2, 3, 4))
    client.launch_unchecked(FILL, 1, [keep], [5.0, 1])  # builds the unchecked plan
    for values in (["x", 1], [1.0, -1], [np.ones(3), 1], [1.0, 2**40]):
        with pytest.raises(ValidationError, match="kernel arguments"):
            client.launch_unchecked(FILL, 1, [keep], values)
    client.launch_unchecked(FILL, 1, [keep], [np.float32(7.0), np.uint32(2)])  # numpy scalars as given
    np.testing.assert_array_equal(client.to_numpy(keep, "f32"), [7, 7, 3, 4])


def test_bad_inputs_keep_other_handles_intact(client, make_client) -> None:  # type: ignore[no-untyped-def]
    keep = client.create(f32(1, 2, 3, 4))
    other = make_client().create(f32(0))
    dropped = client.create(f32(0))
    dropped.drop()
    bad = [
        lambda: client.launch(FILL, 1, [], [1.0, 1]),  # missing buffer
        lambda: client.launch(FILL, 1, [client.create(b"abc")], [1.0, 1]),  # not whole f32s
        lambda: client.launch(FILL, 1, [other], [1.0, 1]),  # another client's handle
        lambda: client.launch(FILL, 1, [dropped], [1.0, 1]),
        lambda: client.launch(FILL, 1, [keep], ["x", 1]),  # bad scalar
        lambda: client.launch(FILL, 1, [keep], [1.0, -1]),
        lambda: client.create([1, 2, 3]),
        lambda: client.empty(-1),
        lambda: client.read([object()]),
    ]
    for call in bad:
        with pytest.raises(ValidationError):
            call()
    np.testing.assert_array_equal(client.to_numpy(keep, "f32"), [1, 2, 3, 4])
    client.launch(FILL, 1, [keep], [9.0, 2])
    np.testing.assert_array_equal(client.to_numpy(keep, "f32"), [9, 9, 3, 4])


def test_allocation_beyond_the_device_maximum(client) -> None:  # type: ignore[no-untyped-def]
    biggest = client.properties["max_page_size"]
    with pytest.raises(BufferTooBig):
        client.empty(biggest + 1)
    h = client.create(f32(5))
    assert client.to_numpy(h, "f32")[0] == 5


def test_out_of_memory_reports_and_recovers(mode, client) -> None:  # type: ignore[no-untyped-def]
    page = client.properties["max_page_size"]
    size = page - (1 << 20)
    held = []
    with pytest.raises(OutOfMemoryError) as info:
        for _ in range(64):
            held.append(client.empty(size))
    err = info.value
    assert err.requested == size and err.device_total and err.device_free is not None
    assert err.device_free <= err.device_total <= client.properties["total_memory"] * 1.01
    assert "requested" in str(err) and "memory_cleanup" in str(err)
    del held
    gc.collect()
    client.memory_cleanup()
    h = client.empty(size)
    assert h.size == size


def test_memory_limit_is_honoured(make_client) -> None:  # type: ignore[no-untyped-def]
    client = make_client(memory_limit=32 << 20)
    keep = [client.empty(8 << 20)]
    with pytest.raises(OutOfMemoryError):
        for _ in range(16):
            keep.append(client.empty(8 << 20))


# ---------------------------------------------------------------------- streams and threads
def test_explicit_streams_and_cross_stream_reads(client) -> None:  # type: ignore[no-untyped-def]
    n = 1 << 14
    x = client.create(np.zeros(n, dtype=np.int32))
    with client.stream():
        for _ in range(10):
            client.launch(ADD_ONE, blocks(n, 256), [x], [n])
        with client.stream():
            np.testing.assert_array_equal(client.to_numpy(x, "i32"), 10)  # waits for the other stream
    client.launch(ADD_ONE, blocks(n, 256), [x], [n])
    np.testing.assert_array_equal(client.to_numpy(x, "i32"), 11)


@pytest.mark.parametrize("threads", [4])
def test_threads_chain_kernels_with_cross_stream_reads(mode, client, threads) -> None:  # type: ignore[no-untyped-def]
    iterations = 1000 if mode == "gpu" else 60
    n = 1 << 12
    handles = [client.create(np.zeros(n, dtype=np.int32)) for _ in range(threads)]
    mismatches: list[str] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads)

    def work(i: int) -> None:
        try:
            barrier.wait(timeout=120)
            mine = handles[i]
            for it in range(1, iterations + 1):
                client.launch(ADD_ONE, blocks(n, 256), [mine], [n])
                if it % 50 == 0:
                    got = client.to_numpy(mine, "i32")
                    if not (got == it).all():
                        mismatches.append(f"thread {i} iteration {it}: {got[:4]}")
                    peer = client.to_numpy(handles[(i + 1) % threads], "i32")  # another stream's buffer
                    if not ((peer == peer[0]).all() and 0 <= peer[0] <= iterations):
                        mismatches.append(f"thread {i} saw a torn peer buffer at {it}")
        except BaseException as e:
            errors.append(e)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(300)
    assert not errors, errors
    assert mismatches == []
    for h in handles:
        np.testing.assert_array_equal(client.to_numpy(h, "i32"), iterations)


# ---------------------------------------------------------------------- tensors
def test_pitched_tensors_round_trip(client) -> None:  # type: ignore[no-untyped-def]
    arr = np.arange(5 * 100, dtype=np.float32).reshape(5, 100)
    t = client.create_tensor(arr)
    assert t.strides == (128, 1) and not t.is_contiguous
    np.testing.assert_array_equal(client.read_tensor(t), arr)
    cube = np.arange(2 * 3 * 5, dtype=np.int16).reshape(2, 3, 5)
    t3 = client.create_tensor(cube)
    assert t3.strides == (24, 8, 1)
    np.testing.assert_array_equal(client.read_tensor(t3), cube)
    column = np.arange(7, dtype=np.float64).reshape(7, 1)
    assert client.create_tensor(column).is_contiguous
    e = client.empty_tensor((3, 10), "f32")
    assert e.strides == (16, 1) and e.handle.size >= (2 * 16 + 10) * 4
    aligned = client.create_tensor(np.ones((4, 128), dtype=np.float32))
    assert aligned.is_contiguous


def test_pitched_tensor_kernel_and_strided_read(client) -> None:  # type: ignore[no-untyped-def]
    from tests.backends.cuda.kernels import SCALE2D

    rows, cols = 37, 50
    arr = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    t = client.create_tensor(arr)
    pitch = t.strides[0]
    client.launch(
        SCALE2D, CubeCount(blocks(cols, 16), blocks(rows, 16)), [t.handle], [rows, cols, pitch, 2.0]
    )
    np.testing.assert_array_equal(client.read_tensor(t), arr * 2)
    server = client.server
    with client._lock:
        fut = server.read_tensor_async(t, server.stream_id(current_stream_id()))
    np.testing.assert_array_equal(fut.result(timeout=30), arr * 2)


def test_no_pitching_when_turned_off(make_client) -> None:  # type: ignore[no-untyped-def]
    client = make_client(pitch_alignment=0)
    t = client.create_tensor(np.ones((3, 5), dtype=np.float32))
    assert t.is_contiguous


# ---------------------------------------------------------------------- between clients
def test_to_client_cpu_and_back(client) -> None:  # type: ignore[no-untyped-def]
    from cubeplug.backends.cpu.server import CpuServer
    from cubeplug.backends.cpu.storage import CpuStorage
    from cubeplug.core.client import ComputeClient

    cpu = ComputeClient(CpuServer(CpuStorage()))
    try:
        h = client.create(np.arange(10, dtype=np.int64))
        on_cpu = client.to_client(h, cpu)
        np.testing.assert_array_equal(cpu.to_numpy(on_cpu, "i64"), np.arange(10))
        back = cpu.to_client(on_cpu, client)
        np.testing.assert_array_equal(client.to_numpy(back, "i64"), np.arange(10))
    finally:
        cpu.close()


def test_transfer_between_cuda_servers(client, make_client) -> None:  # type: ignore[no-untyped-def]
    other = make_client()
    h = client.create(np.arange(1000, dtype=np.float32))
    client.launch(FILL, 1, [h.offset_end(4 * 900)], [7.0, 100])
    sid = client.server.stream_id(current_stream_id())
    with client._lock, other._lock:
        moved = client.server.transfer_to(h, other.server, sid)
    expect = np.arange(1000, dtype=np.float32)
    expect[:100] = 7
    np.testing.assert_array_equal(other.to_numpy(moved, "f32"), expect)
    del h
    gc.collect()
    np.testing.assert_array_equal(other.to_numpy(moved, "f32"), expect)


# ---------------------------------------------------------------------- launch paths and devices
@pytest.mark.parametrize("path", ["cupy", "driver"])
def test_launch_paths_agree(make_client, path) -> None:  # type: ignore[no-untyped-def]
    from cubeplug import ConfigError
    from cubeplug.backends.cuda.compiler import driver_available

    client = make_client(launch=path)
    out, out2 = client.empty(8), client.empty(16)
    if path == "driver" and not driver_available():
        with pytest.raises(ConfigError, match="cuda.bindings"):
            client.launch(MIXED, 1, [out, out2], [2.5, -7, 3])
        return
    client.launch(MIXED, 1, [out, out2], [2.5, -7, 3])
    assert client.to_numpy(out, "f64")[0] == 2.5
    np.testing.assert_array_equal(client.to_numpy(out2, "i64"), [-7, 3])
    n = 300
    x = client.create(np.zeros(n, dtype=np.int32))
    for _ in range(50):
        client.launch_unchecked(ADD_ONE, blocks(n, 256), [x.offset_start(16)], [np.uint32(n - 4)])
    got = client.to_numpy(x, "i32")
    assert got[:4].sum() == 0 and (got[4:] == 50).all()
    assert client.launcher.compiled_for(ADD_ONE, checked=False).program.launch_path == path


@pytest.mark.parametrize("peer_access", [True, False])
def test_peer_copy_between_two_devices(mode, make_client, peer_access) -> None:  # type: ignore[no-untyped-def]
    """A peer copy where the devices reach each other, staged through a pinned block where not
    (the fake runtime plays both; a real pair of GPUs plays what it is)."""
    import cupy

    from cubeplug.backends.cuda.device import device_count

    if mode == "fake":
        cupy.cuda.runtime.devices = 2
        cupy.cuda.runtime.peer_access = peer_access
    elif device_count() < 2:
        pytest.skip("needs two CUDA devices")
    a, b = make_client(0), make_client(1)
    assert b.device.index == 1
    h = a.create(np.arange(4096, dtype=np.float32))
    a.launch(FILL, 1, [h], [5.0, 16])
    sid = a.server.stream_id(current_stream_id())
    with a._lock, b._lock:
        moved = a.server.transfer_to(h, b.server, sid)
    expect = np.arange(4096, dtype=np.float32)
    expect[:16] = 5
    np.testing.assert_array_equal(b.to_numpy(moved, "f32"), expect)
    if mode == "fake":
        peer = [c for c in cupy.cuda.runtime.calls if c.startswith("memcpyPeerAsync")]
        assert peer == (["memcpyPeerAsync size=16384"] if peer_access else [])
    b.launch(FILL, 1, [moved], [1.0, 8])
    np.testing.assert_array_equal(b.to_numpy(moved, "f32")[:9], [1] * 8 + [5])


# ---------------------------------------------------------------------- through the plugin registry
def test_built_through_the_plugin_hooks(mode) -> None:  # type: ignore[no-untyped-def]
    from cubeplug import BackendUnavailableError
    from cubeplug.core.config import Config
    from cubeplug.registry.plugins import registry, reset_registry

    reset_registry()
    try:
        reg = registry()
        client = reg.build_client("cuda", 0, Config())
        try:
            assert client.backend == "cuda" and type(client.server).__name__ == "CudaServer"
            h = client.create(f32(1, 2, 3))
            client.launch(FILL, 1, [h], [8.0, 2])
            np.testing.assert_array_equal(client.to_numpy(h, "f32"), [8, 8, 3])
            props = reg.memory_properties("cuda", 0)
            assert props is not None and props.alignment == 256
        finally:
            client.close()
        with pytest.raises(BackendUnavailableError, match="cuda:7 does not exist"):
            reg.build_client("cuda", 7, Config())
        bad = Config()
        bad.backends["cuda"] = {"launch": "warp-speed"}
        from cubeplug import ConfigError

        with pytest.raises(ConfigError, match="launch"):
            reg.build_client("cuda", 0, bad)
    finally:
        reset_registry()


def test_memory_used_by_another_stream_is_not_reused_while_in_use(mode, client) -> None:  # type: ignore[no-untyped-def]
    from cubeplug.core.stream import stream_scope
    from tests.backends.cuda.kernels import SLOW

    n = 1 << 16
    # On a GPU the second launch runs for about a second (dependent multiply-adds), far longer than
    # the few calls that follow it, and the test checks that it is still running when it looks.
    rounds = 300_000_000 if mode == "gpu" else 10
    with stream_scope() as a:
        h = client.create(np.zeros(n, np.int32))
        client.sync()
    with stream_scope() as b:
        client.launch(SLOW, n // 64, [h], [10])  # first use on B: B waits for A, the slice is pinned
        client.sync()
        client.launch(SLOW, n // 64, [h], [rounds])  # second use: no wait needed, still held
        address = client.server._ptr(h)
        del h  # no gc.collect(): with CuPy loaded it can outlast the kernel
    with stream_scope(a):
        y = client.create(np.full(n, 7, np.int32))  # A's pool must not hand out h's slice yet
        if mode == "gpu":  # the stand-in finishes every launch at once, so reuse is legal there
            import cupy

            running = cupy.cuda.Event(disable_timing=True)
            running.record(cupy.cuda.ExternalStream(client.server._state(b).ptr))
            assert not running.done, "the slow kernel ended before the check: it checked nothing"
            assert client.server._ptr(y) != address
    client.sync(all_streams=True)
    np.testing.assert_array_equal(client.to_numpy(y, "i32"), np.full(n, 7, np.int32))


def test_a_thread_waiting_in_sync_does_not_stall_other_threads(mode, client) -> None:  # type: ignore[no-untyped-def]
    if mode == "fake":
        pytest.skip("the host-memory stand-in has no device time to wait for")
    from cubeplug import Buffer, Kernel, Scalar

    spin = Kernel(
        "spin_wait",
        [Buffer("out", "f32", "write"), Scalar("iters", "u32")],
        {"c": """KERNEL spin_wait(GLOBAL float* out, unsigned int iters) {
    float v = (float)ABSOLUTE_POS_X;
    for (unsigned int k = 0; k < iters; ++k) v = v * 0.9999f + 0.5f;
    out[ABSOLUTE_POS_X] = v;
}"""},
        cube_dim=128,
    )
    out = client.empty(4 * 128)
    client.launch(spin, 1, [out], [1])
    client.sync()
    assert_sync_does_not_stall(
        client, lambda: client.launch(spin, 1, [out], [50_000_000]), client.memory_usage
    )


def test_a_thread_whose_first_cuda_call_is_a_launch(client) -> None:  # type: ignore[no-untyped-def]
    """The single-device launch path makes the device current only when a launch needs it."""
    n = 1000
    y = client.create(np.zeros(n, dtype=np.float32))
    client.sync()
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            with client.stream():
                client.launch(FILL, CubeCount(blocks(n, 256)), [y], [3.0, n])
                client.sync()
        except BaseException as e:  # reported below
            errors.append(e)

    t = threading.Thread(target=worker)
    t.start()
    t.join(60)
    assert not errors, errors
    np.testing.assert_array_equal(client.to_numpy(y, "f32"), np.full(n, 3.0, dtype=np.float32))
