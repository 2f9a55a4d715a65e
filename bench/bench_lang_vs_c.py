"""cubeplug.lang kernels against hand-written kernels of the same algorithm, per backend.

Three algorithms, each written once in the language and once by hand in the ``c`` dialect (CUDA and
OpenCL through the prelude) and in WGSL (WebGPU):

* ``axpy``: ``y[i] += a * x[i]``, one unit per element (memory bound).
* ``block_sum``: each cube of 256 units sums its 256 values in shared memory with a tree of
  ``sync_cube()`` steps and writes one partial sum.
* ``matmul``: ``C = A @ B`` with 16 x 16 tiles of A and B staged in shared memory, one output per
  unit; the inner loop over the tile has a constant trip count on both sides, unrolled or not by
  the compiler. (Forcing it, ``cl.unroll`` in the language or ``#pragma unroll`` by hand, made
  the kernel 2.7x slower on PoCL here: 4.6 against 1.7 ms at 128^3.)

Every pair is checked against numpy first, then timed in paired alternating loops of launches
(bench/paired.py: launch ``--n`` times, sync, per round; the median of the per-round ratios and its
spread). ``time_ratio`` is lang time / hand time, ``speed`` is hand / lang (goal >= 0.95), for the
checked launch (device-side bound checks, the language's default) and the unchecked one. The hand
kernels guard their edges as the algorithm needs and no more.

    PYTHONPATH=. python bench/bench_lang_vs_c.py --backends cuda,opencl,webgpu [--quick] [--json FILE]

``--quick`` uses small problems (PoCL and lavapipe run on this host's CPU: a proof that the script
works, not figures to tune on).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from paired import each_backend, paired, repeat, run_header, versus

import cubeplug
from cubeplug import lang as cl
from cubeplug.lang import Array, Comptime, f32, u32

BLOCK = 256
TILE = 16


# ------------------------------------------------------------------------------------ the language
# axpy and the block sum: the kernels whose launch overhead bench_lang.py times.
from bench_lang import axpy, block_sum  # noqa: E402


@cl.kernel
def matmul(a: Array[f32], b: Array[f32], c: Array[f32], M: u32, N: u32, K: u32, T: Comptime[int]) -> None:
    As = cl.shared(f32, T * T)
    Bs = cl.shared(f32, T * T)
    tx = cl.UNIT_POS_X
    ty = cl.UNIT_POS_Y
    row = cl.CUBE_POS_Y * T + ty
    col = cl.CUBE_POS_X * T + tx
    acc = f32(0)
    for k0 in range(0, K, T):
        As[ty * T + tx] = a[row * K + k0 + tx] if row < M and k0 + tx < K else 0.0
        Bs[ty * T + tx] = b[(k0 + ty) * N + col] if k0 + ty < K and col < N else 0.0
        cl.sync_cube()
        for k in range(T):
            acc += As[ty * T + k] * Bs[k * T + tx]
        cl.sync_cube()
    if row < M and col < N:
        c[row * N + col] = acc


# ----------------------------------------------------------------------------------- by hand: c
_AXPY_C = """\
KERNEL axpy_hand(GLOBAL const float* x, GLOBAL float* y, float a, unsigned int n) {
    unsigned int i = ABSOLUTE_POS_X;
    if (i < n) y[i] += a * x[i];
}
"""
_SUM_C = """\
KERNEL block_sum_hand(GLOBAL const float* x, GLOBAL float* out, unsigned int n) {
    LOCAL float buf[CUBE_DIM_STATIC_X];
    unsigned int i = ABSOLUTE_POS_X;
    unsigned int u = UNIT_POS_X;
    buf[u] = i < n ? x[i] : 0.0f;
    SYNC_CUBE();
    for (unsigned int s = CUBE_DIM_STATIC_X / 2u; s > 0u; s >>= 1) {
        if (u < s) buf[u] += buf[u + s];
        SYNC_CUBE();
    }
    if (u == 0u) out[CUBE_POS_X] = buf[0];
}
"""
_MATMUL_C = """\
#define T CUBE_DIM_STATIC_X
KERNEL matmul_hand(GLOBAL const float* a, GLOBAL const float* b, GLOBAL float* c,
                   unsigned int M, unsigned int N, unsigned int K) {
    LOCAL float As[T * T];
    LOCAL float Bs[T * T];
    unsigned int tx = UNIT_POS_X, ty = UNIT_POS_Y;
    unsigned int row = CUBE_POS_Y * T + ty, col = CUBE_POS_X * T + tx;
    float acc = 0.0f;
    for (unsigned int k0 = 0u; k0 < K; k0 += T) {
        As[ty * T + tx] = (row < M && k0 + tx < K) ? a[row * K + k0 + tx] : 0.0f;
        Bs[ty * T + tx] = (k0 + ty < K && col < N) ? b[(k0 + ty) * N + col] : 0.0f;
        SYNC_CUBE();
        for (unsigned int k = 0u; k < T; ++k) acc += As[ty * T + k] * Bs[k * T + tx];
        SYNC_CUBE();
    }
    if (row < M && col < N) c[row * N + col] = acc;
}
"""

# -------------------------------------------------------------------------------- by hand: wgsl
_AXPY_WGSL = """\
@compute @workgroup_size(CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z)
fn axpy_hand(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i < scalars.n) { y[i] += scalars.a * x[i]; }
}
"""
_SUM_WGSL = """\
var<workgroup> buf: array<f32, CUBE_DIM_X>;

