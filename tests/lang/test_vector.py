"""``Vec[T, W]`` elements: vector arrays, lanes, elementwise operators, construction; every backend."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cubeplug
from cubeplug import lang as cl
from cubeplug.lang import Array, Vec, f32, i32

RNG = np.random.default_rng(4)
F4 = Vec[f32, 4]


@cl.kernel
def vec_axpy(x: Array[Vec[f32, 4]], y: Array[Vec[f32, 4]], a: f32):
    i = cl.ABSOLUTE_POS
    if i < len(y):
        y[i] = a * x[i] + y[i]


@cl.kernel
def vec_ops(x: Array[Vec[f32, 4]], y: Array[Vec[f32, 4]], out: Array[Vec[f32, 4]], sums: Array[f32]):
    i = cl.ABSOLUTE_POS
    if i < len(x):
        v = x[i]
        w = y[i]
        r = (v + w) * 2.0 - v / w
        r.y = v.x + w[3]
        r[2] += 1.0
        r = -r + (v // w) * 0.5 + v % w
        out[i] = r
        sums[i] = v.x + v.y + v.z + v.w


@cl.kernel
def vec_int(a: Array[Vec[i32, 2]], b: Array[Vec[i32, 2]], out: Array[Vec[i32, 2]]):
    i = cl.ABSOLUTE_POS
    if i < len(a):
        p = a[i]
        q = b[i]
        out[i] = (p // q) ^ (p % q) + (p & 7) * 3 - (-q)


@cl.kernel
def pack(x: Array[f32], out: Array[Vec[f32, 4]]):
    """Builds vectors from scalars: lanes (4i, 4i+1, 4i+2, 4i+3), plus a splat."""
    i = cl.ABSOLUTE_POS
    if i < len(out):
        v = F4(x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3])
        out[i] = v + F4(f32(i))


@cl.kernel
def reverse_in_cube(x: Array[Vec[f32, 2]], out: Array[Vec[f32, 2]]):
    """A shared array of vectors: each cube reverses its 64 elements (and swaps their lanes)."""
    buf = cl.shared(Vec[f32, 2], 64)
    buf[cl.UNIT_POS] = x[cl.ABSOLUTE_POS]
    cl.sync_cube()
    v = buf[63 - cl.UNIT_POS]
    out[cl.ABSOLUTE_POS] = Vec[f32, 2](v.y, v.x)


@cl.kernel
def scalar_width_one(x: Array[Vec[f32, 1]], y: Array[f32]):
    i = cl.ABSOLUTE_POS
    if i < len(x):
        y[i] = x[i] * 2.0


def _vecs(client: Any, arr: np.ndarray) -> Any:
    return client.create(np.ascontiguousarray(arr))


@pytest.mark.parametrize("n", [300, 1000])
def test_vec4_axpy(client: Any, n: int) -> None:
    xs = RNG.standard_normal((n, 4)).astype(np.float32)
    ys = RNG.standard_normal((n, 4)).astype(np.float32)
    x, y = _vecs(client, xs), _vecs(client, ys)
    vec_axpy.launch(client, cubeplug.CubeCount(-(-n // 128)), 128, x, y, 0.75)
    got = client.to_numpy(y, "f32").reshape(n, 4)
    np.testing.assert_allclose(got, np.float32(0.75) * xs + ys, rtol=1e-5, atol=1e-6)


def test_vec4_operators_and_lanes(client: Any) -> None:
    n = 257
    xs = RNG.uniform(0.5, 4, (n, 4)).astype(np.float32)
    ys = RNG.uniform(0.5, 4, (n, 4)).astype(np.float32)
    x, y = _vecs(client, xs), _vecs(client, ys)
    out, sums = _vecs(client, np.zeros((n, 4), np.float32)), client.create(np.zeros(n, np.float32))
    vec_ops.launch(client, cubeplug.CubeCount(3), 128, x, y, out, sums)
    r = (xs + ys) * np.float32(2) - xs / ys
    r[:, 1] = xs[:, 0] + ys[:, 3]
    r[:, 2] += 1
    r = -r + np.floor(xs / ys) * np.float32(0.5) + np.fmod(xs, ys)
    np.testing.assert_allclose(client.to_numpy(out, "f32").reshape(n, 4), r, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(client.to_numpy(sums, "f32"), xs.sum(axis=1), rtol=1e-5)


def test_vec2_integer_operators(client: Any) -> None:
    n = 200
    a = RNG.integers(-1000, 1000, (n, 2)).astype(np.int32)
    b = (RNG.integers(1, 50, (n, 2)) * RNG.choice([-1, 1], (n, 2))).astype(np.int32)
    ha, hb, out = _vecs(client, a), _vecs(client, b), _vecs(client, np.zeros((n, 2), np.int32))
    vec_int.launch(client, cubeplug.CubeCount(1), 256, ha, hb, out)
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    q = np.trunc(a64 / b64).astype(np.int64)
    want = q ^ (a64 - q * b64) + (a64 & 7) * 3 + b64
    np.testing.assert_array_equal(client.to_numpy(out, "i32").reshape(n, 2), want.astype(np.int32))


def test_vec_construction_and_splat(client: Any) -> None:
    xs = RNG.standard_normal(4 * 77).astype(np.float32)
    x, out = client.create(xs), _vecs(client, np.zeros((77, 4), np.float32))
    pack.launch(client, cubeplug.CubeCount(1), 128, x, out)
    want = xs.reshape(77, 4) + np.arange(77, dtype=np.float32)[:, None]
    np.testing.assert_allclose(client.to_numpy(out, "f32").reshape(77, 4), want, rtol=1e-6)


def test_shared_vec2_array(client: Any) -> None:
    xs = RNG.standard_normal((128, 2)).astype(np.float32)
    x, out = _vecs(client, xs), _vecs(client, np.zeros((128, 2), np.float32))
    reverse_in_cube.launch(client, cubeplug.CubeCount(2), 64, x, out)
    want = xs.reshape(2, 64, 2)[:, ::-1, ::-1].reshape(128, 2)
    np.testing.assert_array_equal(client.to_numpy(out, "f32").reshape(128, 2), want)


def test_width_one_is_the_scalar(client: Any) -> None:
    xs = RNG.standard_normal(50).astype(np.float32)
    x, y = client.create(xs), client.create(np.zeros(50, np.float32))
    scalar_width_one.launch(client, 1, 64, x, y)
    np.testing.assert_allclose(client.to_numpy(y, "f32"), xs * 2, rtol=1e-6)


def test_checked_vec_write_is_dropped(client: Any) -> None:
    guard = client.create(np.full((8, 4), -1.0, np.float32))
    y = guard.offset_end(4 * 16)  # the first 4 vectors
    x = client.create(np.ones((8, 4), np.float32))

    @cl.kernel
    def copy_all(x: Array[Vec[f32, 4]], y: Array[Vec[f32, 4]]):
        y[cl.ABSOLUTE_POS] = x[cl.ABSOLUTE_POS]

    copy_all.launch(client, 1, 8, x, y)
    got = client.to_numpy(guard, "f32").reshape(8, 4)
    np.testing.assert_array_equal(got[:4], 1.0)
    np.testing.assert_array_equal(got[4:], -1.0)


def test_outside_kernels_a_vec_type_builds_an_array() -> None:
    np.testing.assert_array_equal(F4(1, 2, 3, 4), np.array([1, 2, 3, 4], np.float32))
    np.testing.assert_array_equal(F4(2), np.full(4, 2, np.float32))
    assert Vec[f32, 1] is f32


@cl.kernel
def compare_vectors(x: Array[Vec[f32, 4]], y: Array[f32]):
    if x[0] < x[1]:
        y[0] = 1.0


@cl.kernel
def lane_out_of_width(x: Array[Vec[f32, 2]], y: Array[f32]):
    y[0] = x[0].z


@cl.kernel
def scalar_cast_of_vector(x: Array[Vec[f32, 4]], y: Array[Vec[f32, 4]]):
    y[0] = F4(f32(x[0]))


@cl.kernel
def width_three(x: Array[Vec[f32, 3]]):
    pass


@cl.kernel
def runtime_lane(x: Array[Vec[f32, 4]], y: Array[f32], k: i32):
    y[0] = x[0][k]


@cl.kernel
def mixed_widths(x: Array[Vec[f32, 4]], y: Array[Vec[f32, 2]]):
    y[0] = x[0] + y[0]


@pytest.mark.parametrize(("kern", "error", "match"), [
    (compare_vectors, cl.KernelTypeError, "any\\(mask\\) or all\\(mask\\)"),
    (lane_out_of_width, cl.KernelTypeError, "has lanes x, y"),
    (scalar_cast_of_vector, cl.KernelTypeError, "takes scalars"),
    (width_three, cl.KernelSyntaxError, "widths are 1, 2 or 4"),
    (runtime_lane, cl.KernelSyntaxError, "comptime int"),
    (mixed_widths, cl.KernelTypeError, "mismatched vector types"),
])
def test_vector_errors(kern: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match) as info:
        kern.ir(32)
    assert "test_vector.py:" in str(info.value)
