"""``copy``: copy ``n`` elements between handles, bit for bit, in any std data dtype.

Written once in :mod:`cubeplug.lang`: :func:`copy_scalar` moves one element at a time (4-byte
dtypes as ``u32`` words, so that no float load can touch a NaN's payload); :func:`copy_vector`
moves 16 bytes at a time through ``Vec[u32, 4]`` views, whatever the dtype, and unit 0 moves the
last elements in the same element type as :func:`copy_scalar`.
"""

from __future__ import annotations

from typing import Any

from cubeplug import lang as cl
from cubeplug.core.handle import Handle
from cubeplug.lang import Array, Comptime, u32, u32x4
from cubeplug.std import checks, elementwise
from cubeplug.std.elementwise import CUBE, DATA_DTYPES

_ELEMENTS = elementwise.Elements("copy", DATA_DTYPES)


@cl.kernel
def copy_scalar(src: Array[T], dst: Array[T], n: u32, T: Comptime[cl.DType]) -> None:  # type: ignore[name-defined]  # noqa: F821
    """``dst[:n] = src[:n]``."""
    for i in range(cl.ABSOLUTE_POS_X, n, cl.CUBE_DIM_X * cl.CUBE_COUNT_X):
        dst[i] = src[i]


@cl.kernel
def copy_vector(
    src4: Array[u32x4], src: Array[T], dst4: Array[u32x4], dst: Array[T], n: u32,  # type: ignore[name-defined]  # noqa: F821
    PER: Comptime[int], T: Comptime[cl.DType],
) -> None:
    """``dst[:n] = src[:n]``: whole vectors (``PER`` elements each) through the views ``src4`` and
    ``dst4``, then unit 0 copies the last ``n % PER`` elements."""
    n4 = n // PER
    for i in range(cl.ABSOLUTE_POS_X, n4, cl.CUBE_DIM_X * cl.CUBE_COUNT_X):
        dst4[i] = src4[i]
    if cl.ABSOLUTE_POS_X == 0:
        for j in range(n4 * PER, n):
            dst[j] = src[j]


def copy(client: Any, src: Handle, n: int, out: Handle | None = None, dtype: Any = "f32") -> Handle:
    """Copy the first ``n`` elements (of ``dtype``: f16, f32, f64, i32, u32, i64, u64 where the device
    declares it; the bits are copied exactly) of ``src`` into ``out`` (new when None); returns ``out``."""
    e = _ELEMENTS(client, dtype)
    n = checks.count(n)
    nbytes = n * e.size
    checks.buffer(client, src, nbytes, "copy: src")
    if out is None:
        out = client.empty(nbytes)
    else:
        checks.buffer(client, out, nbytes, "copy: out")
    if n == 0:
        return out
    views = elementwise.vector_views((src, out), nbytes)
    if views is not None:
        copy_vector.launch_unchecked(client, elementwise.cubes(n // e.per), CUBE, views[0], src, views[1],
                                     out, n, PER=e.per, T=e.word)
    else:
        copy_scalar.launch_unchecked(client, elementwise.cubes(n), CUBE, src, out, n, T=e.word)
    return out
