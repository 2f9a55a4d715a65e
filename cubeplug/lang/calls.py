"""Lowering of calls: ``sync_cube()``, ``shared``/``local`` declarations, atomics, casts, ``len``,
math builtins, and the inlining of ``@cl.func`` helpers (each call gets its own frame of names);
also the statement that is a call (its value unused)."""

from __future__ import annotations

import ast
import builtins
import math as pymath

from cubeplug.lang import access, infer, ir, returns, vectors
from cubeplug.lang import builtins as clb
from cubeplug.lang.errors import KernelTypeError, Loc
from cubeplug.lang.func import LangFunc
from cubeplug.lang.infer import Val, is_expr, known
from cubeplug.lang.lowering import Lowering
from cubeplug.lang.scope import ArrayRef, Frame, assign_counts, hashable
from cubeplug.lang.types import DType, bool_, f32, i32, u32

_PY_MATH = {
    builtins.abs: "abs", builtins.min: "min", builtins.max: "max", pymath.sqrt: "sqrt",
    pymath.exp: "exp", pymath.log: "log", pymath.sin: "sin", pymath.cos: "cos",
    pymath.tanh: "tanh", pymath.floor: "floor", pymath.ceil: "ceil", pymath.pow: "pow",
}


def call_statement(lw: Lowering, node: ast.Expr) -> None:
    """An expression statement: a call whose value is unused, or a docstring (skipped)."""
    if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
        return  # a docstring
    if not isinstance(node.value, ast.Call):
        raise lw.syntax("an expression statement that is not a call has no effect", node, "expression")
    lower_call(lw, node.value, statement=True)


def lower_call(lw: Lowering, node: ast.Call, statement: bool) -> Val:
    """A call; ``statement`` when its value is unused (``sync_cube()`` must be one)."""
    loc = lw.loc(node)
    fn = lw.expr(node.func)
    if node.keywords:
        raise lw.syntax("keyword arguments are not supported in kernel calls", node, "call")
    if any(isinstance(a, ast.Starred) for a in node.args):
        raise lw.syntax("*args in calls is not supported", node, "call")
    name = str(getattr(fn, "name", None) or getattr(fn, "__name__", "?"))
    if fn is clb.sync_cube:
        if not statement:
            raise lw.syntax("sync_cube() is a statement, not a value", node, "sync_cube")
        if node.args:
            raise lw.syntax("sync_cube() takes no arguments", node, "sync_cube")
        lw.emit(ir.Barrier(loc))
        return None
    if fn is clb.shared or fn is clb.local:
        return array_decl(lw, node, "shared" if fn is clb.shared else "local")
    if isinstance(fn, clb.Intrinsic) and fn.name in clb.ATOMICS:
        return atomic(lw, fn.name, node, statement)
    if isinstance(fn, LangFunc):
        return inline(lw, fn, node)
    args = [lw.expr(a) for a in node.args]
    if isinstance(fn, DType) and fn.is_vector:
        return vectors.construct(fn, args, loc)
    if isinstance(fn, DType):
        if len(args) != 1:
            raise lw.syntax(f"{fn}() takes one argument", node, str(fn))
        lw.need(fn, loc)
        return infer.cast(args[0], fn, loc, f"{fn}()")
    if fn in (builtins.float, builtins.int, builtins.bool) and len(args) == 1:
        if not is_expr(args[0]):
            return fn(args[0])
        ty = {builtins.float: f32, builtins.int: i32, builtins.bool: bool_}[fn]
        return infer.cast(args[0], ty, loc, f"{name}()")
    if fn is builtins.len:
        return length(lw, args, node)
    if fn is builtins.any or fn is builtins.all:
        return mask_reduce(lw, name, args, node)
    math = _PY_MATH.get(fn) if hashable(fn) else None
    if math is None and isinstance(fn, clb.Intrinsic) and fn.name in clb.MATH:
        math = fn.name
    if math is not None:
        nargs, float_only = clb.MATH[math]
        if math in ("min", "max") and len(args) > 2:
            acc = args[0]
            for a in args[1:]:
                acc = math_call(math, [acc, a], float_only, loc, f"{math}()")
            return acc
        if len(args) != nargs:
            raise lw.syntax(f"{math}() takes {nargs} argument(s), got {len(args)}", node, math)
        return math_call(math, args, float_only, loc, f"{math}()")
    if fn is builtins.range or fn is clb.unroll:
        raise lw.syntax(f"{name}() can only be the iterable of a for loop", node, name)
    raise lw.syntax(
        f"cannot call {name!r} in a kernel: only builtins of cubeplug.lang, dtype casts and "
        f"@cl.func helpers can be called", node, "call",
    )


