"""The portable collectives' one kernel: ``acc = op(acc, other)`` elementwise, any dtype, any op.

Importing ``cubeplug.lang`` loads the language's compiler (about 0.2 s on the 2-core CI machine),
so :mod:`cubeplug.collectives.portable` imports this module at the first collective, not when
``cubeplug.client`` imports the package.
"""

from __future__ import annotations

from typing import Any

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


#: Units per cube, and the most cubes one launch uses (each unit then loops: few enough iterations
#: for lavapipe's 65,535-iteration loop limit up to 2**40 elements).
CUBE = 256
MAX_CUBES = 65535


def reduce_into(client: Any, acc: Any, others: list[Any], count: int, dtype: str, op: str) -> None:
    """``acc = op(acc, other)`` for each of ``others`` in order, queued on the thread's stream."""
    cubes = max(1, min(-(-count // CUBE), MAX_CUBES))
    for other in others:
        combine.launch(client, cubes, CUBE, acc, other, T=getattr(cl, dtype), OP=OP_CODES[op])
