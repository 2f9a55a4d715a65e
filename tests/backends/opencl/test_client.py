"""Every ComputeClient call on a real OpenCL device (PoCL in CI, NVIDIA's OpenCL on the GPU machine)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import numpy as np
import pytest

from cubeplug import BufferTooBig, CubeCount, ValidationError
from cubeplug.core.kernel import DTYPES
from tests.backends.opencl.conftest import make_client, requires_opencl
from tests.backends.opencl.kernels import (
    ADD_ONE,
    AXPY,
    COUNT,
    DEFINES,
    ENTRY,
    FILL,
    GEOMETRY,
    NOOP,
    REVERSE,
    SCALE,
    SLOW,
    VEC4,
    add_scalar,
)
from tests.backends.sync_stall import assert_sync_does_not_stall

pytestmark = requires_opencl


def test_identity_and_properties(client) -> None:  # type: ignore[no-untyped-def]
    assert client.backend == "opencl"
    props = client.properties
    for key in (
        "max_work_group_size",
        "local_memory",
        "max_allocation",
        "fp16",
        "fp64",
        "int64_atomics",
        "base_address_alignment",
        "vendor",
        "driver_version",
        "name",
        "platform",
        "global_memory",
    ):
        assert key in props, key
    assert props["alignment"] >= 256
    assert client.capabilities.offset_alignment == props["alignment"]
    assert client.capabilities.max_alloc_bytes == props["max_allocation"]
    assert "opencl" in str(client.device)


@pytest.mark.parametrize("size", [0, 1, 3, 255, 4097, (1 << 20) + 7])
def test_create_read_round_trip(client, size) -> None:  # type: ignore[no-untyped-def]
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    h = client.create(data)
    assert h.size == size
    assert bytes(client.read_one(h)) == data


def test_create_copies_at_call_time(client) -> None:  # type: ignore[no-untyped-def]
    arr = np.arange(1000, dtype=np.float32)
    h = client.create(arr)
    arr[:] = -1  # the upload was snapshotted: changing the source afterwards changes nothing
    np.testing.assert_array_equal(client.to_numpy(h, "f32"), np.arange(1000, dtype=np.float32))


def test_empty_read_many_read_async(client) -> None:  # type: ignore[no-untyped-def]
    e = client.empty(1024)
    assert e.size == 1024 and len(client.read_one(e)) == 1024
    a, b = client.create(b"hello"), client.create(b"opencl!")
    assert [bytes(x) for x in client.read([a, b])] == [b"hello", b"opencl!"]
    fut = client.read_async([b, a])
    assert isinstance(fut, Future)
    assert [bytes(x) for x in fut.result(timeout=30)] == [b"opencl!", b"hello"]


def test_read_async_does_not_block_the_caller(client) -> None:  # type: ignore[no-untyped-def]
    n = 1 << 18
    x = client.create(np.ones(n, dtype=np.float32))
    y = client.create(np.zeros(n, dtype=np.float32))
    for _ in range(20):
        client.launch(AXPY, CubeCount(n // 128), [x, y], [1.0, n])
    fut = client.read_async([y])
    # The call returned a future at once; the result is right once it completes.
    np.testing.assert_array_equal(
        np.frombuffer(fut.result(timeout=60)[0], np.float32), np.full(n, 20, np.float32)
    )


def test_to_numpy_and_tensors(client) -> None:  # type: ignore[no-untyped-def]
    arr = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    h = client.create(arr)
    np.testing.assert_array_equal(client.to_numpy(h, "i32", (2, 3, 4)), arr)
    t = client.create_tensor(arr.astype(np.float64 if client.capabilities.fp64 else np.float32))
    assert t.shape == (2, 3, 4)
    np.testing.assert_array_equal(client.read_tensor(t), arr)
    e = client.empty_tensor((5, 7), "u16")
    assert e.shape == (5, 7) and e.handle.size >= 70
    assert client.read_tensor(e).shape == (5, 7)
    assert client.read_tensor(client.create_tensor(np.zeros(0, np.float32))).shape == (0,)


def test_launch_axpy_checked_and_unchecked(client) -> None:  # type: ignore[no-untyped-def]
    n = 1000
    x = client.create(np.arange(n, dtype=np.float32))
    y = client.create(np.ones(n, dtype=np.float32))
    client.launch(AXPY, CubeCount((n + 127) // 128), [x, y], [2.0, n])
    client.launch_unchecked(AXPY, (n + 127) // 128, [x, y], [np.float32(0.5), np.uint32(n)])
    np.testing.assert_allclose(client.to_numpy(y, "f32"), 1 + 2.5 * np.arange(n, dtype=np.float32))


def test_native_opencl_dialect_is_preferred(client) -> None:  # type: ignore[no-untyped-def]
    x = client.create(np.full(64, 3, np.float32))
    client.launch(SCALE, 2, [x], [2.0, 64])
    np.testing.assert_array_equal(client.to_numpy(x, "f32"), np.full(64, 6, np.float32))


def test_geometry_macros_3d(client) -> None:  # type: ignore[no-untyped-def]
    count = (3, 2, 2)
    units = 3 * 4 * 2 * 2 * 2 * 1
    out = client.create(np.zeros(8 + units, np.uint32))
    client.launch(GEOMETRY, CubeCount(*count), [out], [])
    got = client.to_numpy(out, "u32")
    assert list(got[:7]) == [3, 2, 2, 4, 2, 1, 8]
    grid = got[8:].reshape(2, 2 * 2, 3 * 4)  # z, y, x
    assert grid[0, 0, 5] == 1 * 100 + 1 * 10 + 0  # x = 5: cube 1, unit 1
    assert grid[0, 1, 2] == 0 * 100 + 2 * 10 + 1  # y = 1: unit y 1


def test_local_memory_barrier_atomics_vectors_defines_entry(client) -> None:  # type: ignore[no-untyped-def]
    x = client.create(np.arange(128, dtype=np.float32))
    client.launch(REVERSE, 2, [x], [])
    expected = np.concatenate([np.arange(63, -1, -1), np.arange(127, 63, -1)]).astype(np.float32)
    np.testing.assert_array_equal(client.to_numpy(x, "f32"), expected)

    counter = client.create(np.zeros(1, np.uint32))
    client.launch(COUNT, 10, [counter], [])
    assert client.to_numpy(counter, "u32")[0] == 640

    src = np.arange(32, dtype=np.float32)
    a, b = client.create(src), client.empty(src.nbytes)
    client.launch(VEC4, 1, [a, b], [8])
    np.testing.assert_array_equal(client.to_numpy(b, "f32"), src * 2 + np.tile([0, 1, 2, 3], 8))

    out = client.empty(4)
    client.launch(DEFINES, 1, [out], [])
    assert client.to_numpy(out, "i32")[0] == 43
    client.launch(ENTRY, 1, [out], [])
    assert client.to_numpy(out, "i32")[0] == 7
    client.launch(NOOP, 1, [], [])
    client.sync()


def test_every_supported_dtype(client) -> None:  # type: ignore[no-untyped-def]
    n = 100
    rng = np.random.default_rng(0)
    tested = []
    for name in sorted(client.capabilities.dtypes):
        dt = DTYPES[name]
        if dt.kind == "b":
            x = rng.integers(0, 2, n).astype(bool)
            s = True
            expected = x | s
        elif dt.kind == "f":
            x = rng.standard_normal(n).astype(dt)
            s = dt.type(1.5)
            expected = (x + s).astype(dt)
        else:
            info = np.iinfo(dt)
            x = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
            s = dt.type(info.max // 3)
            with np.errstate(over="ignore"):
                expected = (x + s).astype(dt)
        kernel = add_scalar(name)
        hx, hy = client.create(x), client.empty(x.nbytes)
        client.launch(kernel, (n + 31) // 32, [hx, hy], [s, n])
        got = client.to_numpy(hy, name)
        if dt.kind == "f":
            np.testing.assert_allclose(got, expected, rtol=1e-3 if name == "f16" else 1e-6)
        else:
            np.testing.assert_array_equal(got, expected)
        tested.append(name)
    assert {"f32", "i32", "u32", "i64", "u64", "i8", "u8", "i16", "u16", "bool"} <= set(tested)


def test_scalar_values_change_between_launches(client) -> None:  # type: ignore[no-untyped-def]
    # The backend skips re-binding unchanged arguments: changed ones (and -0.0 vs 0.0) must still bind.
    out = client.empty(64 * 4)
    for value in (1.0, 2.0, 2.0, -0.0, 0.0, float("nan"), 5.0):
        client.launch(FILL, 1, [out], [value, 64])
        got = client.to_numpy(out, "f32")
        np.testing.assert_array_equal(got, np.full(64, value, np.float32))
        if value == 0:
            assert np.signbit(got[0]) == np.signbit(np.float32(value))
    other = client.empty(64 * 4)
    client.launch(FILL, 1, [other], [9.0, 64])
    client.launch(FILL, 1, [out], [9.0, 64])
    assert client.to_numpy(other, "f32")[0] == 9.0 and client.to_numpy(out, "f32")[0] == 9.0


def test_offsets_and_views(client) -> None:  # type: ignore[no-untyped-def]
    align = client.capabilities.offset_alignment
    n = 3 * align // 4  # i32 elements in three aligned blocks
    h = client.create(np.zeros(n, np.int32))
    middle = h.offset_start(align).offset_end(align)
    assert middle.size == align
    assert client.server.bound_buffer(middle).size == align  # a sub-buffer at the view's offset
    client.launch(ADD_ONE, (align // 4 + 63) // 64, [middle], [align // 4])
    got = client.to_numpy(h, "i32")
    assert got[: align // 4].sum() == 0 and got[-(align // 4) :].sum() == 0
    assert (got[align // 4 : 2 * align // 4] == 1).all()
    # Reads of unaligned views need no alignment.
    data = bytes(range(256)) * 4
    b = client.create(data)
    assert bytes(client.read_one(b.offset_start(3).offset_end(5))) == data[3:-5]
    # An unaligned view cannot be bound: ValidationError that names the alignment.
    with pytest.raises(ValidationError, match=f"aligned to {align}"):
        client.launch(ADD_ONE, 1, [h.offset_start(4)], [1])
    # The handle is intact after the refused launch.
    assert (client.to_numpy(h, "i32")[align // 4 : 2 * align // 4] == 1).all()


def test_dynamic_count(client) -> None:  # type: ignore[no-untyped-def]
    counts = client.create(np.array([2, 1, 1], np.uint32))
    x = client.create(np.zeros(256, np.int32))
    client.launch(ADD_ONE, CubeCount.dynamic(counts), [x], [256])
    got = client.to_numpy(x, "i32")
    assert got[:128].sum() == 128 and got[128:].sum() == 0
    zero = client.create(np.array([0, 1, 1], np.uint32))
    client.launch(ADD_ONE, CubeCount.dynamic(zero), [x], [256])  # a zero axis: nothing runs
    assert client.to_numpy(x, "i32")[:128].sum() == 128
    # The count written by a kernel just before is read after it (stream order).
    client.launch(FILL, 1, [counts], [0.0, 3])  # zero bits = 0 cubes
    client.launch(ADD_ONE, CubeCount.dynamic(counts), [x], [256])
    assert client.to_numpy(x, "i32")[:128].sum() == 128
    with pytest.raises(ValidationError, match="12 B"):
        client.launch(ADD_ONE, CubeCount.dynamic(client.empty(8)), [x], [256])


def test_300_chained_launches_exact(client) -> None:  # type: ignore[no-untyped-def]
    n = 4096
    x = client.create(np.zeros(n, np.int32))
    for _ in range(300):
        client.launch(ADD_ONE, n // 64, [x], [n])
    np.testing.assert_array_equal(client.to_numpy(x, "i32"), np.full(n, 300, np.int32))


def test_flush_sync_and_copy(client) -> None:  # type: ignore[no-untyped-def]
    x = client.create(np.zeros(64, np.int32))
    client.launch(ADD_ONE, 1, [x], [64])
    client.flush()
    client.sync()
    client.sync(all_streams=True)
    y = client.to_client(x, client)  # same client: a device copy
    client.launch(ADD_ONE, 1, [x], [64])
    assert client.to_numpy(y, "i32").sum() == 64 and client.to_numpy(x, "i32").sum() == 128


def test_to_client_cpu_and_back(client, cpu_client) -> None:  # type: ignore[no-untyped-def]
    arr = np.arange(300, dtype=np.float32)
    h = client.create(arr)
    on_cpu = client.to_client(h, cpu_client)
    np.testing.assert_array_equal(cpu_client.to_numpy(on_cpu, "f32"), arr)
    back = cpu_client.to_client(on_cpu, client)
    client.launch(AXPY, 3, [h, back], [1.0, 300])
    np.testing.assert_array_equal(client.to_numpy(back, "f32"), 2 * arr)


def test_two_clients_of_one_device_share_nothing_they_should_not(client) -> None:  # type: ignore[no-untyped-def]
    other = make_client()
    try:
        a = client.create(np.zeros(64, np.int32))
        b = other.create(np.zeros(64, np.int32))
        client.launch(ADD_ONE, 1, [a], [64])
        other.launch(ADD_ONE, 1, [b], [64])
        other.launch(ADD_ONE, 1, [b], [64])
        assert client.to_numpy(a, "i32").sum() == 64 and other.to_numpy(b, "i32").sum() == 128
        with pytest.raises(ValidationError, match="another client"):
            client.launch(ADD_ONE, 1, [b], [64])
        moved = other.to_client(b, client)
        assert client.to_numpy(moved, "i32").sum() == 128
    finally:
        other.close()


def test_memory_usage_cleanup_returns_memory(client) -> None:  # type: ignore[no-untyped-def]
    before = client.memory_usage()
    handles = [client.empty(1 << 20) for _ in range(4)]
    big = client.empty(client.capabilities.max_alloc_bytes // 3)
    usage = client.memory_usage()
    assert usage.bytes_in_use >= before.bytes_in_use + (4 << 20)
    assert usage.bytes_reserved > before.bytes_reserved
    del handles, big
    client.memory_cleanup()
    after = client.memory_usage()
    assert after.bytes_reserved < usage.bytes_reserved
    assert after.bytes_in_use <= before.bytes_in_use
    assert client.server.cl_storage.reserved() == after.bytes_reserved


def test_persistent_memory(client) -> None:  # type: ignore[no-untyped-def]
    with client.persistent_memory(), client.persistent_memory():
        p = client.create(np.arange(10, dtype=np.int32))
    client.memory_cleanup()
    np.testing.assert_array_equal(client.to_numpy(p, "i32"), np.arange(10))


def test_allocation_beyond_device_maximum(client) -> None:  # type: ignore[no-untyped-def]
    keep = client.create(np.arange(16, dtype=np.int32))
    with pytest.raises(BufferTooBig):
        client.empty(client.capabilities.max_alloc_bytes + 1)
    np.testing.assert_array_equal(client.to_numpy(keep, "i32"), np.arange(16))
    assert client.to_numpy(client.create(np.ones(4, np.int32)), "i32").sum() == 4


def test_profile_device_timing(client) -> None:  # type: ignore[no-untyped-def]
    n = 1 << 16
    x = client.create(np.zeros(n, np.int32))
    _, duration = client.profile(lambda: [client.launch(ADD_ONE, n // 64, [x], [n]) for _ in range(5)])
    assert duration.seconds() > 0
    assert duration.method == ("device" if client.capabilities.device_timing else "system")
    assert client.to_numpy(x, "i32")[0] == 5
    if client.capabilities.device_timing:
        # Device timestamps span the device timeline between the two markers, idle time included.
        t0 = time.perf_counter()
        _, idle = client.profile(lambda: time.sleep(0.2))
        host = time.perf_counter() - t0
        assert idle.method == "device" and 0.15 < idle.seconds() <= host + 0.01


def test_profile_without_profiling_queues() -> None:
    c = make_client(opencl={"profiling": False})
    try:
        assert not c.capabilities.device_timing
        _, duration = c.profile(lambda: c.create(b"x" * 100))
        assert duration.method == "system"
    finally:
        c.close()


def test_reserve_staging(client) -> None:  # type: ignore[no-untyped-def]
    bufs = client.reserve_staging([1024, 0, 10])
    assert [b.nbytes for b in bufs] == [1024, 0, 10]
    bufs[0][:] = np.arange(1024) % 251
    h = client.create(bufs[0])
    bufs[0][:] = 0  # reusable at once: the upload took a snapshot
    np.testing.assert_array_equal(client.to_numpy(h, "u8"), np.arange(1024) % 251)
    with pytest.raises(ValidationError):
        client.reserve_staging([-1])


def test_streams_and_threads_cross_stream_reads(client) -> None:  # type: ignore[no-untyped-def]
    n = 1 << 14
    results: dict[int, object] = {}
    errors: list[BaseException] = []
    handles: dict[int, object] = {}
    ready = threading.Barrier(4)

    def work(k: int) -> None:
        try:
            h = client.create(np.zeros(n, np.int32))
            for _ in range(20 + 5 * k):
                client.launch(ADD_ONE, n // 64, [h], [n])
            handles[k] = h
            ready.wait(timeout=60)
            # Read another thread's handle: this stream must wait for that stream's launches.
            other = handles[(k + 1) % 4]
            results[k] = client.to_numpy(other, "i32")
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    for k in range(4):
        j = (k + 1) % 4
        np.testing.assert_array_equal(results[k], np.full(n, 20 + 5 * j, np.int32))


def test_stream_context_orders_cross_stream_work(client) -> None:  # type: ignore[no-untyped-def]
    # Without the device-side wait this fails every time on PoCL (checked by disabling it).
    n = 1 << 20
    x = client.create(np.zeros(n, np.int32))
    with client.stream():
        for _ in range(60):
            client.launch(ADD_ONE, n // 64, [x], [n])
    with client.stream():
        y = client.empty(n * 4)
        copy = client.to_client(x, client)  # a device copy of x on another stream
        client.launch(FILL, n // 64, [y], [1.0, n])
        client.launch(ADD_ONE, n // 64, [x], [n])  # must run after the 60 launches on the first stream
        got = client.to_numpy(x, "i32")
    np.testing.assert_array_equal(got, np.full(n, 61, np.int32))
    np.testing.assert_array_equal(client.to_numpy(copy, "i32"), np.full(n, 60, np.int32))


def test_bad_inputs_keep_other_handles_intact(client) -> None:  # type: ignore[no-untyped-def]
    good = client.create(np.arange(64, dtype=np.int32))
    dropped = client.create(np.zeros(64, np.int32))
    dropped.drop()
    cases = [
        lambda: client.launch(ADD_ONE, 1, [], [64]),
        lambda: client.launch(ADD_ONE, 1, [good, good], [64]),
        lambda: client.launch(ADD_ONE, 1, [good], [-1]),
        lambda: client.launch(ADD_ONE, 1, [good], [1.5]),
        lambda: client.launch(ADD_ONE, 1, [dropped], [64]),
        lambda: client.launch(ADD_ONE, 1, [client.create(b"abc")], [64]),
        lambda: client.launch(ADD_ONE, 1, ["not a handle"], [64]),
        lambda: client.empty(-5),
        lambda: client.create([1, 2, 3]),
        lambda: client.read_one(dropped),
    ]
    for i, case in enumerate(cases):
        with pytest.raises(ValidationError):
            case()
            pytest.fail(f"case {i} did not raise ValidationError")
    client.sync()
    got = client.to_numpy(good, "i32")
    assert got.shape == (64,)
    client.launch(ADD_ONE, 1, [good], [64])
    assert client.to_numpy(good, "i32")[0] == got[0] + 1


def test_unchecked_launch_with_unusable_handles(client) -> None:  # type: ignore[no-untyped-def]
    good = client.create(np.zeros(64, np.int32))
    dropped = client.create(np.zeros(64, np.int32))
    dropped.drop()
    with pytest.raises(ValidationError, match="dropped"):
        client.launch_unchecked(ADD_ONE, 1, [dropped], [64])
    with pytest.raises(ValidationError, match="Handle"):
        client.launch_unchecked(ADD_ONE, 1, [object()], [64])
    client.launch_unchecked(ADD_ONE, 1, [good], [64])
    assert client.to_numpy(good, "i32").sum() == 64


def test_launch_errors_name_the_limit(client) -> None:  # type: ignore[no-untyped-def]
    import pyopencl as cl

    client.launch(ADD_ONE, 1, [client.empty(256)], [64])
    prog = client.launcher.compiled_for(ADD_ONE).program

    class FakeError(Exception):
        code = cl.status_code.INVALID_WORK_GROUP_SIZE

    err = client.server._launch_error(prog, (64, 1, 1), FakeError("bad group"))
    assert "INVALID_WORK_GROUP_SIZE" in str(err) and f"at most {prog.max_group_size}" in str(err)


def test_memory_of_another_stream_is_not_reused_while_in_use(client) -> None:  # type: ignore[no-untyped-def]
    from cubeplug.core.stream import stream_scope

    n = 1 << 16
    rounds = 20000 if client.properties["device_type"] != "gpu" else 2_000_000
    with stream_scope() as a:
        h = client.create(np.zeros(n, np.int32))
        client.sync()
    with stream_scope():
        client.launch(SLOW, n // 64, [h], [10])  # first use on B: B waits for A, h is pinned
        client.sync()
        client.launch(SLOW, n // 64, [h], [rounds])  # second use: already synced, nothing pinned
        del h
    with stream_scope(a):
        y = client.create(np.full(n, 7, np.int32))  # A's pool may hand out h's slice again
    client.sync(all_streams=True)
    np.testing.assert_array_equal(client.to_numpy(y, "i32"), np.full(n, 7, np.int32))


def test_process_exits_cleanly_with_work_pending() -> None:
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import numpy as np\n"
        "from tests.backends.opencl.conftest import make_client\n"
        "from tests.backends.opencl.kernels import SLOW\n"
        "c = make_client()\n"
        "h = c.create(np.zeros(1 << 14, np.int32))\n"
        "for _ in range(3): c.launch(SLOW, 256, [h], [3000])\n"
        "f = c.read_async([h])\n"  # never waited for: the process exits with work queued
    )
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "terminate called" not in done.stderr


def test_a_thread_waiting_in_sync_does_not_stall_other_threads(client) -> None:  # type: ignore[no-untyped-def]
    n = 1 << 12
    x = client.create(np.zeros(n, np.int32))
    client.sync()
    rounds = 200_000 if client.properties["device_type"] != "gpu" else 200_000_000  # ~0.5 s on an H100
    assert_sync_does_not_stall(
        client, lambda: client.launch(SLOW, n // 64, [x], [rounds]), client.memory_usage
    )
