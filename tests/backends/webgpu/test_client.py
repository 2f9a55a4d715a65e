"""Every ComputeClient call on a real WebGPU adapter (lavapipe in CI, NVIDIA's Vulkan on the GPU machine)."""

from __future__ import annotations

import concurrent.futures
import math
import threading
import time
from concurrent.futures import Future

import numpy as np
import pytest

from cubeplug import (
    Buffer,
    BufferTooBig,
    CompileError,
    CubeCount,
    Kernel,
    LaunchError,
    ValidationError,
)
from cubeplug.backends.webgpu import queue as wgpu_queue
from cubeplug.core.kernel import DTYPES
from cubeplug.core.stream import current_stream_id
from tests.backends.sync_stall import assert_sync_does_not_stall
from tests.backends.webgpu.conftest import make_client, requires_webgpu
from tests.backends.webgpu.kernels import (
    ADD_ONE,
    AXPY,
    COUNT,
    DEFINES,
    ENTRY,
    FILL,
    GEOMETRY,
    MIXED,
    NOOP,
    REVERSE,
    SLOW,
    VEC4,
    add_scalar,
)

pytestmark = requires_webgpu


def test_identity_properties_and_capabilities(client) -> None:  # type: ignore[no-untyped-def]
    assert client.backend == "webgpu"
    props = client.properties
    for key in ("name", "backend_type", "adapter_type", "features", "limits", "max_page_size", "alignment"):
        assert key in props, key
    limits = props["limits"]
    caps = client.capabilities
    assert caps.offset_alignment == props["alignment"] == limits["min-storage-buffer-offset-alignment"]
    assert caps.max_alloc_bytes == props["max_page_size"] <= limits["max-storage-buffer-binding-size"]
    assert caps.max_cube_threads == limits["max-compute-invocations-per-workgroup"]
    assert not caps.multi_queue
    assert caps.device_timing == ("timestamp-query" in props["features"])
    assert caps.fp16 == ("shader-f16" in props["features"])
    assert {"f32", "i32", "u32"} <= caps.dtypes and "bool" not in caps.dtypes
    assert str(client.device).startswith("webgpu:")


@pytest.mark.parametrize("size", [0, 1, 3, 255, 4097, (1 << 20) + 7])
def test_create_read_round_trip(client, size) -> None:  # type: ignore[no-untyped-def]
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    h = client.create(data)
    assert h.size == size
    assert bytes(client.read_one(h)) == data


def test_create_copies_at_call_time(client) -> None:  # type: ignore[no-untyped-def]
    arr = np.arange(1000, dtype=np.float32)
    h = client.create(arr)
    arr[:] = -1
    np.testing.assert_array_equal(client.to_numpy(h, "f32"), np.arange(1000, dtype=np.float32))


def test_empty_read_many_read_async(client) -> None:  # type: ignore[no-untyped-def]
    e = client.empty(1024)
    assert e.size == 1024 and len(client.read_one(e)) == 1024
    a, b = client.create(b"hello"), client.create(b"webgpu!")
    assert [bytes(x) for x in client.read([a, b])] == [b"hello", b"webgpu!"]
    fut = client.read_async([b, a, client.empty(0)])
    assert isinstance(fut, Future)
    assert [bytes(x) for x in fut.result(timeout=30)] == [b"webgpu!", b"hello", b""]


def test_read_async_completes_without_being_asked(client) -> None:  # type: ignore[no-untyped-def]
    # Callbacks and concurrent.futures.wait fire from the completer thread, not only on result().
    x = client.create(np.arange(4096, dtype=np.int32))
    client.launch(ADD_ONE, 64, [x], [4096])
    fut = client.read_async([x])
    seen = threading.Event()
    fut.add_done_callback(lambda f: seen.set())
    done, _ = concurrent.futures.wait([fut], timeout=30)
    assert fut in done and seen.wait(30)
    np.testing.assert_array_equal(np.frombuffer(fut.result()[0], np.int32), np.arange(1, 4097))


def test_to_numpy_and_tensors(client) -> None:  # type: ignore[no-untyped-def]
    arr = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    h = client.create(arr)
    np.testing.assert_array_equal(client.to_numpy(h, "i32", (2, 3, 4)), arr)
    t = client.create_tensor(arr.astype(np.float32))
    assert t.shape == (2, 3, 4) and t.is_contiguous
    np.testing.assert_array_equal(client.read_tensor(t), arr)
    e = client.empty_tensor((5, 7), "u32")
    assert e.shape == (5, 7) and e.handle.size == 140
    assert client.read_tensor(e).shape == (5, 7)
    assert client.read_tensor(client.create_tensor(np.zeros(0, np.float32))).shape == (0,)


