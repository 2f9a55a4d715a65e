"""What an event costs a launch: clEnqueueNDRangeKernel through ctypes with and without an event.

    python3 bench/probes/opencl_event_cost.py [selector]     (default: CUBEPLUG_TEST_OPENCL or opencl:0)

PyOpenCL's ``enqueue_nd_range_kernel`` always asks the driver for an event (it returns one); the
compiled launcher (launch_path.py) asks for none. The same ctypes call with and without an event
(released at once) shows the driver's share of that difference; ctypes' own overhead is in both.
"""
from __future__ import annotations

import ctypes
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from bench_opencl import TINY, tiny_setup

from cubeplug.backends.opencl import launch_path

sel = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CUBEPLUG_TEST_OPENCL", "opencl:0")
client, x, queue, prog = tiny_setup(sel)
kernel = prog.kernel
import pyopencl as cl  # noqa: E402

lib = launch_path.opencl_library()
assert lib is not None
enq = lib.clEnqueueNDRangeKernel
enq.restype = ctypes.c_int32
enq.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p,
                ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p]
release = lib.clReleaseEvent
release.argtypes = [ctypes.c_void_p]
q, k = ctypes.c_void_p(queue.int_ptr), ctypes.c_void_p(kernel.int_ptr)
size = (ctypes.c_size_t * 3)(64, 1, 1)
event = ctypes.c_void_p()
ev_ref = ctypes.byref(event)


def pyopencl(n: int) -> None:
    for _ in range(n):
        cl.enqueue_nd_range_kernel(queue, kernel, (64, 1, 1), (64, 1, 1))


def no_event(n: int) -> None:
    for _ in range(n):
        enq(q, k, 3, None, size, size, 0, None, None)


def with_event(n: int) -> None:
    for _ in range(n):
        enq(q, k, 3, None, size, size, 0, None, ev_ref)
        release(event)


def launch(n: int) -> None:
    f = client.launch
    for _ in range(n):
        f(TINY, 1, [x], [1.0, 64])


fns = {"pyopencl.enqueue_nd_range_kernel": pyopencl, "ctypes, no event": no_event,
       "ctypes, event (released)": with_event, "client.launch": launch}
best = {name: 1e9 for name in fns}
for _ in range(7):
    for name, fn in fns.items():
        queue.finish()
        t0 = time.perf_counter()
        fn(2000)
        best[name] = min(best[name], (time.perf_counter() - t0) / 2000 * 1e6)
        queue.finish()
print(f"device: {client.device}")
for name, us in best.items():
    print(f"{name:36s} {us:7.3f} us")
