"""The portable collectives' one kernel: ``acc = op(acc, other)`` elementwise, any dtype, any op."""

from __future__ import annotations

from cubeplug import lang as cl
from cubeplug.lang import Array, Comptime

#: The reduction ops, as the comptime code the kernel branches on (folded away when specialized).
OP_CODES = {"sum": 0, "prod": 1, "min": 2, "max": 3}


@cl.kernel
def combine(acc: Array[T], other: Array[T], T: Comptime[cl.DType], OP: Comptime[int]) -> None:  # type: ignore[name-defined]  # noqa: F821
    """``acc[i] = op(acc[i], other[i])`` over a grid-stride loop (any count of cubes covers any length)."""
    stride = cl.CUBE_DIM * cl.CUBE_COUNT
    for i in range(cl.ABSOLUTE_POS, len(acc), stride):
        if OP == 0:
            acc[i] = acc[i] + other[i]
        elif OP == 1:
            acc[i] = acc[i] * other[i]
        elif OP == 2:
            acc[i] = min(acc[i], other[i])
        else:
            acc[i] = max(acc[i], other[i])
