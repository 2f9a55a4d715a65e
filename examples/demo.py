"""The main job until `cubeplug bench` lands: pick the best backend, launch a kernel, check it.

    python examples/demo.py [selector]      # e.g. cpu, opencl, webgpu, cuda:0; default: auto
"""

from __future__ import annotations

import sys
import time

import numpy as np

import cubeplug
from cubeplug import Buffer, CubeCount, Kernel, Scalar

C_SRC = """
KERNEL axpy(GLOBAL const float* x, GLOBAL float* y, float a, unsigned int n) {
    unsigned int i = ABSOLUTE_POS_X;
    if (i < n) { y[i] = a * x[i] + y[i]; }
}
"""

WGSL_SRC = """
@compute @workgroup_size(CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z)
fn axpy(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i < scalars.n) { y[i] = scalars.a * x[i] + y[i]; }
}
"""


def axpy_py(launch, x, y, a, n):  # type: ignore[no-untyped-def]
    y[:n] = a * x[:n] + y[:n]


AXPY = Kernel(
    "axpy",
    [Buffer("x", "f32", "read"), Buffer("y", "f32", "read_write"), Scalar("a", "f32"), Scalar("n", "u32")],
    {"c": C_SRC, "wgsl": WGSL_SRC, "python": axpy_py},
    cube_dim=256,
)


def main() -> int:
    selector = sys.argv[1] if len(sys.argv) > 1 else None
    client = cubeplug.client(selector)
    print(f"backend: {client.backend}  device: {client.device}")
    n = 1 << 20
    rng = np.random.default_rng(0)
    x_host = rng.random(n, dtype=np.float32)
    y_host = rng.random(n, dtype=np.float32)
    x, y = client.create(x_host), client.create(y_host)
    cubes = CubeCount((n + 255) // 256)
    t0 = time.perf_counter()
    for _ in range(10):
        client.launch(AXPY, cubes, [x, y], [0.5, n])
    client.sync()
    elapsed = time.perf_counter() - t0
    got = client.to_numpy(y, "f32")
    expected = y_host.copy()
    for _ in range(10):
        expected = np.float32(0.5) * x_host + expected
    ok = np.allclose(got, expected, rtol=1e-5)
    print(f"10 x axpy over {n} floats: {elapsed * 1e3:.2f} ms, result {'correct' if ok else 'WRONG'}")
    usage = client.memory_usage()
    print(f"memory: {usage}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
