"""The ``python`` dialect: an IR interpreter that runs the units of cubes in lockstep as numpy vectors.

Every unit is one lane of a vector; control flow is masks (``if`` both branches under complementary
masks, loops until no lane continues, ``break``/``continue``/``return`` clear lanes). Each statement
runs for all active lanes before the next one, so ``shared`` memory and ``sync_cube()`` behave as on
a GPU for race-free kernels, and a ``sync_cube()`` reached by only some live lanes raises
:class:`BarrierDivergenceError`. Cubes are independent, so many run side by side in one vector:
:data:`LANES` lanes at a time for a kernel with barriers or shared memory, :data:`FLAT_LANES` for
one without (its units share nothing but global memory, so any grouping gives the same result).
Reads out of bounds give 0 and writes out of bounds are dropped, checked or not. A vector value is
an ``(n, lanes)`` array (a vector array an ``(elements, lanes)`` one).

Values stay cheap where they can (``lanes.py``): a scalar when every lane has the same value, a
:class:`~cubeplug.lang.lanes.Ramp` for ``ABSOLUTE_POS_X``-like indices (an access through one is a
slice); a mask of None means every lane, and a mask that holds every lane becomes None. A branch
that few lanes take, or that a ramp comparison selects (``if ABSOLUTE_POS_X == 0``), runs on those
lanes alone (:meth:`_Run.branch`, :meth:`_Run.span`) when nothing in it syncs, returns or leaves
an enclosing loop: its statements then cost what its lanes cost, not what the batch's do. Each
fast path gives the general path's result (``tests/lang/test_interp.py`` compares them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cubeplug.lang import ir, lanes, semantics
from cubeplug.lang.errors import BarrierDivergenceError
from cubeplug.lang.interp_expr import Fn
from cubeplug.lang.interp_expr import rows as _rows
from cubeplug.lang.interp_plan import Plan, has_barrier
from cubeplug.lang.lanes import Ramp, Tile
from cubeplug.lang.types import DType

#: About how many lanes one vector holds (whole cubes at a time), with barriers or shared memory.
LANES = 1 << 16
#: The same for kernels without barriers and shared memory.
FLAT_LANES = 1 << 20
#: A branch taken by at most this fraction of a batch's lanes runs on those lanes alone (their
#: values gathered, the locals it assigns scattered back), when nothing in it syncs, returns or
#: leaves an enclosing loop: the raking folds of the std reductions run 1/8 and 1/256 of the lanes
#: there, and masked statements over every lane made them most of a reduction's time (with the
#: live-lane changes of :meth:`_Run.block`, 2 cores: reduce_sum 1M f32 62 -> 23 ms, reduce_axis
#: axis=1 1k x 1k 260 -> 115 ms). 0 turns it off, and :meth:`_Run.span` too (the tests compare).
COMPACT = 0.25
_ATOMIC_UFUNC = {"add": np.add, "sub": np.subtract, "min": np.minimum, "max": np.maximum}
#: f32 min and max as the dialects' compare-and-swap loops do them: the value replaces the element
#: only when it compares less (greater), so a NaN value never replaces the element and a NaN
#: element is never replaced (fmin/fmax would replace it). Element by element (no ufunc.at).
_F32_MIN_MAX = {
    "min": lambda old, v: v if v < old else old,
    "max": lambda old, v: v if v > old else old,
}
Mask = np.ndarray | None


class Interpreter:
    """The ``fn(launch, *params)`` of a kernel's ``python`` source."""

    def __init__(self, k: ir.KernelIR) -> None:
        self.k = k
        self.names = (*k.order, *k.hidden_names)
        self.__name__ = k.name
        self.flat = not has_barrier(k.body) and all(d.space != "shared" for d in k.decls)
        self.plan = Plan(k)

    def __call__(self, launch: Any, *params: Any) -> None:
        values = dict(zip(self.names, params))
        count = (int(launch.count[0]), int(launch.count[1]), int(launch.count[2]))
        d = tuple(launch.cube_dim)
        dims = (int(d[0]), int(d[1]), int(d[2]))
        units = dims[0] * dims[1] * dims[2]
        cubes = count[0] * count[1] * count[2]
        per = max(1, (FLAT_LANES if self.flat else LANES) // units)
        # One-dimensional cubes: batches end at rows of the grid, so ABSOLUTE_POS_X is a ramp.
        row = count[0] if units == dims[0] and count[0] * units >= min(per * units, 1 << 14) else 0
        c0 = 0
        with np.errstate(all="ignore"):
            while c0 < cubes:
                c1 = min(cubes, c0 + per, (c0 // row + 1) * row if row else cubes)
                _Run(self.k, values, count, dims, c0, c1, self.plan).block(self.k.body, None)
                c0 = c1


def _or(lanes_: np.ndarray | None, m: Mask, n: int) -> np.ndarray:
    """The lanes of ``lanes_`` (None: none) and of ``m`` (None: every lane), as a new array."""
    if m is None:
        return np.ones(n, bool)
    return m.copy() if lanes_ is None else lanes_ | m


def _and(*masks: Mask) -> Mask:
    out: Mask = None
    for m in masks:
        if m is not None:
            out = m if out is None else out & m
    return out


def _own(v: Any, written: list[np.ndarray] | None = None) -> Any:
    """``v`` not sharing memory with an array a store may change (a load may be a view of one):
    of ``written`` where given (the arrays the kernel stores to), else of any. A read-only view (a
    broadcast constant vector) is kept, and so is a view of an array the kernel never writes (map
    1M f32, its two inputs loaded into the function's locals: 1.1 ms of copies)."""
    if not (isinstance(v, np.ndarray) and v.base is not None and v.flags.writeable):
        return v
    if written is not None and not any(np.may_share_memory(v, w) for w in written):
        return v
    return v.copy()


class _Run:
    """One batch of whole cubes run in lockstep."""

    def __init__(self, k: ir.KernelIR, values: dict[str, Any], count: tuple[int, int, int],
                 dims: tuple[int, int, int], c0: int, c1: int, plan: Plan) -> None:
        self.k = k
        self.plan = plan
        self.count, self.dims, self.c0, self.c1 = count, dims, c0, c1
        units = dims[0] * dims[1] * dims[2]
        n = (c1 - c0) * units
        self.n = n
        self.types = dict(k.locals)
        self.builtins: dict[str, Any] = {}
        self.values = values
        # A vector local starts as a read-only broadcast of zeros, not n rows of them: most are
        # assigned before they are read (fill 1M f32: 0.8 ms of its 5 ms were these zeros).
        self.env: dict[str, Any] = {
            name: np.broadcast_to(np.zeros((1, ty.lanes), ty.np), (n, ty.lanes)) if ty.is_vector
            else ty.np.type(0) for name, ty in k.locals
        }
        self.mem: dict[str, tuple[np.ndarray, Any, int]] = {}
        for a in k.arrays:
            arr = values[a.name].reshape(_shape(-1, a.elem))
            if a.atomic and a.elem.is_float:  # bound as u32
                arr = arr.view(a.elem.np)
            self.mem[a.name] = (arr, None, len(arr))
        #: The arrays a store or an atomic may change (a local may keep a view of any other).
        self.written = [self.mem[a.name][0] for a in k.arrays if a.written or a.atomic]
        #: Per-unit (``cl.local``) arrays: unit j's element k is at ``j * size + k``.
        self.private = frozenset(d.name for d in k.decls if d.space != "shared")
        for d in k.decls:
            lane = np.arange(n, dtype=np.int64)
            rows = (c1 - c0) if d.space == "shared" else n
            base = (lane // units) * d.size if d.space == "shared" else lane * d.size
            self.mem[d.name] = (np.zeros(_shape(rows * d.size, d.elem), d.elem.np), base, d.size)
            self.written.append(self.mem[d.name][0])
        self.alive: Mask = None
        #: The lanes that left the innermost loop (``brk``), and those that left its current pass
        #: (``stop``: break or continue); None while no lane has (no pass over the lanes for it).
        self.brk: np.ndarray | None = None
        self.stop: np.ndarray | None = None
        #: For a run on a subset of a batch's lanes (:meth:`branch`): the batch's run and the lanes.
        self.outer: tuple[_Run, np.ndarray | slice | lanes.Units] | None = None
        #: True when the lanes are whole rows of the batch's cubes (the batch's run, or a run on
        #: :class:`~cubeplug.lang.lanes.Units`): tiles address them, as views of memory.
        self.cubewise = True

    # ------------------------------------------------------------------------------ statements
    def live(self, mask: Mask) -> Mask:
        return _and(mask, self.alive, None if self.stop is None else ~self.stop)

    def block(self, b: ir.Block, mask: Mask) -> None:
        # The live lanes change only where a statement may break, continue or return: computed
        # again only after one of those (each costs a few passes over the lanes).
        again = True
        m: Mask = None
        for s in b.stmts:
            if again:
                m = self.live(mask)
                if m is not None:
                    if not m.any():
                        return
                    if m.all():  # every lane: the unmasked paths (ramps, plain stores)
                        m = None
            self.stmt(s, m)
            again = id(s) in self.plan.flows

    def branch(self, b: ir.Block, mask: np.ndarray) -> None:
        """Run ``b`` for the lanes of ``mask``; on those lanes alone (:data:`COMPACT`) when few are."""
        if not b.stmts:
            return
        live = self.live(mask)
        assert live is not None
        taken = int(np.count_nonzero(live))
        if taken == 0:
            return
        if not self.runs_alone(b) or taken > COMPACT * self.n:
            self.block(b, live)
            return
        self.alone(b, np.flatnonzero(live))

    def runs_alone(self, b: ir.Block) -> bool:
        """True when ``b`` may run on a subset of the lanes: nothing in it syncs, returns or leaves
        an enclosing loop."""
        return self.plan.alone(b).ok

    def alone(self, b: ir.Block, idx: np.ndarray | slice | lanes.Units) -> None:
        """Run ``b`` (:meth:`runs_alone`) on the lanes ``idx`` alone, as a run of their own: their
        values gathered (for a slice of lanes, views and ramps), the locals ``b`` assigns written back."""
        sub = object.__new__(_Run)
        sub.k, sub.plan = self.k, self.plan
        sub.count, sub.dims, sub.c0, sub.c1 = self.count, self.dims, self.c0, self.c1
        if isinstance(idx, lanes.Units):
            sub.n = idx.rows * (idx.hi - idx.lo)
        else:
            sub.n = len(idx) if isinstance(idx, np.ndarray) else idx.stop - idx.start
        sub.types, sub.values, sub.written = self.types, self.values, self.written
        sub.builtins = {}
        sub.private = frozenset()  # a unit's private elements are no longer at lane * size: no columns
        sub.mem = {name: (arr, None if base is None else lanes.take(base, idx), size)
                   for name, (arr, base, size) in self.mem.items()}
        sub.alive = sub.brk = sub.stop = None
        sub.outer = (self, idx)
        sub.cubewise = self.cubewise and isinstance(idx, lanes.Units)
        plan = self.plan.alone(b)
        env = self.env
        taken_env = {name: lanes.take(env[name], idx) for name in plan.need}
        sub.env = dict(taken_env)
        sub.block(b, None)
        for name in plan.keep:
            v = sub.env[name]
            if v is not taken_env[name]:  # assigned in the branch: its lanes back into the batch's value
                ty = self.types[name]
                whole = np.array(self.full(self.env[name]), dtype=ty.np)
                lanes.put(whole, idx, v)
                self.env[name] = whole

    def stmt(self, s: ir.Stmt, m: Mask) -> None:
        if isinstance(s, ir.Assign):
            v = self.eval(s.value)
            if m is None:
                self.env[s.name] = _own(v, self.written)
            else:
                old = self.full(self.env[s.name])
                self.env[s.name] = lanes.select(_rows(m, old), self.full(v), old, old.dtype)
        elif isinstance(s, ir.Store):
            self.store(s, m)
        elif isinstance(s, ir.Atomic):
            self.atomic(s, m)
        elif isinstance(s, ir.If):
            cond = s.cond
            if isinstance(cond, ir.BinOp) and cond.op in lanes.ORDERED:
                ab = (self.eval(cond.a), self.eval(cond.b))
                if m is None and self.alive is None and self.stop is None and self.span(s, *ab):
                    return
                c = self.plan.exprs.split(cond)[2](*ab, None)
            else:
                c = self.eval(cond)
            if np.ndim(c) == 0 or (m is None and (c.all() or not c.any())):  # the same in every lane
                self.block(s.then if c.all() else s.orelse, m)
            else:
                c = np.asarray(c, bool)
                if s.then.stmts:
                    self.branch(s.then, c if m is None else m & c)
                if s.orelse.stmts:
                    self.branch(s.orelse, ~c if m is None else m & ~c)
        elif isinstance(s, ir.RangeFor):
            self.range_for(s, m)
        elif isinstance(s, ir.While):
            self.loop(None, s.cond, s.body, m)
        elif isinstance(s, ir.Break):
            self.brk = _or(self.brk, m, self.n)
            self.stop = _or(self.stop, m, self.n)
        elif isinstance(s, ir.Continue):
            self.stop = _or(self.stop, m, self.n)
        elif isinstance(s, ir.Return):
            gone = np.ones(self.n, bool) if m is None else m
            self.alive = ~gone if self.alive is None else self.alive & ~gone
        elif isinstance(s, ir.Barrier):
            self.barrier(s, m)
        else:  # pragma: no cover
            raise TypeError(s)

    def span(self, s: ir.If, a: Any, b: Any) -> bool:
        """Run ``s`` (every lane live) when its condition compares a ramp with an integer: the
        lanes where it holds are one run, ``[lo, hi)``, and its ``then`` runs on their slice, ramps
        kept (``if ABSOLUTE_POS_X == 0``, ``if i < n``: no mask over the batch). False when the
        condition is of another kind or the block cannot run alone."""
        if not isinstance(s.cond, ir.BinOp) or COMPACT <= 0:
            return False
        units = lanes.unit_span(s.cond.op, a, b) if self.cubewise else None
        if units is not None:
            return self.unit_span(s, units)
        sp = lanes.span(s.cond.op, a, b)
        if sp is None or not self.runs_alone(s.then):
            return False
        lo, hi = sp
        if lo < hi:
            if hi - lo == self.n:
                self.block(s.then, None)
                return True
            self.alone(s.then, slice(lo, hi))
        if s.orelse.stmts and hi - lo < self.n:
            rest = np.ones(self.n, bool)
            rest[lo:hi] = False
            self.branch(s.orelse, rest)
        return True

    def unit_span(self, s: ir.If, units: lanes.Units) -> bool:
        """Run ``s`` (every lane live) when its condition compares a tile with an integer: its
        ``then`` on the units where it holds, tiles kept (``if UNIT_POS_X < half`` of a tree:
        shared memory through views, not gathers); its ``else`` under a mask."""
        if not self.runs_alone(s.then) or units.units * units.rows != self.n:
            return False
        lo, hi = units.lo, units.hi
        if lo < hi:
            if hi - lo == units.units:
                self.block(s.then, None)
                return True
            self.alone(s.then, units)
        if s.orelse.stmts and hi - lo < units.units:
            rest = np.ones((units.rows, units.units), bool)
            rest[:, lo:hi] = False
            self.branch(s.orelse, rest.reshape(-1))
        return True

    def barrier(self, s: ir.Barrier, m: Mask) -> None:
        """Check that each cube reaches the barrier with all its live units or with none (a cube
        that skips it under a uniform condition is fine); the batch's cubes are side by side."""
        reached, live = self.mask(m), self.mask(self.alive)
        if np.array_equal(reached, live):
            return
        units = self.dims[0] * self.dims[1] * self.dims[2]
        reached, live = reached.reshape(-1, units), live.reshape(-1, units)
        bad = reached.any(axis=1) & (reached != live).any(axis=1)
        if bad.any():
            cube = int(np.argmax(bad))
            raise BarrierDivergenceError(
                f"{s.loc}: sync_cube() reached by only some units of a cube "
                f"({int(reached[cube].sum())} of {int(live[cube].sum())} live units)"
            )

    def range_for(self, s: ir.RangeFor, m: Mask) -> None:
        ty = self.types[s.var]
        start, step = self.eval(s.start), self.eval(s.step)
        if m is None:
            # A ramp start (a grid-stride loop from ABSOLUTE_POS_X) stays a ramp while every lane
            # steps on together, so the body's accesses through it are slices.
            # A start loaded through a ramp is a view of memory the body may store to: own it.
            self.env[s.var] = start if isinstance(start, Ramp) else _own(self.full(start), self.written)
        else:
            self.env[s.var] = lanes.select(m, self.full(start), self.full(self.env[s.var]), ty.np)
        self.loop(s, self.plan.condition(s), s.body, m, step)

    def loop(self, rf: ir.RangeFor | None, cond: ir.Expr, body: ir.Block, m: Mask,
             step: Any = None) -> None:
        saved = (self.brk, self.stop)
        self.brk = None
        try:
            while True:
                self.stop = None
                go = self.going(cond, m)
                if go is not None and not go.any():
                    break
                self.stop = None if self.brk is None else self.brk.copy()
                self.block(body, None if go is None or go.all() else go)
                if rf is not None:
                    inc = _and(go, None if self.brk is None else ~self.brk, self.alive)
                    ty = self.types[rf.var]
                    cur = self.env[rf.var]
                    if (isinstance(cur, Ramp) and (by := lanes.as_int(step)) is not None
                            and (inc is None or inc.all())):
                        nxt = lanes.make(cur.start + by, cur.step, cur.n, cur.dtype)
                        if nxt is not None:  # else the values wrap: the array arithmetic below
                            self.env[rf.var] = nxt
                            continue
                    cur = self.full(cur)
                    more = semantics.binary_raw("+", cur, step, ty)
                    self.env[rf.var] = more if inc is None else lanes.select(inc, more, cur, ty.np)
        finally:
            self.brk, self.stop = saved

    def going(self, cond: ir.Expr, m: Mask) -> Mask:
        """The lanes that run a loop's next pass (None: every lane). A ramp compared with an
        integer while every lane is in the loop (a grid-stride loop) builds no mask when the
        comparison holds for every lane or for none."""
        if m is None and self.alive is None and self.brk is None and isinstance(cond, ir.BinOp) \
                and cond.op in lanes.ORDERED:
            ab = (self.eval(cond.a), self.eval(cond.b))
            sp = lanes.span(cond.op, *ab)
            if sp is not None and sp[1] - sp[0] in (0, self.n):
                return None if sp[1] > sp[0] else np.zeros(self.n, bool)
            c = self.plan.exprs.split(cond)[2](*ab, None)
        else:
            c = self.eval(cond)
        return self.mask(_and(m, self.alive, None if self.brk is None else ~self.brk, self.full(c)))

    def store(self, s: ir.Store, m: Mask) -> None:
        if s.lane is not None:  # one lane of a vector element (a lane out of the vector: dropped)
            arr, addr, ok = self.address(s.array, self.eval(s.index), s.guard)
            lane = self.full(self.eval(s.lane)).astype(np.int64)
            sel = _and(ok, (lane >= 0) & (lane < arr.shape[-1]), m)  # ok and m: None for every lane
            arr[addr[sel], lane[sel]] = self.full(self.eval(s.value))[sel]
            return
        arr, base, size = self.mem[s.array]
        idx = self.eval(s.index)
        if isinstance(idx, Ramp) and base is None and idx.step == 1 and idx.start >= 0:
            k = max(0, min(self.n, size - idx.start))  # lanes [0, k) are in bounds
            if k == 0:
                return
            sel = _and(m, None if s.guard is None else self.full(self.eval(s.guard)))
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
        sel = _and(m, ok)
        if sel is None:
            arr[addr] = self.full(self.eval(s.value))
        else:
            arr[addr[sel]] = self.full(self.eval(s.value))[sel]

    def atomic(self, s: ir.Atomic, m: Mask) -> None:
        arr, addr, in_bounds = self.address(s.array, self.eval(s.index), s.guard)
        ok = self.mask(in_bounds)
        sel = ok if m is None else m & ok
        args = [_own(self.full(self.eval(a))) for a in s.args]
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

    # ------------------------------------------------------------------------------ expressions
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
        k = lanes.as_int(index) if not isinstance(index, int) else index
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

    def load(self, e: ir.Load, idx: Any, guard: Fn | None) -> Any:
        """Load ``e`` at the lanes' index values ``idx`` (``guard``: its guard's closure)."""
        arr, base, size = self.mem[e.array]
        if isinstance(idx, Ramp) and base is None and idx.step == 1 and idx.start >= 0:
            k = max(0, min(self.n, size - idx.start))
            got = arr[idx.start:idx.start + k]
            if k < self.n:
                got = np.concatenate([got, np.zeros(_shape(self.n - k, e.ty), e.ty.np)])
            if guard is not None:
                got = lanes.select(_rows(self.full(guard(self)), got), got, e.ty.np.type(0), e.ty.np)
            return got
        view = self.strided(e.array, idx, e.guard, False)
        if view is not None:
            return view.reshape(_shape(self.n, e.ty))
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
            return np.zeros(_shape(self.n, e.ty), e.ty.np)
        got = arr[addr]
        return got if ok is None else lanes.select(_rows(ok, got), got, e.ty.np.type(0), e.ty.np)

    def eval(self, e: ir.Expr) -> Any:
        """The value of ``e`` for the batch's lanes, through its compiled closure."""
        return self.plan.exprs(e)(self)


def _shape(n: int, ty: DType) -> tuple[int, ...]:
    """The shape of ``n`` values of ``ty``: ``(n,)``, or ``(n, lanes)`` for a vector."""
    return (n, ty.lanes) if ty.is_vector else (n,)
