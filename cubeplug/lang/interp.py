"""The ``python`` dialect: an IR interpreter that runs the units of cubes in lockstep as numpy vectors.

Every unit is one lane of a vector; control flow is masks (``if`` both branches under complementary
masks, loops until no lane continues, ``break``/``continue``/``return`` clear lanes). Each statement
runs for all active lanes before the next one, so ``shared`` memory and ``sync_cube()`` behave as on
a GPU for race-free kernels, and a ``sync_cube()`` reached by only some live lanes raises
:class:`BarrierDivergenceError`. Cubes are independent, so many run side by side in one vector.
Reads out of bounds give 0 and writes out of bounds are dropped, checked or not. A vector value is
an ``(n, lanes)`` array (a vector array an ``(elements, lanes)`` one).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cubeplug.lang import ir, semantics
from cubeplug.lang.errors import BarrierDivergenceError
from cubeplug.lang.types import DType

#: About how many lanes one vector holds (whole cubes at a time).
LANES = 1 << 16
_ATOMIC_UFUNC = {"add": np.add, "sub": np.subtract, "min": np.minimum, "max": np.maximum}


class Interpreter:
    """The ``fn(launch, *params)`` of a kernel's ``python`` source."""

    def __init__(self, k: ir.KernelIR) -> None:
        self.k = k
        self.names = (*k.order, *k.hidden_names)
        self.__name__ = k.name

    def __call__(self, launch: Any, *params: Any) -> None:
        values = dict(zip(self.names, params))
        cx, cy, cz = launch.count
        dims = tuple(launch.cube_dim)
        units = dims[0] * dims[1] * dims[2]
        cubes = cx * cy * cz
        per = max(1, LANES // units)
        for c0 in range(0, cubes, per):
            _Run(self.k, values, (cx, cy, cz), dims, c0, min(cubes, c0 + per)).block(self.k.body, None)


class _Run:
    """One batch of whole cubes run in lockstep."""

    def __init__(self, k: ir.KernelIR, values: dict[str, Any], count: tuple[int, int, int],
                 dims: tuple[int, ...], c0: int, c1: int) -> None:
        self.k = k
        units = dims[0] * dims[1] * dims[2]
        n = (c1 - c0) * units
        self.n = n
        lane = np.arange(n, dtype=np.int64)
        self.cube_local = lane // units
        cid = c0 + self.cube_local
        u = lane % units
        unit = (u % dims[0], (u // dims[0]) % dims[1], u // (dims[0] * dims[1]))
        cube = (cid % count[0], (cid // count[0]) % count[1], cid // (count[0] * count[1]))
        self.builtins: dict[str, Any] = {}
        for i, axis in enumerate("XYZ"):
            self.builtins[f"UNIT_POS_{axis}"] = unit[i].astype(np.uint32)
            self.builtins[f"CUBE_POS_{axis}"] = cube[i].astype(np.uint32)
            self.builtins[f"CUBE_COUNT_{axis}"] = np.uint32(count[i])
            self.builtins[f"ABSOLUTE_POS_{axis}"] = (cube[i] * dims[i] + unit[i]).astype(np.uint32)
        self.values = values
        self.env: dict[str, Any] = {name: np.zeros(_shape(n, ty), ty.np) for name, ty in k.locals}
        self.mem: dict[str, tuple[np.ndarray, Any, int]] = {}
        for a in k.arrays:
            arr = values[a.name].reshape(_shape(-1, a.elem))
            if a.atomic and a.elem.is_float:  # bound as u32
                arr = arr.view(a.elem.np)
            self.mem[a.name] = (arr, None, len(arr))
        for d in k.decls:
            rows = (c1 - c0) if d.space == "shared" else n
            base = self.cube_local * d.size if d.space == "shared" else lane * d.size
            self.mem[d.name] = (np.zeros(_shape(rows * d.size, d.elem), d.elem.np), base, d.size)
        self.alive = np.ones(n, bool)
        self.brk: np.ndarray | None = None
        self.stop: np.ndarray | None = None

    # ------------------------------------------------------------------------------ statements
    def live(self, mask: np.ndarray | None) -> np.ndarray:
        m = self.alive if mask is None else mask & self.alive
        if self.stop is not None:
            m = m & ~self.stop
        return m

    def block(self, b: ir.Block, mask: np.ndarray | None) -> None:
        for s in b.stmts:
            m = self.live(mask)
            if not m.any():
                return
            self.stmt(s, m)

    def stmt(self, s: ir.Stmt, m: np.ndarray) -> None:
        if isinstance(s, ir.Assign):
            old = self.env[s.name]
            self.env[s.name] = np.where(_rows(m, old), self.full(self.eval(s.value)), old).astype(
                old.dtype, copy=False)
        elif isinstance(s, ir.Store):
            arr, addr, ok = self.address(s.array, s.index, s.guard)
            sel = m & ok
            arr[addr[sel]] = self.full(self.eval(s.value))[sel]
        elif isinstance(s, ir.Atomic):
            self.atomic(s, m)
        elif isinstance(s, ir.If):
            c = self.full(self.eval(s.cond))
            self.block(s.then, m & c)
            self.block(s.orelse, m & ~c)
        elif isinstance(s, ir.RangeFor):
            self.range_for(s, m)
        elif isinstance(s, ir.While):
            self.loop(None, s.cond, s.body, m)
        elif isinstance(s, ir.Break):
            assert self.brk is not None and self.stop is not None
            self.brk |= m
            self.stop |= m
        elif isinstance(s, ir.Continue):
            assert self.stop is not None
            self.stop |= m
        elif isinstance(s, ir.Return):
            self.alive &= ~m
        elif isinstance(s, ir.Barrier):
            if not np.array_equal(m, self.alive):
                raise BarrierDivergenceError(
                    f"{s.loc}: sync_cube() reached by only some units of a cube "
                    f"({int(m.sum())} of {int(self.alive.sum())} live units)"
                )
        else:  # pragma: no cover
            raise TypeError(s)

    def range_for(self, s: ir.RangeFor, m: np.ndarray) -> None:
        ty = dict(self.k.locals)[s.var]
        start, step = self.full(self.eval(s.start)), self.eval(s.step)
        self.env[s.var] = np.where(m, start, self.env[s.var]).astype(ty.np, copy=False)
        down = isinstance(s.step, ir.Const) and s.step.value < 0
        self.loop(s, ir.BinOp(">" if down else "<", ir.Var(s.var, ty, s.loc), s.stop, ty, s.loc),
                  s.body, m, step)

    def loop(self, rf: ir.RangeFor | None, cond: ir.Expr, body: ir.Block, m: np.ndarray,
             step: Any = None) -> None:
        saved = (self.brk, self.stop)
        self.brk = np.zeros(self.n, bool)
        try:
            while True:
                self.stop = None
                go = m & self.alive & ~self.brk & self.full(self.eval(cond))
                if not go.any():
                    break
                self.stop = self.brk.copy()
                self.block(body, go)
                if rf is not None:
                    inc = go & ~self.brk & self.alive
                    ty = dict(self.k.locals)[rf.var]
                    cur = self.env[rf.var]
                    self.env[rf.var] = np.where(inc, semantics.binary("+", cur, step, ty), cur)
        finally:
            self.brk, self.stop = saved

    def atomic(self, s: ir.Atomic, m: np.ndarray) -> None:
        arr, addr, ok = self.address(s.array, s.index, s.guard)
        sel = m & ok
        args = [self.full(self.eval(a)) for a in s.args]
        if s.out is None and s.op in _ATOMIC_UFUNC:
            _ATOMIC_UFUNC[s.op].at(arr, addr[sel], args[0][sel])
            return
        out = self.env[s.out] if s.out else np.zeros(self.n, s.ty.np)
        with np.errstate(all="ignore"):
            for lane in np.nonzero(sel)[0]:
                a = addr[lane]
                old = arr[a]
                out[lane] = old
                v = args[0][lane]
                if s.op in _ATOMIC_UFUNC:
                    arr[a] = _ATOMIC_UFUNC[s.op](old, v)
                elif s.op == "exchange":
                    arr[a] = v
                elif old == v:  # compare_exchange(expected=v, new)
                    arr[a] = args[1][lane]
        if s.out:
            self.env[s.out] = np.where(m & ~ok, s.ty.np.type(0), out)

    # ------------------------------------------------------------------------------ expressions
    def full(self, v: Any) -> np.ndarray:
        arr = np.asarray(v)
        return arr if arr.shape == (self.n,) or arr.ndim == 2 else np.broadcast_to(arr, (self.n,))

    def address(self, name: str, index: ir.Expr, guard: ir.Expr | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        arr, base, size = self.mem[name]
        idx = self.full(self.eval(index)).astype(np.int64)
        ok = (idx >= 0) & (idx < size)
        if guard is not None:
            ok &= self.full(self.eval(guard))
        idx = np.where(ok, idx, 0)
        addr = idx if base is None else base + idx
        if size == 0:
            ok = np.zeros(self.n, bool)
        return arr, addr, ok

    def eval(self, e: ir.Expr) -> Any:
        if isinstance(e, ir.Const):
            return e.ty.np.type(e.value)
        if isinstance(e, ir.Var):
            if e.kind == "local":
                return self.env[e.name]
            return e.ty.np.type(self.values[e.name])
        if isinstance(e, ir.Builtin):
            return self.builtins[e.name]
        if isinstance(e, ir.BinOp):
            return semantics.binary(e.op, self.eval(e.a), self.eval(e.b), e.a.ty)
        if isinstance(e, ir.UnOp):
            return semantics.unary(e.op, self.eval(e.a), e.ty)
        if isinstance(e, ir.Cast):
            return semantics.cast(self.eval(e.a), e.ty)
        if isinstance(e, ir.Call):
            return semantics.math(e.fn, [self.eval(a) for a in e.args], e.ty)
        if isinstance(e, ir.Select):
            a, b = self.full(self.eval(e.a)), self.full(self.eval(e.b))
            return np.where(_rows(self.full(self.eval(e.cond)), a), a, b).astype(e.ty.np, copy=False)
        if isinstance(e, ir.Load):
            arr, addr, ok = self.address(e.array, e.index, e.guard)
            if len(arr) == 0:
                return np.zeros(_shape(self.n, e.ty), e.ty.np)
            got = arr[addr]
            return np.where(_rows(ok, got), got, e.ty.np.type(0))
        if isinstance(e, ir.VecNew):
            lanes = [self.full(self.eval(a)) for a in e.args]
            if len(lanes) == 1:
                lanes = lanes * e.ty.lanes
            return np.stack(lanes, axis=1).astype(e.ty.np, copy=False)
        if isinstance(e, ir.VecGet):
            return self.full(self.eval(e.v))[:, e.lane]
        raise TypeError(e)  # pragma: no cover


def _shape(n: int, ty: DType) -> tuple[int, ...]:
    """The shape of ``n`` values of ``ty``: ``(n,)``, or ``(n, lanes)`` for a vector."""
    return (n, ty.lanes) if ty.is_vector else (n,)


def _rows(mask: np.ndarray, like: np.ndarray) -> np.ndarray:
    """A per-lane mask shaped to select whole rows of ``like`` (a column for vectors)."""
    return mask[:, None] if np.ndim(like) == 2 else mask
