"""``transpose``: the ``cols x rows`` transpose of a row-major ``rows x cols`` matrix, autotuned.

Candidates (:func:`transpose_set`, one per dtype), each cube moving a 32 x 32 tile:

* ``tiled``: 32 x 8 units, 4 elements each; the tile goes through shared memory (rows padded to
  33 elements so that the column reads hit distinct banks), so both the reads and the writes of
  global memory are coalesced. Tiles wholly inside the matrix skip the per-element bound tests.
* ``tiled_x8``: the same with 32 x 4 units, 8 elements each (more loads in flight per unit).
* ``direct``: 32 x 8 units; each unit writes its elements straight to their transposed place (reads coalesced,
  writes strided); it wins where shared memory is slow or emulated.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from cubeplug import lang as cl
from cubeplug.core.handle import Handle
from cubeplug.core.kernel import DTYPES, CubeCount
from cubeplug.core.tune import AutotuneKey, Tunable, TunableSet, anchor, autotune
from cubeplug.lang import Array, Comptime, u32
from cubeplug.std import checks
from cubeplug.std.combine import element_type, lang_type

TILE = 32
#: Rows of units per cube: each unit moves TILE / ROWS elements.
ROWS = 8
#: Largest rows or cols: the count of tiles along each axis stays within 65535 cubes.
MAX_SIDE = TILE * checks.MAX_GROUPS


@cl.kernel
def transpose_tiled(
    x: Array[T], y: Array[T], rows: u32, cols: u32, T: Comptime[cl.DType], RW: Comptime[int]  # type: ignore[name-defined]  # noqa: F821
) -> None:
    """``y[c, r] = x[r, c]`` through a shared tile, with ``RW`` rows of units (``TILE / RW``
    elements each). A tile wholly inside the matrix (the same answer for the whole cube) moves
    without a bound test per element."""
    tile = cl.shared(T, TILE * (TILE + 1))
    tx = cl.UNIT_POS_X
    ty = cl.UNIT_POS_Y
    c = cl.CUBE_POS_X * TILE + tx
    inside = cols >= (cl.CUBE_POS_X + 1) * TILE and rows >= (cl.CUBE_POS_Y + 1) * TILE
    if inside:
        for k in cl.unroll(range(0, TILE, RW)):
            tile[(ty + k) * (TILE + 1) + tx] = x[(cl.CUBE_POS_Y * TILE + ty + k) * cols + c]
    else:
        for k in cl.unroll(range(0, TILE, RW)):
            r = cl.CUBE_POS_Y * TILE + ty + k
            if r < rows and c < cols:
                tile[(ty + k) * (TILE + 1) + tx] = x[r * cols + c]
    cl.sync_cube()
    c2 = cl.CUBE_POS_Y * TILE + tx
    if inside:
        for k in cl.unroll(range(0, TILE, RW)):
            y[(cl.CUBE_POS_X * TILE + ty + k) * rows + c2] = tile[tx * (TILE + 1) + ty + k]
    else:
        for k in cl.unroll(range(0, TILE, RW)):
            r2 = cl.CUBE_POS_X * TILE + ty + k
            if r2 < cols and c2 < rows:
                y[r2 * rows + c2] = tile[tx * (TILE + 1) + ty + k]


@cl.kernel
def transpose_direct(
    x: Array[T], y: Array[T], rows: u32, cols: u32, T: Comptime[cl.DType]  # type: ignore[name-defined]  # noqa: F821
) -> None:
    """``y[c, r] = x[r, c]``, each unit straight from global memory to global memory."""
    c = cl.CUBE_POS_X * TILE + cl.UNIT_POS_X
    for k in cl.unroll(range(0, TILE, ROWS)):
        r = cl.CUBE_POS_Y * TILE + cl.UNIT_POS_Y + k
        if r < rows and c < cols:
            y[c * rows + r] = x[r * cols + c]


def strategy(kernel: Any, name: str, rw: int | None = None) -> Any:
    """A candidate launching ``kernel`` over the tiles (``rw`` rows of units, for the tiled one)."""
    T = lang_type(name)
    extra = {} if rw is None else {"RW": rw}
    dim = (TILE, ROWS if rw is None else rw)

    def run(client: Any, x: Handle, rows: int, cols: int) -> Handle:
        y: Handle = client.empty(rows * cols * DTYPES[name].itemsize)
        count = CubeCount(-(-cols // TILE), -(-rows // TILE))
        kernel.launch_unchecked(client, count, dim, x, y, rows, cols, T=T, **extra)
        return y

    return run


def transpose_key(client: Any, level: str, x: Handle, rows: int, cols: int) -> AutotuneKey:
    """The tuning key: the anchored sides."""
    return AutotuneKey(("rows", anchor(rows, level, MAX_SIDE)), ("cols", anchor(cols, level, MAX_SIDE)))


@functools.cache
def transpose_set(name: str) -> TunableSet:
    """The tunable set of the transpose of ``name`` elements."""

    def reference(client: Any, x: Handle, rows: int, cols: int) -> Handle:
        host = client.to_numpy(checks.prefix(x, rows * cols * DTYPES[name].itemsize), name)
        made: Handle = client.create(np.ascontiguousarray(host.reshape(rows, cols).T))
        return made

    def compare(client: Any, expected: Handle, got: Handle, x: Handle, rows: int, cols: int) -> str | None:
        same = np.array_equal(client.to_numpy(expected, name), client.to_numpy(got, name), equal_nan=True)
        return None if same else "the transposes differ"

    return TunableSet(
        f"std.transpose.{name}",
        [Tunable("tiled", strategy(transpose_tiled, name, ROWS), priority=2),
         Tunable("tiled_x8", strategy(transpose_tiled, name, 4), priority=2),
         Tunable("direct", strategy(transpose_direct, name), priority=2)],
        transpose_key, compare=compare, reference=reference,
    )


def transpose(client: Any, handle: Handle, rows: int, cols: int, dtype: Any = "f32") -> Handle:
    """The transpose of the row-major ``rows x cols`` matrix at the start of ``handle`` (of
    ``dtype``), as a new handle holding the row-major ``cols x rows`` matrix (autotuned)."""
    name = element_type(client, dtype, "transpose")
    rows = checks.count(rows, "rows", MAX_SIDE)
    cols = checks.count(cols, "cols", MAX_SIDE)
    n = checks.count(rows * cols, "rows * cols")
    size = DTYPES[name].itemsize
    checks.buffer(client, handle, n * size, "transpose: handle")
    if n == 0:
        empty: Handle = client.empty(0)
        return empty
    result: Handle = autotune(client, transpose_set(name), handle, rows, cols)
    return result
