"""Lane values of the interpreter that are cheaper than one array element per lane.

A value of the interpreter is a numpy scalar (the same in every lane: a parameter, a constant, a
position that does not vary in the batch), an array of one element (row) per lane, or a
:class:`Ramp`: ``start, start + step, ...`` over the lanes, kept symbolic while integer arithmetic
allows (``ABSOLUTE_POS_X`` of a one-dimensional launch, ``i + 1``, ``2 * i``). An array access
whose index is a ramp of step 1 is a slice of the array (a view, or a masked ``copyto``) instead of
a gather or a scatter, and a comparison of a ramp with a scalar is a prefix or suffix mask. A
:class:`Tile` is the same per cube (``UNIT_POS_X``): an access of shared memory through one is a
strided view of the cubes' rows. Every operation the rules do not cover materializes them
(:meth:`Ramp.array`, :meth:`Tile.array`), with the same result. :func:`splat` and
:func:`fill_rows` keep a vector that is the same in every lane from costing a numpy loop per lane.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from cubeplug.lang.types import DType

_CMP: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
    "==": operator.eq, "!=": operator.ne,
}
#: The comparisons whose lanes, for a ramp and an integer, are one run (:func:`span`).
ORDERED = ("<", "<=", ">", ">=", "==")
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}


@dataclass(frozen=True, slots=True)
class Ramp:
    """The integers ``start + step * j`` for lanes ``j < n``, all inside the range of ``dtype``."""

    start: int
    step: int
    n: int
    dtype: np.dtype[Any]

    def value(self, j: int) -> int:
        """The value of lane ``j``."""
        return self.start + self.step * j

    def array(self) -> np.ndarray:
        """The lane values as an array."""
        if self.step > 0 and self.start >= 0:
            return np.arange(self.start, self.start + self.step * self.n, self.step, dtype=self.dtype)
        return (np.arange(self.n, dtype=np.int64) * self.step + self.start).astype(self.dtype)


@dataclass(frozen=True, slots=True)
class Tile:
    """``start + step * u + row * r`` for the units ``u < units`` of each of ``rows`` cubes ``r``,
    side by side (``UNIT_POS_X`` of one-dimensional cubes, ``u * 8 + k``; with a ``row`` step,
    ``CUBE_POS_X`` within a row of the grid and ``CUBE_POS * BLOCK + k * CUBE + UNIT_POS``): an
    access of shared memory through one of row step 0 is a strided view of the cubes' rows, an
    access of global memory through one in bounds a strided view of the array, not a gather."""

    start: int
    step: int
    units: int
    rows: int
    dtype: np.dtype[Any]
    row: int = 0

    def array(self) -> np.ndarray:
        """The lane values as an array."""
        one = np.arange(self.units, dtype=np.int64) * self.step + self.start
        if self.row:
            every = one[None, :] + (np.arange(self.rows, dtype=np.int64) * self.row)[:, None]
            return every.reshape(-1).astype(self.dtype)
        return np.tile(one.astype(self.dtype), self.rows)

    def bounds(self) -> tuple[int, int]:
        """The least and the greatest lane value."""
        corners = [self.start + self.step * u + self.row * r
                   for u in (0, self.units - 1) for r in (0, self.rows - 1)]
        return min(corners), max(corners)

    def cut(self, size: int) -> tuple[int, int, slice] | None:
        """For a positive step and row step 0: the units ``[lo, hi)`` whose values are in
        ``[0, size)`` (they are one run) and the slice of a cube's row those address; None for
        another step."""
        if self.step <= 0 or self.row:
            return None
        lo = 0 if self.start >= 0 else min(self.units, (self.step - 1 - self.start) // self.step)
        hi = min(self.units, (size - 1 - self.start) // self.step + 1) if self.start < size else 0
        if hi <= lo:
            return lo, lo, slice(0, 0)
        first = self.start + self.step * lo
        return lo, hi, slice(first, first + self.step * (hi - lo - 1) + 1, self.step)


@dataclass(frozen=True, slots=True)
class Units:
    """The lanes of the units ``[lo, hi)`` of each of ``rows`` cubes of ``units`` lanes: the lanes
    where a tile compared with an integer holds (``if UNIT_POS_X < half``), which a branch runs
    on alone with its tiles kept (:func:`take`), so that its shared-memory accesses stay strided
    views of the cubes' rows."""

    lo: int
    hi: int
    units: int
    rows: int

    def columns(self, v: np.ndarray) -> np.ndarray:
        """The view of ``v`` (one row, or one element, per lane) at these lanes, as ``(rows, hi - lo)``
        rows."""
        return v.reshape(self.rows, self.units, *v.shape[1:])[:, self.lo:self.hi]