def test_launch_axpy_checked_and_unchecked(client) -> None:  # type: ignore[no-untyped-def]
    n = 1000
    x = client.create(np.arange(n, dtype=np.float32))
    y = client.create(np.ones(n, dtype=np.float32))
    client.launch(AXPY, CubeCount((n + 127) // 128), [x, y], [2.0, n])
    client.launch_unchecked(AXPY, (n + 127) // 128, [x, y], [np.float32(0.5), np.uint32(n)])
    np.testing.assert_allclose(client.to_numpy(y, "f32"), 1 + 2.5 * np.arange(n, dtype=np.float32))


def test_read_and_read_write_buffers_of_one_page(client) -> None:  # type: ignore[no-untyped-def]
    # Small handles share a page: the read-only and the read-write binding are one GPUBuffer.
    x = client.create(np.full(64, 2, np.float32))
    y = client.create(np.ones(64, np.float32))
    assert x.memory().storage.id == y.memory().storage.id
    client.launch(AXPY, 1, [x, y], [3.0, 64])
    np.testing.assert_array_equal(client.to_numpy(y, "f32"), np.full(64, 7, np.float32))


def test_geometry_3d(client) -> None:  # type: ignore[no-untyped-def]
    units = 3 * 4 * 2 * 2 * 2 * 1
    out = client.create(np.zeros(8 + units, np.uint32))
    client.launch(GEOMETRY, CubeCount(3, 2, 2), [out], [])
    got = client.to_numpy(out, "u32")
    assert list(got[:6]) == [3, 2, 2, 4, 2, 1]
    grid = got[8:].reshape(2, 2 * 2, 3 * 4)
    assert grid[0, 0, 5] == 1 * 100 + 1 * 10 + 0
    assert grid[0, 1, 2] == 0 * 100 + 2 * 10 + 1


def test_workgroup_memory_atomics_vectors_defines_entry(client) -> None:  # type: ignore[no-untyped-def]
    x = client.create(np.arange(128, dtype=np.float32))
    client.launch(REVERSE, 2, [x], [])
    expected = np.concatenate([np.arange(63, -1, -1), np.arange(127, 63, -1)]).astype(np.float32)
    np.testing.assert_array_equal(client.to_numpy(x, "f32"), expected)

    values = client.create(np.array([1, -1] * 320, np.int32))
    hits = client.create(np.zeros(1, np.uint32))
    client.launch(COUNT, 10, [values, hits], [640])
    assert client.to_numpy(hits, "u32")[0] == 320

    src = np.arange(32, dtype=np.float32)
    v = client.create(src)
    client.launch(VEC4, 1, [v], [2.0, 8])
    np.testing.assert_array_equal(client.to_numpy(v, "f32"), src * 2 + np.tile([0, 1, 2, 3], 8))

    out = client.empty(16)
    client.launch(DEFINES, 1, [out], [])
    np.testing.assert_array_equal(client.to_numpy(out, "f32"), [17, 2.5, 1, 7])
    client.launch(ENTRY, 1, [out], [])
    np.testing.assert_array_equal(client.to_numpy(out, "u32"), [42, 43, 44, 45])
    client.launch(NOOP, 1, [out], [])
    client.sync()


def test_every_supported_dtype(client) -> None:  # type: ignore[no-untyped-def]
    n = 100
    rng = np.random.default_rng(0)
    tested = []
    for name in sorted(client.capabilities.dtypes):
        dt = DTYPES[name]
        if dt.kind == "f":
            x = rng.standard_normal(n).astype(dt)
            s = dt.type(1.5)
            expected = (x * dt.type(2) + s).astype(dt)
        else:
            info = np.iinfo(dt)
            x = rng.integers(info.min // 4, info.max // 4, n, dtype=dt, endpoint=True)
            s = dt.type(info.max // 7)
            expected = (x * dt.type(2) + s).astype(dt)
        hx, hy = client.create(x), client.empty(x.nbytes)
        client.launch(add_scalar(name), (n + 63) // 64, [hx, hy], [s, n])
        got = client.to_numpy(hy, name)
        if dt.kind == "f":
            np.testing.assert_allclose(got, expected, rtol=1e-3 if name == "f16" else 1e-6)
        else:
            np.testing.assert_array_equal(got, expected)
        tested.append(name)
    assert {"f32", "i32", "u32"} <= set(tested)
    if client.capabilities.fp16:
        assert "f16" in tested


def test_scalar_struct_alignment(client) -> None:  # type: ignore[no-untyped-def]
    if not {"f16", "f64", "i64"} <= client.capabilities.dtypes:
        pytest.skip("the device lacks f16, f64 or i64 (shader-f16 / shader-f64 / shader-int64)")
    out = client.empty(5 * 8)
    client.launch(MIXED, 1, [out], [1.5, 7, 2.25, -(2**40), 0.75])
    np.testing.assert_array_equal(client.to_numpy(out, "f64"), [1.5, 7, 2.25, -(2.0**40), 0.75])


def test_scalar_values_change_between_launches(client) -> None:  # type: ignore[no-untyped-def]
    # Identical scalar blocks share an arena slot: changed ones (and -0.0 vs 0.0) must still reach the kernel.
    out = client.empty(64 * 4)
    for value in (1.0, 2.0, 2.0, -0.0, 0.0, float("nan"), 5.0):
        client.launch(FILL, 1, [out], [value, 64])
        got = client.to_numpy(out, "f32")
        np.testing.assert_array_equal(got, np.full(64, value, np.float32))
        if value == 0:
            assert np.signbit(got[0]) == np.signbit(np.float32(value))
    # Within one batch too: alternating values, then one read.
    a, b = client.empty(256), client.empty(256)
    for i in range(10):
        client.launch(FILL, 1, [a if i % 2 else b], [float(i), 64])
    assert client.to_numpy(a, "f32")[0] == 9.0 and client.to_numpy(b, "f32")[0] == 8.0


def test_offsets_at_the_alignment_and_unaligned_refused(client) -> None:  # type: ignore[no-untyped-def]
    align = client.capabilities.offset_alignment
    n = 3 * align // 4
    h = client.create(np.zeros(n, np.int32))
    middle = h.offset_start(align).offset_end(align)
    assert middle.size == align
    client.launch(ADD_ONE, 1, [middle], [align // 4])
    got = client.to_numpy(h, "i32")
    assert got[: align // 4].sum() == 0 and got[-(align // 4) :].sum() == 0
    assert (got[align // 4 : 2 * align // 4] == 1).all()
    data = bytes(range(256)) * 4
    b = client.create(data)
    assert bytes(client.read_one(b.offset_start(3).offset_end(5))) == data[3:-5]
    with pytest.raises(ValidationError, match=f"aligned to {align}"):
        client.launch(ADD_ONE, 1, [h.offset_start(4)], [1])
    with pytest.raises(ValidationError, match=f"aligned to {align}"):
        client.launch_unchecked(ADD_ONE, 1, [h.offset_start(4)], [1])
    assert (client.to_numpy(h, "i32")[align // 4 : 2 * align // 4] == 1).all()


def test_unaligned_copies(client) -> None:  # type: ignore[no-untyped-def]
    data = bytes(range(251)) * 3
    h = client.create(data)
    for start, end in ((0, 0), (1, 0), (3, 2), (4, 1), (0, 3)):
        view = h.offset_start(start).offset_end(end)
        copy = client.to_client(view, client)
        assert bytes(client.read_one(copy)) == data[start : len(data) - end]
    assert bytes(client.read_one(h)) == data


def test_dynamic_count(client) -> None:  # type: ignore[no-untyped-def]
    counts = client.create(np.array([2, 1, 1], np.uint32))
    x = client.create(np.zeros(256, np.int32))
    client.launch(ADD_ONE, CubeCount.dynamic(counts), [x], [256])
    got = client.to_numpy(x, "i32")
    assert got[:128].sum() == 128 and got[128:].sum() == 0
    zero = client.create(np.array([0, 1, 1], np.uint32))
    client.launch(ADD_ONE, CubeCount.dynamic(zero), [x], [256])
    assert client.to_numpy(x, "i32")[:128].sum() == 128
    # A count written by a kernel just before is read after it (stream order), even on a shared page.
    client.launch(FILL, 1, [counts], [0.0, 3])
    client.launch(
        ADD_ONE,
        CubeCount.dynamic(counts),
        [
            x,
        ],
        [256],
    )
    assert client.to_numpy(x, "i32")[:128].sum() == 128
    four = client.create(np.array([4, 1, 1], np.uint32))
    client.launch(ADD_ONE, CubeCount.dynamic(four), [x], [256])
    assert client.to_numpy(x, "i32").sum() == 128 + 256
    with pytest.raises(ValidationError, match="12 B"):
        client.launch(ADD_ONE, CubeCount.dynamic(client.empty(8)), [x], [256])
    with pytest.raises(ValidationError, match="4-byte aligned"):
        client.launch(ADD_ONE, CubeCount.dynamic(client.create(bytes(16)).offset_start(2)), [x], [256])


def test_count_beyond_the_device_limit(client) -> None:  # type: ignore[no-untyped-def]
    limit = client.properties["limits"]["max-compute-workgroups-per-dimension"]
    x = client.create(np.zeros(64, np.int32))
    with pytest.raises(ValidationError, match="cubes per dimension"):
        client.launch(ADD_ONE, CubeCount(limit + 1), [x], [64])
    client.launch(ADD_ONE, 1, [x], [64])
    assert client.to_numpy(x, "i32").sum() == 64


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
    y = client.to_client(x, client)
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


def test_two_clients_of_one_device(client) -> None:  # type: ignore[no-untyped-def]
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


def test_memory_usage_and_cleanup_return_memory(fresh_client) -> None:  # type: ignore[no-untyped-def]
    client = fresh_client
    before = client.memory_usage()
    handles = [client.empty(1 << 20) for _ in range(4)]
    big = client.empty(client.capabilities.max_alloc_bytes // 3)
    x = client.create(np.zeros(64, np.int32))
    client.launch(ADD_ONE, 1, [x], [64])  # a cached bind group holds the page until cleanup
    usage = client.memory_usage()
    assert usage.bytes_in_use >= before.bytes_in_use + (4 << 20)
    assert usage.bytes_reserved > before.bytes_reserved
    del handles, big, x
    client.memory_cleanup()
    after = client.memory_usage()
    assert after.bytes_reserved < usage.bytes_reserved
    assert after.bytes_in_use <= before.bytes_in_use
    assert client.server.storage.reserved() >= after.bytes_reserved
    assert not client.server.bind_groups.cache


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
    # Nested tokens.
    (_, inner), outer = client.profile(lambda: client.profile(lambda: client.launch(ADD_ONE, 1, [x], [n])))
    assert outer.seconds() >= 0 and inner.seconds() >= 0


def test_reserve_staging(client) -> None:  # type: ignore[no-untyped-def]
    bufs = client.reserve_staging([1024, 0, 10])
    assert [b.nbytes for b in bufs] == [1024, 0, 10]
    bufs[0][:] = np.arange(1024) % 251
    h = client.create(bufs[0])
    bufs[0][:] = 0
    np.testing.assert_array_equal(client.to_numpy(h, "u8"), np.arange(1024) % 251)
    with pytest.raises(ValidationError):
        client.reserve_staging([-1])


def test_threads_on_their_own_streams_with_cross_stream_reads(client) -> None:  # type: ignore[no-untyped-def]
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
    n = 1 << 16
    x = client.create(np.zeros(n, np.int32))
    with client.stream():
        for _ in range(60):
            client.launch(ADD_ONE, n // 64, [x], [n])
    with client.stream():
        y = client.empty(n * 4)
        copy = client.to_client(x, client)
        client.launch(FILL, n // 64, [y], [1.0, n])
        client.launch(ADD_ONE, n // 64, [x], [n])
        got = client.to_numpy(x, "i32")
    np.testing.assert_array_equal(got, np.full(n, 61, np.int32))
    np.testing.assert_array_equal(client.to_numpy(copy, "i32"), np.full(n, 60, np.int32))


def test_wgsl_compile_error_maps_lines(client) -> None:  # type: ignore[no-untyped-def]
    bad = Kernel(
        "bad",
        [Buffer("x", "f32")],
        {
            "wgsl": "@compute @workgroup_size(CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z)\n"
            "fn bad(@builtin(global_invocation_id) g: vec3<u32>) {\n"
            "    x[g.x] = undefined_name;\n}\n"
        },
        cube_dim=64,
    )
    with pytest.raises(CompileError) as info:
        client.launch(bad, 1, [client.empty(256)], [])
    err = info.value
    assert err.line == 3 and err.col == 14, (err.line, err.col)
    assert "undefined_name" in str(err) and "undefined_name" in err.log
    assert "   3 |     x[g.x] = undefined_name;" in err.dump()
    # Writing a buffer declared "read" is refused at compile time.
    writes_read = Kernel(
        "writes_read",
        [Buffer("x", "f32", "read")],
        {
            "wgsl": "@compute @workgroup_size(CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z)\n"
            "fn writes_read() { x[0] = 1.0; }\n"
        },
    )
    with pytest.raises(CompileError) as info2:
        client.launch(writes_read, 1, [client.empty(4)], [])
    assert info2.value.line == 2
    missing_entry = Kernel(
        "nope", [Buffer("x", "f32")], {"wgsl": "@compute @workgroup_size(1) fn other() {}"}
    )
    with pytest.raises(CompileError, match="nope"):
        client.launch(missing_entry, 1, [client.empty(4)], [])
    x = client.create(np.zeros(64, np.int32))
    client.launch(ADD_ONE, 1, [x], [64])
    assert client.to_numpy(x, "i32").sum() == 64


def test_bad_inputs_keep_other_handles_intact(client) -> None:  # type: ignore[no-untyped-def]
    good = client.create(np.arange(64, dtype=np.int32))
    dropped = client.create(np.zeros(64, np.int32))
    dropped.drop()
    other = make_client()
    other_client_handle = other.create(np.zeros(64, np.int32))
    cases = [
        lambda: client.launch(ADD_ONE, 1, [], [64]),
        lambda: client.launch(ADD_ONE, 1, [good, good], [64]),
        lambda: client.launch(ADD_ONE, 1, [good], [-1]),
        lambda: client.launch(ADD_ONE, 1, [good], [1.5]),
        lambda: client.launch(ADD_ONE, 1, [dropped], [64]),
        lambda: client.launch_unchecked(ADD_ONE, 1, [dropped], [64]),
        lambda: client.launch(ADD_ONE, 1, [client.create(b"abc")], [64]),
        lambda: client.launch(ADD_ONE, 1, ["not a handle"], [64]),
        lambda: client.launch(add_scalar("f32"), 1, [good, good], ["x", 1]),
        lambda: client.launch_unchecked(AXPY, 1, [good, good], [1.0]),
        lambda: client.launch_unchecked(ADD_ONE, 1, [other_client_handle], [64]),
        lambda: client.empty(-5),
        lambda: client.create([1, 2, 3]),
        lambda: client.read_one(dropped),
    ]
    for i, case in enumerate(cases):
        with pytest.raises(ValidationError):
            case()
            pytest.fail(f"case {i} did not raise ValidationError")
    other.close()
    client.sync()
    got = client.to_numpy(good, "i32")
    np.testing.assert_array_equal(got, np.arange(64))
    client.launch(ADD_ONE, 1, [good], [64])
    assert client.to_numpy(good, "i32")[0] == got[0] + 1


def test_dropping_a_handle_with_queued_work_keeps_its_memory(fresh_client) -> None:  # type: ignore[no-untyped-def]
    """Queued work holds the slice: a handle dropped before the flush is not reused under it."""
    from tests.backends.webgpu.kernels import AXPY

    n = 64
    x = fresh_client.create(np.full(n, 3, dtype=np.float32))
    y = fresh_client.create(np.zeros(n, dtype=np.float32))
    fresh_client.launch(AXPY, 1, [x, y], [1.0, n])  # queued, not yet submitted
    x.drop()
    again = fresh_client.create(np.full(n, 100, dtype=np.float32))  # must not land in x's slice
    np.testing.assert_array_equal(fresh_client.to_numpy(y, "f32"), np.full(n, 3, dtype=np.float32))
    np.testing.assert_array_equal(fresh_client.to_numpy(again, "f32"), np.full(n, 100, dtype=np.float32))


def test_unchecked_scalars_that_do_not_fit_are_validation_errors(client) -> None:  # type: ignore[no-untyped-def]
    n = 64
    x = client.create(np.ones(n, dtype=np.float32))
    y = client.create(np.zeros(n, dtype=np.float32))
    cases = [
        [1e39, n],  # beyond f32: OverflowError from struct
        [1.0, -1],  # not a u32: struct.error
        [1.0, 2**32],
        ["two", n],
        [1.0],  # one value short
    ]
    for values in cases:
        with pytest.raises(ValidationError, match=r"kernel 'axpy'.*\(a: f32, n: u32\)"):
            client.launch_unchecked(AXPY, 1, [x, y], values)
    # Python numbers and numpy scalars both pack, in any mix.
    client.launch_unchecked(AXPY, 1, [x, y], [2, np.uint32(n)])
    client.launch_unchecked(AXPY, 1, [x, y], [np.float64(0.5), n])
    client.launch(AXPY, 1, [x, y], [np.float32(0.25), np.int64(n)])
    np.testing.assert_array_equal(client.to_numpy(y, "f32"), np.full(n, 2.75, dtype=np.float32))


def _slow_launches(client, x) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """Rounds and launches of SLOW over ``x`` that keep this adapter busy for about half a second."""
    # lavapipe (a CPU adapter) ends any loop after 65535 iterations.
    rounds = 60_000 if str(client.properties["adapter_type"]).lower() == "cpu" else 1 << 20
    client.launch(ADD_ONE, 1, [x], [0])  # compiled before the timing, as the test launches it
    start = time.perf_counter()
    client.launch(SLOW, x.size // 256, [x], [rounds])
    client.sync()
    one = time.perf_counter() - start
    return rounds, max(1, min(64, math.ceil(0.5 / max(one, 1e-3))))


def test_a_thread_waiting_in_sync_does_not_stall_other_threads(client) -> None:  # type: ignore[no-untyped-def]
    n = 1 << 12
    x = client.create(np.zeros(n, np.int32))
    rounds, launches = _slow_launches(client, x)

    def launch_slow() -> None:
        for _ in range(launches):
            client.launch(SLOW, n // 64, [x], [rounds])

    def meanwhile() -> object:
        client.memory_usage()  # needs the client's lock, not the device
        # Another stream's work is queued meanwhile (a flush would wait for the device here:
        # lavapipe keeps one submission in flight, so a second submit blocks until the first ran).
        y = client.create(np.zeros(64, np.int32))
        client.launch(ADD_ONE, 1, [y], [64])
        return y

    y = assert_sync_does_not_stall(client, launch_slow, meanwhile)
    assert client.to_numpy(y, "i32").sum() == 64
    assert set(client.to_numpy(x, "i32").tolist()) <= {-1, 5}


def test_sync_waits_outside_the_lock_and_still_raises_async_errors(fresh_client) -> None:  # type: ignore[no-untyped-def]
    client = fresh_client
    server = client.server
    x = client.create(np.zeros(64, np.int32))
    sid = server.stream_id(current_stream_id())
    bad = (wgpu_queue.DISPATCH, None, None, None, 1, 1, 1, ())  # a pipeline that is not one: encoding fails
    server.scheduler.register(sid, bad)
    with pytest.raises(LaunchError, match="queued tasks failed"):
        client.sync()
    client.launch(ADD_ONE, 1, [x], [64])
    client.sync()  # the error was raised once; the client keeps working
    assert client.to_numpy(x, "i32").sum() == 64
    # sync_begin submits under the lock and leaves the waiting, and the error, to its wait.
    server.scheduler.register(sid, bad)
    wait = server.sync_begin(sid)
    assert callable(wait)
    with pytest.raises(LaunchError, match="queued tasks failed"):
        wait()
    client.sync(all_streams=True)


def test_close_stops_every_thread_of_the_client() -> None:
    """close() leaves no thread of the client running while the client is still referenced: the
    completer, and wgpu's poll thread of its device (which lived until the closed client was
    collected, a thread and a device per closed client)."""
    before = set(threading.enumerate())
    other = make_client()
    h = other.create(np.arange(64, dtype=np.float32))
    assert other.to_numpy(h, "f32")[5] == 5  # a read-back wakes the poll thread
    assert set(threading.enumerate()) - before, "the client runs no thread: nothing to test"
    other.close()
    left = [t for t in set(threading.enumerate()) - before if t.is_alive()]
    assert not left, f"threads still running after close: {left}"  # `other` is still referenced


def test_closing_a_server_twice_does_nothing_the_second_time() -> None:
    other = make_client()
    h = other.create(np.arange(64, dtype=np.float32))
    assert other.to_numpy(h, "f32")[5] == 5
    server = other.server
    other.close()
    server.close()  # it raised: it flushed and waited on the destroyed device (wgpu validation error)
