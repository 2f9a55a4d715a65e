"""Where an OpenCL launch spends its time, interleaved in one process (paired rounds).

    python3 bench/probes/opencl_launch.py [selector]     (default: CUBEPLUG_TEST_OPENCL or opencl:0)

Compares raw enqueues of 1-D and 3-D sizes, on the client's kernel object and on a fresh one,
with ``client.launch`` (the compiled launcher where it is built), with the Python method it stands
in for, and with that method whose enqueue is a no-op (pure Python cost).
The control "raw + busy" puts a little pure-Python work (a 12-step loop, timed alone as "busy")
between raw enqueues: on PoCL with few cores, the raw figure rises by several times that work,
because a slower stream of enqueues lets PoCL's worker threads fall asleep between kernels.
"""
from __future__ import annotations

import functools
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from bench_opencl import TINY, tiny_setup

from cubeplug import CubeCount

sel = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CUBEPLUG_TEST_OPENCL", "opencl:0")
client, x, queue, prog = tiny_setup(sel)
server = client.server
import pyopencl as cl  # noqa: E402

raw = cl.Kernel(prog.kernel.program, "tiny")
raw.set_args(server.bound_buffer(x), np.float32(1.0), np.uint32(64))
enq = cl.enqueue_nd_range_kernel
count = CubeCount(1)
launch = client.launch
k = prog.kernel


def raw1(n: int) -> None:
    for _ in range(n):
        enq(queue, raw, (64,), (64,))


def raw3(n: int) -> None:
    for _ in range(n):
        enq(queue, raw, (64, 1, 1), (64, 1, 1))


def ours_kernel3(n: int) -> None:
    for _ in range(n):
        enq(queue, k, (64, 1, 1), (64, 1, 1))


def ours(n: int) -> None:
    for _ in range(n):
        launch(TINY, count, [x], [1.0, 64])


python_launch = functools.partial(type(client).launch, client)  # what the compiled launcher stands in for


def ours_python(n: int) -> None:
    for _ in range(n):
        python_launch(TINY, count, [x], [1.0, 64])


def ours_python_noop(n: int) -> None:
    real = server._enqueue
    server._enqueue = lambda *a: None
    try:
        for _ in range(n):
            python_launch(TINY, count, [x], [1.0, 64])
    finally:
        server._enqueue = real


def busy(k: int) -> int:
    s = 0
    for i in range(k):
        s += i
    return s


def raw_busy(n: int) -> None:
    for _ in range(n):
        enq(queue, raw, (64,), (64,))
        busy(12)


def busy_only(n: int) -> None:
    for _ in range(n):
        busy(12)


fns = {"raw 1-D": raw1, "raw 3-D": raw3, "raw 3-D, client's kernel": ours_kernel3,
       "client.launch": ours, "Python launch": ours_python,
       "Python launch, no-op enqueue": ours_python_noop,
       "raw 1-D + busy": raw_busy, "busy": busy_only}
best = {name: 1e9 for name in fns}
for _ in range(15):
    for name, fn in fns.items():
        queue.finish()
        t0 = time.perf_counter()
        fn(2000)
        queue.finish()
        best[name] = min(best[name], (time.perf_counter() - t0) / 2000 * 1e6)
for name, us in best.items():
    print(f"{name:32s} {us:7.3f} us")

# The same as the bench's goal figure (bench/paired.py): client.launch, and the control, against raw.
from paired import paired  # noqa: E402

for name, fn in (("client.launch", ours), ("Python launch", ours_python), ("raw 1-D + busy", raw_busy)):
    p = paired(fn, raw1, 4000, drain=queue.finish)
    print(f"paired {name} / raw 1-D: {p['ratio_median']:.3f} (IQR {p['ratio_iqr']})")
