"""The numeric semantics of the language, on numpy values: constant folding and the CPU interpreter
both compute through these functions, so they agree with each other and with C and WGSL.

* integers wrap; ``//`` and ``%`` on integers truncate toward zero (C and WGSL), a division by zero
  gives 0 here (undefined in C; WGSL gives the dividend);
* shift amounts are taken modulo the bit width (WGSL; larger shifts are undefined in C);
* ``//`` on floats is ``floor(a / b)``, ``%`` on floats is ``fmod`` (truncated, as C and WGSL).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cubeplug.lang.types import DType

ARITH = ("+", "-", "*", "/", "//", "%", "**")
BITWISE = ("&", "|", "^", "<<", ">>")
COMPARE = ("<", "<=", "==", "!=", ">", ">=")
LOGIC = ("and", "or")

_CMP = {
    "<": np.less, "<=": np.less_equal, "==": np.equal, "!=": np.not_equal,
    ">": np.greater, ">=": np.greater_equal,
}
_MATH1 = {
    "sqrt": np.sqrt, "exp": np.exp, "log": np.log, "sin": np.sin, "cos": np.cos, "tanh": np.tanh,
    "floor": np.floor, "ceil": np.ceil, "abs": np.abs,
}


def binary(op: str, a: Any, b: Any, ty: DType) -> Any:
    """``a op b`` for operands of type ``ty`` (the result is bool for comparisons and logic)."""
    with np.errstate(all="ignore"):
        return binary_raw(op, a, b, ty)


def binary_raw(op: str, a: Any, b: Any, ty: DType) -> Any:
    """:func:`binary` without its ``np.errstate`` (the caller ignores floating-point errors)."""
    dt = ty.np
    if op in _CMP:
        return _CMP[op](a, b)
    if op == "and":
        return np.logical_and(a, b)
    if op == "or":
        return np.logical_or(a, b)
    a = np.asarray(a, dtype=dt)
    b = np.asarray(b, dtype=dt)
    if op == "+":
        r = np.add(a, b)
    elif op == "-":
        r = np.subtract(a, b)
    elif op == "*":
        r = np.multiply(a, b)
    elif op == "/":
        r = np.divide(a, b)
    elif op == "//":
        if ty.is_float:
            r = np.floor(np.divide(a, b))
        else:
            safe = np.where(b == 0, np.ones_like(b), b)
            rem = np.fmod(a, safe)
            r = np.where(b == 0, np.zeros_like(a), (a - rem) // safe)
    elif op == "%":
        if ty.is_float:
            r = np.fmod(a, b)
        else:
            safe = np.where(b == 0, np.ones_like(b), b)
            r = np.where(b == 0, np.zeros_like(a), np.fmod(a, safe))
    elif op == "**":
        r = np.power(a, b)
    elif op in ("&", "|", "^"):
        fn = {"&": np.bitwise_and, "|": np.bitwise_or, "^": np.bitwise_xor}[op]
        r = fn(a, b)
    elif op in ("<<", ">>"):
        amount = np.bitwise_and(b, ty.bits - 1).astype(dt)
        r = np.left_shift(a, amount) if op == "<<" else np.right_shift(a, amount)
    else:  # pragma: no cover - the frontend only builds the ops above
        raise ValueError(op)
    return r.astype(dt, copy=False)


def unary(op: str, a: Any, ty: DType) -> Any:
    """``-a``, ``not a``, ``~a``."""
    with np.errstate(all="ignore"):
        return unary_raw(op, a, ty)


def unary_raw(op: str, a: Any, ty: DType) -> Any:
    """:func:`unary` without its ``np.errstate``."""
    if op == "not":
        return np.logical_not(a)
    a = np.asarray(a, dtype=ty.np)
    r = np.negative(a) if op == "-" else np.invert(a)
    return r.astype(ty.np, copy=False)


def cast(a: Any, ty: DType) -> Any:
    """``a`` converted to ``ty`` (floats to integers truncate toward zero)."""
    with np.errstate(all="ignore"):
        arr = np.asarray(a)
        if ty.is_int and arr.dtype.kind == "f":
            arr = np.trunc(np.nan_to_num(arr, nan=0.0, posinf=0.0, neginf=0.0))
            info = np.iinfo(ty.np)
            arr = np.clip(arr, info.min, info.max)
        return arr.astype(ty.np)


def math(fn: str, args: list[Any], ty: DType) -> Any:
    """A math builtin on values of type ``ty``."""
    dt = ty.np
    with np.errstate(all="ignore"):
        xs = [np.asarray(x, dtype=dt) for x in args]
        if fn in _MATH1:
            r = _MATH1[fn](xs[0])
        elif fn == "min":
            r = np.minimum(xs[0], xs[1])
        elif fn == "max":
            r = np.maximum(xs[0], xs[1])
        elif fn == "pow":
            r = np.power(xs[0], xs[1])
        elif fn == "fma":
            r = xs[0].astype(np.float64) * xs[1] + xs[2]
        else:  # pragma: no cover
            raise ValueError(fn)
        return np.asarray(r).astype(dt, copy=False)


def python_value(x: Any, ty: DType) -> int | float | bool:
    """A numpy scalar as the Python value a :class:`~cubeplug.lang.ir.Const` holds."""
    v: int | float | bool = np.asarray(x).astype(ty.np).item()
    return v
