"""What the thread-per-device model costs an in-process all_reduce on two GPUs, without cubeplug.

    python bench/probes/nccl_threads.py [iterations]

Per call, 4 KiB f32 in place: (1) one thread, both ranks' ``allReduce`` in ``groupStart/groupEnd``;
(2) one thread per device, each calling its own communicator, a ``threading.Barrier`` per call
(what a rendezvous costs at least); (3) the same with no barrier; (4) the bare barrier alone.
"""

from __future__ import annotations

import sys
import threading
import time

import cupy
from cupy.cuda import nccl

n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
count = 1024
comms = nccl.NcclCommunicator.initAll([0, 1])
arrays, streams = [], []
for d in (0, 1):
    with cupy.cuda.Device(d):
        arrays.append(cupy.ones(count, cupy.float32))
        streams.append(cupy.cuda.Stream(non_blocking=True))


def call(d: int) -> None:
    with cupy.cuda.Device(d):
        comms[d].allReduce(arrays[d].data.ptr, arrays[d].data.ptr, count, nccl.NCCL_FLOAT32,
                           nccl.NCCL_SUM, streams[d].ptr)  # fmt: skip


def grouped() -> None:
    for _ in range(n):
        nccl.groupStart()
        call(0)
        call(1)
        nccl.groupEnd()


def threaded(barrier: threading.Barrier | None, work: bool = True) -> None:
    def run(d: int) -> None:
        for _ in range(n):
            if barrier is not None:
                barrier.wait()
            if work:
                call(d)

    ts = [threading.Thread(target=run, args=(d,)) for d in (0, 1)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def timed(name: str, fn: object) -> None:
    for s in streams:
        s.synchronize()
    t0 = time.perf_counter()
    fn()  # type: ignore[operator]
    for s in streams:
        s.synchronize()
    print(f"{name:34s} {(time.perf_counter() - t0) / n * 1e6:8.1f} us per call", flush=True)


for _ in range(2):
    timed("grouped, one thread", grouped)
    timed("thread per device + barrier", lambda: threaded(threading.Barrier(2)))
    timed("thread per device, no barrier", lambda: threaded(None))
    timed("barrier alone", lambda: threaded(threading.Barrier(2), work=False))
print("switch interval", sys.getswitchinterval())
