"""Pick a backend, launch kernels written in the kernel language, check them against numpy.

    python examples/demo.py [selector]      # e.g. cpu, opencl, webgpu, cuda:0; default: auto

Each kernel is one Python function; ``cubeplug.lang`` compiles it for the client's dialect (``c`` on
CUDA and OpenCL, ``wgsl`` on WebGPU, a numpy interpreter on the CPU backend). See docs/lang.md.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import numpy as np

import cubeplug
from cubeplug import lang as cl
from cubeplug.lang import Array, Comptime, f32, u32

BLOCK = 256

# mypy cannot read the language's annotations (``Array[f32]``), so it sees the kernels' types only.
if TYPE_CHECKING:
    axpy: cl.LangKernel
    block_sum: cl.LangKernel
else:

    @cl.kernel
    def axpy(x: Array[f32], y: Array[f32], a: f32):
        """y += a * x."""
        i = cl.ABSOLUTE_POS
        if i < len(y):
            y[i] += a * x[i]

    @cl.kernel
    def block_sum(x: Array[f32], out: Array[f32], B: Comptime[int]):
        """Each cube sums its B values in shared memory into out[CUBE_POS] (B: the cube dim)."""
        buf = cl.shared(f32, B)
        i = cl.ABSOLUTE_POS
        buf[cl.UNIT_POS] = x[i] if i < len(x) else 0.0
        cl.sync_cube()
        s = u32(B // 2)
        while s > 0:  # a tree: strides B/2, B/4, ..., 1 (uniform, so the barrier is allowed)
            if s > cl.UNIT_POS:
                buf[cl.UNIT_POS] += buf[cl.UNIT_POS + s]
            cl.sync_cube()
            s = s >> 1
        if cl.UNIT_POS == 0:
            out[cl.CUBE_POS] = buf[0]


def main() -> int:
    selector = sys.argv[1] if len(sys.argv) > 1 else None
    client = cubeplug.client(selector)
    print(f"backend: {client.backend}  device: {client.device}")
    n = 1 << 20
    rng = np.random.default_rng(0)
    x_host = rng.random(n, dtype=np.float32)
    y_host = rng.random(n, dtype=np.float32)
    x, y = client.create(x_host), client.create(y_host)
    cubes = cubeplug.CubeCount((n + BLOCK - 1) // BLOCK)

    axpy.launch(client, cubes, BLOCK, x, y, 0.0)  # compiles; y unchanged
    client.sync()
    t0 = time.perf_counter()
    for _ in range(10):
        axpy.launch(client, cubes, BLOCK, x, y, 0.5)
    client.sync()
    elapsed = time.perf_counter() - t0
    got = client.to_numpy(y, "f32")
    expected = y_host.copy()
    for _ in range(10):
        expected = np.float32(0.5) * x_host + expected
    ok_axpy = np.allclose(got, expected, rtol=1e-5)
    print(f"10 x axpy over {n} floats: {elapsed * 1e3:.2f} ms, result {'correct' if ok_axpy else 'WRONG'}")

    partial = client.create(np.zeros(cubes.x, np.float32))
    block_sum.launch(client, cubes, BLOCK, y, partial, B=BLOCK)
    sums = client.to_numpy(partial, "f32")
    want = expected.reshape(-1, BLOCK).sum(axis=1, dtype=np.float64)
    ok_sum = np.allclose(sums, want, rtol=1e-4)
    print(f"block sums of {cubes.x} cubes (shared memory, sync_cube): "
          f"total {sums.sum(dtype=np.float64):.1f}, result {'correct' if ok_sum else 'WRONG'}")
    print(f"memory: {client.memory_usage()}")
    return 0 if ok_axpy and ok_sum else 1


if __name__ == "__main__":
    raise SystemExit(main())
