"""Host time of one std op on WebGPU round by round, with what each round did (a probe).

    python bench/probes/webgpu_rounds.py [op] [side] [rounds] [calls]

``op`` is ``transpose`` (a new side x side f32 output each call) or ``fill`` (in place). Each round
is ``calls`` calls ending in a sync, as ``cubeplug bench`` times them; a line per round gives the
host ms per call, the ms spent queuing the calls and in the sync, the pages the storage created
and freed, and the batches submitted. Then the device time of one round (timestamps).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import cubeplug
from cubeplug import std
from cubeplug.bench.suite import BackendBench, plan_for


def main() -> None:
    op = sys.argv[1] if len(sys.argv) > 1 else "transpose"
    side = int(sys.argv[2]) if len(sys.argv) > 2 else 16384
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    calls = int(sys.argv[4]) if len(sys.argv) > 4 else 100
    client = cubeplug.client("webgpu")
    server: Any = client.server
    storage = server.storage
    made: list[int] = []
    freed: list[int] = []
    alloc, dealloc = storage.alloc, storage.dealloc
    storage.alloc = lambda size: (made.append(size), alloc(size))[1]
    storage.dealloc = lambda sid: (freed.append(sid), dealloc(sid))[1]
    n = side * side
    m = client.create(np.ones(n, np.float32))
    ops: dict[str, Callable[[], object]] = {
        "transpose": lambda: std.transpose(client, m, side, side),
        "fill": lambda: std.fill(client, m, n, 2.0),
    }
    fn = ops[op]
    fn()
    client.sync()
    print(f"{client.device}: {op} {side} x {side} f32, {calls} calls a round")
    for r in range(rounds):
        made.clear()
        freed.clear()
        s0 = server.scheduler.submissions
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        client.sync()
        t2 = time.perf_counter()
        print(f"round {r}: {(t2 - t0) / calls * 1e3:.3f} ms/call; queuing {(t1 - t0) * 1e3:.1f} ms, "
              f"sync {(t2 - t1) * 1e3:.1f} ms; pages made {len(made)}, freed {len(freed)}; "
              f"batches {server.scheduler.submissions - s0}; pages held {len(storage.buffers)}")

    device = BackendBench(client, None, plan_for(client, quick=True)).ours(fn, calls, 1, device=True)
    print(f"device: {device.median * 1e3:.3f} ms/call")
    client.close()


if __name__ == "__main__":
    main()
