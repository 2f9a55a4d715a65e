"""``return`` anywhere: early exits from kernels (also inside loops), uniform returns before a
barrier, early returns in ``@cl.func`` helpers; the verifier's rejections."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cubeplug
from cubeplug import lang as cl
from cubeplug.lang import Array, f32, i32, u32

RNG = np.random.default_rng(99)


@cl.kernel
def first_negative(x: Array[f32], out: Array[i32], width: u32):
    """Each unit scans its row; it writes the first negative's column and returns from the loop."""
    row = cl.ABSOLUTE_POS
    if row * width >= len(x):
        return
    for j in range(width):
        if x[row * width + j] < 0.0:
            out[row] = i32(j)
            return
    out[row] = -1


@cl.kernel
def uniform_return_then_sync(x: Array[f32], out: Array[f32], cubes: u32):
    """Cubes past ``cubes`` leave at once (a uniform return); the others reverse through shared memory."""
    if cubes <= cl.CUBE_POS:
        return
    buf = cl.shared(f32, 32)
    buf[cl.UNIT_POS] = x[cl.ABSOLUTE_POS]
    cl.sync_cube()
    out[cl.ABSOLUTE_POS] = buf[31 - cl.UNIT_POS]


@cl.func
def classify(v: f32) -> f32:
    if v < 0.0:
        return -1.0
    elif v > 10.0:
        big = v * 0.5
        return big
    if v == 0.0:
        return 0.0
    return v + 100.0


@cl.func
def clamp_index(i: i32, n: i32) -> i32:
    if i < 0:
        return 0
    if i >= n:
        return n - 1
    return i


@cl.kernel
def helpers(x: Array[f32], y: Array[f32], idx: Array[i32], got: Array[f32]):
    i = cl.ABSOLUTE_POS
    if i < len(x):
        y[i] = classify(x[i])
        got[i] = x[clamp_index(idx[i], i32(len(x)))]


def test_return_inside_a_loop(client: Any) -> None:
    width = 13
    xs = RNG.uniform(-0.2, 1, 50 * width).astype(np.float32)
    xs[7 * width:8 * width] = 1.0  # a row without negatives
    x, out = client.create(xs), client.create(np.full(64, 7, np.int32))
    first_negative.launch(client, 1, 64, x, out, width)
    rows = xs.reshape(50, width) < 0
    want = np.where(rows.any(axis=1), rows.argmax(axis=1), -1)
    got = client.to_numpy(out, "i32")
    np.testing.assert_array_equal(got[:50], want)
    np.testing.assert_array_equal(got[50:], 7)  # units past the rows returned first


def test_uniform_return_before_a_barrier(client: Any) -> None:
    xs = np.arange(4 * 32, dtype=np.float32)
    x, out = client.create(xs), client.create(np.full(4 * 32, -1.0, np.float32))
    uniform_return_then_sync.launch(client, cubeplug.CubeCount(4), 32, x, out, 2)
    got = client.to_numpy(out, "f32")
    np.testing.assert_array_equal(got[:64], xs[:64].reshape(2, 32)[:, ::-1].reshape(-1))
    np.testing.assert_array_equal(got[64:], -1.0)


def test_func_early_returns(client: Any) -> None:
    xs = np.array([-3, 0, 5, 12, 40, -0.5, 9.5, 10], np.float32)
    xs = np.tile(xs, 40)
    idx = RNG.integers(-20, len(xs) + 20, len(xs)).astype(np.int32)
    x, y = client.create(xs), client.create(np.zeros_like(xs))
    hi, got = client.create(idx), client.create(np.zeros_like(xs))
    helpers.launch(client, cubeplug.CubeCount(2), 256, x, y, hi, got)
    want = np.where(xs < 0, -1, np.where(xs > 10, xs * 0.5, np.where(xs == 0, 0, xs + 100)))
    np.testing.assert_allclose(client.to_numpy(y, "f32"), want, rtol=1e-6)
    np.testing.assert_array_equal(client.to_numpy(got, "f32"), xs[np.clip(idx, 0, len(xs) - 1)])


@cl.kernel
def return_in_loop_before_sync(x: Array[f32]):
    for j in range(4):
        if x[j] > 0.0:
            return
    cl.sync_cube()


@cl.kernel
def per_unit_return_before_sync(x: Array[f32]):
    if cl.UNIT_POS_X == 3:
        return
    cl.sync_cube()
    x[0] = 1.0


@cl.func
def loop_return(v: f32) -> f32:
    for j in range(3):
        if v > f32(j):
            return v
    return 0.0


@cl.kernel
def uses_loop_return(x: Array[f32]):
    x[0] = loop_return(x[1])


@cl.func
def barrier_after_return(v: f32) -> f32:
    if v > 0.0:
        return v
    cl.sync_cube()
    return 0.0


@cl.kernel
def uses_barrier_after_return(x: Array[f32]):
    x[cl.UNIT_POS] = barrier_after_return(x[cl.UNIT_POS])


@pytest.mark.parametrize(("kern", "error", "match"), [
    (return_in_loop_before_sync, cl.KernelSyntaxError, "sync_cube"),
    (per_unit_return_before_sync, cl.KernelSyntaxError, "some units returned"),
    (uses_loop_return, cl.KernelSyntaxError, "inside a loop"),
    (uses_barrier_after_return, cl.KernelSyntaxError, "sync_cube"),
])
def test_return_errors(kern: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match) as info:
        kern.ir(32)
    assert "test_returns.py:" in str(info.value)
