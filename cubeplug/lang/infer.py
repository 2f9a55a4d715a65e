"""Type rules of the language: literal adoption, operators, casts and math, with constant folding.

Values during lowering are either IR expressions (typed) or plain Python values (comptime: literals,
``Comptime`` parameters, module constants). Python values fold with Python arithmetic; a Python
number meeting a typed expression adopts its type (an int literal adopts any numeric type, a float
literal only float types). Two typed operands must have the same type: there are no implicit
conversions (``i32 + u32`` is a KernelTypeError that suggests a cast).
"""

from __future__ import annotations

import math as pymath
import operator
from collections.abc import Callable
from typing import Any, TypeGuard

import numpy as np

from cubeplug.lang import ir, semantics
from cubeplug.lang.errors import KernelTypeError, Loc
from cubeplug.lang.types import DType, bool_, f32, i32, unify_literal

Val = Any  # an ir.Expr or a Python value
CapCheck = Callable[[DType, Loc], None]
EXPRS = (ir.Const, ir.Var, ir.Builtin, ir.BinOp, ir.UnOp, ir.Cast, ir.Call, ir.Select, ir.Load, ir.VecNew,
         ir.VecGet)

_PY_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "<<": operator.lshift,
    ">>": operator.rshift, "&": operator.and_, "|": operator.or_, "^": operator.xor,
    "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt,
    ">=": operator.ge,
}
_PY_MATH: dict[str, Callable[..., Any]] = {
    "sqrt": pymath.sqrt, "exp": pymath.exp, "log": pymath.log, "sin": pymath.sin, "cos": pymath.cos,
    "tanh": pymath.tanh, "floor": pymath.floor, "ceil": pymath.ceil, "abs": abs, "min": min,
    "max": max, "pow": pymath.pow, "fma": lambda a, b, c: a * b + c,
}


def is_expr(v: Val) -> TypeGuard[ir.Expr]:
    """True for an IR expression (a runtime value); narrows ``v`` to :data:`ir.Expr` for the checker."""
    return isinstance(v, EXPRS)


def is_number(v: Val) -> bool:
    """True for a Python (comptime) number or bool."""
    return isinstance(v, (bool, int, float)) and not isinstance(v, np.generic)


def known(v: Val) -> Any:
    """The value of a comptime number or an IR constant, else None."""
    if is_number(v):
        return v
    if isinstance(v, ir.Const):
        return v.value
    return None


def default_type(v: int | float | bool) -> DType:
    """The type a bare literal gets where nothing else decides: bool, i32 or f32."""
    if isinstance(v, bool):
        return bool_
    return i32 if isinstance(v, int) else f32


def adopt(v: int | float | bool, ty: DType, loc: Loc, construct: str) -> ir.Const:
    """The literal ``v`` as a constant of type ``ty``, or KernelTypeError."""
    if not unify_literal(ty, v):
        raise KernelTypeError(
            f"the literal {v!r} cannot be used as {ty}; write a {ty} value or cast it, e.g. {ty}({v!r})",
            loc, construct,
        )
    if ty.is_int:
        info = np.iinfo(ty.np)
        if not info.min <= int(v) <= info.max:
            raise KernelTypeError(f"the literal {v!r} does not fit in {ty}", loc, construct)
        return ir.Const(int(v), ty, loc)
    if ty.is_float:
        if not pymath.isfinite(float(v)):
            raise KernelTypeError(
                f"the literal {v!r} is not finite; C and WGSL have no spelling", loc, construct
            )
        return ir.Const(float(v), ty, loc)
    return ir.Const(bool(v), ty, loc)


def to_expr(v: Val, loc: Loc, construct: str, want: DType | None = None) -> ir.Expr:
    """A value as a typed expression: literals adopt ``want`` (or their default type)."""
    if is_expr(v):
        if want is not None and v.ty != want:
            raise KernelTypeError(
                f"expected a {want} value, got {v.ty}; cast it with {want}(...)", loc, construct
            )
        return v
    if is_number(v):
        if want is not None and want.is_vector:  # a literal for a vector: every lane
            return ir.VecNew((adopt(v, want.scalar, loc, construct),), want, loc)
        return adopt(v, want or default_type(v), loc, construct)
    raise KernelTypeError(f"{_describe(v)} is not a value a kernel can compute with", loc, construct)


