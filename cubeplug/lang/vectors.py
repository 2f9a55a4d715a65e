"""Vector values (``Vec[T, W]``, W in 2 and 4): type rules of their operators, construction and
lanes.

Vectors support the elementwise arithmetic operators (``+ - * / // % **`` on floats, ``+ - * //
%`` and ``& | ^`` on integers) and unary ``-`` (and ``~`` on integers); a scalar operand (a literal
or a value of the lane type) is splatted to every lane. Comparisons are elementwise too and give a
bool vector (``boolx4``, :func:`bool_vec`): its lanes, ``&``/``|`` of two of them, ``any()`` /
``all()`` and the elementwise select ``a if mask else b``. Math builtins apply per lane
(:func:`math`), ``Vec[T, W](v)`` converts a vector lane by lane (:func:`construct`); integer
vectors shift lane by lane (``<< >>``). Lanes are ``v.x v.y v.z v.w`` or ``v[k]`` with a comptime
``k``; assigning a lane of a local (``v.y = e``, ``v[1] += e``) rebuilds the local.

The IR keeps these as ordinary nodes (``BinOp``, ``Call``, ``Cast``, ``Select``) of a vector type;
each dialect spells them: WGSL natively, C through per-lane helper functions, the interpreter on
``(n, lanes)`` arrays.
"""

from __future__ import annotations

from cubeplug.lang import infer, ir
from cubeplug.lang.errors import KernelTypeError, Loc
from cubeplug.lang.infer import Val, is_expr
from cubeplug.lang.types import VECTOR_ELEMS, DType, bool_

LANE_NAMES = "xyzw"
_ARITH = ("+", "-", "*", "/", "//", "%", "**")
_BITWISE = ("&", "|", "^")
_COMPARE = ("<", "<=", ">", ">=", "==", "!=")


def bool_vec(width: int) -> DType:
    """The type of an elementwise comparison of ``width``-lane vectors (C: ``uintW`` of 0/1 lanes,
    WGSL: ``vecW<bool>``); not an array element type."""
    return DType(f"boolx{width}", "b", 8, width)


def vec_of(scalar: DType, width: int, loc: Loc, construct: str) -> DType:
    """The ``width``-lane vector of ``scalar`` lanes."""
    if scalar == bool_:
        return bool_vec(width)
    if scalar.name not in VECTOR_ELEMS:
        raise KernelTypeError(f"vectors hold {', '.join(VECTOR_ELEMS)} (or bool from a comparison), "
                              f"not {scalar}", loc, construct)
    return DType(f"{scalar.name}x{width}", scalar.kind, scalar.bits, width)


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
    if op in _COMPARE:
        if ty.kind == "b":
            raise KernelTypeError(f"`{op}` compares numbers, got {ty}; combine masks with & and |",
                                  loc, construct)
        ea, eb = operand(a, ty, loc, construct), operand(b, ty, loc, construct)
        return ir.BinOp(op, ea, eb, bool_vec(ty.lanes), loc)
    if ty.kind == "b" and op not in ("&", "|"):
        raise KernelTypeError(f"bool vectors take & and | (and any(), all(), lanes), not `{op}`",
                              loc, construct)
    if op in ("<<", ">>"):
        if not ty.is_int:
            raise KernelTypeError(f"`{op}` needs integer vectors, got {ty}", loc, construct)
        # The amount: a vector of the same type or a scalar splatted (a literal, or the lane type);
        # a literal amount is taken modulo the width, as the interpreter and WGSL take any amount
        # (WGSL rejects a constant one beyond the width).
        if isinstance(b, int) and not isinstance(b, bool):
            b = b & (ty.bits - 1)
        return ir.BinOp(op, operand(a, ty, loc, construct), operand(b, ty, loc, construct), ty, loc)
    if op not in _ARITH + _BITWISE:
        raise KernelTypeError(f"`{op}` is not defined on vectors", loc, construct)
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
        (v,) = args
        if is_vec(v) and v.ty != ty:  # a conversion, lane by lane
            if v.ty.lanes != ty.lanes:
                raise KernelTypeError(f"{what} converts a vector of {ty.lanes} lanes, got {v.ty}", loc, what)
            return ir.Cast(v, ty, loc)
        return operand(v, ty, loc, what)
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


def math(fn: str, args: list[Val], float_only: bool, loc: Loc, construct: str) -> ir.Expr:
    """A math builtin with a vector argument, lane by lane (scalar arguments are splatted)."""
    ty = next(a.ty for a in args if is_vec(a))
    if ty.kind == "b" or (float_only and not ty.is_float):
        raise KernelTypeError(f"{fn}() needs {'float' if float_only else 'number'} vectors, got {ty}",
                              loc, construct)
    return ir.Call(fn, tuple(operand(a, ty, loc, construct) for a in args), ty, loc)


def select(mask: ir.Expr, a: Val, b: Val, loc: Loc) -> ir.Expr:
    """``a if mask else b`` with a bool vector ``mask``: per lane (both sides are evaluated)."""
    what = "conditional expression"
    if mask.ty.kind != "b":
        raise KernelTypeError(f"a vector condition must be a bool vector (a comparison), got {mask.ty}",
                              loc, what)
    vec = next((v for v in (a, b) if is_vec(v)), None)
    if vec is None:
        ea, _ = infer.unify(a, b, loc, what)
        ty = vec_of(ea.ty, mask.ty.lanes, loc, what)
    else:
        ty = vec.ty
    if ty.lanes != mask.ty.lanes:
        raise KernelTypeError(f"a {mask.ty} mask selects between vectors of {mask.ty.lanes} lanes, got {ty}",
                              loc, what)
    return ir.Select(mask, operand(a, ty, loc, what), operand(b, ty, loc, what), ty, loc)


def reduce(fn: str, v: ir.Expr, loc: Loc) -> ir.Expr:
    """``any(mask)`` / ``all(mask)``: the lanes of a bool vector (a named value) or'ed / and'ed."""
    op = "or" if fn == "any" else "and"
    acc = get(v, 0, loc)
    for k in range(1, v.ty.lanes):
        acc = ir.BinOp(op, acc, get(v, k, loc), bool_, loc)
    return acc
