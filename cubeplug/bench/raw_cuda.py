"""CuPy baselines on the client's CUDA device: RawKernel launches, the memory pool, runtime copies,
``cupy.sum`` and ``cupy.matmul`` (cuBLAS), timed with CUDA events where the work runs on the device;
and :class:`CupyArrays`, CuPy as the baseline of the std-op rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from cubeplug.bench.raw import MIB, TINY_N, RawLibrary, host_seconds
from cubeplug.bench.raw_arrays import ArrayLibrary
from cubeplug.bench.timing import Figure, per_call

_SOURCE = """
extern "C" __global__ void tiny(float* x, float a, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * a + 1.0f;
}
"""
_H2D, _D2H, _D2D = 1, 2, 3


class CupyRaw(RawLibrary):
    """Raw CuPy on the same device as the client."""

    timing = "device"
    alloc_call = "cupy.empty (CuPy's memory pool) + release"
    reduce_call = "cupy.sum"
    matmul_call = "cupy.matmul (cuBLAS)"

    def __init__(self, client: Any) -> None:
        import cupy

        self.cp = cupy
        self.library = f"cupy {cupy.__version__}"
        self.dev = cupy.cuda.Device(client.device.index)
        with self.dev:
            self.kernel = cupy.RawKernel(_SOURCE, "tiny")
            self.x = cupy.zeros(TINY_N, cupy.float32)
        self._arrays: dict[tuple[str, int], Any] = {}

    def _array(self, tag: str, nbytes: int) -> Any:
        key = (tag, nbytes)
        if key not in self._arrays:
            with self.dev:
                self._arrays[key] = self.cp.empty(nbytes, self.cp.uint8)
        return self._arrays[key]

    def events(self, run: Callable[[], object], iters: int, repeats: int) -> Figure:
        """Seconds per iteration of ``run`` from CUDA events around ``iters`` iterations."""
        cp = self.cp
        with self.dev:
            run()
            cp.cuda.get_current_stream().synchronize()
            samples = []
            for _ in range(repeats):
                start, end = cp.cuda.Event(), cp.cuda.Event()
                start.record()
                for _ in range(iters):
                    run()
                end.record()
                end.synchronize()
                samples.append(cp.cuda.get_elapsed_time(start, end) * 1e-3 / iters)
        samples.sort()
        return Figure(samples[len(samples) // 2], samples[0])

    def launch(self, n: int, repeats: int) -> Figure:
        """``RawKernel`` launches with one argument tuple built beforehand."""
        kernel, args = self.kernel, (self.x, np.float32(1.0), np.uint32(TINY_N))
        sync = self.cp.cuda.get_current_stream().synchronize

        def calls(k: int) -> None:
            for _ in range(k):
                kernel((1,), (TINY_N,), args)

        with self.dev:
            return per_call(calls, n, repeats, sync)

    def alloc(self, n: int, repeats: int) -> Figure:
        """``cupy.empty(1 MiB)`` from CuPy's pool and its release."""
        empty, u8 = self.cp.empty, self.cp.uint8

        def calls(k: int) -> None:
            for _ in range(k):
                a = empty(MIB, u8)
                del a

        with self.dev:
            return per_call(calls, n, repeats, lambda: None)

    def _host(self, nbytes: int, staged: bool) -> np.ndarray:
        if not staged:
            return np.empty(nbytes, np.uint8)
        import cupyx

        pinned: np.ndarray = cupyx.empty_pinned((nbytes,), np.uint8)
        return pinned

    def upload(self, host: np.ndarray, staged: bool, iters: int, repeats: int) -> Figure | None:
        """``cudaMemcpy`` host to device from pageable or pinned memory."""
        src = self._host(host.nbytes, staged)
        src[:] = host.view(np.uint8).reshape(-1)
        dst = self._array("up", host.nbytes)
        memcpy = self.cp.cuda.runtime.memcpy
        with self.dev:
            return host_seconds(
                lambda: memcpy(dst.data.ptr, src.ctypes.data, host.nbytes, _H2D), lambda: None, iters, repeats
            )

    def download(self, nbytes: int, staged: bool, iters: int, repeats: int) -> Figure | None:
        """``cudaMemcpy`` device to host into pageable or pinned memory."""
        dst = self._host(nbytes, staged)
        src = self._array("up", nbytes)
        memcpy = self.cp.cuda.runtime.memcpy
        with self.dev:
            return host_seconds(
                lambda: memcpy(dst.ctypes.data, src.data.ptr, nbytes, _D2H), lambda: None, iters, repeats
            )

    def copy(self, nbytes: int, iters: int, repeats: int) -> Figure:
        """``cudaMemcpyAsync`` device to device on the current stream."""
        src, dst = self._array("src", nbytes), self._array("dst", nbytes)
        rt = self.cp.cuda.runtime
        stream = self.cp.cuda.get_current_stream().ptr
        return self.events(
            lambda: rt.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, _D2D, stream), iters, repeats
        )

    def reduce(self, host: np.ndarray, iters: int, repeats: int) -> Figure:
        """``cupy.sum`` of the same data on the device."""
        with self.dev:
            x = self.cp.asarray(host)
        return self.events(lambda: x.sum(), iters, repeats)

    def matmul(self, a: np.ndarray, b: np.ndarray, iters: int, repeats: int) -> Figure:
        """``cupy.matmul`` (cuBLAS SGEMM) of the same matrices on the device."""
        with self.dev:
            da, db = self.cp.asarray(a), self.cp.asarray(b)
        return self.events(lambda: self.cp.matmul(da, db), iters, repeats)

    def close(self) -> None:
        """Free the arrays and CuPy's cached blocks."""
        self._arrays.clear()
        with self.dev:
            self.cp.cuda.get_current_stream().synchronize()
            self.cp.get_default_memory_pool().free_all_blocks()
            self.cp.get_default_pinned_memory_pool().free_all_blocks()


