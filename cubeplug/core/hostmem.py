"""Host memory for results that a copy fills whole: uninitialised, and on huge pages when large.

``bytearray(n)`` zero-fills, which faults in every page of fresh memory only for the copy to write
it again: for a 256 MiB read, 65536 faults of 4 KiB can cost more than the transfer. The buffers
made here skip the fill and, from :data:`HUGEPAGE_MIN` up, are advised for transparent huge pages,
as numpy does for its arrays (what CuPy's ``ndarray.get()`` copies into).
"""

from __future__ import annotations

import ctypes
import mmap
import sys
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from cubeplug.core.errors import ValidationError

#: Host buffers this large and larger are advised for transparent huge pages (numpy's threshold).
HUGEPAGE_MIN = 4 << 20


def host_address(view: memoryview) -> int:
    """The address of a C-contiguous byte view's first byte."""
    if view.nbytes == 0:
        return 0
    return int(np.frombuffer(view, dtype=np.uint8).ctypes.data)


def _uninitialised_bytearray() -> Callable[[Any, int], bytearray] | None:
    """CPython's ``PyByteArray_FromStringAndSize``: with a NULL source it leaves the bytes unset."""
    try:
        proto = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_ssize_t)
        return proto(("PyByteArray_FromStringAndSize", ctypes.pythonapi))
    except (AttributeError, OSError):  # not CPython
        return None


def _madvise() -> Callable[[int, int, int], int] | None:
    """libc's ``madvise`` (Linux), or None."""
    if not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_HUGEPAGE"):
        return None
    try:
        proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, use_errno=True)
        return proto(("madvise", ctypes.CDLL(None, use_errno=True)))
    except (AttributeError, OSError):
        return None


_new_bytearray = _uninitialised_bytearray()
_madvise_fn = _madvise()
_MADV_HUGEPAGE: int = getattr(mmap, "MADV_HUGEPAGE", 14)
_PAGE = 4096


def advise_hugepages(address: int, nbytes: int) -> None:
    """Ask for transparent huge pages over the whole pages of ``[address, address + nbytes)``.

    What numpy does for every array of 4 MiB and more: the first touch of fresh memory then faults
    2 MiB at a time instead of 4 KiB (a 256 MiB buffer: 128 faults instead of 65536). Errors (an old
    kernel, THP turned off) are ignored: the pages are then ordinary ones.
    """
    if _madvise_fn is None or nbytes < HUGEPAGE_MIN:
        return
    start = -(-address // _PAGE) * _PAGE
    end = (address + nbytes) // _PAGE * _PAGE
    if end > start:
        _madvise_fn(start, end - start, _MADV_HUGEPAGE)


def host_buffer(nbytes: int) -> bytearray:
    """A bytearray of ``nbytes`` *uninitialised* bytes, for a result a copy then fills whole.

    ``bytearray(n)`` zero-fills: it faults in every page of fresh memory only for the copy to write it
    again (for a 256 MiB read that first touch, 65536 faults of 4 KiB, can cost more than the
    transfer). This one
    is allocated without a fill and, from :data:`HUGEPAGE_MIN` up, advised for huge pages, as numpy
    allocates the array that CuPy's ``ndarray.get()`` copies into.
    """
    if nbytes <= 0:
        return bytearray()
    if _new_bytearray is None:
        return bytearray(nbytes)
    buf = _new_bytearray(None, nbytes)
    if nbytes >= HUGEPAGE_MIN:
        advise_hugepages(host_address(memoryview(buf)), nbytes)
    return buf


def host_copy(src: np.ndarray) -> bytearray:
    """A bytearray copy of a contiguous uint8 array: one copy, no fill."""
    n = src.nbytes
    if n < HUGEPAGE_MIN:
        return bytearray(src)
    out = host_buffer(n)
    np.frombuffer(out, dtype=np.uint8)[:] = src
    return out


def host_copies(src: np.ndarray, sizes: Iterable[int]) -> list[bytearray]:
    """:func:`host_copy` of each of the ranges of ``sizes`` bytes that lie end to end in ``src``
    (a read of several handles staged in one block)."""
    out, at = [], 0
    for n in sizes:
        out.append(host_copy(src[at : at + n]))
        at += n
    return out


def staging_sizes(sizes: Iterable[Any]) -> list[int]:
    """The byte sizes of a ``reserve_staging`` call as ints, all checked before any is allocated;
    ValidationError for one that is not a non-negative integer (a bool is not a size)."""
    out = []
    for size in sizes:
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
            raise ValidationError(f"staging sizes are non-negative byte counts, got {size!r}")
        out.append(int(size))
    return out


class StagedRead:
    """Bytes a server read into host memory a transfer can write from directly, lent until
    :meth:`release`: a block of CUDA pinned memory, a mapped host-allocated OpenCL buffer, a mapped
    WebGPU staging buffer, or (the plain fallback) ordinary bytes. ``ComputeServer.read_staged``
    makes them; a copy to another backend writes ``view`` there, then releases it."""

    __slots__ = ("_release", "view")

    def __init__(self, view: memoryview, release: Callable[[], None] | None = None) -> None:
        self.view = view
        self._release = release

    def release(self) -> None:
        """Give the memory back to its pool (once; the view must not be used after)."""
        release, self._release = self._release, None
        self.view = memoryview(b"")
        if release is not None:
            release()

