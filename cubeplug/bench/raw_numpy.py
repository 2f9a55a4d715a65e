"""The CPU backend's baseline: NumPy on the host."""

from __future__ import annotations

from typing import Any

import numpy as np

from cubeplug.bench.raw import MIB, TINY_N, RawLibrary
from cubeplug.bench.timing import Figure, per_call, seconds


class NumpyRaw(RawLibrary):
    """The CPU backend's baseline: NumPy on the host (its kernels are NumPy functions)."""

    def __init__(self, client: Any) -> None:
        self.library = f"numpy {np.__version__}"
        self._x = np.zeros(TINY_N, np.float32)

    def launch(self, n: int, repeats: int) -> Figure:
        """The tiny kernel as a NumPy statement, called directly."""
        x = self._x
        a = np.float32(1.0)

        def calls(k: int) -> None:
            for _ in range(k):
                x[:TINY_N] = x[:TINY_N] * a + 1

        return per_call(calls, n, repeats, lambda: None)

    def alloc(self, n: int, repeats: int) -> Figure:
        """``numpy.empty(1 MiB)`` and its release."""

        def calls(k: int) -> None:
            for _ in range(k):
                h = np.empty(MIB, np.uint8)
                del h

        return per_call(calls, n, repeats, lambda: None)

    def upload(self, host: np.ndarray, staged: bool, iters: int, repeats: int) -> Figure | None:
        """A memcpy into another host array (no staging on the host)."""
        if staged:
            return None
        dst = np.empty_like(host)
        return seconds(lambda: _copies(dst, host, iters), repeats).scaled(iters)

    def download(self, nbytes: int, staged: bool, iters: int, repeats: int) -> Figure | None:
        """A memcpy of ``nbytes`` (the same as an upload on the host)."""
        if staged:
            return None
        return self.upload(np.zeros(nbytes, np.uint8), False, iters, repeats)

    def copy(self, nbytes: int, iters: int, repeats: int) -> Figure:
        """``numpy.copyto`` between two arrays."""
        src = np.ones(nbytes, np.uint8)
        dst = np.empty_like(src)
        return seconds(lambda: _copies(dst, src, iters), repeats).scaled(iters)


def _copies(dst: np.ndarray, src: np.ndarray, iters: int) -> None:
    for _ in range(iters):
        np.copyto(dst, src)
