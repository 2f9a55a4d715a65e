"""Lowering of expressions: constants, names, attributes, subscripts, operators, comparisons,
``and``/``or``, conditional expressions and calls.

An expression lowers to a comptime value (a plain Python value, folded) or to an IR expression
(typed by :mod:`.infer`, or :mod:`.vectors` for vector operands). ``and``/``or`` and ``a if c else
b`` whose operands emit statements (an inlined helper, an atomic) become an ``if`` on a temporary,
so that the operand not taken is not evaluated.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from cubeplug.lang import access, infer, ir, tensors, vectors
from cubeplug.lang.calls import lower_call
from cubeplug.lang.errors import KernelTypeError, Loc
from cubeplug.lang.infer import Val, is_expr, known
from cubeplug.lang.lowering import Lowering
from cubeplug.lang.scope import ArrayRef
from cubeplug.lang.types import bool_

#: The binary operators kernels support (also those of augmented assignments), by AST type.
BINOPS = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
    ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>", ast.BitAnd: "&", ast.BitOr: "|",
    ast.BitXor: "^",
}
_CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Eq: "==", ast.NotEq: "!=", ast.Gt: ">", ast.GtE: ">="}
_UNOPS = {ast.USub: "-", ast.UAdd: "+", ast.Not: "not", ast.Invert: "~"}


def binop(op: str, a: Val, b: Val, loc: Loc, construct: str) -> Val:
    """``a op b``: the vector rules when a side is a vector, else the scalar ones."""
    if vectors.is_vec(a) or vectors.is_vec(b):
        return vectors.binop(op, a, b, loc, construct)
    return infer.binop(op, a, b, loc, construct)


def condition(lw: Lowering, v: Val, node: ast.AST) -> ir.Expr:
    """``v`` as the condition of a runtime branch or loop: it must be a bool."""
    e = infer.to_expr(v, lw.loc(node), "condition")
    if e.ty.is_vector:
        raise KernelTypeError(f"a condition must be bool, got a {e.ty} vector; use any(mask) or all(mask)",
                              lw.loc(node), "condition", kernel=lw.name)
    if e.ty != bool_:
        raise KernelTypeError(f"a condition must be bool, got {e.ty}; compare it, e.g. x != 0",
                              lw.loc(node), "condition", kernel=lw.name)
    return e


def element(lw: Lowering, arr: ArrayRef, node: ast.expr) -> tuple[ir.Expr, ir.Expr | None]:
    """The flat index of ``arr[node]`` and, for a checked tensor access, its shape guard."""
    if arr.tensor:
        return tensors.index(lw, arr, node)
    return access.index(lw, node), None


def subscript_target(lw: Lowering, node: ast.Subscript) -> tuple[ArrayRef, ir.Expr, ir.Expr | None]:
    """The array, flat index and shape guard of an assigned ``a[i]``."""
    arr = lw.expr(node.value)
    if not isinstance(arr, ArrayRef):
        raise lw.syntax("only arrays can be indexed and assigned", node, "subscript")
    return (arr, *element(lw, arr, node.slice))


def _constant(lw: Lowering, node: ast.Constant) -> Val:
    if isinstance(node.value, (bool, int, float)):
        return node.value
    raise lw.syntax(f"{type(node.value).__name__} constants are not supported in kernels", node)


def _name(lw: Lowering, node: ast.Name) -> Val:
    return lw.lookup(node.id, node)


def _attribute(lw: Lowering, node: ast.Attribute) -> Val:
    base = lw.expr(node.value)
    if isinstance(base, ArrayRef):
        return tensors.attribute(lw, base, node)
    if vectors.is_vec(base):
        return vectors.get(base, vectors.lane_of(base, node.attr, lw.loc(node)), lw.loc(node))
    if is_expr(base):
        raise lw.syntax(f"attribute {node.attr!r} of a kernel value is not supported", node, node.attr)
    if not hasattr(base, node.attr):
        raise lw.syntax(f"{getattr(base, '__name__', base)!r} has no attribute {node.attr!r}", node,
                        node.attr)
    return getattr(base, node.attr)


def _tuple(lw: Lowering, node: ast.Tuple) -> Val:
    vals = tuple(lw.expr(e) for e in node.elts)
    if any(is_expr(v) for v in vals):
        raise lw.syntax("tuples of runtime values are not supported", node, "tuple")
    return vals


def _subscript(lw: Lowering, node: ast.Subscript) -> Val:
    base = lw.expr(node.value)
    if isinstance(base, ArrayRef):
        idx, guard = element(lw, base, node.slice)
        return access.load(lw, base, idx, lw.loc(node), guard)
    if isinstance(base, tensors.TensorMeta):
        return tensors.meta_index(lw, base, node)
    if vectors.is_vec(base):
        key = lw.expr(node.slice)
        if is_expr(key):
            raise lw.syntax("a vector lane index must be a comptime int", node, "lane")
        return vectors.get(base, vectors.lane_of(base, key, lw.loc(node)), lw.loc(node))
    if isinstance(base, type) and hasattr(base, "__class_getitem__"):  # cl.Vec[f32, 4]
        try:
            return base[lw.expr(node.slice)]  # type: ignore[index]
        except TypeError as e:
            raise lw.syntax(str(e), node) from e
    if isinstance(base, (tuple, list)):
        i = lw.expr(node.slice)
        if not isinstance(i, int):
            raise lw.syntax("a comptime tuple needs a comptime index", node, "subscript")
        return base[i]
    raise lw.syntax("only arrays (and comptime tuples) can be indexed", node, "subscript")


def _bin_op(lw: Lowering, node: ast.BinOp) -> Val:
    op = BINOPS.get(type(node.op))
    if op is None:
        raise lw.syntax(f"the operator `{type(node.op).__name__}` is not supported", node)
    return binop(op, lw.expr(node.left), lw.expr(node.right), lw.loc(node), op)


def _unary_op(lw: Lowering, node: ast.UnaryOp) -> Val:
    return infer.unop(_UNOPS[type(node.op)], lw.expr(node.operand), lw.loc(node), "unary operator")


def _compare(lw: Lowering, node: ast.Compare) -> Val:
    """``a < b < c`` is ``a < b and b < c``."""
    loc = lw.loc(node)
    left = lw.expr(node.left)
    result: Val = None
    for op_node, right_node in zip(node.ops, node.comparators):
        op = _CMPOPS.get(type(op_node))
        if op is None:
            raise lw.syntax(f"the comparison `{type(op_node).__name__}` is not supported", node)
        right = lw.expr(right_node)
        cmp = binop(op, left, right, loc, op)
        result = cmp if result is None else infer.binop("and", result, cmp, loc, "comparison")
        left = right
    return result


def _bool_op(lw: Lowering, node: ast.BoolOp) -> Val:
    """``and``/``or``, short-circuiting: a comptime operand decides at comptime."""
    op = "and" if isinstance(node.op, ast.And) else "or"
    loc = lw.loc(node)
    acc = lw.expr(node.values[0])
    for sub in node.values[1:]:
        k = known(acc)
        if k is not None:
            if (op == "and" and not k) or (op == "or" and k):
                return acc
            acc = lw.expr(sub)
            continue
        lw.out.append([])
        right = lw.expr(sub)
        stmts = lw.out.pop()
        if not stmts:
            acc = infer.binop(op, acc, right, loc, op)
            continue
        # The right side emitted statements: evaluate it only when needed.
        tmp = lw.declare("t_" + op, bool_, loc)
        lw.emit(ir.Assign(tmp, condition(lw, acc, node), loc))
        var = ir.Var(tmp, bool_, loc)
        test = var if op == "and" else ir.UnOp("not", var, bool_, loc)
        then = ir.Block((*stmts, ir.Assign(tmp, condition(lw, right, sub), loc)))
        lw.emit(ir.If(test, then, ir.Block(()), loc))
        acc = var
    return acc


def _if_exp(lw: Lowering, node: ast.IfExp) -> Val:
    """``a if c else b``: folded on a comptime ``c``, a select when neither side has effects."""
    loc = lw.loc(node)
    cond = lw.expr(node.test)
    k = known(cond)
    if k is not None:
        return lw.expr(node.body if k else node.orelse)
    if vectors.is_vec(cond):  # per lane: both sides run (their statements too), then a select
        return vectors.select(cond, lw.expr(node.body), lw.expr(node.orelse), loc)
    c = condition(lw, cond, node.test)
    lw.out.append([])
    a = lw.expr(node.body)
    sa = lw.out.pop()
    lw.out.append([])
    b = lw.expr(node.orelse)
    sb = lw.out.pop()
    ea, eb = infer.unify(a, b, loc, "conditional expression")
    if not sa and not sb and not ir.reads_memory(ea) and not ir.reads_memory(eb):
        return ir.Select(c, ea, eb, ea.ty, loc)
    tmp = lw.declare("t_sel", ea.ty, loc)
    lw.emit(ir.If(c, ir.Block((*sa, ir.Assign(tmp, ea, loc))), ir.Block((*sb, ir.Assign(tmp, eb, loc))),
                  loc))
    return ir.Var(tmp, ea.ty, loc)


def _call(lw: Lowering, node: ast.Call) -> Val:
    return lower_call(lw, node, statement=False)


#: The lowering of each supported expression type; any other is a KernelSyntaxError.
EXPRESSIONS: dict[type[ast.expr], Callable[[Lowering, Any], Val]] = {
    ast.Constant: _constant,
    ast.Name: _name,
    ast.Attribute: _attribute,
    ast.Tuple: _tuple,
    ast.Subscript: _subscript,
    ast.BinOp: _bin_op,
    ast.UnaryOp: _unary_op,
    ast.Compare: _compare,
    ast.BoolOp: _bool_op,
    ast.IfExp: _if_exp,
    ast.Call: _call,
}
