"""Vector values (``Vec[T, W]``, W in 2 and 4): type rules of their operators, construction and
lanes.

Vectors support the elementwise arithmetic operators (``+ - * / // % **`` on floats, ``+ - * //
%`` and ``& | ^`` on integers) and unary ``-`` (and ``~`` on integers); a scalar operand (a literal
or a value of the lane type) is splatted to every lane. Comparisons, shifts, math builtins and
casts take scalars: apply them per lane. Lanes are ``v.x v.y v.z v.w`` or ``v[k]`` with a comptime
``k``; assigning a lane of a local (``v.y = e``, ``v[1] += e``) rebuilds the local.
"""

from __future__ import annotations

from cubeplug.lang import infer, ir
from cubeplug.lang.errors import KernelTypeError, Loc
from cubeplug.lang.infer import Val, is_expr
from cubeplug.lang.types import DType

LANE_NAMES = "xyzw"
_ARITH = ("+", "-", "*", "/", "//", "%", "**")
_BITWISE = ("&", "|", "^")


def is_vec(v: Val) -> bool:
    """True for a vector-typed expression."""
    return is_expr(v) and v.ty.is_vector


def operand(v: Val, ty: DType, loc: Loc, construct: str) -> ir.Expr:
    """``v`` as a ``ty`` vector: a vector of that type, or a scalar splatted to every lane."""
    if is_expr(v) and v.ty == ty:
        return v
    if is_expr(v) and v.ty.is_vector:
        raise KernelTypeError(f"mismatched vector types {ty} and {v.ty}; build one from the other's "
                              f"lanes", loc, construct)
    return splat(infer.to_expr(v, loc, construct, ty.scalar), ty, loc)


def splat(s: ir.Expr, ty: DType, loc: Loc) -> ir.Expr:
    """The scalar ``s`` in every lane of a ``ty`` vector."""
    return ir.VecNew((s,), ty, loc)


def binop(op: str, a: Val, b: Val, loc: Loc, construct: str) -> ir.Expr:
    """``a op b`` where at least one side is a vector."""
    ty = a.ty if is_vec(a) else b.ty
    if op not in _ARITH + _BITWISE:
        raise KernelTypeError(
            f"`{op}` is not defined on vectors; compare or shift per lane (v.x, v[k])", loc, construct
        )
    if op in _BITWISE and ty.is_float:
        raise KernelTypeError(f"`{op}` needs integer vectors, got {ty}", loc, construct)
    if op == "/" and ty.is_int:
        raise KernelTypeError(f"`/` on {ty} is not defined: use `//` for integer division", loc, construct)
    if op == "**" and ty.is_int:
        raise KernelTypeError(f"`**` needs float vectors, got {ty}", loc, construct)
    return ir.BinOp(op, operand(a, ty, loc, construct), operand(b, ty, loc, construct), ty, loc)


def construct(ty: DType, args: list[Val], loc: Loc) -> ir.Expr:
    """``Vec[T, W](a, b, ...)`` (one scalar per lane) or ``Vec[T, W](s)`` (every lane ``s``)."""
    what = f"{ty}()"
    if len(args) == 1:
        return operand(args[0], ty, loc, what)
    if len(args) != ty.lanes:
        raise KernelTypeError(f"{what} takes 1 or {ty.lanes} scalars, got {len(args)}", loc, what)
    lanes = []
    for a in args:
        if is_vec(a):
            raise KernelTypeError(f"{what} takes scalars, got a {a.ty} vector", loc, what)
        lanes.append(infer.to_expr(a, loc, what, ty.scalar))
    return ir.VecNew(tuple(lanes), ty, loc)


def lane_of(v: ir.Expr, key: str | int, loc: Loc) -> int:
    """The lane number of ``v.<key>`` or ``v[key]``, checked against the width."""
    lane = LANE_NAMES.find(key) if isinstance(key, str) and len(key) == 1 else key
    names = LANE_NAMES[: v.ty.lanes]
    if isinstance(lane, bool) or not isinstance(lane, int) or not 0 <= lane < v.ty.lanes:
        raise KernelTypeError(
            f"a {v.ty} vector has lanes {', '.join(names)} (or v[0] to v[{v.ty.lanes - 1}] with a "
            f"comptime index), not {key!r}", loc, "lane",
        )
    return lane


def get(v: ir.Expr, lane: int, loc: Loc) -> ir.Expr:
    """Lane ``lane`` of ``v`` (folded when ``v`` is built from lanes)."""
    if isinstance(v, ir.VecNew) and all(isinstance(a, (ir.Const, ir.Var)) for a in v.args):
        return v.args[0] if len(v.args) == 1 else v.args[lane]
    return ir.VecGet(v, lane, v.ty.scalar, loc)


def with_lane(v: ir.Var, lane: int, value: Val, loc: Loc) -> ir.Expr:
    """The vector ``v`` with lane ``lane`` replaced by ``value``."""
    e = infer.to_expr(value, loc, "lane assignment", v.ty.scalar)
    lanes = tuple(e if k == lane else ir.VecGet(v, k, v.ty.scalar, loc) for k in range(v.ty.lanes))
    return ir.VecNew(lanes, v.ty, loc)