def _fits(start: int, step: int, n: int, dtype: np.dtype[Any]) -> bool:
    """Whether the ``n`` values ``start + step * i`` are all in the range of ``dtype``."""
    info = np.iinfo(dtype)
    last = start + step * (n - 1)
    return bool(info.min <= min(start, last) and max(start, last) <= info.max)


def make_tile(start: int, step: int, units: int, rows: int, dtype: np.dtype[Any], row: int = 0) -> Any:
    """A :class:`Tile`, a scalar where every lane has the same value, or None when a value leaves
    the range of ``dtype``."""
    if rows == 1:
        row = 0
    if units == 1:
        step = 0
    tile = Tile(start, step, units, rows, dtype, row)
    lo, hi = tile.bounds()
    info = np.iinfo(dtype)
    if lo < info.min or hi > info.max:
        return None
    if step == 0 and row == 0:
        return dtype.type(start)
    return tile


def make(start: int, step: int, n: int, dtype: np.dtype[Any]) -> Any:
    """A ramp, a scalar for step 0, or None when a lane's value leaves the range of ``dtype``
    (wrapping is left to the array arithmetic)."""
    if not _fits(start, step, n, dtype):
        return None
    return dtype.type(start) if step == 0 else Ramp(start, step, n, dtype)


def as_int(v: Any) -> int | None:
    """``v`` as a Python int when it is one integer value for every lane, else None."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.ndarray) and v.ndim == 0 and v.dtype.kind in "iu":
        return int(v)
    return None


def materialize(v: Any) -> Any:
    """A ramp or a tile as an array; any other value unchanged."""
    return v.array() if isinstance(v, (Ramp, Tile)) else v


def binary(op: str, a: Any, b: Any, ty: DType) -> Any:
    """``a op b`` with a ramp operand, as a ramp (or a mask for a comparison); None when the rules
    do not cover it."""
    if not ty.is_int or ty.is_vector:
        return None
    if isinstance(a, Tile) or isinstance(b, Tile):
        return _tile_binary(op, a, b, ty)
    ra, rb = isinstance(a, Ramp), isinstance(b, Ramp)
    if op in _CMP:
        if ra and (s := as_int(b)) is not None:
            return compare(op, a, s)
        if rb and (s := as_int(a)) is not None:
            return compare(_FLIP[op], b, s)
        return None
    dt = ty.np
    if ra and rb:
        if op in ("+", "-") and a.n == b.n:
            sign = 1 if op == "+" else -1
            return make(a.start + sign * b.start, a.step + sign * b.step, a.n, dt)
        return None
    r, s = (a, as_int(b)) if ra else (b, as_int(a))
    if s is None:
        return None
    if op == "+":
        return make(r.start + s, r.step, r.n, dt)
    if op == "*":
        return make(r.start * s, r.step * s, r.n, dt)
    if op == "-":
        return make(r.start - s, r.step, r.n, dt) if ra else make(s - r.start, -r.step, r.n, dt)
    return None


def _tile_binary(op: str, a: Any, b: Any, ty: DType) -> Any:
    """``a op b`` with a tile operand (``+``, ``-``, ``*`` with an integer, ``+``/``-`` of two
    tiles of the same shape), else None (comparisons included: they are arrays)."""
    dt = ty.np
    ta, tb = isinstance(a, Tile), isinstance(b, Tile)
    if ta and tb:
        if op in ("+", "-") and (a.units, a.rows) == (b.units, b.rows):
            sign = 1 if op == "+" else -1
            return make_tile(a.start + sign * b.start, a.step + sign * b.step, a.units, a.rows, dt,
                             a.row + sign * b.row)
        return None
    t, s = (a, as_int(b)) if ta else (b, as_int(a))
    if s is None or not isinstance(t, Tile):
        return None
    if op == "+":
        return make_tile(t.start + s, t.step, t.units, t.rows, dt, t.row)
    if op == "*":
        return make_tile(t.start * s, t.step * s, t.units, t.rows, dt, t.row * s)
    if op == "-":
        return make_tile(t.start - s, t.step, t.units, t.rows, dt, t.row) if ta else \
            make_tile(s - t.start, -t.step, t.units, t.rows, dt, -t.row)
    return None


def unary(op: str, a: Ramp | Tile, ty: DType) -> Any:
    """``-a`` of a ramp or a tile (signed types, in range), else None."""
    if op == "-" and ty.is_int:
        if isinstance(a, Tile):
            return make_tile(-a.start, -a.step, a.units, a.rows, ty.np, -a.row)
        return make(-a.start, -a.step, a.n, ty.np)
    return None


def cast(a: Ramp | Tile, ty: DType) -> Any:
    """A ramp or a tile converted to another integer type where every lane fits, else None."""
    if ty.is_int and not ty.is_vector:
        if isinstance(a, Tile):
            return make_tile(a.start, a.step, a.units, a.rows, ty.np, a.row)
        return make(a.start, a.step, a.n, ty.np)
    return None


def compare(op: str, r: Ramp, s: int) -> np.ndarray:
    """``r op s`` per lane: the ramp is monotonic, so the result switches at most once (one lane
    differs for ``==``/``!=``)."""
    fn = _CMP[op]
    if op in ("==", "!="):
        out = np.full(r.n, op == "!=")
        j, rem = divmod(s - r.start, r.step)
        if rem == 0 and 0 <= j < r.n:
            out[j] = op == "=="
        return out
    first = fn(r.start, s)
    lo = _switch(fn, r, s)
    out = np.empty(r.n, bool)
    out[:lo] = first
    out[lo:] = not first
    return out


def _switch(fn: Callable[[Any, Any], bool], r: Ramp, s: int) -> int:
    """The first lane whose ``fn(lane, s)`` differs from lane 0's (``r.n`` when none does)."""
    first = fn(r.start, s)
    lo, hi = 0, r.n
    while lo < hi:
        mid = (lo + hi) // 2
        if fn(r.value(mid), s) == first:
            lo = mid + 1
        else:
            hi = mid
    return lo


