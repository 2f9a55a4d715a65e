"""``reduce_axis``: ``op`` along one axis of a 2-D :class:`cubeplug.Array` (any strides).

One generic source, :func:`axis_pass`: the input is read as a ``Tensor`` whose dimension 1 is the
one reduced (axis 0 is the transposed view: shape and strides swapped, no copy); each cube folds
whole lines (cubes loop over the lines beyond the launch), its units striding along the line and a
tree in shared memory ending it. The result is a new contiguous 1-D Array of the input's dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cubeplug import lang as cl
from cubeplug.core.array import Array as DeviceArray
from cubeplug.core.errors import ValidationError
from cubeplug.core.handle import Tensor as DeviceTensor
from cubeplug.core.kernel import CubeCount, dtype_of
from cubeplug.lang import Array, Comptime, Tensor
from cubeplug.std import checks
from cubeplug.std.combine import MAX, MIN, PROD, combine, element_type, identity, lang_type, op_code
from cubeplug.std.reduction import CUBE, cube_tree


@cl.kernel
def axis_pass(
    t: Tensor[T], out: Array[T], OP: Comptime[int], T: Comptime[cl.DType]  # type: ignore[name-defined]  # noqa: F821
) -> None:
    """``out[r] = op(t[r, :])`` for every line ``r``."""
    buf = cl.shared(T, CUBE)
    u = cl.UNIT_POS_X
    for r in range(cl.CUBE_POS_X, t.shape[0], cl.CUBE_COUNT_X):
        acc = T(0)
        if OP == PROD:
            acc = T(1)
        if OP >= MAX:
            acc = t[r, 0]
        for j in range(u, t.shape[1], CUBE):
            acc = combine(OP, T, acc, t[r, j])
        buf[u] = acc
        cube_tree(OP, T, buf)
        if u == 0:
            out[r] = buf[0]
        cl.sync_cube()


def reduce_axis(client: Any, array: DeviceArray, axis: int, op: str = "sum") -> DeviceArray:
    """``op`` ("sum", "prod", "max", "min") of a 2-D ``array`` along ``axis`` (0 or 1), as numpy's
    ``array.sum(axis=axis, dtype=array.dtype)`` (or ``max``...) gives it: a new 1-D Array."""
    code = op_code(op, "reduce_axis")
    if not isinstance(array, DeviceArray):
        raise ValidationError(
            f"reduce_axis takes a cubeplug.Array (client.asarray(...)), got {type(array).__name__}"
        )
    if array.ndim != 2:
        raise ValidationError(f"reduce_axis takes a 2-D Array, got shape {array.shape}; reshape it first")
    if axis not in (0, 1, -1, -2):
        raise ValidationError(f"reduce_axis: axis must be 0 or 1 for a 2-D Array, got {axis!r}")
    axis %= 2
    name = element_type(client, dtype_of(array.dtype), "reduce_axis")
    shape, strides = array.shape, array.strides
    if axis == 0:
        shape, strides = shape[::-1], strides[::-1]
    lines, length = shape
    checks.count(lines, "lines")
    checks.count(length, "line length")
    if length == 0 and lines:
        if code in (MAX, MIN):
            raise ValidationError(
                f"reduce_axis: op={op!r} along an empty axis has no value (numpy raises too)"
            )
        filled: DeviceArray = client.asarray(np.full(lines, identity(code, name)))
        return filled
    result: DeviceArray = client.empty_array((lines,), name)
    if lines == 0:
        return result
    checks.buffer(client, array.handle, 0, "reduce_axis: array")
    view = DeviceTensor(array.handle, shape, strides, array.dtype)
    cubes = checks.groups(lines, 1)
    axis_pass.launch_unchecked(client, CubeCount(cubes), CUBE, view, result.handle, OP=code,
                               T=lang_type(name))
    return result
