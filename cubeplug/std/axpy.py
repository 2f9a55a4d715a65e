"""``axpy``: ``y = a * x + y`` over the first ``n`` elements, in place (BLAS saxpy/daxpy), f16/f32/f64.

Written once in :mod:`cubeplug.lang`: :func:`axpy_scalar` element by element; :func:`axpy_vector`
through ``Vec[T, 4]`` views (the language's vectors hold f32: the f32 fast path) with unit 0 doing
the last ``n % 4`` elements.
"""

from __future__ import annotations

from typing import Any

from cubeplug import lang as cl
from cubeplug.core.handle import Handle
from cubeplug.core.kernel import DTYPES, Scalar, to_scalar
from cubeplug.lang import Array, Comptime, u32
from cubeplug.std import checks, elementwise
from cubeplug.std.combine import VECTOR_DTYPES, element_type, lang_type


@cl.kernel
def axpy_scalar(x: Array[T], y: Array[T], a: T, n: u32, T: Comptime[cl.DType]) -> None:  # type: ignore[name-defined]  # noqa: F821
    """``y[:n] += a * x[:n]``."""
    for i in range(cl.ABSOLUTE_POS_X, n, cl.CUBE_DIM_X * cl.CUBE_COUNT_X):
        y[i] += a * x[i]


@cl.kernel
def axpy_vector(
    x4: Array[V], x: Array[T], y4: Array[V], y: Array[T], a: T, n: u32,  # type: ignore[name-defined]  # noqa: F821
    T: Comptime[cl.DType], V: Comptime[cl.DType],
) -> None:
    """``y[:n] += a * x[:n]``: whole ``V`` (``Vec[T, 4]``) vectors of the views ``x4``, ``y4``, then
    unit 0 the last ``n % 4`` elements."""
    n4 = n >> 2
    for i in range(cl.ABSOLUTE_POS_X, n4, cl.CUBE_DIM_X * cl.CUBE_COUNT_X):
        y4[i] += a * x4[i]
    if cl.ABSOLUTE_POS_X == 0:
        for j in range(n4 * 4, n):
            y[j] += a * x[j]


def axpy(client: Any, a: float, x: Handle, y: Handle, n: int, dtype: Any = "f32") -> Handle:
    """``y[:n] = a * x[:n] + y[:n]`` on elements of ``dtype`` (f16, f32, f64 where the device declares
    it), in place; returns ``y``."""
    name = element_type(client, dtype, "axpy", elementwise.FLOAT_DTYPES)
    n = checks.count(n)
    size = DTYPES[name].itemsize
    checks.buffer(client, x, n * size, "axpy: x")
    checks.buffer(client, y, n * size, "axpy: y")
    scale = to_scalar(Scalar("a", name), a, "axpy")
    if n == 0:
        return y
    T = lang_type(name)
    if name in VECTOR_DTYPES and elementwise.vector_ok((x, y), n * size):
        x4, y4 = elementwise.vectors((x, y), n * size)
        axpy_vector.launch_unchecked(client, elementwise.cubes(n >> 2), elementwise.CUBE, x4, x, y4, y, scale,
                                     n, T=T, V=lang_type(f"{name}x4"))
    else:
        axpy_scalar.launch_unchecked(client, elementwise.cubes(n), elementwise.CUBE, x, y, scale, n, T=T)
    return y