def unit_span(op: str, a: Any, b: Any) -> Units | None:
    """The units ``[lo, hi)`` where ``a op b`` holds in every cube, for a tile of row step 0 and an
    integer compared by one of :data:`ORDERED` (the tile's values are monotonic over the units);
    else None."""
    if isinstance(b, Tile) and not isinstance(a, Tile):
        a, b, op = b, a, _FLIP.get(op, op)
    if not isinstance(a, Tile) or a.row or a.step == 0 or isinstance(b, (Ramp, Tile)):
        return None
    sp = span(op, Ramp(a.start, a.step, a.units, a.dtype), b)
    return None if sp is None else Units(sp[0], sp[1], a.units, a.rows)


def span(op: str, a: Any, b: Any) -> tuple[int, int] | None:
    """The lanes ``[lo, hi)`` where ``a op b`` holds, for a ramp and an integer compared by one of
    :data:`ORDERED` (they are one run: the ramp is monotonic); else None."""
    if op not in ORDERED:
        return None
    if isinstance(a, Ramp) and (s := as_int(b)) is not None:
        r = a
    elif isinstance(b, Ramp) and (s := as_int(a)) is not None:
        r, op = b, _FLIP[op]
    else:
        return None
    if op == "==":
        j, rem = divmod(s - r.start, r.step)
        return (j, j + 1) if rem == 0 and 0 <= j < r.n else (0, 0)
    fn = _CMP[op]
    switch = _switch(fn, r, s)
    return (0, switch) if fn(r.start, s) else (switch, r.n)


def take(v: Any, idx: np.ndarray | slice | Units) -> Any:
    """The lanes ``idx`` of a lane value (a scalar stays one; a ramp is computed at them only, and
    stays a ramp on a slice of lanes; an array on a slice is a view; on :class:`Units`, a tile
    or a ramp is a tile of their units, an array a copy of their columns)."""
    if isinstance(idx, Units):
        if isinstance(v, Tile):
            return make_tile(v.start + v.step * idx.lo, v.step, idx.hi - idx.lo, idx.rows, v.dtype, v.row)
        if isinstance(v, Ramp):  # lane c * units + u: a tile of row step units * step
            return make_tile(v.start + v.step * idx.lo, v.step, idx.hi - idx.lo, idx.rows, v.dtype,
                             v.step * idx.units)
        if isinstance(v, np.ndarray) and v.ndim:
            return idx.columns(v).reshape(-1, *v.shape[1:])
        return v
    if isinstance(v, Ramp):
        if isinstance(idx, slice):
            return make(v.start + v.step * idx.start, v.step, idx.stop - idx.start, v.dtype)
        return (idx.astype(np.int64) * v.step + v.start).astype(v.dtype)
    if isinstance(v, Tile):
        return v.array()[idx]
    return v[idx] if isinstance(v, np.ndarray) and v.ndim else v


def put(whole: np.ndarray, idx: np.ndarray | slice | Units, v: Any) -> None:
    """Write the values ``v`` of the lanes ``idx`` (:func:`take`'s) into ``whole``, every lane's value."""
    v = materialize(v)
    if isinstance(idx, Units):
        cols = idx.columns(whole)
        cols[...] = v if np.ndim(v) == 0 else np.reshape(v, cols.shape)
    else:
        whole[idx] = v


def splat(v: Any, other: Any) -> Any:
    """``v``, or its one lane value as a scalar when ``v`` is a vector with the same value in every
    lane and every element (a broadcast ``Vec(a)``, ``a * v``) and ``other`` is a vector array
    that gives the result its shape. numpy loops over the 4-element rows of a broadcast operand
    (axpy 1M f32, ``a * x4[i]``: 3.1 ms; with the scalar: 0.3 ms). Compared bit for bit: -0.0 and
    0.0 stay apart."""
    if not (isinstance(v, np.ndarray) and v.ndim == 2 and v.strides[0] == 0 and isinstance(other, np.ndarray)
            and other.ndim == 2 and other.strides[0] != 0):
        return v
    bits = v[0].view(f"u{v.itemsize}")
    return v[0, 0] if (bits == bits[0]).all() else v


