"""The ``wgsl`` generator's forms (cubeplug/lang/codegen_wgsl.py): buffers reached as struct
members, and local arrays indexed only by constants split into one variable an element; each
checked against numpy on every backend, and for the form of the generated WGSL."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from cubeplug import lang as cl
from cubeplug.core.wgsl import STRUCT_BUFFERS
from cubeplug.lang import Array, Vec, f32, u32
from cubeplug.lang.codegen_wgsl import MAX_SPLIT

F4 = Vec[f32, 4]
RNG = np.random.default_rng(21)


@cl.kernel
def block_sums(x: Array[f32], out: Array[f32]):
    """Each unit sums 8 values into a local array of 4 (indices all constants after unrolling),
    then writes the 4 partial sums weighted 1..4: a register block as matmul's accumulators."""
    i = cl.ABSOLUTE_POS
    acc = cl.local(f32, 4)
    for j in cl.unroll(range(4)):
        acc[j] = f32(0)
    for j in cl.unroll(range(8)):
        acc[j % 4] += x[8 * i + j] if 8 * i + j < len(x) else f32(0)
    if i < len(out):
        out[i] = acc[0] + 2.0 * acc[1] + 3.0 * acc[2] + 4.0 * acc[3]


@cl.kernel
def picked(x: Array[f32], out: Array[f32], k: u32):
    """A local array indexed at runtime (element k % 4): it stays an array."""
    i = cl.ABSOLUTE_POS
    tmp = cl.local(f32, 4)
    for j in cl.unroll(range(4)):
        tmp[j] = x[4 * i + j] if 4 * i + j < len(x) else f32(0)
    if i < len(out):
        out[i] = tmp[k % 4]


@cl.kernel
def lane_k(out: Array[F4], k: u32):
    """Lane k (runtime) of a split local vector takes 9; a checked launch drops k out of range."""
    v = cl.local(F4, 1)
    v[0] = F4(1.0)
    v[0][k] = 9.0
    out[0] = v[0]


@cl.kernel
def lanes_of_split(x: Array[f32], out: Array[F4]):
    """A split local vector array written one lane at a time (a runtime and a constant lane)."""
    i = cl.ABSOLUTE_POS
    v = cl.local(F4, 2)
    if i < len(out):
        v[0] = F4(0.0)
        for j in range(4):
            v[1][3 - j] = x[4 * i + j]
        v[1].x = v[1].x + 1.0
        out[i] = v[1] + v[0]


def wgsl(kernel: Any, checked: bool = False, **comptime: Any) -> str:
    return str(kernel.specialize_for("wgsl", None, (64, 1, 1), checked, comptime).source)


def test_buffers_are_struct_members_and_the_source_says_so() -> None:
    source = wgsl(block_sums)
    assert source.startswith(STRUCT_BUFFERS + "\n")
    assert "x.data[" in source and "out.data[" in source
    assert not re.search(r"\bx\[", source)


def test_a_constant_indexed_local_array_is_one_variable_an_element() -> None:
    source = wgsl(block_sums)
    assert [f"var cl_x_acc_{k}: f32;" in source for k in range(4)] == [True] * 4
    assert "array<f32, 4>" not in source
    assert "acc[" not in source


@cl.kernel
def big(out: Array[f32]):
    """A local array one element above the split limit, indexed by constants only."""
    tmp = cl.local(f32, MAX_SPLIT + 1)
    for j in cl.unroll(range(MAX_SPLIT + 1)):
        tmp[j] = f32(j)
    out[0] = tmp[MAX_SPLIT]


@pytest.mark.parametrize(
    ("kernel", "size"), [(picked, 4), (big, MAX_SPLIT + 1)], ids=["runtime-index", "above-limit"]
)
def test_a_local_array_indexed_at_runtime_or_above_the_limit_stays_an_array(kernel: Any, size: int) -> None:
    source = wgsl(kernel)
    assert f"var tmp: array<f32, {size}>;" in source
    assert "cl_x_tmp" not in source


def test_a_user_name_in_the_element_prefix_is_renamed() -> None:
    @cl.kernel
    def named(out: Array[f32]):
        acc = cl.local(f32, 1)
        cl_x_acc_0 = f32(2)
        acc[0] = 1.0
        out[0] = acc[0] + cl_x_acc_0

    source = wgsl(named)
    assert "var cl_x_acc_0: f32;" in source
    assert "v_cl_x_acc_0" in source


@pytest.mark.parametrize("n", [1, 100, 515])
def test_split_locals_compute_numpys_answer(client: Any, n: int) -> None:
    x = RNG.standard_normal(n).astype(np.float32)
    units = -(-n // 8)
    out = client.create(np.full(units, np.nan, np.float32))
    block_sums.launch(client, -(-units // 64), 64, client.create(x), out)
    padded = np.concatenate([x, np.zeros(units * 8 - n, np.float32)]).reshape(units, 2, 4).sum(axis=1)
    want = padded @ np.arange(1, 5, dtype=np.float32)
    np.testing.assert_allclose(client.to_numpy(out, "f32")[:units], want, rtol=1e-5, atol=1e-5)


def test_runtime_indexed_locals_compute_numpys_answer(client: Any) -> None:
    x = RNG.standard_normal(400).astype(np.float32)
    out = client.empty(4 * 100)
    picked.launch(client, 2, 64, client.create(x), out, 6)
    np.testing.assert_array_equal(client.to_numpy(out, "f32"), x.reshape(100, 4)[:, 2])


def test_lane_stores_into_split_locals(client: Any) -> None:
    x = RNG.standard_normal((70, 4)).astype(np.float32)
    out = client.empty(x.nbytes)
    lanes_of_split.launch(client, 2, 64, client.create(x.ravel()), out)
    assert "cl_x_v_1[" in wgsl(lanes_of_split)
    want = x[:, ::-1].copy()
    want[:, 0] += 1.0
    np.testing.assert_allclose(client.to_numpy(out, "f32").reshape(70, 4), want, rtol=1e-6)


@pytest.mark.parametrize("k", [2, 7])
def test_a_checked_lane_store_into_a_split_local_drops_a_lane_out_of_range(client: Any, k: int) -> None:
    assert "if (" in wgsl(lane_k, checked=True).split("cl_x_v_0[cl_s_k]")[0].splitlines()[-1]
    out = client.empty(16)
    lane_k.launch(client, 1, 1, out, k)
    want = np.ones(4, np.float32)
    if k < 4:
        want[k] = 9.0
    np.testing.assert_array_equal(client.to_numpy(out, "f32"), want)
