"""Lowering of assignments: ``x = e``, ``x: T = e`` and ``x op= e`` to a name, a lane of a local
vector or an array element.

A name assigned once, outside runtime control flow, to a comptime value stays comptime (a plain
Python value); any other assigned name is a runtime local, declared at the top of the kernel with
the type of its first assignment (or its annotation), which later assignments must match. Arrays
and parameters cannot be reassigned.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from cubeplug.lang import access, infer, ir, vectors
from cubeplug.lang.errors import KernelSyntaxError, KernelTypeError, Loc
from cubeplug.lang.exprs import BINOPS, binop, subscript_target
from cubeplug.lang.infer import Val, is_expr
from cubeplug.lang.lowering import Lowering
from cubeplug.lang.params import pyeval
from cubeplug.lang.positions import upper_bound
from cubeplug.lang.scope import ArrayRef, describe
from cubeplug.lang.types import DType


def _assign_stmt(lw: Lowering, node: ast.Assign) -> None:
    if len(node.targets) != 1:
        raise lw.syntax("chained assignment `a = b = c` is not supported", node, "assignment")
    assign(lw, node.targets[0], node.value, node, None)


def _ann_assign(lw: Lowering, node: ast.AnnAssign) -> None:
    if node.value is None:
        raise lw.syntax("a declaration needs a value: `x: f32 = 0.0`", node, "annotation")
    ann = pyeval(lw, node.annotation)
    if not isinstance(ann, DType):
        raise lw.syntax(f"a local's annotation must be a dtype, got {ann!r}", node.annotation,
                        "annotation")
    assign(lw, node.target, node.value, node, ann)


def _aug_assign(lw: Lowering, node: ast.AugAssign) -> None:
    """``t op= e``: ``t = t op e``, with an array element's index evaluated once."""
    op = BINOPS.get(type(node.op))
    if op is None:
        raise lw.syntax("this augmented assignment is not supported", node)
    loc = lw.loc(node)
    if isinstance(node.target, ast.Name):
        cur = lw.expr(node.target)
        assign_name(lw, node.target.id, binop(op, cur, lw.expr(node.value), loc, f"{op}="),
                    loc, None)
    elif lane_target(lw, node.target) is not None:
        cur = lw.expr(node.target)
        assign_lane(lw, node.target, binop(op, cur, lw.expr(node.value), loc, f"{op}="), loc)
    elif isinstance(node.target, ast.Subscript):
        arr, idx, guard = subscript_target(lw, node.target)
        cur = access.load(lw, arr, idx, loc, guard)
        access.store(lw, arr, idx, binop(op, cur, lw.expr(node.value), loc, f"{op}="), loc, guard)
    else:
        raise lw.syntax(f"cannot assign to `{describe(node.target)}`", node.target)


def assign(lw: Lowering, target: ast.expr, value: ast.expr, node: ast.stmt, ann: DType | None) -> None:
    """``target = value`` (``ann``: the declared type of ``target: ann = value``)."""
    loc = lw.loc(node)
    if isinstance(target, ast.Name):
        # The name hint names a shared/local array after the variable it is assigned to.
        lw.name_hint = target.id
        v = lw.expr(value)
        lw.name_hint = ""
        assign_name(lw, target.id, v, loc, ann)
    elif lane_target(lw, target) is not None:
        assign_lane(lw, target, lw.expr(value), loc)
    elif element_lane(lw, target):
        assert isinstance(target, (ast.Attribute, ast.Subscript)) and isinstance(target.value, ast.Subscript)
        arr, idx, guard = subscript_target(lw, target.value)
        access.store_lane(lw, arr, idx, _lane_key(lw, target), lw.expr(value), loc, guard)
    elif isinstance(target, ast.Subscript):
        arr, idx, guard = subscript_target(lw, target)
        access.store(lw, arr, idx, lw.expr(value), loc, guard)
    elif isinstance(target, ast.Tuple):
        raise lw.syntax("tuple assignment is not supported; assign one name at a time", target, "tuple")
    else:
        raise lw.syntax(f"cannot assign to `{describe(target)}`", target)


def lane_target(lw: Lowering, target: ast.expr) -> ast.Name | None:
    """The local vector's name when ``target`` is one of its lanes (``v.x``, ``v[k]``)."""
    if isinstance(target, (ast.Attribute, ast.Subscript)) and isinstance(target.value, ast.Name):
        bound = lw.frame.env.get(target.value.id)
        if isinstance(bound, ir.Var) and bound.ty.is_vector:
            return target.value
    return None