@compute @workgroup_size(CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z)
fn block_sum_hand(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
                  @builtin(workgroup_id) wid: vec3<u32>) {
    let i = gid.x;
    let u = lid.x;
    var v = 0.0;
    if (i < scalars.n) { v = x[i]; }
    buf[u] = v;
    workgroupBarrier();
    for (var s = u32(CUBE_DIM_X) / 2u; s > 0u; s >>= 1u) {
        if (u < s) { buf[u] += buf[u + s]; }
        workgroupBarrier();
    }
    if (u == 0u) { out[wid.x] = buf[0]; }
}
"""
_MATMUL_WGSL = """\
const T = u32(CUBE_DIM_X);
var<workgroup> As: array<f32, CUBE_DIM_X * CUBE_DIM_X>;
var<workgroup> Bs: array<f32, CUBE_DIM_X * CUBE_DIM_X>;

@compute @workgroup_size(CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z)
fn matmul_hand(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let M = scalars.M; let N = scalars.N; let K = scalars.K;
    let tx = lid.x; let ty = lid.y;
    let row = wid.y * T + ty; let col = wid.x * T + tx;
    var acc = 0.0;
    for (var k0 = 0u; k0 < K; k0 += T) {
        var av = 0.0;
        if (row < M && k0 + tx < K) { av = a[row * K + k0 + tx]; }
        As[ty * T + tx] = av;
        var bv = 0.0;
        if (k0 + ty < K && col < N) { bv = b[(k0 + ty) * N + col]; }
        Bs[ty * T + tx] = bv;
        workgroupBarrier();
        for (var k = 0u; k < T; k += 1u) { acc += As[ty * T + k] * Bs[k * T + tx]; }
        workgroupBarrier();
    }
    if (row < M && col < N) { c[row * N + col] = acc; }
}
"""

_HAND = {
    "axpy": cubeplug.Kernel(
        "axpy_hand",
        [cubeplug.Buffer("x", "f32", "read"), cubeplug.Buffer("y", "f32"), cubeplug.Scalar("a", "f32"),
         cubeplug.Scalar("n", "u32")],
        {"c": _AXPY_C, "wgsl": _AXPY_WGSL}, cube_dim=BLOCK,
    ),
    "block_sum": cubeplug.Kernel(
        "block_sum_hand",
        [cubeplug.Buffer("x", "f32", "read"), cubeplug.Buffer("out", "f32", "write"),
         cubeplug.Scalar("n", "u32")],
        {"c": _SUM_C, "wgsl": _SUM_WGSL}, cube_dim=BLOCK,
    ),
    "matmul": cubeplug.Kernel(
        "matmul_hand",
        [cubeplug.Buffer("a", "f32", "read"), cubeplug.Buffer("b", "f32", "read"),
         cubeplug.Buffer("c", "f32", "write"), cubeplug.Scalar("M", "u32"), cubeplug.Scalar("N", "u32"),
         cubeplug.Scalar("K", "u32")],
        {"c": _MATMUL_C, "wgsl": _MATMUL_WGSL}, cube_dim=(TILE, TILE, 1),
    ),
}


# --------------------------------------------------------------------------------------- cases
Launch = Callable[[bool], None]


def _cases(client: Any, sizes: dict[str, int]) -> dict[str, tuple[Launch, Launch, Callable[[], None]]]:
    """Per algorithm: (lang launch given checked, hand launch, check of both results)."""
    rng = np.random.default_rng(16)
    out: dict[str, tuple[Launch, Launch, Callable[[], None]]] = {}

    n = sizes["axpy"]
    xs = rng.standard_normal(n).astype(np.float32)
    x = client.create(xs)
    y_lang, y_hand = client.create(np.zeros(n, np.float32)), client.create(np.zeros(n, np.float32))
    cubes = cubeplug.CubeCount(-(-n // BLOCK))

    def axpy_check() -> None:
        for y in (y_lang, y_hand):
            client.fill(y, 0.0, "f32")
        axpy.launch(client, cubes, BLOCK, x, y_lang, 2.0)
        client.launch(_HAND["axpy"], cubes, [x, y_hand], [2.0, n])
        for y in (y_lang, y_hand):
            np.testing.assert_allclose(client.to_numpy(y, "f32"), 2 * xs, rtol=1e-6)

    out["axpy"] = (
        lambda checked: (axpy.launch if checked else axpy.launch_unchecked)(
            client, cubes, BLOCK, x, y_lang, 0.5),
        lambda _: client.launch(_HAND["axpy"], cubes, [x, y_hand], [0.5, n]),
        axpy_check,
    )

    n = sizes["block_sum"]
    vs = rng.random(n, dtype=np.float32)
    v = client.create(vs)
    parts = -(-n // BLOCK)
    s_lang, s_hand = client.empty(4 * parts), client.empty(4 * parts)
    blocks = cubeplug.CubeCount(parts)

    def sum_check() -> None:
        block_sum.launch(client, blocks, BLOCK, v, s_lang, B=BLOCK)
        client.launch(_HAND["block_sum"], blocks, [v, s_hand], [n])
        want = np.pad(vs, (0, parts * BLOCK - n)).reshape(parts, BLOCK).sum(axis=1, dtype=np.float64)
        for s in (s_lang, s_hand):
            np.testing.assert_allclose(client.to_numpy(s, "f32"), want, rtol=1e-4)

    out["block_sum"] = (
        lambda checked: (block_sum.launch if checked else block_sum.launch_unchecked)(
            client, blocks, BLOCK, v, s_lang, B=BLOCK),
        lambda _: client.launch(_HAND["block_sum"], blocks, [v, s_hand], [n]),
        sum_check,
    )

    m = sizes["matmul"]
    as_, bs = rng.standard_normal((m, m)).astype(np.float32), rng.standard_normal((m, m)).astype(np.float32)
    a, b = client.create(as_), client.create(bs)
    c_lang, c_hand = client.empty(4 * m * m), client.empty(4 * m * m)
    tiles = cubeplug.CubeCount(-(-m // TILE), -(-m // TILE), 1)
    dim = (TILE, TILE, 1)

    def matmul_check() -> None:
        matmul.launch(client, tiles, dim, a, b, c_lang, m, m, m, T=TILE)
        client.launch(_HAND["matmul"], tiles, [a, b, c_hand], [m, m, m])
        want = as_.astype(np.float64) @ bs
        for c in (c_lang, c_hand):
            np.testing.assert_allclose(client.to_numpy(c, "f32").reshape(m, m), want, rtol=1e-3, atol=1e-3)

    out["matmul"] = (
        lambda checked: (matmul.launch if checked else matmul.launch_unchecked)(
            client, tiles, dim, a, b, c_lang, m, m, m, T=TILE),
        lambda _: client.launch(_HAND["matmul"], tiles, [a, b, c_hand], [m, m, m]),
        matmul_check,
    )
    return out


def measure(backend: str, sizes: dict[str, int], n: int, rounds: int) -> dict[str, Any]:
    client = cubeplug.client(backend)
    result: dict[str, Any] = {"device": str(client.device), "sizes": sizes}
    try:
        for name, (lang, hand, check) in _cases(client, sizes).items():
            check()
            row: dict[str, Any] = {}
            for mode in ("checked", "unchecked"):
                ours, theirs = functools.partial(lang, mode == "checked"), functools.partial(hand, True)
                fig = paired(repeat(ours), repeat(theirs), n, rounds, drain=client.sync)
                row[mode] = versus(fig)
            result[name] = row
            print(backend, name, json.dumps(row), flush=True)
    finally:
        client.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="cuda,opencl,webgpu")
    parser.add_argument("--quick", action="store_true", help="small problems (a CPU-side device)")
    parser.add_argument("--n", type=int, default=None, help="launches per loop (default 50, --quick 5)")
    parser.add_argument("--rounds", type=int, default=None, help="paired rounds (default 20, --quick 6)")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.quick:
        sizes = {"axpy": 1 << 18, "block_sum": 1 << 18, "matmul": 128}
        n, rounds = args.n or 5, args.rounds or 6
    else:
        # 2^24 - 2^8 elements: 65535 cubes of 256, what a 1-D launch may have on WebGPU (2^24 was
        # one cube too many for the H200's Vulkan device).
        sizes = {"axpy": (1 << 24) - 256, "block_sum": (1 << 24) - 256, "matmul": 2048}
        n, rounds = args.n or 50, args.rounds or 20
    results = run_header(launches_per_loop=n, rounds=rounds)
    each_backend(args.backends, lambda backend: measure(backend, sizes, n, rounds), results, args.json)

if __name__ == "__main__":
    main()
