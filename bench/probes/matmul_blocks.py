"""Register-blocked matmul shapes beyond std's candidates, timed on one backend (a probe).

    PYTHONPATH=. python bench/probes/matmul_blocks.py [size] [backend] [rounds] [--json=OUT]
        [--std] [--index=u32,i32] [--units=16x16,8x16] [--dtype=f16]

Builds ``std.matmul.reg`` plans for a grid of block shapes (per-unit patches of 4 x 8, 8 x 4,
8 x 8, 8 x 16 and 16 x 8; steps of 8 or 16; float4 I/O; double-buffered; A staged as scalars, in
4 x 4 squares or in lanes), checks each against numpy (f64) and times them on the device's clock
(``BackendBench.ours`` with ``device=True``: 10 launches a sample) in rounds that alternate the
shapes, printing TFLOP/s fastest first (cuBLAS's figure is the std bench's,
``cubeplug bench --only std_ops --ops matmul``). A shape the device cannot hold (shared memory) is skipped.

On the H100 (``../results/matmul-blocks-webgpu-h100-2026-11-26.json``) no shape beat 40.0 TFLOP/s
on Vulkan, where std's chosen ``reg_8x8_vec_db16`` (``8x8 bk16 lanes``) ran 39.8.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
from typing import Any

import numpy as np

import cubeplug
from cubeplug.bench.suite import BackendBench, plan_for

sys.path.insert(0, "bench")  # run from the repository root
from paired import run_header

# The module, not the function cubeplug.std re-exports under the same name.
mm = importlib.import_module("cubeplug.std.matmul")
LAUNCHES = 10


def shapes(units: tuple[int, int] = (16, 16)) -> dict[str, Any]:
    """The grid: ``"<TM>x<TN> bk<BK> <staging>"`` -> RegBlock (``units`` = (x, y) units a cube;
    other than 16 x 16 it is appended to the name)."""
    grid = {}
    ux, uy = units
    cube = "" if units == (16, 16) else f" u{ux}x{uy}"
    for tm, tn in ((8, 8), (8, 16), (16, 8), (4, 8), (8, 4)):
        for bk in (8, 16):
            for staging in mm.A_STAGING:
                grid[f"{tm}x{tn} bk{bk} {staging}{cube}"] = mm.RegBlock(
                    uy * tm, ux * tn, bk, tm, tn, True, stages=2, stage_a=staging, index="i32")
    return grid


def std_shapes() -> dict[str, Any]:
    """std's register-blocked candidates: candidate name -> RegBlock."""
    blocks = {mm.reg(rb): rb for rb in vars(mm).values() if isinstance(rb, mm.RegBlock)}
    return {name: blocks[plan] for name, plan in mm.PLANS.items() if plan in blocks}


def option(name: str) -> str | None:
    """The value of ``--name=value`` on the command line, if given."""
    return next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith(f"--{name}=")), None)


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    out = option("json")
    indices = option("index")
    units = [tuple(int(u) for u in c.split("x")) for c in (option("units") or "16x16").split(",")]
    grid = std_shapes() if "--std" in sys.argv else {
        name: rb for cube in units for name, rb in shapes((cube[0], cube[1])).items()}
    if indices:
        grid = {f"{name}{'' if ix == 'u32' else ' ' + ix}": dataclasses.replace(rb, index=ix)
                for name, rb in grid.items() for ix in indices.split(",")}
    size = int(args[0]) if args else 4096
    backend = args[1] if len(args) > 1 else "cuda"
    rounds = int(args[2]) if len(args) > 2 else 4
    client = cubeplug.client(backend)
    rng = np.random.default_rng(0)
    dtype = option("dtype") or "f32"  # f32 or f16 (f32 accumulation)
    a = rng.standard_normal((size, size)).astype(dtype.replace("f", "float"))
    b = rng.standard_normal((size, size)).astype(dtype.replace("f", "float"))
    want = a.astype(np.float64) @ b.astype(np.float64)
    ha, hb, hc = client.create(a), client.create(b), client.empty(a.itemsize * size * size)
    plans: dict[str, Any] = {}
    for name, rb in grid.items():
        plan = mm.reg(rb)
        if plan.shared * 4 > client.capabilities.max_shared_bytes:
            print(f"{name:20s} skipped: {plan.shared * 4} B of shared memory", flush=True)
            continue
        mm.launch(client, plan, ha, hb, hc, size, size, size, dtype)
        err = float(np.abs(client.to_numpy(hc, dtype).reshape(size, size) - want).max())
        assert err < 1e-3 * size, f"{name}: max error {err}"
        plans[name] = plan
    runs: dict[str, Any] = {name: (lambda p=plan: mm.launch(client, p, ha, hb, hc, size, size, size, dtype))
                            for name, plan in plans.items()}
    bench = BackendBench(client, None, plan_for(client, quick=True))
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):  # one device-timed loop of each shape a round: drift hits them all
        for name, run in runs.items():
            times[name].append(bench.ours(run, LAUNCHES, 1, device=True).median)
    flops = 2.0 * size ** 3
    rows = {name: {"median_ms": round(float(np.median(t)) * 1e3, 4),
                   "tflops": round(flops / float(np.median(t)) / 1e12, 2)}
            for name, t in sorted(times.items(), key=lambda kv: float(np.median(kv[1])))}
    for name, row in rows.items():
        print(f"{name:20s} {row['median_ms']:.3f} ms {row['tflops']:6.2f} TFLOP/s", flush=True)
    if out:
        result = run_header(device=str(client.device), size=size, dtype=dtype, rounds=rounds, rows=rows)
        with open(out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
