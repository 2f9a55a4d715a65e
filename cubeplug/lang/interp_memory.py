"""The memory side of the interpreter's lockstep runs (:class:`Lanes`, the base of ``interp._Run``):
what a batch of cubes and the runs on subsets of its lanes share (:class:`Batch`), the arrays they
address, and the loads, stores and atomics of their lanes with their fast paths: a ramp index is
a slice, a tile of shared memory a strided view of the cubes' rows, a tile of global memory in
bounds a strided view of the array, a private array at a constant index a column; every other
index a gather or a scatter, out-of-bounds reads giving 0 and writes dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from cubeplug.lang import ir, lanes
from cubeplug.lang.interp_expr import rows as _rows
from cubeplug.lang.interp_plan import Plan
from cubeplug.lang.lanes import Ramp, Tile
from cubeplug.lang.types import DType

_ATOMIC_UFUNC = {"add": np.add, "sub": np.subtract, "min": np.minimum, "max": np.maximum}
#: f32 min and max as the dialects' compare-and-swap loops do them: the value replaces the element
#: only when it compares less (greater), so a NaN value never replaces the element and a NaN
#: element is never replaced (fmin/fmax would replace it). Element by element (no ufunc.at).
_F32_MIN_MAX = {
    "min": lambda old, v: v if v < old else old,
    "max": lambda old, v: v if v > old else old,
}
Mask = np.ndarray | None
#: Where a run's lanes are among its batch's: all of them (None), a slice, indices, or units of
#: every cube.
Where = np.ndarray | slice | lanes.Units


def and_(*masks: Mask) -> Mask:
    """The lanes of every mask (None: every lane)."""
    out: Mask = None
    for m in masks:
        if m is not None:
            out = m if out is None else out & m
    return out


def own(v: Any, written: list[np.ndarray] | None = None) -> Any:
    """``v`` not sharing memory with an array a store may change (a load may be a view of one):
    of ``written`` where given (the arrays the kernel stores to), else of any. A read-only view (a
    broadcast constant vector) is kept, and so is a view of an array the kernel never writes (map
    1M f32, its two inputs loaded into the function's locals: 1.1 ms of copies)."""
    if not (isinstance(v, np.ndarray) and v.base is not None and v.flags.writeable):
        return v
    if written is not None and not any(np.may_share_memory(v, w) for w in written):
        return v
    return v.copy()


def shape(n: int, ty: DType) -> tuple[int, ...]:
    """The shape of ``n`` values of ``ty``: ``(n,)``, or ``(n, lanes)`` for a vector."""
    return (n, ty.lanes) if ty.is_vector else (n,)


@dataclass(frozen=True, slots=True)
class Batch:
    """What a batch of cubes ``[c0, c1)`` and the runs on subsets of its lanes share: the kernel,
    its plan, the launch's values and shape, and the arrays a store or an atomic may change (a
    local may keep a view of any other)."""

    plan: Plan
    values: dict[str, Any]
    count: tuple[int, int, int]
    dims: tuple[int, int, int]
    c0: int
    c1: int
    written: list[np.ndarray]


def batch_memory(k: ir.KernelIR, values: dict[str, Any], dims: tuple[int, int, int], c0: int, c1: int
                 ) -> tuple[dict[str, tuple[np.ndarray, Any, int]], list[np.ndarray]]:
    """The arrays of a batch, each as (array, every lane's base address or None, size), and those
    a store or an atomic may change. Per-unit (``cl.local``) arrays: unit j's element k is at
    ``j * size + k``; shared ones: cube c's at ``c * size + k``."""
    units = dims[0] * dims[1] * dims[2]
    n = (c1 - c0) * units
    mem: dict[str, tuple[np.ndarray, Any, int]] = {}
    for a in k.arrays:
        arr = values[a.name].reshape(shape(-1, a.elem))
        if a.atomic and a.elem.is_float:  # bound as u32
            arr = arr.view(a.elem.np)
        mem[a.name] = (arr, None, len(arr))
    written = [mem[a.name][0] for a in k.arrays if a.written or a.atomic]
    if k.decls:  # every lane's base address, one arange for all the arrays
        lane = np.arange(n, dtype=np.int64)
        for d in k.decls:
            rows = (c1 - c0) if d.space == "shared" else n
            base = (lane // units) * d.size if d.space == "shared" else lane * d.size
            mem[d.name] = (np.zeros(shape(rows * d.size, d.elem), d.elem.np), base, d.size)
            written.append(mem[d.name][0])
    return mem, written


class Lanes:
    """The lanes of one run: a batch of whole cubes in lockstep, or a subset of its lanes that a
    branch runs on alone (``outer``: the enclosing run and where the lanes are among its lanes)."""

    def __init__(self, batch: Batch, n: int, mem: dict[str, tuple[np.ndarray, Any, int]], env: dict[str, Any],
                 outer: tuple[Lanes, Where] | None = None) -> None:
        self.batch, self.n, self.mem, self.env, self.outer = batch, n, mem, env, outer
        self.plan, self.values = batch.plan, batch.values
        self.count, self.dims, self.c0, self.c1 = batch.count, batch.dims, batch.c0, batch.c1
        self.written = batch.written
        self.types = batch.plan.types
        self.builtins: dict[str, Any] = {}
        #: The per-unit arrays whose elements are at ``lane * size + k`` (no longer so on a subset
        #: of the lanes: no columns there).
        self.private = batch.plan.private if outer is None else frozenset()
        #: True when the lanes are whole rows of the batch's cubes (the batch's run, or a run on
        #: :class:`~cubeplug.lang.lanes.Units` of it): tiles address them, as views of memory.
        self.cubewise: bool = outer is None or (outer[0].cubewise and isinstance(outer[1], lanes.Units))
        self.alive: Mask = None
        #: The lanes that left the innermost loop (``brk``), and those that left its current pass
        #: (``stop``: break or continue); None while no lane has (no pass over the lanes for it).
        self.brk: np.ndarray | None = None
        self.stop: np.ndarray | None = None

    def mask(self, m: Mask) -> np.ndarray:
        return np.ones(self.n, bool) if m is None else m

    def full(self, v: Any) -> np.ndarray:
        if isinstance(v, (Ramp, Tile)):
            return v.array()
        arr = np.asarray(v)
        return arr if arr.shape == (self.n,) or arr.ndim == 2 else np.broadcast_to(arr, (self.n,))

    def builtin(self, name: str) -> Any:
        v = self.builtins.get(name)
        if v is None:
            if self.outer is not None:
                run, idx = self.outer
                v = self.builtins[name] = lanes.take(run.builtin(name), idx)
            else:
                v = self.builtins[name] = lanes.position(name, self.count, self.dims, self.c0, self.c1)
        return v

    def column(self, name: str, index: Any, guard: ir.Expr | None) -> np.ndarray | None:
        """Every unit's element ``index`` of the private array ``name`` as a strided view, when
        ``index`` is one in-bounds constant for every lane and nothing guards the access; else None."""
        if name not in self.private or guard is not None:
            return None
        k = lanes.as_int(index)
        arr, _, size = self.mem[name]
        if k is None or not 0 <= k < size:
            return None
        return arr[k::size]

    def rows(self, name: str, index: Any, guard: ir.Expr | None) -> tuple[np.ndarray, int, int] | None:
        """The elements of the shared array ``name`` that a tile ``index`` addresses, as a
        ``(cubes, hi - lo)`` strided view of the batch's rows for the units ``[lo, hi)`` in bounds
        (the others read 0, their writes are dropped), when nothing guards the access; else None.
        The scan's and the trees' ``tile[k * CUBE + u]``, ``buf[u]``, ``tot[u - 4]``: no gather."""
        if not isinstance(index, Tile) or guard is not None or not self.cubewise:
            return None
        arr, base, size = self.mem[name]
        if base is None or name in self.plan.private or arr.ndim != 1 or index.rows != self.c1 - self.c0:
            return None
        cut = index.cut(size)
        if cut is None:
            return None
        lo, hi, sl = cut
        return arr.reshape(index.rows, size)[:, sl], lo, hi

    def strided(self, name: str, index: Any, guard: ir.Expr | None, store: bool) -> np.ndarray | None:
        """The elements of the global array ``name`` that a tile ``index`` addresses, every lane's
        in bounds, as a ``(cubes, units)`` strided view, when nothing guards the access (for a
        store: when no two lanes address one element, in lane order); else None. The scan's
        ``x[CUBE_POS * BLOCK + k * CUBE + UNIT_POS]``: no gather, no scatter, no bounds masks
        (1M f32 inclusive scan, 2 cores: see docs/std.md)."""
        if not isinstance(index, Tile) or guard is not None or not self.cubewise:
            return None
        arr, base, size = self.mem[name]
        if base is not None or index.step < 0 or index.row < 0:
            return None
        if store and (index.step == 0 or (index.rows > 1 and index.row < index.step * index.units)):
            return None
        lo, hi = index.bounds()
        if lo < 0 or hi >= size:
            return None
        item = arr.strides[0]
        return np.lib.stride_tricks.as_strided(
            arr[lo:], (index.rows, index.units, *arr.shape[1:]), (index.row * item, index.step * item,
                                                                  *arr.strides[1:]))

    def address(self, name: str, index: Any, guard: ir.Expr | None = None
                ) -> tuple[np.ndarray, np.ndarray, Mask]:
        """The array, every lane's element address and the lanes in bounds (and guarded): None
        when every lane is (no masking after a gather or before a scatter)."""
        arr, base, size = self.mem[name]
        idx = self.full(index)
        if (guard is None and size and len(idx) and (idx.dtype.kind == "u" or idx.min() >= 0)
                and idx.max() < size):
            # Every lane in bounds (the usual case), checked without a mask: a min and a max
            # instead of two comparisons, an and and an all over the lanes, and numpy indexes
            # with the u32 (or int64, from base) addresses as they are.
            return arr, (idx if base is None else base + idx), None
        ok = idx < size if idx.dtype.kind == "u" else (idx >= 0) & (idx < size)
        if guard is not None:
            ok &= self.full(self.eval(guard))
        idx = np.where(ok, idx, 0).astype(np.int64)
        addr = idx if base is None else base + idx
        if size == 0:
            ok = np.zeros(self.n, bool)
        return arr, addr, ok

    def load(self, e: ir.Load, idx: Any) -> Any:
        """Load ``e`` at the lanes' index values ``idx``."""
        arr, base, size = self.mem[e.array]
        if isinstance(idx, Ramp) and base is None and idx.step == 1 and idx.start >= 0:
            k = max(0, min(self.n, size - idx.start))
            got = arr[idx.start:idx.start + k]
            if k < self.n:
                got = np.concatenate([got, np.zeros(shape(self.n - k, e.ty), e.ty.np)])
            if e.guard is not None:
                got = lanes.select(_rows(self.full(self.eval(e.guard)), got), got, e.ty.np.type(0), e.ty.np)
            return got
        view = self.strided(e.array, idx, e.guard, False)
        if view is not None:
            return view.reshape(shape(self.n, e.ty))
        column = self.column(e.array, idx, e.guard)
        if column is not None:
            return column
        rows = self.rows(e.array, idx, e.guard)
        if rows is not None:
            got, lo, hi = rows
            assert isinstance(idx, Tile)
            if hi - lo == idx.units:
                return got.reshape(-1)
            out = np.zeros((idx.rows, idx.units), e.ty.np)
            out[:, lo:hi] = got
            return out.reshape(-1)
        at = lanes.as_int(idx)
        if e.guard is None and at is not None and 0 <= at < size:
            # One element for every lane (buf[0], buf[k] of an unrolled fold): no bounds masks.
            if base is not None:
                return arr[base + at]
            if not e.ty.is_vector:
                return arr[at]  # a scalar: a copy
            return np.broadcast_to(arr[at].copy(), (self.n, e.ty.lanes))
        arr, addr, ok = self.address(e.array, idx, e.guard)
        if len(arr) == 0:
            return np.zeros(shape(self.n, e.ty), e.ty.np)
        got = arr[addr]
        return got if ok is None else lanes.select(_rows(ok, got), got, e.ty.np.type(0), e.ty.np)

    def eval(self, e: ir.Expr) -> Any:
        """The value of ``e`` for the batch's lanes, through its compiled closure."""
        return self.plan.exprs(e)(self)

    def store(self, s: ir.Store, m: Mask) -> None:
        if s.lane is not None:  # one lane of a vector element (a lane out of the vector: dropped)
            arr, addr, ok = self.address(s.array, self.eval(s.index), s.guard)
            lane = self.full(self.eval(s.lane)).astype(np.int64)
            sel = and_(ok, (lane >= 0) & (lane < arr.shape[-1]), m)  # ok and m: None for every lane
            arr[addr[sel], lane[sel]] = self.full(self.eval(s.value))[sel]
            return
        arr, base, size = self.mem[s.array]
        idx = self.eval(s.index)
        if isinstance(idx, Ramp) and base is None and idx.step == 1 and idx.start >= 0:
            k = max(0, min(self.n, size - idx.start))  # lanes [0, k) are in bounds
            if k == 0:
                return
            sel = and_(m, None if s.guard is None else self.full(self.eval(s.guard)))
            if sel is not None and sel[:k].all():  # a masked copy costs several plain ones
                sel = None
            dst = arr[idx.start:idx.start + k]
            if sel is None and k == self.n and isinstance(s.value, ir.BinOp):  # y[i] = y[i] + ...
                fa, fb, apply = self.plan.exprs.split(s.value)
                val = apply(fa(self), fb(self), dst)
                if val is dst:
                    return
            else:
                val = self.eval(s.value)
            val = lanes.materialize(val)
            src = val if np.ndim(val) == 0 else self.full(val)[:k]
            if sel is None:
                lanes.fill_rows(dst, src)
            else:
                np.copyto(dst, src, where=_rows(sel[:k], dst), casting="unsafe")
            return
        rows = self.rows(s.array, idx, s.guard)
        if rows is not None:  # shared memory through a tile: a strided view of the cubes' rows
            dst, lo, hi = rows
            val = lanes.materialize(self.eval(s.value))
            assert isinstance(idx, Tile)
            src = val if np.ndim(val) == 0 else self.full(val).reshape(idx.rows, idx.units)[:, lo:hi]
            if m is None:
                dst[...] = src
            else:
                np.copyto(dst, src, where=m.reshape(idx.rows, idx.units)[:, lo:hi], casting="unsafe")
            return
        view = None if m is not None else self.strided(s.array, idx, s.guard, True)
        if view is not None:  # a global array through a tile: a strided view of it
            val = lanes.materialize(self.eval(s.value))
            view[...] = val if np.ndim(val) == 0 else self.full(val).reshape(view.shape)
            return
        column = self.column(s.array, idx, s.guard)
        if column is not None:  # a private array at one constant index: a strided view
            val = self.full(self.eval(s.value))
            if m is None:
                column[...] = val
            else:
                np.copyto(column, val, where=_rows(m, column), casting="unsafe")
            return
        arr, addr, ok = self.address(s.array, idx, s.guard)
        sel = and_(m, ok)
        if sel is None:
            arr[addr] = self.full(self.eval(s.value))
        else:
            arr[addr[sel]] = self.full(self.eval(s.value))[sel]

    def atomic(self, s: ir.Atomic, m: Mask) -> None:
        arr, addr, in_bounds = self.address(s.array, self.eval(s.index), s.guard)
        ok = self.mask(in_bounds)
        sel = ok if m is None else m & ok
        args = [own(self.full(self.eval(a))) for a in s.args]
        ufuncs: dict[str, Any] = _ATOMIC_UFUNC
        if s.ty.is_float and s.op in _F32_MIN_MAX:
            ufuncs = {**_ATOMIC_UFUNC, **_F32_MIN_MAX}
        elif s.out is None and s.op in ufuncs:
            ufuncs[s.op].at(arr, addr[sel], args[0][sel])
            return
        out = np.array(self.full(self.env[s.out])) if s.out else np.zeros(self.n, s.ty.np)
        for lane in np.nonzero(sel)[0]:
            a = addr[lane]
            old = arr[a]
            out[lane] = old
            v = args[0][lane]
            if s.op in ufuncs:
                arr[a] = ufuncs[s.op](old, v)
            elif s.op == "exchange":
                arr[a] = v
            elif (old.view(np.uint32) == v.view(np.uint32)) if s.ty.is_float else old == v:
                arr[a] = args[1][lane]  # compare_exchange(expected=v, new); f32: of the bits
        if s.out:
            self.env[s.out] = lanes.select(~ok if m is None else m & ~ok, s.ty.np.type(0), out, s.ty.np)
