"""Array element access while lowering: index expressions, the record of which arrays are read,
written and bound-checked, and the IR of loads and stores.

An access is bound-checked in a checked launch unless it is to a ``shared`` or ``local`` array and
its index is provably inside it (:func:`.positions.upper_bound`); a checked access to a global array
uses the array's hidden length, which is then passed to the kernel.
"""

from __future__ import annotations

import ast

from cubeplug.lang import infer, ir
from cubeplug.lang.errors import KernelTypeError, Loc
from cubeplug.lang.infer import Val, is_expr
from cubeplug.lang.lowering import Lowering
from cubeplug.lang.positions import upper_bound
from cubeplug.lang.scope import ArrayRef
from cubeplug.lang.types import bool_, u32


def index(lw: Lowering, node: ast.expr) -> ir.Expr:
    """A one-dimensional index: a non-negative comptime int or an integer expression."""
    loc = lw.loc(node)
    if isinstance(node, ast.Tuple):
        raise lw.syntax("multi-dimensional indexing needs a Tensor[T] parameter; compute a "
                        "flat index for an Array", node, "index")
    v = lw.expr(node)
    if not is_expr(v):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise KernelTypeError(f"an index must be a non-negative int, got {v!r}", loc, "index",
                                  kernel=lw.name)
        return ir.Const(v, u32, loc)
    if not v.ty.is_int or v.ty.is_vector:
        raise KernelTypeError(f"an index must be an integer, got {v.ty}", loc, "index", kernel=lw.name)
    return v


def touch(lw: Lowering, arr: ArrayRef, idx: ir.Expr, write: bool) -> bool:
    """Record a use of ``arr``; True when the access is bound-checked (``shared`` and ``local``
    accesses whose index is provably in bounds are not)."""
    st = lw.arrays.get(arr.name)
    if st is not None:
        st.written |= write
        if lw.checked:
            st.len_used = True
    if lw.checked and arr.size is not None:
        top = upper_bound(idx, lw.cube_dim, lw.var_bounds)
        return top is None or top >= arr.size
    return lw.checked


def load(lw: Lowering, arr: ArrayRef, idx: ir.Expr, loc: Loc, guard: ir.Expr | None = None) -> ir.Expr:
    """``arr[idx]`` as a value; ``guard`` is a tensor access's shape check."""
    return ir.Load(arr.name, idx, arr.elem, loc, touch(lw, arr, idx, False), guard)


def store(lw: Lowering, arr: ArrayRef, idx: ir.Expr, v: Val, loc: Loc, guard: ir.Expr | None = None) -> None:
    """``arr[idx] = v``: ``v`` must have the array's element type (a literal adopts it)."""
    e = infer.to_expr(v, loc, "store", arr.elem) if not is_expr(v) else v
    if e.ty != arr.elem:
        raise KernelTypeError(f"cannot store a {e.ty} value into an array of {arr.elem}; cast it "
                              f"with {arr.elem}(...)", loc, "store", kernel=lw.name)
    lw.emit(ir.Store(arr.name, idx, e, loc, touch(lw, arr, idx, True), guard))


def store_lane(
    lw: Lowering, arr: ArrayRef, idx: ir.Expr, lane: Val, v: Val, loc: Loc, guard: ir.Expr | None = None
) -> None:
    """``arr[idx][lane] = v`` (or ``arr[idx].x = v``): one lane of a vector element, ``lane`` a
    comptime int or a runtime integer (in a checked launch, a lane out of the vector drops the
    write, as an index out of the array does)."""
    if not arr.elem.is_vector:
        raise KernelTypeError(f"{arr.name!r} holds {arr.elem} scalars, which have no lanes; assign "
                              f"{arr.name}[i] = value (an element of a tensor: {arr.name}[i, j] = value)",
                              loc, "lane", kernel=lw.name)
    lanes = arr.elem.lanes
    e = infer.to_expr(v, loc, "lane store", arr.elem.scalar) if not is_expr(v) else v
    if e.ty != arr.elem.scalar:
        raise KernelTypeError(f"cannot store a {e.ty} value into a lane of {arr.elem}; cast it with "
                              f"{arr.elem.scalar}(...)", loc, "store", kernel=lw.name)
    checked = touch(lw, arr, idx, True)
    if not is_expr(lane):
        if isinstance(lane, bool) or not isinstance(lane, int) or not 0 <= lane < lanes:
            raise KernelTypeError(f"a {arr.elem} element has lanes 0 to {lanes - 1}, not {lane!r}", loc,
                                  "lane", kernel=lw.name)
        at: ir.Expr = ir.Const(lane, u32, loc)
    else:
        if not lane.ty.is_int or lane.ty.is_vector:
            raise KernelTypeError(f"a lane must be an integer, got {lane.ty}", loc, "lane", kernel=lw.name)
        at = lane
        if lw.checked:
            as_u32 = infer.to_expr(infer.cast(lane, u32, loc, "lane"), loc, "lane")
            inside = ir.BinOp("<", as_u32, ir.Const(lanes, u32, loc), bool_, loc)
            guard = inside if guard is None else ir.BinOp("and", guard, inside, bool_, loc)
            checked = True
    lw.emit(ir.Store(arr.name, idx, e, loc, checked, guard, at))
