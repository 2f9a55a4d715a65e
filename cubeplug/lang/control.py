"""Lowering of control flow: ``if``, ``while``, ``for``, ``break``, ``continue``, ``return`` and
``pass``.

An ``if`` on a comptime condition keeps only the branch taken; ``for i in cl.unroll(range(...))``
with comptime bounds is expanded at comptime (``i`` a comptime int in each copy of the body); ``for
i in range(...)`` is a runtime loop counting in the bounds' integer type. Statements under runtime
control flow make the names they assign runtime locals (``Lowering.runtime_depth``).
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Callable
from typing import Any

from cubeplug.lang import builtins as clb
from cubeplug.lang import infer, ir
from cubeplug.lang.assign import assign_name
from cubeplug.lang.calls import RESULT
from cubeplug.lang.errors import KernelTypeError, Loc
from cubeplug.lang.exprs import condition
from cubeplug.lang.infer import Val, is_expr, known
from cubeplug.lang.lowering import Lowering
from cubeplug.lang.types import i32, u32

#: The most loop bodies one ``unroll`` may expand to.
UNROLL_CAP = 1024


def _pass(lw: Lowering, node: ast.Pass) -> None:
    pass


def _if(lw: Lowering, node: ast.If) -> None:
    cond = lw.expr(node.test)
    k = known(cond)
    if k is not None:
        for s in node.body if k else node.orelse:
            lw.stmt(s)
        return
    c = condition(lw, cond, node.test)
    then = lw.block(node.body, True)
    orelse = lw.block(node.orelse, True)
    lw.emit(ir.If(c, then, orelse, lw.loc(node)))


def _while(lw: Lowering, node: ast.While) -> None:
    if node.orelse:
        raise lw.syntax("`while ... else` is not supported", node, "while-else")
    cond = lw.expr(node.test)
    if known(cond) is False:
        return
    c = condition(lw, cond, node.test)
    lw.loops.append("runtime")
    try:
        body = lw.block(node.body, True)
    finally:
        lw.loops.pop()
    lw.emit(ir.While(c, body, lw.loc(node)))


def _for(lw: Lowering, node: ast.For) -> None:
    if node.orelse:
        raise lw.syntax("`for ... else` is not supported", node, "for-else")
    if not isinstance(node.target, ast.Name):
        raise lw.syntax("the loop variable must be a single name", node.target, "for")
    it = node.iter
    fn = lw.expr(it.func) if isinstance(it, ast.Call) else None
    if fn is clb.unroll and isinstance(it, ast.Call):
        _unrolled(lw, node, it)
    elif fn is builtins.range and isinstance(it, ast.Call):
        _range_loop(lw, node, it)
    else:
        raise lw.syntax("only `for i in range(...)` and `for i in cl.unroll(range(...))` loops are "
                        "supported", it, "for")


def _range_args(lw: Lowering, call: ast.Call) -> list[Val]:
    """``range``'s arguments as [start, stop, step]."""
    if call.keywords or not 1 <= len(call.args) <= 3:
        raise lw.syntax("range() takes 1 to 3 positional arguments", call, "range")
    args = [lw.expr(a) for a in call.args]
    if len(args) == 1:
        args = [0, args[0], 1]
    elif len(args) == 2:
        args.append(1)
    return args


def _unrolled(lw: Lowering, node: ast.For, call: ast.Call) -> None:
    """``for i in unroll(range(...))``: the body lowered once per value of ``i``."""
    inner = call.args[0] if len(call.args) == 1 and not call.keywords else None
    if not (isinstance(inner, ast.Call) and lw.expr(inner.func) is builtins.range):
        raise lw.syntax("unroll() takes one range(...)", call, "unroll")
    args = _range_args(lw, inner)
    values = [known(a) for a in args]
    if any(not isinstance(v, int) or isinstance(v, bool) for v in values):
        raise lw.syntax("unroll(range(...)) needs comptime int bounds (literals, Comptime params, "
                        "CUBE_DIM); use a plain range() for runtime bounds", inner, "unroll")
    r = range(*values)
    if len(r) > UNROLL_CAP:
        raise lw.syntax(f"unroll of {len(r)} iterations exceeds the cap of {UNROLL_CAP}", call,
                        "unroll")
    target = node.target.id  # type: ignore[attr-defined]
    lw.loops.append("unroll")
    try:
        for v in r:
            lw.frame.env[target] = v
            for s in node.body:
                lw.stmt(s)
    finally:
        lw.loops.pop()