def _describe(v: Val) -> str:
    name = getattr(v, "__name__", None) or type(v).__name__
    return f"{name!r}"


def unify(a: Val, b: Val, loc: Loc, construct: str) -> tuple[ir.Expr, ir.Expr]:
    """Two operands as expressions of one type (a literal adopts the other side's type)."""
    if is_expr(a) and is_expr(b):
        if a.ty != b.ty:
            hint = f"cast one side, e.g. {a.ty}(...) or {b.ty}(...)"
            raise KernelTypeError(f"mismatched types {a.ty} and {b.ty}; {hint}", loc, construct)
        return a, b
    if is_expr(a):
        return a, to_expr(b, loc, construct, a.ty)
    if is_expr(b):
        return to_expr(a, loc, construct, b.ty), b
    ty = f32 if isinstance(a, float) or isinstance(b, float) else default_type(a)
    return to_expr(a, loc, construct, ty), to_expr(b, loc, construct, ty)


def _fold_const(e: ir.Expr) -> ir.Expr:
    """``e`` folded to a constant when all its operands are constants."""
    if isinstance(e, ir.BinOp) and isinstance(e.a, ir.Const) and isinstance(e.b, ir.Const):
        if e.op in ("and", "or"):
            return ir.Const(bool(semantics.binary(e.op, e.a.value, e.b.value, e.a.ty)), e.ty, e.loc)
        r = semantics.binary(e.op, e.a.value, e.b.value, e.a.ty)
        return ir.Const(semantics.python_value(r, e.ty), e.ty, e.loc)
    if isinstance(e, ir.UnOp) and isinstance(e.a, ir.Const):
        return ir.Const(semantics.python_value(semantics.unary(e.op, e.a.value, e.ty), e.ty), e.ty, e.loc)
    if isinstance(e, ir.Cast) and isinstance(e.a, ir.Const):
        return ir.Const(semantics.python_value(semantics.cast(e.a.value, e.ty), e.ty), e.ty, e.loc)
    return e


def _simplify(op: str, a: ir.Expr, b: ir.Expr) -> ir.Expr | None:
    """Integer identities that keep folded positions short: x+0, x-0, x*1, x*0."""
    if not a.ty.is_int:
        return None
    ka, kb = known(a), known(b)
    if op == "+" and ka == 0:
        return b
    if op in ("+", "-") and kb == 0:
        return a
    if op == "*" and (ka == 0 or kb == 0):
        return a if ka == 0 else b
    if op == "*" and ka == 1:
        return b
    if op == "*" and kb == 1:
        return a
    return None


def _scalars_only(vals: list[Val], loc: Loc, construct: str) -> None:
    for v in vals:
        if is_expr(v) and v.ty.is_vector:
            raise KernelTypeError(
                f"{construct} takes scalars, got a {v.ty} vector; convert a vector with "
                f"Vec[T, {v.ty.lanes}](v), or take a lane (v.x, v[k])",
                loc, construct,
            )