def fill_rows(dst: np.ndarray, src: Any) -> None:
    """``dst[...] = src``. A vector (a row) repeated in every lane, as a broadcast, is a fill of
    the widest unsigned word that repeats in the row's bytes (bit for bit), else copied by doubling
    the rows already written: numpy's broadcast copy loops over 4-element rows (fill 1M f32
    through ``Vec[u32, 4]``: 3 ms; doubling 0.34 ms; a u64 fill 0.2 ms, numpy's own fill 0.18 ms)."""
    if not (np.ndim(src) == 2 and src.strides[0] == 0 and dst.flags.c_contiguous and len(dst) > 1):
        dst[...] = src
        return
    raw = np.ascontiguousarray(src[0], dst.dtype).tobytes()
    for width in (8, 4, 2, 1):
        if len(raw) % width == 0 and raw == raw[:width] * (len(raw) // width):
            dst.reshape(-1).view(np.uint8).view(f"u{width}").fill(np.frombuffer(raw[:width], f"u{width}")[0])
            return
    dst[0] = src[0]
    done = 1
    while done < len(dst):
        step = min(done, len(dst) - done)
        dst[done:done + step] = dst[:step]
        done += step


def position(name: str, count: tuple[int, int, int], dims: tuple[int, int, int], c0: int, c1: int) -> Any:
    """The per-axis position builtin ``name`` for the lanes of cubes ``c0 <= c < c1`` (units
    fastest, x fastest): a scalar where it does not vary, a ramp for ``ABSOLUTE_POS_X`` of
    one-dimensional cubes within one row of the grid, a tile for their ``UNIT_POS_X``, else a u32
    array."""
    base, axis = name.rsplit("_", 1)
    a = "XYZ".index(axis)
    u32 = np.dtype(np.uint32)
    if base == "CUBE_COUNT":
        return u32.type(count[a])
    units = dims[0] * dims[1] * dims[2]
    ncubes = c1 - c0
    if (base == "ABSOLUTE_POS" and a == 0 and units == dims[0]
            and c0 // count[0] == (c1 - 1) // count[0]):
        return make((c0 % count[0]) * dims[0], 1, ncubes * units, u32)
    if base == "UNIT_POS" and a == 0 and units == dims[0] and units > 1:
        return Tile(0, 1, units, ncubes, u32)
    if base == "CUBE_POS" and a == 0 and units == dims[0] and c0 // count[0] == (c1 - 1) // count[0]:
        # A scalar for one cube; for several, a tile of row step 1 (the scan's block addresses).
        return make_tile(c0 % count[0], 0, units, ncubes, u32, 1)
    unit: Any = u32.type(0)
    cube: Any = u32.type(0)
    if base != "CUBE_POS" and dims[a] > 1:
        pattern = (np.arange(units) // (1, dims[0], dims[0] * dims[1])[a]) % dims[a]
        unit = np.tile(pattern.astype(u32), ncubes)
    if base != "UNIT_POS" and count[a] > 1:
        cid = (np.arange(c0, c1) // (1, count[0], count[0] * count[1])[a]) % count[a]
        cube = u32.type(cid[0]) if ncubes == 1 else np.repeat(cid.astype(u32), units)
    if base == "UNIT_POS":
        return unit
    if base == "CUBE_POS":
        return cube
    return (cube * u32.type(dims[a]) + unit).astype(u32) if np.ndim(cube) or np.ndim(unit) else \
        u32.type(int(cube) * dims[a] + int(unit))


def select(c: Any, a: Any, b: Any, dtype: np.dtype[Any]) -> np.ndarray:
    """``numpy.where(c, a, b)`` in ``dtype``, bit for bit, without its branch per element: the
    bits of ``b + (a - b) * c`` as unsigned words (wrapping). numpy's ``where`` mispredicts a
    branch per element of a mask without long runs (65536 f32, random mask: 470 us; this: 64 us,
    2 cores), and the interpreter's selects, masked assignments and masked stores have such masks
    (the NaN-propagating max of the std reductions, lanes that a loop or a branch left). ``c`` is
    a bool array (or scalar) broadcastable against the operands; the result is a new array."""
    words = np.dtype(f"u{dtype.itemsize}")
    bw = np.asarray(b, dtype).view(words)
    diff = np.subtract(np.asarray(a, dtype).view(words), bw)
    out = np.multiply(diff, c, dtype=words)
    out += bw
    got: np.ndarray = out.view(dtype)
    return got