def _range_loop(lw: Lowering, node: ast.For, call: ast.Call) -> None:
    """``for i in range(...)``: a runtime loop; ``i`` may not be assigned in the body."""
    loc = lw.loc(node)
    start, stop, step = _range_args(lw, call)
    typed = [a for a in (start, stop, step) if is_expr(a)]
    ty = typed[0].ty if typed else u32 if all(int(v) >= 0 for v in (start, stop, step)) else i32
    if not ty.is_int or ty.is_vector:
        raise KernelTypeError(f"range() needs integer bounds, got {ty}", loc, "range", kernel=lw.name)
    es = [infer.to_expr(a, loc, "range", ty) for a in (start, stop, step)]
    if known(es[2]) == 0:
        raise lw.syntax("range() step must not be zero", call, "range")
    name = node.target.id  # type: ignore[attr-defined]
    for sub in ast.walk(ast.Module(body=node.body, type_ignores=[])):
        targets = sub.targets if isinstance(sub, ast.Assign) else (
            [sub.target] if isinstance(sub, (ast.AugAssign, ast.AnnAssign)) else [])
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            raise lw.syntax(f"the loop variable {name!r} is assigned in the loop body", sub, name)
    bound = lw.frame.env.get(name)
    if isinstance(bound, ir.Var) and bound.kind == "local":
        if bound.ty != ty:
            raise KernelTypeError(f"{name!r} is {bound.ty}; this loop counts in {ty}", loc, name,
                                  kernel=lw.name)
        var = bound.name
    else:
        var = lw.declare(name + lw.frame.suffix, ty, loc)
        lw.frame.env[name] = ir.Var(var, ty, loc)
    # range() evaluates its stop and step once, where a C or WGSL ``for`` re-reads them at every
    # pass: one the body could change (a local, or a load from memory the body stores to) is
    # copied into a temporary before the loop. The stop is copied unless it is a constant or a
    # parameter (an expression is computed once so); a step made of constants, parameters and
    # builtins (the grid strides) cannot change and stays inline, as the compilers hoist it.
    stop_e, step_e = es[1], es[2]
    if not (isinstance(stop_e, ir.Const) or (isinstance(stop_e, ir.Var) and stop_e.kind != "local")):
        stop_e = _copied(lw, stop_e, f"{var}_end", loc)
    if not _invariant(step_e):
        step_e = _copied(lw, step_e, f"{var}_step", loc)
    # In the body, the variable of a loop with constant bounds and step is below its stop (it is
    # not assigned there, and a nested loop over the same name would change it: then no bound).
    top = _last_value(es)
    rebound = any(isinstance(sub, ast.For) and isinstance(sub.target, ast.Name) and sub.target.id == name
                  for sub in ast.walk(ast.Module(body=node.body, type_ignores=[])))
    if top is not None and not rebound:
        lw.var_bounds[var] = top
    lw.loops.append("runtime")
    try:
        body = lw.block(node.body, True)
    finally:
        lw.loops.pop()
        lw.var_bounds.pop(var, None)
    lw.emit(ir.RangeFor(var, es[0], stop_e, step_e, body, loc))


def _copied(lw: Lowering, e: ir.Expr, name: str, loc: Loc) -> ir.Var:
    """A new local ``name`` assigned ``e`` here, as the expression to use in its place."""
    tmp = lw.declare(name, e.ty, loc)
    lw.emit(ir.Assign(tmp, e, loc))
    return ir.Var(tmp, e.ty, loc)


def _invariant(e: ir.Expr) -> bool:
    """True for an expression no statement can change: constants, parameters and builtins, and
    arithmetic of them."""
    if isinstance(e, (ir.Const, ir.Builtin)):
        return True
    if isinstance(e, ir.Var):
        return e.kind != "local"
    if isinstance(e, ir.BinOp):
        return _invariant(e.a) and _invariant(e.b)
    if isinstance(e, (ir.UnOp, ir.Cast)):
        return _invariant(e.a)
    return False


def _last_value(es: list[ir.Expr]) -> int | None:
    """The largest value the variable of ``range(start, stop, step)`` takes in the body, for
    constant unsigned bounds and a positive step (None otherwise, or for an empty range)."""
    start, stop, step = (e.value if isinstance(e, ir.Const) and e.ty.kind == "u" else None for e in es)
    if start is None or stop is None or step is None or step <= 0 or stop <= start:
        return None
    return int(start) + (int(stop) - 1 - int(start)) // int(step) * int(step)


def _break(lw: Lowering, node: ast.Break) -> None:
    _loop_exit(lw, node, "break")
    lw.emit(ir.Break(lw.loc(node)))


def _continue(lw: Lowering, node: ast.Continue) -> None:
    _loop_exit(lw, node, "continue")
    lw.emit(ir.Continue(lw.loc(node)))


def _loop_exit(lw: Lowering, node: ast.stmt, what: str) -> None:
    """``break``/``continue`` need a runtime loop: an unrolled one has no loop left to exit."""
    if not lw.loops:
        raise lw.syntax(f"`{what}` outside a loop", node, what)
    if lw.loops[-1] == "unroll":
        raise lw.syntax(f"`{what}` in an unrolled loop is not supported", node, what)


def _return(lw: Lowering, node: ast.Return) -> None:
    if lw.frame.returns:  # a helper's hoisted return: it ends its branch
        if node.value is not None:
            assign_name(lw, RESULT, lw.expr(node.value), lw.loc(node), None)
        return
    if lw.frame.is_func:
        raise lw.syntax("a @cl.func may only `return` as its last statement", node, "return")
    if node.value is not None:
        raise lw.syntax("kernels return nothing; write results into an array", node, "return")
    lw.emit(ir.Return(lw.loc(node)))


#: The lowering of each control-flow statement type.
STATEMENTS: dict[type[ast.stmt], Callable[[Lowering, Any], None]] = {
    ast.Pass: _pass,
    ast.If: _if,
    ast.While: _while,
    ast.For: _for,
    ast.Break: _break,
    ast.Continue: _continue,
    ast.Return: _return,
}
