"""Host time of std ops on WebGPU under the scheduler's batch ages (a probe).

    python bench/probes/webgpu_batching.py [side]

For ``max_age`` None (batches of 128 tasks only), 0.1, 0.5 and 2 ms: the host time per call of
``std.transpose`` of a side x side f32 matrix, of ``std.reduce_sum`` of as many elements and of
reserving and dropping an output of the same size, each a loop of 30 calls ending in a sync, with
the device time of the same loop (timestamps).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import cubeplug
from cubeplug import std


def per_call(client: Any, fn: Callable[[], object], n: int = 30) -> tuple[float, float]:
    """(host ms, device ms) per call of ``fn`` over a loop of ``n`` calls."""
    fn()
    client.sync()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    client.sync()
    host = (time.perf_counter() - t0) / n * 1e3

    def loop() -> None:
        for _ in range(n):
            fn()

    _, duration = client.profile(loop)
    client.sync()
    return host, duration.seconds() / n * 1e3


def main() -> None:
    side = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
    n = side * side
    client = cubeplug.client("webgpu")
    m = client.create(np.ones(n, np.float32))
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
            host, device = per_call(client, fn)
            cells.append(f"{name} {host:.3f} / {device:.3f}")
        print(f"max_age {age}: " + "; ".join(cells))
    client.close()


if __name__ == "__main__":
    main()
