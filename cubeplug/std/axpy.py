"""``axpy``: ``y = a * x + y`` over the first ``n`` elements, in place (BLAS saxpy/daxpy), f16/f32/f64.

Written once in :mod:`cubeplug.lang`: :func:`axpy_scalar` element by element; :func:`axpy_vector`
through ``Vec[T, 4]`` views (the language's vectors hold f32: the f32 fast path) with unit 0 doing
the last ``n % 4`` elements.
"""

from __future__ import annotations

from typing import Any

from cubeplug import lang as cl
from cubeplug.core.handle import Handle
from cubeplug.core.kernel import Scalar, to_scalar
from cubeplug.lang import Array, Comptime, u32
from cubeplug.std import checks, elementwise
from cubeplug.std.combine import VECTOR_DTYPES, lang_type
from cubeplug.std.elementwise import CUBE, FLOAT_DTYPES

#: The scale parameter of each dtype, for to_scalar's checks and messages (made once).
_A = {name: Scalar("a", name) for name in FLOAT_DTYPES}
#: The ``Vec[T, 4]`` of the dtypes the vector kernel takes.
_VECTOR = {name: lang_type(f"{name}x4") for name in FLOAT_DTYPES if name in VECTOR_DTYPES}
_ELEMENTS = elementwise.Elements("axpy", FLOAT_DTYPES)


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
    e = _ELEMENTS(client, dtype)
    n = checks.count(n)
    nbytes = n * e.size
    checks.buffer(client, x, nbytes, "axpy: x")
    checks.buffer(client, y, nbytes, "axpy: y")
    scale = to_scalar(_A[e.name], a, "axpy")
    if n == 0:
        return y
    vector = _VECTOR.get(e.name)
    views = None if vector is None else elementwise.vector_views((x, y), nbytes)
    if views is not None:
        axpy_vector.launch_unchecked(client, elementwise.cubes(n >> 2), CUBE, views[0], x, views[1], y, scale,
                                     n, T=e.T, V=vector)
    else:
        axpy_scalar.launch_unchecked(client, elementwise.cubes(n), CUBE, x, y, scale, n, T=e.T)
    return y
