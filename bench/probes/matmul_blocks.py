"""Register-blocked matmul shapes beyond std's candidates, timed against cuBLAS (a probe).

    python bench/probes/matmul_blocks.py [size]

Builds ``std.matmul.reg`` plans for a few block shapes (per-unit patches of 8 x 8, 8 x 16, 16 x 8;
steps of 8 or 16; float4 I/O; double-buffered), checks each against ``cupy.matmul`` and times
both in alternation (CUDA events), printing TFLOP/s and the ratio to cuBLAS. CUDA only.
"""

from __future__ import annotations

import importlib
import sys
import time

import cupy
import numpy as np

import cubeplug

# The module, not the function cubeplug.std re-exports under the same name.
mm = importlib.import_module("cubeplug.std.matmul")


def main() -> None:
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    client = cubeplug.client("cuda")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size)).astype(np.float32)
    b = rng.standard_normal((size, size)).astype(np.float32)
    ha, hb = client.create(a), client.create(b)
    hc = client.empty(4 * size * size)
    da, db = cupy.asarray(a), cupy.asarray(b)
    dc = cupy.empty((size, size), cupy.float32)
    want = cupy.asnumpy(da @ db)
    shapes = {
        "8x8 bk16 quad": mm.RegBlock(128, 128, 16, 8, 8, True, stages=2, stage_a="squares"),
        "8x8 bk8 scalarA": mm.RegBlock(128, 128, 8, 8, 8, True, stages=2, stage_a="scalar"),
        "8x16 bk8 quad": mm.RegBlock(128, 256, 8, 8, 16, True, stages=2, stage_a="squares"),
        "8x16 bk8 scalarA": mm.RegBlock(128, 256, 8, 8, 16, True, stages=2, stage_a="scalar"),
        "16x8 bk8 quad": mm.RegBlock(256, 128, 8, 16, 8, True, stages=2, stage_a="squares"),
        "8x16 bk16 quad": mm.RegBlock(128, 256, 16, 8, 16, True, stages=2, stage_a="squares"),
        "16x8 bk16 quad": mm.RegBlock(256, 128, 16, 16, 8, True, stages=2, stage_a="squares"),
        "8x8 bk8 lanes": mm.RegBlock(128, 128, 8, 8, 8, True, stages=2, stage_a="lanes"),
        "8x8 bk16 lanes": mm.RegBlock(128, 128, 16, 8, 8, True, stages=2, stage_a="lanes"),
        "8x16 bk16 lanes": mm.RegBlock(128, 256, 16, 8, 16, True, stages=2, stage_a="lanes"),
    }
    flops = 2.0 * size ** 3
    for name, rb in shapes.items():
        plan = mm.reg(rb)
        try:
            mm.launch(client, plan, ha, hb, hc, size, size, size, "f32")
            got = client.to_numpy(hc, "f32").reshape(size, size)
        except Exception as e:  # a shape the device cannot hold
            print(f"{name:20s} failed: {type(e).__name__}: {str(e)[:120]}")
            continue
        err = float(np.abs(got - want).max())
        ours, theirs = [], []
        for _ in range(10):
            client.sync()
            t0 = time.perf_counter()
            for _ in range(5):
                mm.launch(client, plan, ha, hb, hc, size, size, size, "f32")
            client.sync()
            ours.append((time.perf_counter() - t0) / 5)
            cupy.cuda.Device().synchronize()
            t0 = time.perf_counter()
            for _ in range(5):
                cupy.matmul(da, db, out=dc)
            cupy.cuda.Device().synchronize()
            theirs.append((time.perf_counter() - t0) / 5)
        o, t = float(np.median(ours)), float(np.median(theirs))
        print(f"{name:20s} {flops / o / 1e12:6.1f} TFLOP/s vs cuBLAS {flops / t / 1e12:6.1f}: "
              f"{t / o:.3f} (max error {err:.2g})", flush=True)


if __name__ == "__main__":
    main()
