"""``fill``: set the first ``n`` elements of a handle to one value, in any std data dtype.

Written once in :mod:`cubeplug.lang`: :func:`fill_scalar` stores the value element by element;
:func:`fill_vector` stores the value's 16-byte pattern through a ``Vec[u32, 4]`` view, which serves
every dtype. The pattern is two ``u32`` words, ``u32x4(w0, w1, w0, w1)``: an 8-byte value's two
halves, a 4-byte value twice, a 2-byte value four times. The 4-byte dtypes store their bits as
``u32`` words in both kernels (their value is passed as the word ``w0``), so f32, i32 and u32
share one kernel each and a NaN's payload is stored as given.
"""

from __future__ import annotations

from typing import Any

from cubeplug import lang as cl
from cubeplug.core.handle import Handle
from cubeplug.core.kernel import Scalar, to_scalar
from cubeplug.lang import Array, Comptime, u32, u32x4
from cubeplug.std import checks, elementwise
from cubeplug.std.elementwise import CUBE, DATA_DTYPES

#: The value parameter of each dtype, for to_scalar's checks and messages (made once).
_VALUE = {name: Scalar("value", name) for name in DATA_DTYPES}
_ELEMENTS = elementwise.Elements("fill", DATA_DTYPES)


@cl.kernel
def fill_scalar(x: Array[T], value: T, n: u32, T: Comptime[cl.DType]) -> None:  # type: ignore[name-defined]  # noqa: F821
    """``x[:n] = value``."""
    for i in range(cl.ABSOLUTE_POS_X, n, cl.CUBE_DIM_X * cl.CUBE_COUNT_X):
        x[i] = value


@cl.kernel
def fill_vector(
    x4: Array[u32x4], x: Array[T], w0: u32, w1: u32, value: T, n: u32,  # type: ignore[name-defined]  # noqa: F821
    PER: Comptime[int], T: Comptime[cl.DType],
) -> None:
    """``x[:n] = value``: the pattern ``(w0, w1, w0, w1)`` (``PER`` values) into each whole vector
    of ``x4`` (a view of ``x``), then unit 0 stores the last ``n % PER`` elements."""
    n4 = n // PER
    pattern = u32x4(w0, w1, w0, w1)
    for i in range(cl.ABSOLUTE_POS_X, n4, cl.CUBE_DIM_X * cl.CUBE_COUNT_X):
        x4[i] = pattern
    if cl.ABSOLUTE_POS_X == 0:
        for j in range(n4 * PER, n):
            x[j] = value


def fill(client: Any, handle: Handle, n: int, value: Any, dtype: Any = "f32") -> Handle:
    """Set the first ``n`` elements of ``handle`` (of ``dtype``: f16, f32, f64, i32, u32, i64, u64
    where the device declares it) to ``value``; returns ``handle``."""
    e = _ELEMENTS(client, dtype)
    n = checks.count(n)
    nbytes = n * e.size
    checks.buffer(client, handle, nbytes, "fill: handle")
    typed = to_scalar(_VALUE[e.name], value, "fill")
    if n == 0:
        return handle
    # The value's bits, little-endian as the devices store them (int.from_bytes: 0.6 us here, a
    # third of numpy's frombuffer(...).tolist() of the 16-byte pattern).
    bits = int.from_bytes(typed.tobytes(), "little")
    if e.size == 4:
        w0 = w1 = stored = bits
    elif e.size == 8:
        w0, w1, stored = bits & 0xFFFFFFFF, bits >> 32, typed
    else:
        w0 = w1 = bits | bits << 16
        stored = typed
    views = elementwise.vector_views((handle,), nbytes)
    if views is not None:
        fill_vector.launch_unchecked(client, elementwise.cubes(n // e.per), CUBE, views[0], handle, w0, w1,
                                     stored, n, PER=e.per, T=e.word)
    else:
        fill_scalar.launch_unchecked(client, elementwise.cubes(n), CUBE, handle, stored, n, T=e.word)
    return handle
