"""PyOpenCL baselines on the client's OpenCL device (its context, a queue of our own)."""

from __future__ import annotations

from typing import Any

import numpy as np

from cubeplug.bench.raw import MIB, TINY_N, RawLibrary, host_seconds
from cubeplug.bench.timing import Figure, per_call

_SOURCE = """
__kernel void tiny(__global float* x, float a, uint n) {
    uint i = get_global_id(0);
    if (i < n) x[i] = x[i] * a + 1.0f;
}
"""


class OpenCLRaw(RawLibrary):
    """Raw PyOpenCL: enqueue_nd_range_kernel, MemoryPool, enqueue_copy, mapped pinned host buffers."""

    timing = "host"
    alloc_call = "pyopencl.tools.MemoryPool allocate + release"

    def __init__(self, client: Any) -> None:
        import pyopencl as cl
        import pyopencl.tools as cl_tools

        self.cl = cl
        self.library = f"pyopencl {cl.VERSION_TEXT}"
        ctx = getattr(client.server, "ctx", None)
        if ctx is not None:
            self.context, self.device = ctx.context, ctx.device
        else:  # a server without the built-in backend's context: find the device by name
            self.device = next(
                d for p in cl.get_platforms() for d in p.get_devices() if d.name.strip() == client.device.name
            )
            self.context = cl.Context([self.device])
        self.queue = cl.CommandQueue(self.context, self.device)
        self.pool = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(self.queue))
        self.program = cl.Program(self.context, _SOURCE).build()
        self._buffers: dict[tuple[str, int], Any] = {}

    def _buffer(self, tag: str, nbytes: int) -> Any:
        key = (tag, nbytes)
        if key not in self._buffers:
            self._buffers[key] = self.cl.Buffer(self.context, self.cl.mem_flags.READ_WRITE, nbytes)
        return self._buffers[key]

    def _pinned(self, nbytes: int) -> np.ndarray:
        """A host array in a mapped ALLOC_HOST_PTR buffer (pinned memory on GPU drivers)."""
        key = ("pinned", nbytes)
        if key not in self._buffers:
            cl = self.cl
            buf = cl.Buffer(self.context, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR, nbytes)
            array, _ = cl.enqueue_map_buffer(
                self.queue, buf, cl.map_flags.READ | cl.map_flags.WRITE, 0, (nbytes,), np.uint8
            )
            self._buffers[key] = (buf, array)
        result: np.ndarray = self._buffers[key][1]
        return result

    def launch(self, n: int, repeats: int) -> Figure:
        """``enqueue_nd_range_kernel`` of the tiny kernel with its arguments set once."""
        cl = self.cl
        x = self._buffer("tiny", 4 * TINY_N)
        kernel = cl.Kernel(self.program, "tiny")
        kernel.set_args(x, np.float32(1.0), np.uint32(TINY_N))
        enqueue, queue = cl.enqueue_nd_range_kernel, self.queue
        gs = ls = (TINY_N,)

        def calls(k: int) -> None:
            for _ in range(k):
                enqueue(queue, kernel, gs, ls)

        return per_call(calls, n, repeats, queue.finish)

    def alloc(self, n: int, repeats: int) -> Figure:
        """``MemoryPool.allocate(1 MiB)`` and ``release``."""
        allocate = self.pool.allocate

        def calls(k: int) -> None:
            for _ in range(k):
                allocate(MIB).release()

        return per_call(calls, n, repeats, lambda: None)

    def upload(self, host: np.ndarray, staged: bool, iters: int, repeats: int) -> Figure | None:
        """``enqueue_copy`` from pageable memory, or from a mapped pinned buffer when staged."""
        dst = self._buffer("up", host.nbytes)
        src = host
        if staged:
            src = self._pinned(host.nbytes)
            src[:] = host.view(np.uint8).reshape(-1)
        cl, queue = self.cl, self.queue
        return host_seconds(
            lambda: cl.enqueue_copy(queue, dst, src, is_blocking=False), queue.finish, iters, repeats
        )

    def download(self, nbytes: int, staged: bool, iters: int, repeats: int) -> Figure | None:
        """``enqueue_copy`` into pageable memory, or into a mapped pinned buffer when staged."""
        src = self._buffer("up", nbytes)
        dst = self._pinned(nbytes) if staged else np.empty(nbytes, np.uint8)
        cl, queue = self.cl, self.queue
        return host_seconds(
            lambda: cl.enqueue_copy(queue, dst, src, is_blocking=False), queue.finish, iters, repeats
        )

    def copy(self, nbytes: int, iters: int, repeats: int) -> Figure:
        """``enqueue_copy`` between two device buffers."""
        src, dst = self._buffer("src", nbytes), self._buffer("dst", nbytes)
        cl, queue = self.cl, self.queue
        return host_seconds(
            lambda: cl.enqueue_copy(queue, dst, src, byte_count=nbytes), queue.finish, iters, repeats
        )

    def close(self) -> None:
        """Release the buffers and the pool."""
        self.queue.finish()
        for value in self._buffers.values():
            if isinstance(value, tuple):
                mapping: Any = getattr(value[1], "base", None)
                if hasattr(mapping, "release"):
                    mapping.release(self.queue)
        self._buffers.clear()
        self.pool.free_held()
