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
an enclosing loop: its statements then cost what its lanes cost, not what the batch's do; a branch
that a tile comparison selects (``if UNIT_POS_X < half``) runs on those units of every cube, its
tiles kept (:meth:`_Run.unit_span`). Each fast path gives the general path's result
(``tests/lang/test_interp.py`` compares them). This module is the control flow; the memory
accesses are :mod:`cubeplug.lang.interp_memory`'s, the expressions closures compiled once per
kernel (:mod:`cubeplug.lang.interp_expr`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cubeplug.lang import ir, lanes, semantics
from cubeplug.lang.errors import BarrierDivergenceError
from cubeplug.lang.interp_expr import rows as _rows
from cubeplug.lang.interp_memory import Batch, Lanes, Mask, Where, and_, batch_memory, own
from cubeplug.lang.interp_plan import Plan, has_barrier
from cubeplug.lang.lanes import Ramp

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
                mem, written = batch_memory(self.k, values, dims, c0, c1)
                batch = Batch(self.plan, values, count, dims, c0, c1, written)
                n = (c1 - c0) * units
                _Run(batch, n, mem, self.plan.fresh_env(n)).block(self.k.body, None)
                c0 = c1


def _or(lanes_: np.ndarray | None, m: Mask, n: int) -> np.ndarray:
    """The lanes of ``lanes_`` (None: none) and of ``m`` (None: every lane), as a new array."""
    if m is None:
        return np.ones(n, bool)
    return m.copy() if lanes_ is None else lanes_ | m



class _Run(Lanes):
    """One batch of whole cubes run in lockstep, or a subset of its lanes (:meth:`alone`)."""

    def live(self, mask: Mask) -> Mask:
        return and_(mask, self.alive, None if self.stop is None else ~self.stop)

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

    def alone(self, b: ir.Block, idx: Where) -> None:
        """Run ``b`` (:meth:`runs_alone`) on the lanes ``idx`` alone, as a run of their own: their
        values gathered (for a slice of lanes, views and ramps), the locals ``b`` assigns written back."""
        mem = {name: (arr, None if base is None else lanes.take(base, idx), size)
               for name, (arr, base, size) in self.mem.items()}
        plan = self.plan.alone(b)
        env = self.env
        taken_env = {name: lanes.take(env[name], idx) for name in plan.need}
        if isinstance(idx, lanes.Units):
            n = idx.rows * (idx.hi - idx.lo)
        else:
            n = len(idx) if isinstance(idx, np.ndarray) else idx.stop - idx.start
        sub = _Run(self.batch, n, mem, dict(taken_env), (self, idx))
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
                self.env[s.name] = own(v, self.written)
            else:
                old = self.full(self.env[s.name])
                self.env[s.name] = lanes.select(_rows(m, old), self.full(v), old, old.dtype)
        elif isinstance(s, ir.Store):
            self.store(s, m)
        elif isinstance(s, ir.Atomic):
            self.atomic(s, m)
        elif isinstance(s, ir.If):
            ab = self.ordered(s.cond)
            every = m is None and self.alive is None and self.stop is None
            if ab is not None and every and self.span(s, *ab):
                return
            c = self.condition(s.cond, ab)
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
        return self.then_else(s, lo, hi, self.n, slice(lo, hi))

    def unit_span(self, s: ir.If, units: lanes.Units) -> bool:
        """Run ``s`` (every lane live) when its condition compares a tile with an integer: its
        ``then`` on the units where it holds, tiles kept (``if UNIT_POS_X < half`` of a tree:
        shared memory through views, not gathers); its ``else`` under a mask."""
        if not self.runs_alone(s.then) or units.units * units.rows != self.n:
            return False
        return self.then_else(s, units.lo, units.hi, units.units, units)

    def then_else(self, s: ir.If, lo: int, hi: int, width: int, where: Where) -> bool:
        """Run ``s`` whose condition holds on the lanes ``[lo, hi)`` of each run of ``width``
        lanes (``where``: those lanes, a slice or :class:`~cubeplug.lang.lanes.Units`): its
        ``then`` on them alone, its ``else`` under a mask of the others (:meth:`span`,
        :meth:`unit_span`)."""
        if lo < hi:
            if hi - lo == width:
                self.block(s.then, None)
                return True
            self.alone(s.then, where)
        if s.orelse.stmts and hi - lo < width:
            rest = np.ones((self.n // width, width), bool)
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
            self.env[s.var] = start if isinstance(start, Ramp) else own(self.full(start), self.written)
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
                    inc = and_(go, None if self.brk is None else ~self.brk, self.alive)
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
        ab = self.ordered(cond) if m is None and self.alive is None and self.brk is None else None
        if ab is not None and isinstance(cond, ir.BinOp):  # ordered: a BinOp
            sp = lanes.span(cond.op, *ab)
            if sp is not None and sp[1] - sp[0] in (0, self.n):
                return None if sp[1] > sp[0] else np.zeros(self.n, bool)
        c = self.condition(cond, ab)
        return self.mask(and_(m, self.alive, None if self.brk is None else ~self.brk, self.full(c)))

    def ordered(self, cond: ir.Expr) -> tuple[Any, Any] | None:
        """The operands' values of a condition that compares by one of :data:`lanes.ORDERED` (a
        ramp or a tile among them selects runs of lanes: :meth:`span`, :meth:`going`), else None."""
        if isinstance(cond, ir.BinOp) and cond.op in lanes.ORDERED:
            fa, fb, _ = self.plan.exprs.split(cond)
            return fa(self), fb(self)
        return None

    def condition(self, cond: ir.Expr, ab: tuple[Any, Any] | None) -> Any:
        """The value of ``cond``, from its operands' values ``ab`` where :meth:`ordered` gave them."""
        if ab is None:
            return self.eval(cond)
        assert isinstance(cond, ir.BinOp)
        return self.plan.exprs.split(cond)[2](*ab, None)

