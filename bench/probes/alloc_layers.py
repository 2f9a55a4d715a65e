"""The allocation path layer by layer (client.empty, server.empty, MemoryManagement.reserve), per backend.

    python3 bench/probes/alloc_layers.py [selector ...]     (default: cpu webgpu)

Nanoseconds per reserve + release of 1 MiB, best of 7 rounds, backends interleaved in one process.
"""
from __future__ import annotations

import sys
import time

import cubeplug
from cubeplug.core.stream import current_stream_id

MIB = 1 << 20


def layers(client):  # type: ignore[no-untyped-def]
    server = client.server
    sid = server.stream_id(current_stream_id())
    mm = server.memory(sid)
    empty, sempty, reserve = client.empty, server.empty, mm.reserve

    def c(n: int) -> None:
        for _ in range(n):
            h = empty(MIB)
            del h

    def s(n: int) -> None:
        for _ in range(n):
            h = sempty(MIB, sid)
            del h

    def m(n: int) -> None:
        for _ in range(n):
            t = reserve(MIB, sid)
            del t

    return {"client": c, "server": s, "memory": m}


sels = sys.argv[1:] or ["cpu", "webgpu"]
fns = {sel: layers(cubeplug.client(sel)) for sel in sels}
best = {(sel, name): 1e9 for sel in sels for name in fns[sel]}
for _ in range(7):
    for sel in sels:
        for name, fn in fns[sel].items():
            t0 = time.perf_counter()
            fn(50000)
            best[sel, name] = min(best[sel, name], (time.perf_counter() - t0) / 50000 * 1e9)
for (sel, name), ns in best.items():
    print(f"{sel:18s} {name:8s} {ns:7.0f} ns")
