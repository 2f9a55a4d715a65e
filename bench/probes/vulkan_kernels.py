"""Where Vulkan (wgpu) loses to CUDA on the same GPU, kernel by kernel (a probe).

    python bench/probes/vulkan_kernels.py [OUT.json]

Times, on ``cuda`` and on ``webgpu`` (device time of a loop of launches: CUDA events, timestamp
queries), each launch that std's slow Vulkan rows are made of, and a copy kernel written in the
language with a shared array of 0 to 8192 floats that it barely touches (one store, one barrier,
one load): if a cube's shared memory costs Vulkan more than CUDA (WebGPU zero-initializes it when
the cube starts), the copy slows down with the size of the array on Vulkan only.
"""

from __future__ import annotations

import datetime
import importlib
import json
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import cubeplug
from cubeplug import lang as cl
from cubeplug.bench.suite import BackendBench, plan_for
from cubeplug.core.handle import Tensor as DeviceTensor
from cubeplug.core.kernel import CubeCount
from cubeplug.lang import Array, Comptime, f32
from cubeplug.std import checks
from cubeplug.std.combine import lang_type

# The modules, not the functions cubeplug.std re-exports under the same names.
axis = importlib.import_module("cubeplug.std.axis")
scan = importlib.import_module("cubeplug.std.scan")

N = 1 << 26  # 64M f32: 256 MiB
SIDE = 8192


@cl.kernel
def copy_with_shared(x: Array[f32], y: Array[f32], S: Comptime[int]) -> None:
    """``y = x``, through a shared array of ``S`` floats (0: none)."""
    i = (cl.CUBE_POS_Y * cl.CUBE_COUNT_X + cl.CUBE_POS_X) * 256 + cl.UNIT_POS_X
    v = x[i]
    if S > 0:
        buf = cl.shared(f32, S)
        buf[cl.UNIT_POS_X] = v
        cl.sync_cube()
        v = buf[(cl.UNIT_POS_X + 1) % 256]
    y[i] = v


def device_ms(client: Any, launch: Callable[[], None], iters: int = 20, rounds: int = 5) -> float:
    """Median device milliseconds per launch (``cubeplug bench``'s device-timed loop)."""
    bench = BackendBench(client, None, plan_for(client, quick=True))
    return bench.ours(launch, iters, rounds, device=True).median * 1e3


def figures(backend: str) -> dict[str, float]:
    client = cubeplug.client(backend)
    out: dict[str, float] = {}
    x = client.create(np.ones(N, np.float32))
    y = client.empty(4 * N)
    grid = CubeCount(4096, N // 256 // 4096)
    for s in (0, 256, 1024, 4096, 8192):

        def copy(s: int = s) -> None:
            copy_with_shared.launch_unchecked(client, grid, 256, x, y, S=s)

        out[f"copy shared={s}"] = device_ms(client, copy)
    # reduce_axis's two kernels, as std launches them on a SIDE x SIDE f32 array
    T = lang_type("f32")
    rows = DeviceTensor(x, (SIDE, N // SIDE), (N // SIDE, 1), np.dtype(np.float32))
    out["axis_pass (lines along memory)"] = device_ms(
        client,
        lambda: axis.axis_pass.launch_unchecked(client, CubeCount(SIDE, 1), 256, rows, y, OP=0, T=T),
    )
    cols = DeviceTensor(x, (N // SIDE, SIDE), (1, N // SIDE), np.dtype(np.float32))
    lines = N // SIDE
    out["column_pass (1 split)"] = device_ms(
        client,
        lambda: axis.column_pass.launch_unchecked(
            client, CubeCount(lines // axis.LINES, 1), (axis.LINES, axis.SLICES), cols, y, OP=0, T=T
        ),
    )
    out["column_pass (16 splits)"] = device_ms(
        client,
        lambda: axis.column_pass.launch_unchecked(
            client, CubeCount(lines // axis.LINES, 16), (axis.LINES, axis.SLICES), cols, y, OP=0, T=T
        ),
    )
    blocks = N // scan.BLOCK
    sums = client.empty(4 * blocks)
    count = checks.cube_count(blocks)
    out["scan block_totals"] = device_ms(
        client,
        lambda: scan.block_totals.launch_unchecked(client, count, 256, x, sums, N, blocks, 0.0, OP=0, T=T),
    )
    out["scan scan_block"] = device_ms(
        client,
        lambda: scan.scan_block.launch_unchecked(
            client, count, 256, x, y, sums, N, blocks, 0.0, OP=0, EXCLUSIVE=False, T=T
        ),
    )
    client.close()
    return out


def main() -> None:
    result: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "n": N,
        "side": SIDE,
    }
    for backend in ("cuda", "webgpu"):
        client = cubeplug.client(backend)
        result[f"{backend}_device"] = client.device.name
        client.close()
        result[backend] = figures(backend)
    print(f"{'kernel':34} {'cuda ms':>9} {'webgpu ms':>10} {'ratio':>6}")
    for name, ms in result["cuda"].items():
        other = result["webgpu"][name]
        print(f"{name:34} {ms:9.4f} {other:10.4f} {other / ms:6.3f}")
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
