"""``Tensor[T]`` parameters: shape/stride/rank metadata and multi-indexing, on every backend."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

import cubeplug
from cubeplug import lang as cl
from cubeplug.lang import Array, Tensor, f32, i32, u32

RNG = np.random.default_rng(16)


@cl.kernel
def axpby_2d(a: Tensor[f32], b: Tensor[f32], out: Tensor[f32], alpha: f32):
    """out = alpha * a + b on 2-D tensors of any strides (guarded by out's shape)."""
    row = cl.ABSOLUTE_POS_Y
    col = cl.ABSOLUTE_POS_X
    if row < out.shape[0] and col < out.shape[1]:
        out[row, col] = alpha * a[row, col] + b[row, col]


@cl.kernel
def fill_unguarded(t: Tensor[f32], v: f32):
    """Writes every unit's (row, col) with no test: a checked launch drops those outside the shape."""
    t[cl.ABSOLUTE_POS_Y, cl.ABSOLUTE_POS_X] = v + f32(cl.ABSOLUTE_POS_Y * 100 + cl.ABSOLUTE_POS_X)


@cl.kernel
def sum_last_axis(t: Tensor[f32], out: Tensor[f32]):
    """out[i, j] = sum over k of t[i, j, k] (a rank-3 input)."""
    i = cl.ABSOLUTE_POS_Y
    j = cl.ABSOLUTE_POS_X
    if i < t.shape[0] and j < t.shape[1]:
        acc = f32(0)
        for k in range(t.shape[2]):
            acc += t[i, j, k]
        out[i, j] = acc


@cl.kernel
def metadata(t: Tensor[i32], out: Array[u32]):
    if cl.ABSOLUTE_POS == 0:
        out[0] = t.rank
        out[1] = t.shape[0]
        out[2] = t.shape[1]
        out[3] = t.stride[0]
        out[4] = t.stride[1]
        out[5] = len(t)


def _transposed(t: cubeplug.Tensor) -> cubeplug.Tensor:
    return dataclasses.replace(t, shape=t.shape[::-1], strides=t.strides[::-1])


@pytest.mark.parametrize("checked", [True, False])
def test_strided_2d_with_a_transposed_view(client: Any, checked: bool) -> None:
    h, w = 37, 21
    a = RNG.standard_normal((h, w)).astype(np.float32)
    bt = RNG.standard_normal((w, h)).astype(np.float32)  # b is its transpose, read through strides
    ta, tb = client.create_tensor(a), _transposed(client.create_tensor(bt))
    out = client.create_tensor(np.zeros((h, w), np.float32))
    launch = axpby_2d.launch if checked else axpby_2d.launch_unchecked
    launch(client, cubeplug.CubeCount(-(-w // 8), -(-h // 8)), (8, 8, 1), ta, tb, out, 1.5)
    np.testing.assert_allclose(client.read_tensor(out), np.float32(1.5) * a + bt.T, rtol=1e-5, atol=1e-6)


def test_checked_tensor_write_outside_shape_is_dropped(client: Any) -> None:
    """A padded-row view: writes past a row's width land inside the buffer but outside the shape."""
    h, w, pitch = 5, 6, 8
    buf = client.create(np.full(h * pitch, -1.0, np.float32))
    t = cubeplug.Tensor(buf, (h, w), (pitch, 1), np.dtype(np.float32))
    fill_unguarded.launch(client, cubeplug.CubeCount(1, 1), (8, 8, 1), t, 0.5)
    got = client.to_numpy(buf, "f32").reshape(h, pitch)
    rows, cols = np.mgrid[0:h, 0:w]
    np.testing.assert_array_equal(got[:, :w], rows * 100 + cols + 0.5)
    np.testing.assert_array_equal(got[:, w:], -1.0)


def test_rank_3_sum_and_a_permuted_view(client: Any) -> None:
    x = RNG.standard_normal((4, 9, 7)).astype(np.float32)
    tx = client.create_tensor(x)
    out = client.create_tensor(np.zeros((4, 9), np.float32))
    sum_last_axis.launch(client, cubeplug.CubeCount(2, 1), (8, 4, 1), tx, out)
    np.testing.assert_allclose(client.read_tensor(out), x.sum(axis=2), rtol=1e-5, atol=1e-5)
    # A permuted view (axes 0, 2, 1) of the same memory sums over the original axis 1.
    view = dataclasses.replace(tx, shape=(4, 7, 9), strides=(tx.strides[0], tx.strides[2], tx.strides[1]))
    out2 = client.create_tensor(np.zeros((4, 7), np.float32))
    sum_last_axis.launch(client, cubeplug.CubeCount(1, 1), (8, 4, 1), view, out2)
    np.testing.assert_allclose(client.read_tensor(out2), x.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_metadata_is_passed_hidden(client: Any) -> None:
    t = client.create_tensor(np.zeros((3, 5), np.int32))
    out = client.create(np.zeros(6, np.uint32))
    tt = _transposed(t)
    metadata.launch(client, 1, 32, tt, out)
    # Rows may be padded (CUDA pitches them): the strides and the length are the tensor's own.
    want = [2, 5, 3, tt.strides[0], tt.strides[1], t.handle.size // 4]
    np.testing.assert_array_equal(client.to_numpy(out, "u32"), want)
    assert tt.strides[0] == 1 and tt.strides[1] >= 5
    ir_text = metadata.ir(32)
    assert "%rank_t" in ir_text and "%shape_t_1" in ir_text and "%stride_t_0" in ir_text


def test_unchecked_source_has_no_shape_guard(cpu: Any) -> None:
    checked = axpby_2d.source(cpu, (8, 8, 1))
    unchecked = axpby_2d.source(cpu, (8, 8, 1), checked=False)
    assert "? if" in checked and "?" not in unchecked


def test_launch_validates_tensor_arguments(cpu: Any) -> None:
    kern = cl.kernel(axpby_2d.fn)
    good = cpu.create_tensor(np.zeros((4, 4), np.float32))
    flat = cpu.create_tensor(np.zeros(16, np.float32))
    ints = cpu.create_tensor(np.zeros((4, 4), np.int32))
    for _ in range(2):  # the first launch and the generated dispatcher
        kern.launch(cpu, 1, (4, 4, 1), good, good, good, 1.0)
        with pytest.raises(cubeplug.ValidationError, match="2 indices"):
            kern.launch(cpu, 1, (4, 4, 1), good, flat, good, 1.0)
        with pytest.raises(cubeplug.ValidationError, match="must hold float32"):
            kern.launch(cpu, 1, (4, 4, 1), good, ints, good, 1.0)
        with pytest.raises(cubeplug.ValidationError, match="Tensor argument a cubeplug.Tensor"):
            kern.launch(cpu, 1, (4, 4, 1), good, good.handle, good, 1.0)


@cl.kernel
def runtime_dim(t: Tensor[f32], d: u32):
    t[0, 0] = f32(t.shape[d])


@cl.kernel
def mixed_arity(t: Tensor[f32]):
    t[0, 0] = t[1]


@cl.kernel
def tuple_index_array(a: Array[f32]):
    a[0, 1] = 1.0


@cl.kernel
def unknown_attribute(t: Tensor[i32]):
    t[0] = t.size


@cl.kernel
def array_shape(a: Array[i32]):
    a[0] = i32(a.shape[0])


@pytest.mark.parametrize(("kern", "error", "match"), [
    (runtime_dim, cl.KernelSyntaxError, "comptime non-negative int dimension"),
    (mixed_arity, cl.KernelTypeError, "indexed with 1 indices here and 2 elsewhere"),
    (tuple_index_array, cl.KernelSyntaxError, "needs a Tensor"),
    (unknown_attribute, cl.KernelSyntaxError, "no attribute 'size'"),
    (array_shape, cl.KernelSyntaxError, "declare the parameter Tensor"),
])
def test_tensor_errors(kern: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match) as info:
        kern.ir(32)
    assert "test_tensor.py:" in str(info.value)


def test_tensor_of_a_device_type_error() -> None:
    @cl.kernel
    def wide(t: Tensor[cl.f64]):
        t[0] = 1.0

    with pytest.raises(cl.KernelTypeError, match="f64 is not supported"):
        wide.ir(32, dtypes=frozenset({"f32", "i32", "u32"}))

