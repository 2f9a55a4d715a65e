"""Host time of std ops on WebGPU under the scheduler's batch ages (a probe).

    python bench/probes/webgpu_batching.py [side]

For ``max_age`` None (batches of 128 tasks only), 0.1, 0.5 and 2 ms: the host time per call of
``std.transpose`` of a side x side f32 matrix, of ``std.reduce_sum`` of as many elements and of
reserving and dropping an output of the same size, each a loop of 30 calls ending in a sync, with
the device time of the same loop (timestamps).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import cubeplug
from cubeplug import std
from cubeplug.bench.suite import BackendBench, plan_for


def per_call(bench: BackendBench, fn: Callable[[], object], n: int = 30) -> tuple[float, float]:
    """(host ms, device ms) per call of ``fn`` over a loop of ``n`` calls (``cubeplug bench``'s
    loops: host time ending in a sync, then timestamps)."""
    host = bench.ours(fn, n, 1, device=False).median * 1e3
    return host, bench.ours(fn, n, 1, device=True).median * 1e3


def main() -> None:
    side = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
    n = side * side
    client = cubeplug.client("webgpu")
    m = client.create(np.ones(n, np.float32))
    bench = BackendBench(client, None, plan_for(client, quick=True))
    server: Any = client.server
    scheduler = server.scheduler
    ops: dict[str, Callable[[], object]] = {
        "transpose": lambda: std.transpose(client, m, side, side),
        "reduce_sum": lambda: std.reduce_sum(client, m, n),
        "empty + drop": lambda: client.empty(4 * n),
    }
    print(f"{client.device.name}, {side} x {side} f32; host ms / device ms per call")
    for age in (None, 0.1e-3, 0.5e-3, 2e-3):
        scheduler.max_age = age
        cells = []
        for name, fn in ops.items():
            host, device = per_call(bench, fn)
            cells.append(f"{name} {host:.3f} / {device:.3f}")
        print(f"max_age {age}: " + "; ".join(cells))
    client.close()


if __name__ == "__main__":
    main()
