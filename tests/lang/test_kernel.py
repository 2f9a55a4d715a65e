"""Differential tests: lang kernels on every backend against numpy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cubeplug
from cubeplug import lang as cl
from tests.lang import kernels as k
from tests.lang.conftest import BACKENDS

RNG = np.random.default_rng(7)


def test_readme_example(client: Any) -> None:
    x = client.create(np.ones(1000, np.float32))
    y = client.create(np.arange(1000, dtype=np.float32))
    k.axpy.launch(client, cubeplug.CubeCount(4), (256, 1, 1), x, y, 2.0)
    k.axpy.launch_unchecked(client, cubeplug.CubeCount(4), 256, x, y, 2.0)
    np.testing.assert_array_equal(client.to_numpy(y, "f32"), np.arange(1000) + 4.0)


def test_axpy_random(client: Any) -> None:
    xs = RNG.standard_normal(3001).astype(np.float32)
    ys = RNG.standard_normal(3001).astype(np.float32)
    x, y = client.create(xs), client.create(ys)
    k.axpy.launch(client, cubeplug.CubeCount(12), 256, x, y, -1.5)
    np.testing.assert_allclose(client.to_numpy(y, "f32"), ys + np.float32(-1.5) * xs, rtol=1e-5, atol=1e-6)


def test_stencil_2d(client: Any) -> None:
    h, w = 37, 53
    grid = RNG.random((h, w), dtype=np.float32)
    src, dst = client.create(grid), client.create(np.zeros_like(grid))
    k.stencil.launch(client, cubeplug.CubeCount(4, 5), (16, 8, 1), src, dst, w, h)
    want = grid.copy()
    want[1:-1, 1:-1] = np.float32(0.2) * (
        grid[1:-1, 1:-1] + grid[1:-1, :-2] + grid[1:-1, 2:] + grid[:-2, 1:-1] + grid[2:, 1:-1]
    )
    np.testing.assert_allclose(client.to_numpy(dst, "f32", (h, w)), want, rtol=1e-5)


@pytest.mark.parametrize("block", [64, 256])
def test_block_sum_shared_and_sync(client: Any, block: int) -> None:
    xs = RNG.random(5 * block - 17, dtype=np.float32)
    x, out = client.create(xs), client.create(np.zeros(5, np.float32))
    k.block_sum.launch(client, cubeplug.CubeCount(5), block, x, out, BLOCK=block)
    want = [xs[i * block:(i + 1) * block].sum(dtype=np.float64) for i in range(5)]
    np.testing.assert_allclose(client.to_numpy(out, "f32"), want, rtol=1e-5)


def test_while_break(client: Any) -> None:
    stride = 19
    xs = RNG.random(40 * stride, dtype=np.float32)
    xs[5 * stride:6 * stride] = 0.0  # a row with no hit
    x, out = client.create(xs), client.create(np.zeros(40, np.int32))
    k.first_above.launch(client, cubeplug.CubeCount(1), 64, x, out, 0.9, stride)
    rows = xs.reshape(40, stride) > np.float32(0.9)
    want = np.where(rows.any(axis=1), rows.argmax(axis=1), -1)
    np.testing.assert_array_equal(client.to_numpy(out, "i32"), want)


def test_comptime_variants(client: Any) -> None:
    xs = RNG.random(300, dtype=np.float32)
    x, y = client.create(xs), client.create(np.zeros(300, np.float32))
    k.scale_or_square.launch(client, cubeplug.CubeCount(2), 256, x, y, SQUARE=True, FACTOR=0.0)
    np.testing.assert_allclose(client.to_numpy(y, "f32"), xs * xs, rtol=1e-6)
    k.scale_or_square.launch(client, cubeplug.CubeCount(2), 256, x, y, SQUARE=False, FACTOR=3.5)
    np.testing.assert_allclose(client.to_numpy(y, "f32"), xs * np.float32(3.5), rtol=1e-6)
    square = k.scale_or_square.source(client, 256, SQUARE=True, FACTOR=0.0)
    scale = k.scale_or_square.source(client, 256, SQUARE=False, FACTOR=3.5)
    assert square != scale
    assert "3.5" in scale and "3.5" not in square  # the untaken branch is folded away


def test_func_helpers_inlined(client: Any) -> None:
    xs = np.linspace(-0.5, 1.5, 500, dtype=np.float32)
    x, y = client.create(xs), client.create(np.zeros(500, np.float32))
    k.smoothstep.launch(client, cubeplug.CubeCount(2), 256, x, y)
    c = np.clip(xs, 0, 1)
    np.testing.assert_allclose(client.to_numpy(y, "f32"), c * c * (3 - 2 * c), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("m", "n", "kk"), [(32, 48, 40), (19, 23, 29)])
def test_tiled_matmul(client: Any, m: int, n: int, kk: int) -> None:
    t = 8
    a = RNG.standard_normal((m, kk)).astype(np.float32)
    b = RNG.standard_normal((kk, n)).astype(np.float32)
    ha, hb = client.create(a), client.create(b)
    hc = client.create(np.zeros((m, n), np.float32))
    count = cubeplug.CubeCount(-(-n // t), -(-m // t))
    k.matmul.launch(client, count, (t, t, 1), ha, hb, hc, m, n, kk, T=t)
    np.testing.assert_allclose(client.to_numpy(hc, "f32", (m, n)), a @ b, rtol=1e-4, atol=1e-4)


def test_atomic_histogram(client: Any) -> None:
    xs = RNG.integers(0, 1000, 4000).astype(np.uint32)
    x, bins = client.create(xs), client.create(np.zeros(16, np.uint32))
    k.histogram.launch(client, cubeplug.CubeCount(16), 256, x, bins, NBINS=16)
    np.testing.assert_array_equal(client.to_numpy(bins, "u32"), np.bincount(xs % 16, minlength=16))


def test_atomic_ops_return_old_values(client: Any) -> None:
    vs = RNG.integers(-50, 50, 300).astype(np.int32)
    counters = client.create(np.array([0, -1000, 1000, 0], np.int32))
    olds, v = client.create(np.zeros(300, np.int32)), client.create(vs)
    k.atomics.launch(client, cubeplug.CubeCount(2), 256, counters, olds, v)
    got = client.to_numpy(counters, "i32")
    assert list(got) == [vs.sum(), vs.max(), vs.min(), 300]
    # The old values of the adds are the prefix sums of some order of the adds: all distinct
    # states, the final one excluded.
    old = np.sort(client.to_numpy(olds, "i32"))
    assert len(old) == 300 and old.min() >= -50 * 300 and old.max() <= 50 * 300


def test_checked_launch_drops_out_of_bounds_writes(client: Any) -> None:
    guard = client.create(np.full(64, -1.0, np.float32))
    y = guard.offset_end(32 * 4)  # a view of the first 32 elements; the rest must stay -1
    k.write_all.launch(client, cubeplug.CubeCount(1), 64, y, 64)
    got = client.to_numpy(guard, "f32")
    np.testing.assert_array_equal(got[:32], np.arange(32))
    np.testing.assert_array_equal(got[32:], -1.0)


def test_math_builtins(client: Any) -> None:
    xs = RNG.random(700, dtype=np.float32) * 3
    x, y = client.create(xs), client.create(np.zeros(700, np.float32))
    k.math_mix.launch(client, cubeplug.CubeCount(3), 256, x, y)
    v = xs.astype(np.float64)
    want = (np.sqrt(v) + np.exp(-v) + np.log(v + 1) + np.sin(v) * np.cos(v) + np.tanh(v)
            + abs(v - 1) + np.minimum(v, 0.5) + np.maximum(v, 0.25) + np.floor(v * 3) + np.ceil(v * 2)
            + v ** 2.5 + (v * 2 + 1))
    got = client.to_numpy(y, "f32")
    # floor/ceil of values a rounding away from an integer may differ by 1 between devices.
    close = np.isclose(got, want, rtol=1e-4, atol=1e-4)
    assert close.mean() > 0.99, got[~close][:5]


def test_integer_semantics(client: Any) -> None:
    a = RNG.integers(-(2**20), 2**20, 500).astype(np.int32)
    b = RNG.integers(1, 300, 500).astype(np.int32) * np.where(RNG.random(500) < 0.5, -1, 1).astype(np.int32)
    ha, hb, out = client.create(a), client.create(b), client.create(np.zeros(500, np.int32))
    k.int_ops.launch(client, cubeplug.CubeCount(2), 256, ha, hb, out)
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    q = np.trunc(a64 / b64).astype(np.int64)
    r = q + (a64 - q * b64) * 3
    r += (a64 << 2) ^ (b64 >> 1)
    r += (a64 & 0xFF) | 7
    r += np.where(a64 < b64, -a64, ~b64)
    r += (a.view(np.uint32) >> 28).astype(np.int64)
    r += np.trunc(a.astype(np.float32) * np.float32(0.5)).astype(np.int64)
    np.testing.assert_array_equal(client.to_numpy(out, "i32"), r.astype(np.int32))


def test_grid_stride_range_with_continue(client: Any) -> None:
    xs = RNG.standard_normal(5000).astype(np.float32)
    x, out = client.create(xs), client.create(np.zeros(2 * 128, np.float32))
    k.grid_stride.launch(client, cubeplug.CubeCount(2), 128, x, out)
    want = np.array([xs[j::256][xs[j::256] > 0].sum() for j in range(256)])
    np.testing.assert_allclose(client.to_numpy(out, "f32"), want, rtol=1e-4, atol=1e-5)


def test_unchecked_launch_skips_checks(cpu: Any) -> None:
    checked = k.axpy.source(cpu, 256)
    unchecked = k.axpy.source(cpu, 256, checked=False)
    assert "?]" in checked and "?]" not in unchecked


def test_scalars_are_read_once_in_wgsl_and_user_names_never_clash_with_the_copies(client: Any) -> None:
    source = k.grid_stride.source(client, 256) if client.backend == "webgpu" else None
    if source is not None:
        # every scalar is copied into a let when the kernel starts; the body reads only the copies
        head, _, body = source.partition("let cl_s_len_out = scalars.len_out;")
        assert "let cl_s_len_x = scalars.len_x;" in head and "scalars." not in body and "cl_s_len_x" in body
    x = client.create(np.zeros(8, np.float32))
    k.prefixed_names.launch(client, 1, 64, x, 3, 5)
    np.testing.assert_array_equal(client.to_numpy(x, "f32"), [8.0] * 5 + [0.0] * 3)


def test_generated_source_is_deterministic(client: Any) -> None:
    first = k.matmul.source(client, (8, 8, 1), T=8)
    k.matmul._specs.clear()
    assert k.matmul.source(client, (8, 8, 1), T=8) == first


def test_launches_are_cached(cpu: Any) -> None:
    x, y = cpu.create(np.ones(10, np.float32)), cpu.create(np.zeros(10, np.float32))
    kern = cl.kernel(k.axpy.fn)
    for _ in range(3):
        kern.launch(cpu, 1, 256, x, y, 1.0)
        kern.launch(cpu, 1, (256, 1, 1), x, y, 1.0)
    assert len(kern._specs) == 1  # 256 and (256, 1, 1) share one specialization
    assert len(kern._launchers) == 2
    np.testing.assert_array_equal(cpu.to_numpy(y, "f32"), 6.0)


def test_wrong_argument_count_and_type(cpu: Any) -> None:
    x = cpu.create(np.ones(10, np.float32))
    with pytest.raises(cubeplug.ValidationError, match="takes 3 arguments"):
        k.axpy.launch(cpu, 1, 32, x, x)
    with pytest.raises(cubeplug.ValidationError, match="Handle"):
        k.axpy.launch(cpu, 1, 32, x, np.ones(3), 1.0)


def test_calling_a_kernel_or_builtin_outside_a_kernel_raises() -> None:
    with pytest.raises(cl.NotInKernelError):
        k.axpy(1, 2, 3)
    with pytest.raises(cl.NotInKernelError):
        cl.sync_cube()
    assert cl.f32(1.5) == np.float32(1.5)


@pytest.mark.parametrize("dtype", ["f32", "i32", "u32"])
def test_comptime_dtype_parameter(client: Any, dtype: str) -> None:
    np_dtype = getattr(cl, dtype).np
    xs = (RNG.random(300) * 100).astype(np_dtype)
    x, y = client.create(xs), client.create(np.zeros(300, np_dtype))
    k.generic_scale.launch(client, cubeplug.CubeCount(2), 256, x, y, T=getattr(cl, dtype))
    np.testing.assert_allclose(client.to_numpy(y, dtype), xs * 3 + 1, rtol=1e-6)


def test_alternating_clients_and_cube_dims(cpu: Any) -> None:
    from tests.std.conftest import make_client

    other = make_client("cpu")
    try:
        ones, zeros = np.ones(300, np.float32), np.zeros(300, np.float32)
        hs = [(c, c.create(ones), c.create(zeros)) for c in (cpu, other)]
        for _ in range(2):
            for dim in (64, 128):
                for c, x, y in hs:
                    k.axpy.launch(c, cubeplug.CubeCount(-(-300 // dim)), dim, x, y, 1.0)
        for c, _, y in hs:
            np.testing.assert_array_equal(c.to_numpy(y, "f32"), 4.0)
    finally:
        other.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_client_dropped_without_close_is_collected(cpu: Any, backend: str) -> None:
    """The launchers, their cache and the fast dispatchers hold a client weakly: dropped without
    close() after launches of every kind (checked, unchecked, a comptime kernel, the dict path and
    the dispatcher), it is collected, its cache entries go, and the kernels launch on other clients."""
    import gc
    import weakref

    from tests.std.conftest import make_client, skip_reason

    reason = skip_reason(backend)
    if reason is not None:
        pytest.skip(reason)
    axpy, scale = cl.kernel(k.axpy.fn), cl.kernel(k.generic_scale.fn)
    client = make_client(backend)
    xs = np.arange(300, dtype=np.float32)
    x, y, z = client.create(xs), client.create(np.zeros(300, np.float32)), client.empty(1200)
    count = cubeplug.CubeCount(2)
    for _ in range(2):  # the second launch of each takes the generated dispatcher
        axpy.launch(client, count, 256, x, y, 1.0)
        axpy.launch_unchecked(client, count, 256, x, y, 1.0)
        scale.launch(client, count, 256, x, z, T=cl.f32)
    np.testing.assert_array_equal(client.to_numpy(y, "f32"), xs * 4)
    np.testing.assert_array_equal(client.to_numpy(z, "f32"), xs * 3 + 1)
    assert len(axpy._launchers) == len(axpy._unchecked) == len(scale._launchers) == 1
    gone = weakref.ref(client)
    del client, x, y, z
    gc.collect()
    assert gone() is None, "the lang kernels keep the dropped client alive"
    assert axpy._launchers == axpy._unchecked == scale._launchers == {}  # its entries went with it
    x, y = cpu.create(xs), cpu.create(np.zeros(300, np.float32))
    for _ in range(2):  # the dispatcher's client is gone: another one takes the general path
        axpy.launch(cpu, count, 256, x, y, 1.0)
        scale.launch(cpu, count, 256, x, y, T=cl.f32)
    np.testing.assert_array_equal(cpu.to_numpy(y, "f32"), xs * 3 + 1)


def test_fast_dispatcher_reports_bad_arguments(cpu: Any) -> None:
    kern = cl.kernel(k.axpy.fn)
    x, y = cpu.create(np.ones(10, np.float32)), cpu.create(np.zeros(10, np.float32))
    kern.launch(cpu, 1, 32, x, y, 1.0)
    kern.launch(cpu, 1, 32, x, y, 1.0)  # the generated dispatcher now
    assert "launch" in vars(kern)
    with pytest.raises(cubeplug.ValidationError, match="takes 3 arguments"):
        kern.launch(cpu, 1, 32, x, y)
    with pytest.raises(cubeplug.ValidationError, match="takes 3 arguments"):
        kern.launch(cpu, 1, 32, x, y, 1.0, 2.0)
    with pytest.raises(cubeplug.ValidationError, match="Handle"):
        kern.launch(cpu, 1, 32, x, np.ones(3), 1.0)
    np.testing.assert_array_equal(cpu.to_numpy(y, "f32"), 2.0)


def test_a_launch_method_bound_before_the_first_launch_takes_the_dispatcher(cpu: Any) -> None:
    kern = cl.kernel(k.axpy.fn)
    x, y = cpu.create(np.ones(10, np.float32)), cpu.create(np.zeros(10, np.float32))
    go, go_unchecked = kern.launch, kern.launch_unchecked  # the class's methods, bound early
    go(cpu, 1, 32, x, y, 1.0)
    go_unchecked(cpu, 1, 32, x, y, 1.0)
    assert "launch" in vars(kern) and "launch_unchecked" in vars(kern)

    def dict_path(*args: Any) -> None:
        raise AssertionError("took the dict path")

    kern._dispatch = dict_path  # type: ignore[method-assign]
    go(cpu, 1, 32, x, y, 1.0)  # same client and cube dim: the generated dispatcher
    go_unchecked(cpu, 1, 32, x, y, 1.0)
    np.testing.assert_array_equal(cpu.to_numpy(y, "f32"), 4.0)


def test_comptime_kernels_take_the_dispatcher_for_repeated_values(cpu: Any) -> None:
    kern = cl.kernel(k.scale_or_square.fn)
    xs = np.arange(10, dtype=np.float32)
    x, y = cpu.create(xs), cpu.create(np.zeros(10, np.float32))
    kern.launch(cpu, 1, 32, x, y, SQUARE=False, FACTOR=2.0)
    assert "launch" in vars(kern)
    calls: list[dict[str, Any]] = []
    slow = kern._dispatch

    def counting(*args: Any) -> None:
        calls.append(args[-1])
        slow(*args)

    kern._dispatch = counting  # type: ignore[method-assign]
    kern.launch(cpu, 1, 32, x, y, SQUARE=False, FACTOR=2.0)  # the same values: the fast path
    assert calls == []
    np.testing.assert_array_equal(cpu.to_numpy(y, "f32"), xs * 2)
    kern.launch(cpu, 1, 32, x, y, SQUARE=True, FACTOR=2.0)  # other values: the dict path
    assert calls == [{"SQUARE": True, "FACTOR": 2.0}]
    np.testing.assert_array_equal(cpu.to_numpy(y, "f32"), xs * xs)
    kern.launch(cpu, 1, 32, x, y, SQUARE=True, FACTOR=2.0)  # remembered in turn
    assert len(calls) == 1
    with pytest.raises(cubeplug.ValidationError, match="takes 2 arguments"):
        kern.launch(cpu, 1, 32, x, SQUARE=True, FACTOR=2.0)


def test_a_range_step_is_evaluated_once(client: Any) -> None:
    # 5 passes of each loop on every backend: the generated for loops re-read their step at every
    # pass, so a step the body could change is copied before the loop, as its stop is.
    out, steps = client.create(np.zeros(64, np.uint32)), client.create(np.full(64, 2, np.uint32))
    k.step_changed_in_body.launch(client, cubeplug.CubeCount(1), 64, out, steps)
    np.testing.assert_array_equal(client.to_numpy(out, "u32"), np.full(64, 55, np.uint32))
    np.testing.assert_array_equal(client.to_numpy(steps, "u32"), np.full(64, 100, np.uint32))
