"""Kernels and host code that ``mypy --strict`` must accept (test_typing.py); they also run.

No ``from __future__ import annotations``: the annotations are evaluated at definition time too.
"""

from typing import Literal

import numpy as np

import cubeplug
from cubeplug import lang as cl
from cubeplug.lang import Array, Atomic, Comptime, Tensor, Vec, f32, i32, u32


@cl.kernel
def axpy(x: Array[f32], y: Array[f32], a: f32) -> None:
    i = cl.ABSOLUTE_POS
    if i < len(y):
        y[i] += a * x[i]


@cl.func
def clamp01(v: f32) -> f32:
    return min(max(v, 0.0), 1.0)


@cl.kernel
def math_casts(x: Array[f32], out: Array[i32], flags: Array[u32], scale: f32) -> None:
    i = cl.ABSOLUTE_POS
    if i >= len(x):
        return
    v: f32 = 0
    v += cl.sqrt(abs(x[i])) + cl.exp(-x[i]) * cl.sin(x[i]) + cl.fma(x[i], scale, 1.0)
    v += cl.pow(clamp01(x[i]), 2.0) + cl.floor(x[i]) + cl.tanh(v) + cl.log(1.0 + abs(v))
    out[i] = i32(v) + i32(u32(i) % 3)
    flags[i] = u32(1) if v > f32(i) else 0


@cl.kernel
def block_sum(x: Array[f32], out: Array[f32], BLOCK: Comptime[int], SQUARE: Comptime[bool]) -> None:
    buf = cl.shared(f32, BLOCK)
    scratch = cl.local(u32, 2)
    i = cl.ABSOLUTE_POS
    v = x[i] if i < len(x) else 0.0
    buf[cl.UNIT_POS] = v * v if SQUARE else v
    scratch[0] = cl.UNIT_POS
    cl.sync_cube()
    s = u32(BLOCK // 2)
    while s > 0:
        if s > scratch[0]:
            buf[cl.UNIT_POS] += buf[cl.UNIT_POS + s]
        cl.sync_cube()
        s = s >> 1
    if cl.UNIT_POS == 0:
        out[cl.CUBE_POS] = buf[0]
    for k in cl.unroll(range(2)):
        scratch[k] = u32(k)


@cl.kernel
def histogram(
    x: Array[u32], bins: Array[Atomic[u32]], total: Array[Atomic[f32]], NBINS: Comptime[int]
) -> None:
    i = cl.ABSOLUTE_POS
    if i < len(x):
        old = cl.atomic_add(bins, x[i] % NBINS, 1)
        cl.atomic_max(bins, NBINS, old)
        cl.atomic_add(total, 0, f32(x[i]))


@cl.kernel
def transpose(src: Tensor[f32], dst: Tensor[f32]) -> None:
    r = cl.ABSOLUTE_POS_Y
    c = cl.ABSOLUTE_POS_X
    if r < src.shape[0] and c < src.shape[1] and src.rank == 2:
        dst[c, r] = src[r, c] + f32(dst.stride[0] * 0)


@cl.kernel
def vectors(x: Array[Vec[f32, Literal[4]]], y: Array[cl.f32x4], n: Array[cl.i32x2]) -> None:
    i = cl.ABSOLUTE_POS
    if i < len(x):
        v = x[i]
        w = cl.f32x4(v.x, v.y, v[2], 1.0) * 2.0 + v
        w.w = v.x + v.w
        y[i] = -w / 2.0
        n[i] = cl.i32x2(i32(i), 7) + 1
        mask = (v < w) & (v != 0.0)
        if any(mask) and not all(mask) and i >= len(y):  # typed, never taken
            y[i] = cl.sqrt(v) if mask else cl.fma(v, w, 1.0)


def run(client: cubeplug.ComputeClient) -> dict[str, np.ndarray]:
    """Host code around the kernels (type-checked too)."""
    x = client.create(np.linspace(-1, 2, 64, dtype=np.float32))
    y = client.create(np.zeros(64, np.float32))
    axpy.launch(client, cubeplug.CubeCount(1), 64, x, y, 2.0)
    out = client.create(np.zeros(64, np.int32))
    flags = client.create(np.zeros(64, np.uint32))
    math_casts.launch(client, 1, (64, 1, 1), x, out, flags, 0.5)
    sums = client.create(np.zeros(2, np.float32))
    block_sum.launch(client, 2, 32, x, sums, BLOCK=32, SQUARE=True)
    keys = client.create(np.arange(64, dtype=np.uint32))
    bins = client.create(np.zeros(5, np.uint32))
    total = client.create(np.zeros(1, np.float32))
    histogram.launch(client, 1, 64, keys, bins, total, NBINS=4)
    src = client.create_tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    dst = client.empty_tensor((4, 3), np.float32)
    transpose.launch(client, (1, 1), (4, 3), src, dst)
    vx = client.create(np.arange(16, dtype=np.float32))
    vy = client.create(np.zeros(16, np.float32))
    vn = client.create(np.zeros(8, np.int32))
    vectors.launch_unchecked(client, 1, 4, vx, vy, vn)
    source: str = axpy.source(client)
    assert source
    names = {"y": y, "out": out, "flags": flags, "sums": sums, "bins": bins, "total": total,
             "vy": vy, "vn": vn}
    dtypes = {"out": "i32", "flags": "u32", "bins": "u32", "vn": "i32"}
    result = {k: client.to_numpy(h, dtypes.get(k, "f32")) for k, h in names.items()}
    result["dst"] = client.to_numpy(dst.handle, "f32")
    return result
