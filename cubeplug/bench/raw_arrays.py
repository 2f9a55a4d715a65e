"""The raw side of the std-op rows: an array library (NumPy on the host, CuPy on a CUDA device).

Each std op of ``cubeplug bench`` is measured against what a user of the array library would call
for the same work: ``xp.sum``, ``xp.max``, ``xp.argmax``, ``xp.sum(m, axis=...)``, ``xp.cumsum``,
``m.T.copy()``, ``xp.matmul``, ``x.fill``, ``xp.copyto``, and for the elementwise ops (``axpy``,
``map``) the library's own elementwise path (NumPy ufuncs with ``out=``; a CuPy ``ElementwiseKernel``).
The same expressions serve both libraries through their array module ``xp``; only the elementwise
ops, the transfers and the clock differ (:class:`cubeplug.bench.raw_cuda.CupyArrays`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from cubeplug.bench.raw import host_op
from cubeplug.bench.timing import Figure


class ArrayLibrary:
    """NumPy as the baseline of the std ops: host arrays, host time."""

    #: How the row names the library's calls, e.g. "numpy.cumsum".
    name = "numpy"

    def __init__(self) -> None:
        self.xp: Any = np

    def asarray(self, host: np.ndarray) -> Any:
        """``host`` in the library's memory (NumPy: the array itself, no copy)."""
        return host

    def time(self, run: Callable[[], object], iters: int, repeats: int) -> Figure:
        """Seconds per ``run()``: host time, iterations calibrated on the library's own speed."""
        return host_op(run, iters, repeats)

    def axpy(self, a: float, x: Any, y: Any) -> Callable[[], object]:
        """``y = a * x + y`` in place, as NumPy does it without a temporary per call: two ufuncs."""
        scratch = np.empty_like(x)
        scale = np.float32(a)

        def run() -> None:
            np.multiply(x, scale, out=scratch)
            np.add(y, scratch, out=y)

        return run

    def map2(self, x: Any, y: Any) -> Callable[[], object]:
        """The bench's map function ``a * b + a`` of two arrays into a new one."""
        return lambda: x * y + x

    def close(self) -> None:
        """Free what the baselines allocated."""
