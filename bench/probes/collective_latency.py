"""Per-call latency of a 4 KiB f32 all_reduce between two persistent rank threads.

    python bench/probes/collective_latency.py fake|cpu|cuda [calls] [--profile]

``fake``: two cuda clients on the fake CuPy runtime and fake ``cupy.cuda.nccl`` of the tests (the
NCCL path's Python and threading; the fake NCCL call is made to do nothing); ``cpu``: two cpu
devices (the portable path); ``cuda``: two real GPUs (NCCL). Each rank thread calls
``client.all_reduce`` in place ``calls`` times, as ``bench/bench_collectives.py`` does; prints the
median (min, max) of 7 samples, in microseconds per call, and the process's CPU time per call (both
threads: less sensitive to a shared machine's load than the wall clock). The same loop with
``devices=[client]`` alone (no hand-off) is the "solo" figure: the per-call Python of one rank.
``--profile`` then profiles each rank thread over ``calls`` more calls (cProfile, the top
functions by own time). Run it from the repository root.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, os.getcwd())  # this checkout's cubeplug (or PYTHONPATH's) and its tests

warnings.simplefilter("ignore")  # sums in place overflow to inf: the latency is what is measured


def clients(which: str) -> list[Any]:
    if which == "fake":
        import pytest

        from tests.backends.cuda import fake_cupy, fake_nccl

        mp = pytest.MonkeyPatch()
        fake_cupy.install(mp)
        import cupy

        cupy.cuda.runtime.devices = 2
        fake_nccl.install(mp)
        # The NCCL call costs nothing here (the fake's numpy reduction would be most of the time):
        # what is left is cubeplug's own Python and the threads' hand-offs.
        mp.setattr(fake_nccl.World, "_run", lambda self, calls: None)
        import cubeplug.collectives
        from cubeplug.backends.cuda.server import CudaServer
        from cubeplug.backends.cuda.storage import CudaStorage
        from cubeplug.backends.cuda.stream import CudaStreams
        from cubeplug.core.client import ComputeClient
        from cubeplug.core.config import Config

        return [ComputeClient(CudaServer(CudaStorage(d), CudaStreams(d), Config(), d)) for d in (0, 1)]
    import cubeplug

    if which == "cuda":
        return [cubeplug.client(f"cuda:{i}") for i in (0, 1)]
    os.environ["CUBEPLUG_BACKENDS_CPU_DEVICES"] = "2"

    return [cubeplug.client(f"cpu:{i}") for i in (0, 1)]


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "fake"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    from bench_collectives import Ranks, both

    pair = clients(which)
    ranks = Ranks(pair)
    xs = ranks.run(lambda r, c: c.asarray(np.ones(1024, np.float32)))

    def timed(step: Any, count: int) -> tuple[list[float], list[float]]:
        both(ranks, step, 20)
        samples, cpu = [], []
        for _ in range(7):
            t0, c0 = time.perf_counter(), time.process_time()
            both(ranks, step, count)
            samples.append((time.perf_counter() - t0) / count * 1e6)
            cpu.append((time.process_time() - c0) / count * 1e6)
        return samples, cpu

    pairs = timed(lambda r, c: c.all_reduce(xs[r], xs[r], devices=pair), n)
    solo_devices = [[c] for c in pair]
    solo = timed(lambda r, c: c.all_reduce(xs[r], xs[r], devices=solo_devices[r]), n)
    for name, (s, c) in (("2 ranks", pairs), ("solo", solo)):
        print(f"{which} {name}: all_reduce 4 KiB {statistics.median(s):.1f} us per call "
              f"(min {min(s):.1f}, max {max(s):.1f}); process CPU "
              f"{statistics.median(c):.1f} us per call")  # fmt: skip
    if "--profile" in sys.argv:
        # Rank 0's thread only: on Python 3.12 one profiler may be active at a time.
        prof = cProfile.Profile()

        def profiled(r: int, c: Any) -> None:
            if r == 0:
                prof.enable()
            try:
                c.all_reduce(xs[r], xs[r], devices=solo_devices[r] if solo_run else pair)
            finally:
                if r == 0:
                    prof.disable()

        for solo_run in (True, False):
            both(ranks, profiled, n)
            print(f"--- rank 0, {'solo' if solo_run else '2 ranks'}: {n} calls, by own time")
            pstats.Stats(prof).sort_stats("tottime").print_stats(16)
            prof = cProfile.Profile()


if __name__ == "__main__":
    main()
