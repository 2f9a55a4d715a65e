"""Raw-library baselines: the same work done directly with each backend's library, in the same run.

A :class:`RawLibrary` measures, for one client's device: launches of a tiny kernel (the same
computation as the bench's cubeplug kernel), reserve + release of 1 MiB, host uploads and
downloads (pageable, and staged through pinned memory where the library has it), device-to-device
copies, and the library baselines of reduce_sum and matmul (CuPy for CUDA, NumPy for the others).
GPU libraries are imported only when a baseline is built.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from cubeplug.bench.timing import Figure

MIB = 1 << 20
#: The tiny kernel every launch figure runs: ``x[i] = x[i] * a + 1`` on 64 floats, one cube of 64.
TINY_N = 64


class RawLibrary(ABC):
    """Baselines of one library on one device; every figure is seconds per operation."""

    #: The library's name and version, e.g. "pyopencl 2026.1.4".
    library = "numpy"
    #: "device" when copy / reduce / matmul times come from device events, else "host".
    timing = "host"
    #: What reserve + release calls, and what the reduce / matmul baselines call.
    alloc_call = "numpy.empty"
    reduce_call = "numpy.sum"
    matmul_call = "numpy.matmul"

    @abstractmethod
    def launch(self, n: int, repeats: int) -> Figure:
        """Seconds per launch of the tiny kernel, ``n`` launches then a drain."""

    @abstractmethod
    def alloc(self, n: int, repeats: int) -> Figure:
        """Seconds per reserve + release of 1 MiB."""

    @abstractmethod
    def upload(self, host: np.ndarray, staged: bool, iters: int, repeats: int) -> Figure | None:
        """Seconds per host-to-device copy of ``host`` (None: the library has no such path)."""

    @abstractmethod
    def download(self, nbytes: int, staged: bool, iters: int, repeats: int) -> Figure | None:
        """Seconds per device-to-host copy of ``nbytes`` (None: the library has no such path)."""

    @abstractmethod
    def copy(self, nbytes: int, iters: int, repeats: int) -> Figure:
        """Seconds per device-to-device copy of ``nbytes`` (the copy peak)."""

    def reduce(self, host: np.ndarray, iters: int, repeats: int) -> Figure:
        """Seconds per sum of ``host`` by the library baseline (NumPy here; at most ``iters`` a sample)."""
        return host_op(lambda: host.sum(dtype=np.float32), iters, repeats)

    def matmul(self, a: np.ndarray, b: np.ndarray, iters: int, repeats: int) -> Figure:
        """Seconds per ``a @ b`` by the library baseline (NumPy here; at most ``iters`` a sample)."""
        return host_op(lambda: a @ b, iters, repeats)

    def close(self) -> None:  # noqa: B027 - optional
        """Free what the baselines allocated."""


#: Seconds a host baseline sample aims at: its own calibration, never the cubeplug side's.
HOST_TARGET = 0.1


def host_op(run: Any, iters: int, repeats: int) -> Figure:
    """Seconds per call of a blocking host operation, iterations calibrated on its own speed."""
    t0 = time.perf_counter()
    run()
    once = time.perf_counter() - t0
    count = max(1, min(iters, int(HOST_TARGET / max(once, 1e-9))))
    reps = repeats if once * count * repeats < 3.0 else max(1, min(repeats, 3))
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(count):
            run()
        samples.append((time.perf_counter() - t0) / count)
    samples.sort()
    return Figure(samples[len(samples) // 2], samples[0])


def host_seconds(run: Any, wait: Any, iters: int, repeats: int) -> Figure:
    """Seconds per iteration of ``run()`` issued ``iters`` times, then ``wait()``, after a warm-up."""
    run()
    wait()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            run()
        wait()
        samples.append((time.perf_counter() - t0) / iters)
    samples.sort()
    return Figure(samples[len(samples) // 2], samples[0])