def binop(op: str, a: Val, b: Val, loc: Loc, construct: str) -> Val:
    """``a op b`` with the language's type rules (scalars; vectors are in ``vectors.py``); Python
    operands fold in Python."""
    _scalars_only([a, b], loc, construct)
    if is_number(a) and is_number(b):
        if op in ("and", "or"):
            return (a and b) if op == "and" else (a or b)
        try:
            return _PY_OPS[op](a, b)
        except (ArithmeticError, ValueError, TypeError) as e:
            raise KernelTypeError(f"comptime {a!r} {op} {b!r} fails: {e}", loc, construct) from e
    if op in ("<<", ">>") and is_expr(a) and is_expr(b) and a.ty.is_int and b.ty.is_int:
        ea, eb = a, b
    elif op in ("<<", ">>") and is_expr(a) and is_number(b):
        ea, eb = a, to_expr(b, loc, construct, a.ty)
    else:
        ea, eb = unify(a, b, loc, construct)
    ty = ea.ty
    if op in ("and", "or"):
        if ty != bool_:
            raise KernelTypeError(
                f"`{op}` needs bool operands, got {ty}; compare first, e.g. x != 0", loc, construct
            )
        out = bool_
    elif op in semantics.COMPARE:
        out = bool_
    elif op in semantics.BITWISE:
        if ty.is_float:
            raise KernelTypeError(f"`{op}` needs integer operands, got {ty}", loc, construct)
        if op in ("<<", ">>") and ty == bool_:
            raise KernelTypeError(f"`{op}` needs integer operands, got bool", loc, construct)
        out = ty
    else:
        if ty == bool_:
            raise KernelTypeError(f"`{op}` needs numbers, got bool", loc, construct)
        if op == "/" and ty.is_int:
            raise KernelTypeError(
                f"`/` on {ty} is not defined: use `//` for integer division or cast to a float type",
                loc, construct,
            )
        if op == "**" and ty.is_int:
            raise KernelTypeError(f"`**` needs float operands, got {ty}", loc, construct)
        out = ty
    simple = _simplify(op, ea, eb) if out == ty else None
    if simple is not None:
        return simple
    return _fold_const(ir.BinOp(op, ea, eb, out, loc))


def unop(op: str, a: Val, loc: Loc, construct: str) -> Val:
    """``-a``, ``not a``, ``~a``, ``+a``."""
    if is_number(a):
        fold: dict[str, Callable[[Any], Any]] = {
            "-": operator.neg, "+": operator.pos, "not": operator.not_, "~": operator.invert,
        }
        return fold[op](a)
    e = to_expr(a, loc, construct)
    if op == "+":
        return e
    if op == "not" and e.ty != bool_:
        raise KernelTypeError(f"`not` needs a bool operand, got {e.ty}", loc, construct)
    if op == "~" and not e.ty.is_int:
        raise KernelTypeError(f"`~` needs an integer operand, got {e.ty}", loc, construct)
    if op == "-" and e.ty == bool_:
        raise KernelTypeError("`-` needs a number, got bool", loc, construct)
    return _fold_const(ir.UnOp(op, e, e.ty, loc))


def cast(v: Val, ty: DType, loc: Loc, construct: str) -> Val:
    """``ty(v)``."""
    _scalars_only([v], loc, construct)
    if is_number(v):
        return ir.Const(semantics.python_value(semantics.cast(v, ty), ty), ty, loc)
    e = to_expr(v, loc, construct)
    if e.ty == ty:
        return e
    return _fold_const(ir.Cast(e, ty, loc))


def math_call(fn: str, args: list[Val], float_only: bool, loc: Loc, construct: str) -> Val:
    """A math builtin call; all-comptime arguments fold in Python."""
    _scalars_only(args, loc, construct)
    if all(is_number(a) for a in args):
        return _PY_MATH[fn](*args)
    typed = [a for a in args if is_expr(a)]
    ty = typed[0].ty
    es = [to_expr(a, loc, construct, ty) for a in args]
    if any(e.ty != ty for e in es):
        raise KernelTypeError(
            f"{fn}() arguments must have one type, got {[str(e.ty) for e in es]}", loc, construct
        )
    if float_only and not ty.is_float:
        raise KernelTypeError(f"{fn}() needs float arguments, got {ty}; cast with f32(...)", loc, construct)
    if ty == bool_:
        raise KernelTypeError(f"{fn}() needs numbers, got bool", loc, construct)
    if all(isinstance(e, ir.Const) for e in es):
        r = semantics.math(fn, [e.value for e in es], ty)  # type: ignore[union-attr]
        return ir.Const(semantics.python_value(r, ty), ty, loc)
    return ir.Call(fn, tuple(es), ty, loc)
