"""Stores into one lane of an array's vector element (``a[i][k] = v``, ``a[i].x = v``), ``k`` a
comptime or a runtime lane, into shared, global and local arrays; every backend."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cubeplug
from cubeplug import lang as cl
from cubeplug.lang import Array, Vec, f32, i32, u32

RNG = np.random.default_rng(12)
F4 = Vec[f32, 4]


@cl.kernel
def transpose_in_shared(x: Array[f32], out: Array[Vec[f32, 4]]):
    """Each cube of 64 units writes x's 64 values one lane at a time into 16 shared vectors, in
    transposed order (unit t: row t % 16, lane t // 16; neighbouring units, neighbouring vectors),
    then the first 16 units copy the vectors out. Races would lose lanes."""
    buf = cl.shared(F4, 16)
    t = cl.UNIT_POS_X
    buf[t % 16][t // 16] = x[cl.ABSOLUTE_POS_X]
    cl.sync_cube()
    if t < 16:
        out[cl.CUBE_POS_X * 16 + t] = buf[t]


@cl.kernel
def transpose_in_shared_named(x: Array[f32], out: Array[Vec[f32, 4]]):
    """transpose_in_shared with its lane in a local named as the C generator's shared-pointer macro."""
    buf = cl.shared(F4, 16)
    t = cl.UNIT_POS_X
    CL_SHARED_PTR = t // 16
    buf[t % 16][CL_SHARED_PTR] = x[cl.ABSOLUTE_POS_X]
    cl.sync_cube()
    if t < 16:
        out[cl.CUBE_POS_X * 16 + t] = buf[t]


@cl.kernel
def lanes_in_global(x: Array[i32], out: Array[Vec[i32, 4]], k: u32):
    """Lane k (runtime) of out[i] takes x[i]; lane y (comptime) takes -x[i]; other lanes stay."""
    i = cl.ABSOLUTE_POS
    if i < len(x):
        out[i][k] = x[i]
        out[i].y = -x[i]


@cl.kernel
def lanes_in_local(x: Array[f32], out: Array[Vec[f32, 4]]):
    """A local vector array filled lane by lane (lanes reversed, a runtime lane)."""
    i = cl.ABSOLUTE_POS
    tmp = cl.local(F4, 2)
    for j in range(4):
        tmp[1][3 - j] = x[4 * i + j]
    if i < len(out):
        out[i] = tmp[1]


@pytest.mark.parametrize("kernel", [transpose_in_shared, transpose_in_shared_named], ids=["t", "named"])
def test_runtime_lanes_of_shared_vectors(client: Any, kernel: Any) -> None:
    xs = RNG.standard_normal(128).astype(np.float32)
    x, out = client.create(xs), client.empty(4 * 128)
    want = xs.reshape(2, 4, 16).transpose(0, 2, 1).reshape(-1)
    for checked in (True, False):
        client.fill(out, 0, "f32")
        launch = kernel.launch if checked else kernel.launch_unchecked
        launch(client, cubeplug.CubeCount(2), 64, x, out)
        np.testing.assert_array_equal(client.to_numpy(out, "f32"), want)


@pytest.mark.parametrize("k", [0, 2, 3, 7])
def test_lanes_of_global_vectors(client: Any, k: int) -> None:
    xs = RNG.integers(-1000, 1000, 100).astype(np.int32)
    x = client.create(xs)
    out = client.create(np.full((100, 4), 5, np.int32))
    lanes_in_global.launch(client, 1, 128, x, out, k)
    want = np.full((100, 4), 5, np.int32)
    if k < 4:  # a checked launch drops a lane out of the vector
        want[:, k] = xs
    want[:, 1] = -xs
    np.testing.assert_array_equal(client.to_numpy(out, "i32").reshape(100, 4), want)


def test_runtime_lanes_of_local_vectors(client: Any) -> None:
    xs = RNG.standard_normal(4 * 40).astype(np.float32)
    x, out = client.create(xs), client.empty(4 * 4 * 40)
    lanes_in_local.launch(client, 1, 64, x, out)
    np.testing.assert_array_equal(client.to_numpy(out, "f32").reshape(40, 4), xs.reshape(40, 4)[:, ::-1])


def test_generated_sources_store_one_lane() -> None:
    c_src = transpose_in_shared.specialize_for("c", None, 64, False, {}).source
    assert "((CL_SHARED_PTR float*)&buf[(CL_IX)(t % 16u)])[(t / 16u)] = " in c_src
    assert "#define CL_SHARED_PTR __local" in c_src
    wgsl = transpose_in_shared.specialize_for("wgsl", None, 64, False, {}).source
    assert "buf[(t % 16u)][(t / 16u)] = " in wgsl
    assert ".y = (-" in lanes_in_global.specialize_for("c", None, 64, False, {}).source


@cl.kernel
def lane_of_scalar_array(x: Array[f32]):
    x[0][1] = 1.0


@cl.kernel
def comptime_lane_outside(x: Array[Vec[f32, 2]]):
    x[0][2] = 1.0


@cl.kernel
def lane_of_other_type(x: Array[Vec[f32, 4]], y: Array[i32]):
    x[0].x = y[0]


@cl.kernel
def bad_lane_name(x: Array[Vec[f32, 4]]):
    x[0].q = 1.0


@cl.kernel
def float_lane(x: Array[Vec[f32, 4]], k: f32):
    x[0][k] = 1.0


@pytest.mark.parametrize(("kern", "error", "match"), [
    (lane_of_scalar_array, cl.KernelTypeError, "which have no lanes"),
    (comptime_lane_outside, cl.KernelTypeError, "lanes 0 to 1, not 2"),
    (lane_of_other_type, cl.KernelTypeError, "cast it with f32"),
    (bad_lane_name, cl.KernelSyntaxError, "not .q"),
    (float_lane, cl.KernelTypeError, "a lane must be an integer"),
])
def test_lane_store_errors(kern: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        kern.ir(32)
