"""Where a one-cube CUDA launch spends its time: the driver call on each stream vs the client path.

    python3 bench/probes/cuda_launch.py      (on the GPU machine; microseconds per launch, best of 5)
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cupy as cp
from bench_cuda import SCALE, SCALE_CUDA, make_client
from cupy.cuda import driver

from cubeplug import CubeCount
from cubeplug.core.stream import current_stream_id


def best(fn, n=20000, r=5):
    fn(1000)
    b = 1e9
    for _ in range(r):
        t0 = time.perf_counter()
        fn(n)
        b = min(b, (time.perf_counter() - t0) / n)
    return round(b * 1e6, 3)


client = make_client()
server = client.server
h = client.create(np.ones(1 << 20, np.float32))
cc = CubeCount(1)
client.launch(SCALE, cc, [h], [1.0, 256])
client.sync()
sid = server.stream_id(current_stream_id())
ours = server.multistream.streams.get(sid).stream
launcher = client.launcher.compiled_for(SCALE).program.launch
f, params = launcher._f, launcher._params
cps = cp.cuda.Stream(non_blocking=True)
x_cp = cp.ones(1 << 20, dtype=cp.float32)
rk = cp.RawKernel(SCALE_CUDA, "scale")
s32, n32 = np.float32(1.0), np.uint32(256)
rk((1,), (256,), (x_cp, s32, n32), stream=cps)
cps.synchronize()


def drv(stream_ptr, sync):
    def run(k):
        for _ in range(k):
            driver.launchKernel(f, 1, 1, 1, 256, 1, 1, 0, stream_ptr, params, 0)
        sync()
    return run


def raw(k):
    with cps:
        for _ in range(k):
            rk((1,), (256,), (x_cp, s32, n32))
        cps.synchronize()


def ours_launch(k):
    for _ in range(k):
        client.launch(SCALE, cc, [h], [1.0, 256])
    client.sync()


def ours_launcher(k):
    for _ in range(k):
        launcher(ours, (1, 1, 1), [int(x_cp.data.ptr)], [1.0, 256])
    client.sync()


for _ in range(2):
    print({
        "driver_on_our_stream": best(drv(ours.ptr, client.sync)),
        "driver_on_cupy_stream": best(drv(cps.ptr, cps.synchronize)),
        "rawkernel": best(raw),
        "our_launcher": best(ours_launcher),
        "client_launch": best(ours_launch),
    })
rt = cp.cuda.runtime
print("stream flags: ours", rt.streamGetFlags(ours.ptr), "cupy", rt.streamGetFlags(cps.ptr))
print("priority", cp.cuda.runtime.streamGetPriority(ours.ptr), cp.cuda.runtime.streamGetPriority(cps.ptr))
