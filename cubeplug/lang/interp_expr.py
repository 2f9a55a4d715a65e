"""The interpreter's expressions, compiled once per kernel into Python closures (:class:`Exprs`).

Each expression node becomes one closure ``fn(run) -> value`` that holds its operands' closures
and what the node decides once: the numpy function of its operator, its result dtype, whether its
operands are fresh temporaries, whether lane rules (ramps, tiles) can apply. Running an expression
is then a closure call and its numpy work per node, not a walk that tests the node's type and
looks its fields up on every evaluation of every batch (the std reductions' unrolled folds
evaluate about 5000 nodes a launch; the walk's dispatch cost 15 isinstance calls a node).
``run`` is the interpreter's batch (``interp._Run``): the closures read its ``env``, ``values``
and ``n`` and call its ``builtin``, ``load`` and ``full``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from cubeplug.lang import ir, lanes, semantics
from cubeplug.lang.lanes import Ramp, Tile

#: ``fn(run)``: an expression's value for the lanes of a batch.
Fn = Callable[[Any], Any]
#: ``apply(a, b, out)``: a binary operator on operand values already evaluated; the result goes
#: to ``out`` where given and possible.
Apply = Callable[[Any, Any, "np.ndarray | None"], Any]

_IN_PLACE = {"+": np.add, "-": np.subtract, "*": np.multiply, "&": np.bitwise_and, "|": np.bitwise_or,
             "^": np.bitwise_xor}
#: Nodes whose value, when an array, is a new one that nothing else holds.
_COMPUTED = (ir.BinOp, ir.UnOp, ir.Cast, ir.Call, ir.Select, ir.VecNew)


def _fits(v: Any, out: np.ndarray, dt: np.dtype[Any]) -> bool:
    """True when ``v`` is an operand of ``dt`` that ``out`` can hold the result of, as it is."""
    return np.shape(v) in ((), out.shape) and getattr(v, "dtype", None) == dt


def rows(mask: np.ndarray, like: np.ndarray) -> np.ndarray:
    """A per-lane mask shaped to select whole rows of ``like`` (a column for vectors; a vector
    mask selects lane by lane as it is)."""
    return mask[:, None] if np.ndim(like) == 2 and np.ndim(mask) == 1 else mask


def binary(e: ir.BinOp) -> Apply:
    """The operator of ``e`` on evaluated operands: lane rules for ramps and tiles first (integer
    scalar types only: :func:`lanes.binary` covers no other), then an in-place ufunc into ``out``
    or into a fresh temporary operand (numpy's ufuncs handle overlapping operands), else
    :func:`semantics.binary_raw`."""
    op, ty_a, dt = e.op, e.a.ty, e.ty.np
    lane_rules = ty_a.is_int and not ty_a.is_vector
    ufunc = _IN_PLACE.get(op)
    fresh_a, fresh_b = isinstance(e.a, _COMPUTED), isinstance(e.b, _COMPUTED)
    raw = semantics.binary_raw

    def apply(a: Any, b: Any, out: np.ndarray | None = None) -> Any:
        if isinstance(a, (Ramp, Tile)) or isinstance(b, (Ramp, Tile)):
            if lane_rules:
                r = lanes.binary(op, a, b, ty_a)
                if r is not None:
                    return r
            a, b = lanes.materialize(a), lanes.materialize(b)
        a, b = lanes.splat(a, b), lanes.splat(b, a)
        if ufunc is not None:
            if out is None:
                if fresh_a and isinstance(a, np.ndarray) and a.base is None and a.dtype == dt:
                    out = a
                elif fresh_b and isinstance(b, np.ndarray) and b.base is None and b.dtype == dt:
                    out = b
            if out is not None and _fits(a, out, dt) and _fits(b, out, dt):
                return ufunc(a, b, out=out)
        return raw(op, a, b, ty_a)

    return apply


class Exprs:
    """The closures of a kernel's expressions, compiled on first use and kept by node identity
    (each entry holds its node, so that no other node can take its id while it is kept)."""

    def __init__(self) -> None:
        self._fns: dict[int, tuple[ir.Expr, Fn]] = {}
        self._split: dict[int, tuple[ir.BinOp, tuple[Fn, Fn, Apply]]] = {}

    def __call__(self, e: ir.Expr) -> Fn:
        got = self._fns.get(id(e))
        if got is None:
            got = self._fns[id(e)] = (e, self._compile(e))
        return got[1]

    def split(self, e: ir.BinOp) -> tuple[Fn, Fn, Apply]:
        """A binary node's operand closures and operator, for callers that look at the operands
        before applying it (a branch on a ramp comparison, a store of ``y[i] = y[i] + ...``)."""
        got = self._split.get(id(e))
        if got is None:
            got = self._split[id(e)] = (e, (self(e.a), self(e.b), binary(e)))
        return got[1]

    def _compile(self, e: ir.Expr) -> Fn:
        if isinstance(e, ir.Const):
            value = e.ty.np.type(e.value)
            return lambda run: value
        if isinstance(e, ir.Var):
            name = e.name
            if e.kind == "local":
                return lambda run: run.env[name]
            to = e.ty.np.type
            return lambda run: to(run.values[name])
        if isinstance(e, ir.Builtin):
            bname = e.name
            return lambda run: run.builtin(bname)
        if isinstance(e, ir.BinOp):
            fa, fb, apply = self.split(e)
            return lambda run: apply(fa(run), fb(run), None)
        if isinstance(e, ir.UnOp):
            return self._unary(e)
        if isinstance(e, ir.Cast):
            return self._cast(e)
        if isinstance(e, ir.Call):
            args, fname, ty = tuple(self(a) for a in e.args), e.fn, e.ty
            return lambda run: semantics.math(fname, [lanes.materialize(f(run)) for f in args], ty)
        if isinstance(e, ir.Select):
            fc, fa, fb, dt = self(e.cond), self(e.a), self(e.b), e.ty.np

            def select(run: Any) -> Any:
                a, b = run.full(fa(run)), run.full(fb(run))
                return lanes.select(rows(run.full(fc(run)), a), a, b, dt)
            return select
        if isinstance(e, ir.Load):
            load = e
            index = self(e.index)
            return lambda run: run.load(load, index(run))
        if isinstance(e, ir.VecNew):
            return self._vec_new(e)
        if isinstance(e, ir.VecGet):
            fv, lane = self(e.v), e.lane
            return lambda run: run.full(fv(run))[:, lane]
        raise TypeError(e)  # pragma: no cover

    def _unary(self, e: ir.UnOp) -> Fn:
        fa, op, ty = self(e.a), e.op, e.ty
        raw = semantics.unary_raw

        def unary(run: Any) -> Any:
            a = fa(run)
            if isinstance(a, (Ramp, Tile)):
                r = lanes.unary(op, a, ty)
                if r is not None:
                    return r
                a = a.array()
            return raw(op, a, ty)
        return unary

    def _cast(self, e: ir.Cast) -> Fn:
        fa, ty = self(e.a), e.ty

        def cast(run: Any) -> Any:
            a = fa(run)
            if isinstance(a, (Ramp, Tile)):
                r = lanes.cast(a, ty)
                if r is not None:
                    return r
                a = a.array()
            return semantics.cast(a, ty)
        return cast

    def _vec_new(self, e: ir.VecNew) -> Fn:
        args, ty = tuple(self(a) for a in e.args), e.ty

        def vec_new(run: Any) -> Any:
            vals = [f(run) for f in args]
            if all(np.ndim(v) == 0 and not isinstance(v, (Ramp, Tile)) for v in vals):
                # The same vector in every lane: a read-only broadcast view, not n copies.
                one = np.array([vals * ty.lanes if len(vals) == 1 else vals], ty.np)
                return np.broadcast_to(one, (run.n, ty.lanes))
            cols = [run.full(v) for v in vals]
            if len(cols) == 1:
                cols = cols * ty.lanes
            return np.stack(cols, axis=1).astype(ty.np, copy=False)
        return vec_new