def math_call(fn: str, args: list[Val], float_only: bool, loc: Loc, construct: str) -> Val:
    """A math builtin: lane by lane when an argument is a vector."""
    if any(vectors.is_vec(a) for a in args):
        return vectors.math(fn, args, float_only, loc, construct)
    return infer.math_call(fn, args, float_only, loc, construct)


def mask_reduce(lw: Lowering, name: str, args: list[Val], node: ast.Call) -> Val:
    """``any(mask)`` / ``all(mask)`` of a bool vector (a bool scalar is itself)."""
    loc = lw.loc(node)
    if len(args) != 1 or not is_expr(args[0]) or args[0].ty.kind != "b":
        raise KernelTypeError(f"{name}() takes one bool vector (a comparison of vectors)", loc, name,
                              kernel=lw.name)
    v = args[0]
    if not v.ty.is_vector:
        return v
    if not isinstance(v, ir.Var):  # evaluated once, then its lanes are read
        tmp = lw.declare("t_mask", v.ty, loc)
        lw.emit(ir.Assign(tmp, v, loc))
        v = ir.Var(tmp, v.ty, loc)
    return vectors.reduce(name, v, loc)


def length(lw: Lowering, args: list[Val], node: ast.Call) -> Val:
    """``len(a)``: the hidden length of a global array, the size of a shared/local one."""
    if len(args) != 1 or not isinstance(args[0], ArrayRef):
        raise lw.syntax("len() takes one array", node, "len")
    arr = args[0]
    if arr.size is not None:
        return ir.Const(arr.size, u32, lw.loc(node))
    st = lw.arrays[arr.name]
    st.len_used = True
    return ir.Var(st.len_name, u32, lw.loc(node), "len")


def array_decl(lw: Lowering, node: ast.Call, space: str) -> ArrayRef:
    """``shared(T, N)`` / ``local(T, N)``: a declaration at the top of the kernel."""
    loc = lw.loc(node)
    if len(node.args) != 2:
        raise lw.syntax(f"{space}(T, N) takes a dtype and a comptime size", node, space)
    ty = lw.expr(node.args[0])
    size = known(lw.expr(node.args[1]))
    if not isinstance(ty, DType):
        raise lw.syntax(f"{space}(T, N): T must be a dtype, got {ty!r}", node.args[0], space)
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise lw.syntax(f"{space}(T, N): N must be a positive comptime int", node.args[1], space)
    lw.need(ty, loc)
    name = lw.unique((lw.name_hint or space) + lw.frame.suffix)
    lw.decls.append(ir.ArrayDecl(name, ty, size, space, loc))
    return ArrayRef(name, ty, False, space, size)


