"""client.empty(1 MiB) + drop on every backend of this machine, interleaved in one process.

    python3 bench/probes/alloc_by_backend.py      (microseconds per pair, best of 5, per round)
"""
from __future__ import annotations

import gc
import time

import cubeplug

MIB = 1 << 20


def pair_us(client, n=100000, r=5):  # type: ignore[no-untyped-def]
    empty = client.empty
    best = 1e9
    for _ in range(r):
        t0 = time.perf_counter()
        for _ in range(n):
            h = empty(MIB)
            del h
        best = min(best, (time.perf_counter() - t0) / n)
    return round(best * 1e6, 3)


clients = {}
for sel in ("cpu", "cuda", "opencl:nvidia:0", "webgpu"):
    try:
        clients[sel] = cubeplug.client(sel)
    except Exception as e:
        print(sel, "unavailable:", e)
for rnd in range(3):
    print(rnd, {sel: pair_us(c) for sel, c in clients.items()})
gc.disable()
print("gc off", {sel: pair_us(c) for sel, c in clients.items()})
gc.enable()
for sel, c in clients.items():
    mm = c.server.memory(c.server.stream_id(cubeplug.core.stream.current_stream_id()))
    pool = mm._routes[MIB][0]
    print(sel, type(pool).__name__, getattr(pool, "page_size", ""))