class CupyArrays(ArrayLibrary):
    """CuPy as the baseline of the std ops on the client's device, timed with CUDA events."""

    name = "cupy"

    def __init__(self, raw: CupyRaw) -> None:
        self.raw = raw
        self.xp = raw.cp
        self._axpy: Any = None
        self._map2: Any = None

    def asarray(self, host: np.ndarray) -> Any:
        """A copy of ``host`` on the device."""
        with self.raw.dev:
            return self.raw.cp.asarray(host)

    def time(self, run: Callable[[], object], iters: int, repeats: int) -> Figure:
        """Seconds per ``run()`` from CUDA events around ``iters`` calls."""
        return self.raw.events(run, iters, repeats)

    def axpy(self, a: float, x: Any, y: Any) -> Callable[[], object]:
        """``y = a * x + y`` in place by one ``ElementwiseKernel`` (what a CuPy user writes for it)."""
        cp = self.raw.cp
        if self._axpy is None:
            self._axpy = cp.ElementwiseKernel("float32 a, T x", "T y", "y = a * x + y", "bench_axpy")
        kernel, scale = self._axpy, np.float32(a)
        return lambda: kernel(scale, x, y)

    def map2(self, x: Any, y: Any) -> Callable[[], object]:
        """``a * b + a`` by an ``ElementwiseKernel`` into a new array (the ``map`` of cubeplug)."""
        cp = self.raw.cp
        if self._map2 is None:
            self._map2 = cp.ElementwiseKernel("T a, T b", "T z", "z = a * b + a", "bench_map2")
        kernel = self._map2
        return lambda: kernel(x, y)

    def close(self) -> None:
        """Free CuPy's cached blocks (the arrays are the caller's)."""
        with self.raw.dev:
            self.raw.cp.cuda.get_current_stream().synchronize()
            self.raw.cp.get_default_memory_pool().free_all_blocks()