def atomic(lw: Lowering, op: str, node: ast.Call, statement: bool) -> Val:
    """An atomic statement; its old value in a fresh local unless the call is a statement."""
    loc = lw.loc(node)
    nvals = clb.ATOMICS[op]
    if len(node.args) != 2 + nvals:
        raise lw.syntax(f"{op}(array, index{', value' * nvals}) takes {2 + nvals} arguments", node, op)
    arr = lw.expr(node.args[0])
    if not isinstance(arr, ArrayRef) or not arr.atomic:
        raise KernelTypeError(f"{op}() needs an Array[Atomic[i32|u32|f32]] parameter", loc, op,
                              kernel=lw.name)
    idx = access.index(lw, node.args[1])
    vals = tuple(infer.to_expr(lw.expr(a), loc, op, arr.elem) for a in node.args[2:])
    if arr.elem.is_float and op == "atomic_sub":
        # f32 atomics work on the bits of a u32 word (dialects: a compare-and-swap loop where the
        # API has no native op); sub adds -v.
        op, vals = "atomic_add", (infer.unop("-", vals[0], loc, op),)
    out = None if statement else lw.declare("old", arr.elem, loc)
    lw.emit(ir.Atomic(op[len("atomic_"):], arr.name, idx, vals, out, arr.elem, loc,
                      access.touch(lw, arr, idx, True)))
    return None if out is None else ir.Var(out, arr.elem, loc)


def inline(lw: Lowering, fn: LangFunc, node: ast.Call) -> Val:
    """A ``@cl.func`` call inlined: arguments bound in a new frame, the body lowered in place."""
    loc = lw.loc(node)
    if any(f.captured.fn is fn.fn for f in lw.frames):
        raise lw.syntax(f"@cl.func {fn.__qualname__} calls itself; recursion is not supported", node,
                        "call")
    args = [lw.expr(a) for a in node.args]
    captured = fn.captured
    tree = captured.tree
    params = tree.args.args
    if len(params) != len(args) or tree.args.vararg or tree.args.kwonlyargs:
        raise lw.syntax(
            f"{fn.__qualname__}() takes {len(params)} positional arguments, got {len(args)}", node, "call"
        )
    lw.inline_count += 1
    frame = Frame(captured, {}, assign_counts(tree), f"_{tree.name}{lw.inline_count}", True)
    for p, a in zip(params, args):
        if (is_expr(a) and not isinstance(a, (ir.Const, ir.Var))) or (
            isinstance(a, ir.Var) and frame.counts.get(p.arg, 0)
        ):
            tmp = lw.declare(p.arg + frame.suffix, a.ty, loc)
            lw.emit(ir.Assign(tmp, a, loc))
            a = ir.Var(tmp, a.ty, loc)
        frame.env[p.arg] = a
    body = list(tree.body)
    result: Val = None
    if returns.early(body):
        return inline_branches(lw, frame, body)
    last = body[-1] if body else None
    lw.frames.append(frame)
    saved_loops, lw.loops = lw.loops, []
    try:
        for s in body[:-1] if isinstance(last, ast.Return) else body:
            lw.stmt(s)
        if isinstance(last, ast.Return) and last.value is not None:
            result = lw.expr(last.value)
            if is_expr(result) and ir.reads_memory(result):
                tmp = lw.declare(f"ret{frame.suffix}", result.ty, loc)
                lw.emit(ir.Assign(tmp, result, loc))
                result = ir.Var(tmp, result.ty, loc)
    finally:
        lw.frames.pop()
        lw.loops = saved_loops
    return result


#: The name (in a helper's frame) of the result local of a helper with early returns.
RESULT = "cl__result"


def inline_branches(lw: Lowering, frame: Frame, body: list[ast.stmt]) -> Val:
    """A helper whose ``return`` is not only its last statement: the body hoisted (``returns.py``)
    so that each ``return e`` ends a branch and assigns the result local."""
    bad = returns.in_loop(body)
    if bad is not None:
        raise lw.syntax("a @cl.func may not `return` inside a loop; set a result and `break`", bad,
                        "return")
    frame.counts[RESULT] = 2  # a runtime local, even when one return is at the top level
    frame.returns = True
    lw.frames.append(frame)
    saved_loops, lw.loops = lw.loops, []
    try:
        for s in returns.hoist(body):
            lw.stmt(s)
        return frame.env.get(RESULT)
    finally:
        lw.frames.pop()
        lw.loops = saved_loops
