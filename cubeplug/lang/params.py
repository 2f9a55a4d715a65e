"""Kernel parameters: annotations evaluated as Python values, ``Comptime`` parameters bound to their
launch values, and every other parameter declared as a global array (``Array[T]``), a tensor
(``Tensor[T]``) or a scalar (a dtype), in the order the launch passes them.

Comptime parameters are bound first, so a later annotation may name a comptime dtype
(``x: Array[T]`` with ``T: Comptime[DType]``).
"""

from __future__ import annotations

import ast
from typing import Any

from cubeplug.lang import ir
from cubeplug.lang.errors import KernelTypeError, Loc
from cubeplug.lang.lowering import Lowering
from cubeplug.lang.scope import ArrayRef, ArrayState, is_comptime_ann
from cubeplug.lang.types import ArrayType, AtomicType, ComptimeType, DType, TensorType

#: Per runtime parameter: its kind ("array", "tensor" or "scalar") and its IR name.
Signature = tuple[tuple[str, str], ...]


def pyeval(lw: Lowering, node: ast.expr) -> Any:
    """A Python-level value (annotations): names, attributes, subscripts, strings."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return pyeval(lw, ast.parse(node.value, mode="eval").body)
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return lw.lookup(node.id, node)
    if isinstance(node, ast.Attribute):
        base = pyeval(lw, node.value)
        if not hasattr(base, node.attr):
            raise lw.syntax(f"{base!r} has no attribute {node.attr!r}", node, node.attr)
        return getattr(base, node.attr)
    if isinstance(node, ast.Subscript):
        base = pyeval(lw, node.value)
        try:
            return base[pyeval(lw, node.slice)]
        except (TypeError, KeyError, IndexError) as e:
            raise lw.syntax(str(e), node) from e
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return (pyeval(lw, node.left), pyeval(lw, node.right))
    if isinstance(node, ast.Tuple):
        return tuple(pyeval(lw, e) for e in node.elts)
    raise lw.syntax("this annotation is not understood", node)


def bind_params(lw: Lowering, fn: ast.FunctionDef) -> Signature:
    """Bind the comptime parameters and declare the runtime ones; the launch signature."""
    a = fn.args
    if a.posonlyargs or a.vararg or a.kwarg or a.kwonlyargs or a.defaults:
        raise lw.syntax("kernel parameters must be plain (no defaults, *args, **kwargs)", fn, "def")
    runtime = _bind_comptime(lw, fn)
    return tuple(_runtime_param(lw, arg) for arg in runtime)


def _bind_comptime(lw: Lowering, fn: ast.FunctionDef) -> list[ast.arg]:
    """Bind each ``Comptime`` parameter to its launch value; the other (runtime) parameters."""
    runtime: list[ast.arg] = []
    bound: set[str] = set()
    for arg in fn.args.args:
        if arg.annotation is None:
            raise lw.syntax(
                f"parameter {arg.arg!r} needs an annotation: Array[T], a dtype like f32, or "
                "Comptime[...]",
                arg, arg.arg,
            )
        # Only annotations that name Comptime are evaluated here: the others may name a comptime
        # dtype, bound by this loop.
        ann = pyeval(lw, arg.annotation) if is_comptime_ann(arg.annotation) else None
        if not isinstance(ann, ComptimeType):
            runtime.append(arg)
            continue
        if arg.arg not in lw.comptime:
            raise KernelTypeError(
                f"comptime parameter {arg.arg!r} needs a value: pass {arg.arg}=... at launch",
                lw.loc(arg), arg.arg, kernel=lw.name,
            )
        lw.frame.env[arg.arg] = _comptime_value(lw, arg, ann, lw.comptime[arg.arg])
        bound.add(arg.arg)
    unknown = set(lw.comptime) - bound
    if unknown:
        raise KernelTypeError(
            f"unknown comptime argument(s) {sorted(unknown)} at launch",
            lw.loc(fn), "launch", kernel=lw.name,
        )
    return runtime


def _comptime_value(lw: Lowering, arg: ast.arg, ann: ComptimeType, value: Any) -> Any:
    """A comptime launch value checked against its annotation: ``Comptime[int]`` takes an int (not
    a bool), ``Comptime[bool]`` a bool, ``Comptime[float]`` an int or a float (as a float), a class
    an instance of it. Without the check ``1``, ``1.0`` and ``True`` (equal in Python) would type a
    local ``y = N`` differently in specializations the caches could confuse."""
    want = ann.of
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    ok = (not isinstance(value, bool) and isinstance(value, int)) if want is int else (
        isinstance(value, want) if isinstance(want, type) else True)
    if not ok:
        name = want.__name__ if isinstance(want, type) else repr(want)
        raise KernelTypeError(
            f"comptime parameter {arg.arg!r} is Comptime[{name}], got {value!r} "
            f"({type(value).__name__}): pass a {name}",
            lw.loc(arg), arg.arg, kernel=lw.name,
        )
    return value


def _runtime_param(lw: Lowering, arg: ast.arg) -> tuple[str, str]:
    """Declare one runtime parameter by its annotation; its (kind, IR name)."""
    assert arg.annotation is not None  # _bind_comptime rejected parameters without one
    t = pyeval(lw, arg.annotation)
    loc = lw.loc(arg)
    name = lw.unique(arg.arg)
    if isinstance(t, ArrayType):
        return _array_param(lw, arg, t, name, loc)
    if isinstance(t, TensorType):
        return _tensor_param(lw, arg, t, name, loc)
    if isinstance(t, DType):
        return _scalar_param(lw, arg, t, name, loc)
    raise lw.syntax(
        f"parameter {arg.arg!r}: {t!r} is not a kernel type; use Array[T], Tensor[T], a "
        "dtype or Comptime[...]",
        arg, arg.arg,
    )


def _array_param(lw: Lowering, arg: ast.arg, t: ArrayType, name: str, loc: Loc) -> tuple[str, str]:
    """``Array[T]`` or ``Array[Atomic[T]]``: a global array with a hidden length."""
    elem = t.elem
    if isinstance(elem, AtomicType):
        elem, atomic = elem.elem, True
    else:
        atomic = t.atomic
    if not isinstance(elem, DType):
        raise lw.syntax(f"Array[...] needs a dtype such as f32, got {elem!r}", arg, arg.arg)
    if atomic and elem.name not in ("i32", "u32", "f32"):
        raise KernelTypeError("atomic arrays must be i32, u32 or f32", loc, arg.arg,
                              kernel=lw.name)
    lw.need(elem, loc)
    lw.arrays[name] = ArrayState(elem, atomic, len_name=lw.unique(f"len_{name}"))
    lw.frame.env[arg.arg] = ArrayRef(name, elem, atomic, "global", None)
    return ("array", name)


def _tensor_param(lw: Lowering, arg: ast.arg, t: TensorType, name: str, loc: Loc) -> tuple[str, str]:
    """``Tensor[T]``: a global array with hidden shape, strides and rank (see :mod:`.tensors`)."""
    if not isinstance(t.elem, DType) or t.elem.is_vector:
        raise lw.syntax(f"Tensor[...] needs a dtype such as f32, got {t.elem!r}", arg, arg.arg)
    lw.need(t.elem, loc)
    lw.arrays[name] = ArrayState(t.elem, False, len_name=lw.unique(f"len_{name}"), tensor=True)
    lw.frame.env[arg.arg] = ArrayRef(name, t.elem, False, "global", None, tensor=True)
    return ("tensor", name)


def _scalar_param(lw: Lowering, arg: ast.arg, t: DType, name: str, loc: Loc) -> tuple[str, str]:
    """A scalar dtype; copied into a local when the kernel assigns the name."""
    if t.is_vector:
        raise lw.syntax(f"scalar parameters cannot be vectors ({t}); pass an Array of "
                        f"them or the lanes", arg, arg.arg)
    lw.need(t, loc)
    lw.scalars.append(ir.ScalarParam(name, t))
    var = ir.Var(name, t, loc, "param")
    if lw.frame.counts.get(arg.arg, 0):
        local = lw.declare(arg.arg + "_local", t, loc)
        lw.emit(ir.Assign(local, var, loc))
        var = ir.Var(local, t, loc)
    lw.frame.env[arg.arg] = var
    return ("scalar", name)
