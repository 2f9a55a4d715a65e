"""``fill``: set the first ``n`` elements of a handle to one value, in any std data dtype.

Written once in :mod:`cubeplug.lang`: :func:`fill_scalar` stores the value element by element;
:func:`fill_vector` stores the value's 16-byte pattern (the value repeated, as four ``u32`` words)
through a ``Vec[u32, 4]`` view, which serves every dtype with one kernel per dtype of the tail.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cubeplug import lang as cl
from cubeplug.core.handle import Handle
from cubeplug.core.kernel import DTYPES, Scalar, to_scalar
from cubeplug.lang import Array, Comptime, u32, u32x4
from cubeplug.std import checks, elementwise
from cubeplug.std.combine import element_type, lang_type


@cl.kernel
def fill_scalar(x: Array[T], value: T, n: u32, T: Comptime[cl.DType]) -> None:  # type: ignore[name-defined]  # noqa: F821
    """``x[:n] = value``."""
    for i in range(cl.ABSOLUTE_POS_X, n, cl.CUBE_DIM_X * cl.CUBE_COUNT_X):
        x[i] = value


@cl.kernel
def fill_vector(
    x4: Array[u32x4], x: Array[T], w0: u32, w1: u32, w2: u32, w3: u32, value: T, n: u32,  # type: ignore[name-defined]  # noqa: F821
    PER: Comptime[int], T: Comptime[cl.DType],
) -> None:
    """``x[:n] = value``: the pattern ``(w0, w1, w2, w3)`` (``PER`` values) into each whole vector of
    ``x4`` (a view of ``x``), then unit 0 stores the last ``n % PER`` elements."""
    n4 = n // PER
    pattern = u32x4(w0, w1, w2, w3)
    for i in range(cl.ABSOLUTE_POS_X, n4, cl.CUBE_DIM_X * cl.CUBE_COUNT_X):
        x4[i] = pattern
    if cl.ABSOLUTE_POS_X == 0:
        for j in range(n4 * PER, n):
            x[j] = value


def fill(client: Any, handle: Handle, n: int, value: Any, dtype: Any = "f32") -> Handle:
    """Set the first ``n`` elements of ``handle`` (of ``dtype``: f16, f32, f64, i32, u32, i64, u64
    where the device declares it) to ``value``; returns ``handle``."""
    name = element_type(client, dtype, "fill", elementwise.DATA_DTYPES)
    n = checks.count(n)
    size = DTYPES[name].itemsize
    checks.buffer(client, handle, n * size, "fill: handle")
    typed = to_scalar(Scalar("value", name), value, "fill")
    if n == 0:
        return handle
    T = lang_type(name)
    if elementwise.vector_ok((handle,), n * size):
        per = elementwise.VECTOR_BYTES // size
        words = np.frombuffer(np.asarray(typed).tobytes() * per, np.uint32).tolist()
        (view,) = elementwise.vectors((handle,), n * size)
        fill_vector.launch_unchecked(client, elementwise.cubes(n // per), elementwise.CUBE, view, handle,
                                     *words, typed, n, PER=per, T=T)
    else:
        fill_scalar.launch_unchecked(client, elementwise.cubes(n), elementwise.CUBE, handle, typed, n, T=T)
    return handle