def element_lane(lw: Lowering, target: ast.expr) -> bool:
    """True when ``target`` is a lane of a named array's element: ``a[i][k]`` or ``a[i].x``."""
    if isinstance(target, (ast.Attribute, ast.Subscript)) and isinstance(target.value, ast.Subscript):
        name = target.value.value
        return isinstance(name, ast.Name) and isinstance(lw.lookup(name.id, name), ArrayRef)
    return False


def _lane_key(lw: Lowering, target: ast.Attribute | ast.Subscript) -> Val:
    """The lane of ``a[i][k]`` (``k``: comptime or runtime) or ``a[i].x`` (a comptime number)."""
    if isinstance(target, ast.Subscript):
        return lw.expr(target.slice)
    lane = vectors.LANE_NAMES.find(target.attr) if len(target.attr) == 1 else -1
    if lane < 0:
        raise lw.syntax(f"a vector's lanes are {', '.join(vectors.LANE_NAMES)}, not .{target.attr}", target,
                        target.attr)
    return lane


def assign_lane(lw: Lowering, target: ast.expr, v: Val, loc: Loc) -> None:
    """``v.x = e`` / ``v[k] = e`` on a local vector: the local rebuilt with that lane replaced."""
    name = lane_target(lw, target)
    assert name is not None and isinstance(target, (ast.Attribute, ast.Subscript))
    var = lw.expr(name)
    if var.kind != "local":
        raise KernelSyntaxError(f"cannot assign a lane of {name.id!r}, which is a parameter", loc,
                                name.id, kernel=lw.name)
    key = target.attr if isinstance(target, ast.Attribute) else lw.expr(target.slice)
    lane = vectors.lane_of(var, key, loc)
    assign_name(lw, name.id, vectors.with_lane(var, lane, v, loc), loc, None)


def assign_name(lw: Lowering, name: str, v: Val, loc: Loc, ann: DType | None) -> None:
    """Bind or assign the name ``name``: an array alias, a comptime value, or a runtime local."""
    frame = lw.frame
    bound = frame.env.get(name)
    if isinstance(v, ArrayRef):
        if isinstance(bound, (ArrayRef, ir.Var)) and bound != v:
            raise KernelSyntaxError(f"{name!r} is already bound; arrays cannot be reassigned", loc,
                                    name, kernel=lw.name)
        frame.env[name] = v
        return
    is_local = isinstance(bound, ir.Var) and bound.kind == "local"
    if isinstance(bound, (ArrayRef,)) or (isinstance(bound, ir.Var) and bound.kind != "local"):
        raise KernelSyntaxError(f"cannot assign to {name!r}, which is an array or a parameter", loc,
                                name, kernel=lw.name)
    comptime_ok = frame.counts.get(name, 0) <= 1 and lw.runtime_depth == 0 and ann is None
    if not is_expr(v) and comptime_ok and not is_local:
        frame.env[name] = v
        return
    if is_local:
        assert isinstance(bound, ir.Var)
        ty = bound.ty
        e = infer.to_expr(v, loc, f"assignment to {name!r}", ty) if not is_expr(v) else v
        if e.ty != ty:
            raise KernelTypeError(
                f"{name!r} is {ty}; cannot assign a {e.ty} value (cast it with {ty}(...))",
                loc, name, kernel=lw.name,
            )
        ir_name = bound.name
    else:
        e = infer.to_expr(v, loc, f"assignment to {name!r}", ann) if not is_expr(v) else v
        if ann is not None and e.ty != ann:
            raise KernelTypeError(f"{name!r} is declared {ann} but assigned a {e.ty} value",
                                  loc, name, kernel=lw.name)
        ir_name = lw.declare(name + frame.suffix, e.ty, loc)
        frame.env[name] = ir.Var(ir_name, e.ty, loc)
    if is_local:
        # A local assigned again: an unrolled copy of its one assignment, or a @cl.func parameter
        # (which holds the argument first). Its earlier bound no longer holds: later uses check.
        lw.var_bounds.pop(ir_name, None)
    elif frame.counts.get(name, 0) == 1 and e.ty.kind == "u" and not e.ty.is_vector:
        # Declared and assigned only here (before, it holds 0): never above this value's bound,
        # which lets the bound-check analysis drop checks such as tile[ty * T + tx] with
        # ty = UNIT_POS_Y.
        top = upper_bound(e, lw.cube_dim, lw.var_bounds)
        if top is not None:
            lw.var_bounds[ir_name] = top
    lw.emit(ir.Assign(ir_name, e, loc))


#: The lowering of each assignment statement type.
STATEMENTS: dict[type[ast.stmt], Callable[[Lowering, Any], None]] = {
    ast.Assign: _assign_stmt,
    ast.AnnAssign: _ann_assign,
    ast.AugAssign: _aug_assign,
}
