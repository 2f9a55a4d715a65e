"""Lowering: a kernel's Python AST to the IR, with comptime folding, typing and ``@cl.func`` inlining.

A whitelist visitor: every AST node it does not know raises a :class:`KernelSyntaxError` naming the
construct and its file:line:col. Comptime values (``Comptime`` params, literals, module constants,
``CUBE_DIM``) are plain Python values while lowering, so branches on them are folded and
``unroll(range(N))`` is expanded. A name assigned once, outside runtime control flow, to a comptime
value stays comptime; any other assigned name is a runtime local, declared at the top of the kernel
with the type of its first assignment.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
from typing import Any

from cubeplug.lang import builtins as clb
from cubeplug.lang import infer, ir, tensors, vectors
from cubeplug.lang.calls import lower_call
from cubeplug.lang.errors import KernelSyntaxError, KernelTypeError, Loc
from cubeplug.lang.infer import Val, is_expr, known
from cubeplug.lang.names import RESERVED
from cubeplug.lang.positions import position, upper_bound
from cubeplug.lang.scope import (
    ArrayRef,
    ArrayState,
    Frame,
    Lowered,
    assign_counts,
    describe,
    is_comptime_ann,
)
from cubeplug.lang.source import Captured
from cubeplug.lang.types import (
    CORE_TYPES,
    ArrayType,
    AtomicType,
    ComptimeType,
    DType,
    TensorType,
    bool_,
    i32,
    u32,
)

#: The most loop bodies one ``unroll`` may expand to.
UNROLL_CAP = 1024
_BINOPS = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
    ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>", ast.BitAnd: "&", ast.BitOr: "|",
    ast.BitXor: "^",
}
_CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Eq: "==", ast.NotEq: "!=", ast.Gt: ">", ast.GtE: ">="}
_UNOPS = {ast.USub: "-", ast.UAdd: "+", ast.Not: "not", ast.Invert: "~"}


class Lowerer:
    """Lowers one kernel for one specialization (comptime values, cube dim, mode, device dtypes)."""

    def __init__(
        self,
        captured: Captured,
        name: str,
        comptime: dict[str, Any],
        cube_dim: tuple[int, int, int],
        checked: bool,
        dtypes: frozenset[str] | None,
    ) -> None:
        self.name = name
        self.comptime = comptime
        self.cube_dim = cube_dim
        self.checked = checked
        self.dtypes = dtypes
        self.locals: dict[str, DType] = {}
        self.decls: list[ir.ArrayDecl] = []
        self.arrays: dict[str, ArrayState] = {}
        self.scalars: list[ir.ScalarParam] = []
        self.hidden: list[ir.HiddenParam] = []
        self.used: set[str] = set(RESERVED)
        self.out: list[list[ir.Stmt]] = [[]]
        self.loops: list[str] = []
        self.runtime_depth = 0
        self.inline_count = 0
        self.name_hint = ""
        self.frames = [Frame(captured, {}, assign_counts(captured.tree), "", False)]

    # ----------------------------------------------------------------------------- helpers
    @property
    def frame(self) -> Frame:
        return self.frames[-1]

    def loc(self, node: ast.AST) -> Loc:
        return self.frame.captured.smap.loc(node)

    def syntax(self, message: str, node: ast.AST, construct: str = "") -> KernelSyntaxError:
        return KernelSyntaxError(message, self.loc(node), construct or describe(node), kernel=self.name)

    def unique(self, base: str) -> str:
        name = base if base.isidentifier() and not base.startswith("__") else "v_" + base.strip("_")
        n = 1
        candidate = name
        while candidate in self.used or candidate.lower() in self.used:
            n += 1
            candidate = f"{name}_{n}"
        self.used.add(candidate)
        return candidate

    def need(self, ty: DType, loc: Loc) -> None:
        """KernelTypeError when the device lacks ``ty``."""
        ty = ty.scalar
        if self.dtypes is not None and ty.name not in CORE_TYPES and ty.name not in self.dtypes:
            raise KernelTypeError(
                f"{ty} is not supported by this device (it supports {', '.join(sorted(self.dtypes))})",
                loc, str(ty), kernel=self.name,
            )

    def declare(self, base: str, ty: DType, loc: Loc) -> str:
        self.need(ty, loc)
        name = self.unique(base)
        self.locals[name] = ty
        return name

    def emit(self, stmt: ir.Stmt) -> None:
        self.out[-1].append(stmt)

    def block(self, body: list[ast.stmt], runtime: bool) -> ir.Block:
        self.out.append([])
        self.runtime_depth += int(runtime)
        try:
            for s in body:
                self.stmt(s)
        finally:
            self.runtime_depth -= int(runtime)
        return ir.Block(tuple(self.out.pop()))

    def binop(self, op: str, a: Val, b: Val, loc: Loc, construct: str) -> Val:
        """``a op b``: the vector rules when a side is a vector, else the scalar ones."""
        if vectors.is_vec(a) or vectors.is_vec(b):
            return vectors.binop(op, a, b, loc, construct)
        return infer.binop(op, a, b, loc, construct)

    # ---------------------------------------------------------------------------- params
    def pyeval(self, node: ast.expr) -> Any:
        """A Python-level value (annotations): names, attributes, subscripts, strings."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return self.pyeval(ast.parse(node.value, mode="eval").body)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self.lookup(node.id, node)
        if isinstance(node, ast.Attribute):
            base = self.pyeval(node.value)
            if not hasattr(base, node.attr):
                raise self.syntax(f"{base!r} has no attribute {node.attr!r}", node, node.attr)
            return getattr(base, node.attr)
        if isinstance(node, ast.Subscript):
            base = self.pyeval(node.value)
            try:
                return base[self.pyeval(node.slice)]
            except (TypeError, KeyError, IndexError) as e:
                raise self.syntax(str(e), node) from e
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return (self.pyeval(node.left), self.pyeval(node.right))
        if isinstance(node, ast.Tuple):
            return tuple(self.pyeval(e) for e in node.elts)
        raise self.syntax("this annotation is not understood", node)

    def params(self, fn: ast.FunctionDef) -> tuple[tuple[str, str], ...]:
        a = fn.args
        if a.posonlyargs or a.vararg or a.kwarg or a.kwonlyargs or a.defaults:
            raise self.syntax("kernel parameters must be plain (no defaults, *args, **kwargs)", fn, "def")
        anns: list[tuple[ast.arg, Any]] = []
        for arg in a.args:
            if arg.annotation is None:
                raise self.syntax(
                    f"parameter {arg.arg!r} needs an annotation: Array[T], a dtype like f32, or "
                    "Comptime[...]",
                    arg, arg.arg,
                )
            # Comptime params first, so later annotations may name a comptime dtype.
            ann = self.pyeval(arg.annotation) if is_comptime_ann(arg.annotation) else None
            if isinstance(ann, ComptimeType):
                if arg.arg not in self.comptime:
                    raise KernelTypeError(
                        f"comptime parameter {arg.arg!r} needs a value: pass {arg.arg}=... at launch",
                        self.loc(arg), arg.arg, kernel=self.name,
                    )
                self.frame.env[arg.arg] = self.comptime[arg.arg]
            anns.append((arg, ann))
        unknown = set(self.comptime) - {arg.arg for arg, ann in anns if isinstance(ann, ComptimeType)}
        if unknown:
            raise KernelTypeError(
                f"unknown comptime argument(s) {sorted(unknown)} at launch",
                self.loc(fn), "launch", kernel=self.name,
            )
        sig: list[tuple[str, str]] = []
        for arg, ann in anns:
            if isinstance(ann, ComptimeType):
                continue
            t = self.pyeval(arg.annotation)  # type: ignore[arg-type]
            loc = self.loc(arg)
            name = self.unique(arg.arg)
            if isinstance(t, ArrayType):
                elem = t.elem
                if isinstance(elem, AtomicType):
                    elem, atomic = elem.elem, True
                else:
                    atomic = t.atomic
                if not isinstance(elem, DType):
                    raise self.syntax(f"Array[...] needs a dtype such as f32, got {elem!r}", arg, arg.arg)
                if atomic and elem.name not in ("i32", "u32", "f32"):
                    raise KernelTypeError("atomic arrays must be i32, u32 or f32", loc, arg.arg,
                                          kernel=self.name)
                self.need(elem, loc)
                self.arrays[name] = ArrayState(elem, atomic, len_name=self.unique(f"len_{name}"))
                self.frame.env[arg.arg] = ArrayRef(name, elem, atomic, "global", None)
                sig.append(("array", name))
            elif isinstance(t, TensorType):
                if not isinstance(t.elem, DType) or t.elem.is_vector:
                    raise self.syntax(f"Tensor[...] needs a dtype such as f32, got {t.elem!r}", arg, arg.arg)
                self.need(t.elem, loc)
                self.arrays[name] = ArrayState(t.elem, False, len_name=self.unique(f"len_{name}"),
                                               tensor=True)
                self.frame.env[arg.arg] = ArrayRef(name, t.elem, False, "global", None, tensor=True)
                sig.append(("tensor", name))
            elif isinstance(t, DType):
                if t.is_vector:
                    raise self.syntax(f"scalar parameters cannot be vectors ({t}); pass an Array of "
                                      f"them or the lanes", arg, arg.arg)
                self.need(t, loc)
                self.scalars.append(ir.ScalarParam(name, t))
                var = ir.Var(name, t, loc, "param")
                if self.frame.counts.get(arg.arg, 0):
                    local = self.declare(arg.arg + "_local", t, loc)
                    self.emit(ir.Assign(local, var, loc))
                    var = ir.Var(local, t, loc)
                self.frame.env[arg.arg] = var
                sig.append(("scalar", name))
            else:
                raise self.syntax(
                    f"parameter {arg.arg!r}: {t!r} is not a kernel type; use Array[T], Tensor[T], a "
                    "dtype or Comptime[...]",
                    arg, arg.arg,
                )
        return tuple(sig)

    # ---------------------------------------------------------------------------- entry
    def kernel(self) -> Lowered:
        fn = self.frame.captured.tree
        if fn.decorator_list and len(fn.decorator_list) > 1:
            raise self.syntax("a kernel takes no decorators besides @cl.kernel", fn, "decorator")
        sig = self.params(fn)
        for s in fn.body:
            self.stmt(s)
        arrays = tuple(
            ir.ArrayParam(n, st.elem, st.atomic, st.written, st.len_name if st.len_used else None,
                          st.tensor, st.rank)
            for n, st in self.arrays.items()
        )
        lens = [ir.HiddenParam(a.len_name, a.name, "len") for a in arrays if a.len_name is not None]
        kir = ir.KernelIR(
            self.name, arrays, tuple(self.scalars), tuple(self.locals.items()), tuple(self.decls),
            ir.Block(tuple(self.out[0])), self.cube_dim, self.checked, tuple(n for _, n in sig),
            (*lens, *self.hidden),
        )
        return Lowered(kir, sig)

    # ---------------------------------------------------------------------------- statements
    def stmt(self, node: ast.stmt) -> None:
        method = getattr(self, "stmt_" + type(node).__name__, None)
        if method is None:
            raise self.syntax(f"`{describe(node)}` statements are not supported in kernels", node)
        method(node)

    def stmt_Pass(self, node: ast.Pass) -> None:
        pass

    def stmt_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # a docstring
        if not isinstance(node.value, ast.Call):
            raise self.syntax("an expression statement that is not a call has no effect", node, "expression")
        lower_call(self, node.value, statement=True)

    def stmt_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) != 1:
            raise self.syntax("chained assignment `a = b = c` is not supported", node, "assignment")
        self.assign(node.targets[0], node.value, node, None)

    def stmt_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is None:
            raise self.syntax("a declaration needs a value: `x: f32 = 0.0`", node, "annotation")
        ann = self.pyeval(node.annotation)
        if not isinstance(ann, DType):
            raise self.syntax(f"a local's annotation must be a dtype, got {ann!r}", node.annotation,
                              "annotation")
        self.assign(node.target, node.value, node, ann)

    def assign(self, target: ast.expr, value: ast.expr, node: ast.stmt, ann: DType | None) -> None:
        loc = self.loc(node)
        if isinstance(target, ast.Name):
            self.name_hint = target.id
            v = self.expr(value)
            self.name_hint = ""
            self.assign_name(target.id, v, loc, ann)
        elif self.lane_target(target) is not None:
            self.assign_lane(target, self.expr(value), loc)
        elif isinstance(target, ast.Subscript):
            arr, idx, guard = self.subscript_target(target)
            self.store(arr, idx, self.expr(value), loc, guard)
        elif isinstance(target, ast.Tuple):
            raise self.syntax("tuple assignment is not supported; assign one name at a time", target, "tuple")
        else:
            raise self.syntax(f"cannot assign to `{describe(target)}`", target)

    def lane_target(self, target: ast.expr) -> ast.Name | None:
        """The local vector's name when ``target`` is one of its lanes (``v.x``, ``v[k]``)."""
        if isinstance(target, (ast.Attribute, ast.Subscript)) and isinstance(target.value, ast.Name):
            bound = self.frame.env.get(target.value.id)
            if isinstance(bound, ir.Var) and bound.ty.is_vector:
                return target.value
        return None

    def assign_lane(self, target: ast.expr, v: Val, loc: Loc) -> None:
        """``v.x = e`` / ``v[k] = e`` on a local vector: the local rebuilt with that lane replaced."""
        name = self.lane_target(target)
        assert name is not None and isinstance(target, (ast.Attribute, ast.Subscript))
        var = self.expr(name)
        if var.kind != "local":
            raise KernelSyntaxError(f"cannot assign a lane of {name.id!r}, which is a parameter", loc,
                                    name.id, kernel=self.name)
        key = target.attr if isinstance(target, ast.Attribute) else self.expr(target.slice)
        lane = vectors.lane_of(var, key, loc)
        self.assign_name(name.id, vectors.with_lane(var, lane, v, loc), loc, None)

    def assign_name(self, name: str, v: Val, loc: Loc, ann: DType | None) -> None:
        frame = self.frame
        bound = frame.env.get(name)
        if isinstance(v, ArrayRef):
            if isinstance(bound, (ArrayRef, ir.Var)) and bound != v:
                raise KernelSyntaxError(f"{name!r} is already bound; arrays cannot be reassigned", loc,
                                        name, kernel=self.name)
            frame.env[name] = v
            return
        is_local = isinstance(bound, ir.Var) and bound.kind == "local"
        if isinstance(bound, (ArrayRef,)) or (isinstance(bound, ir.Var) and bound.kind != "local"):
            raise KernelSyntaxError(f"cannot assign to {name!r}, which is an array or a parameter", loc,
                                    name, kernel=self.name)
        comptime_ok = frame.counts.get(name, 0) <= 1 and self.runtime_depth == 0 and ann is None
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
                    loc, name, kernel=self.name,
                )
            ir_name = bound.name
        else:
            e = infer.to_expr(v, loc, f"assignment to {name!r}", ann) if not is_expr(v) else v
            if ann is not None and e.ty != ann:
                raise KernelTypeError(f"{name!r} is declared {ann} but assigned a {e.ty} value",
                                      loc, name, kernel=self.name)
            ir_name = self.declare(name + frame.suffix, e.ty, loc)
            frame.env[name] = ir.Var(ir_name, e.ty, loc)
        self.emit(ir.Assign(ir_name, e, loc))

    def stmt_AugAssign(self, node: ast.AugAssign) -> None:
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.syntax("this augmented assignment is not supported", node)
        loc = self.loc(node)
        if isinstance(node.target, ast.Name):
            cur = self.expr(node.target)
            self.assign_name(node.target.id, self.binop(op, cur, self.expr(node.value), loc, f"{op}="),
                             loc, None)
        elif self.lane_target(node.target) is not None:
            cur = self.expr(node.target)
            self.assign_lane(node.target, self.binop(op, cur, self.expr(node.value), loc, f"{op}="), loc)
        elif isinstance(node.target, ast.Subscript):
            arr, idx, guard = self.subscript_target(node.target)
            cur = self.load(arr, idx, loc, guard)
            self.store(arr, idx, self.binop(op, cur, self.expr(node.value), loc, f"{op}="), loc, guard)
        else:
            raise self.syntax(f"cannot assign to `{describe(node.target)}`", node.target)

    def stmt_If(self, node: ast.If) -> None:
        cond = self.expr(node.test)
        k = known(cond)
        if k is not None:
            for s in node.body if k else node.orelse:
                self.stmt(s)
            return
        c = self.condition(cond, node.test)
        then = self.block(node.body, True)
        orelse = self.block(node.orelse, True)
        self.emit(ir.If(c, then, orelse, self.loc(node)))

    def condition(self, v: Val, node: ast.AST) -> ir.Expr:
        e = infer.to_expr(v, self.loc(node), "condition")
        if e.ty != bool_:
            raise KernelTypeError(f"a condition must be bool, got {e.ty}; compare it, e.g. x != 0",
                                  self.loc(node), "condition", kernel=self.name)
        return e

    def stmt_While(self, node: ast.While) -> None:
        if node.orelse:
            raise self.syntax("`while ... else` is not supported", node, "while-else")
        cond = self.expr(node.test)
        if known(cond) is False:
            return
        c = self.condition(cond, node.test)
        self.loops.append("runtime")
        try:
            body = self.block(node.body, True)
        finally:
            self.loops.pop()
        self.emit(ir.While(c, body, self.loc(node)))

    def stmt_For(self, node: ast.For) -> None:
        if node.orelse:
            raise self.syntax("`for ... else` is not supported", node, "for-else")
        if not isinstance(node.target, ast.Name):
            raise self.syntax("the loop variable must be a single name", node.target, "for")
        it = node.iter
        fn = self.expr(it.func) if isinstance(it, ast.Call) else None
        if fn is clb.unroll and isinstance(it, ast.Call):
            self.unrolled(node, it)
        elif fn is builtins.range and isinstance(it, ast.Call):
            self.range_loop(node, it)
        else:
            raise self.syntax("only `for i in range(...)` and `for i in cl.unroll(range(...))` loops are "
                              "supported", it, "for")

    def range_args(self, call: ast.Call) -> list[Val]:
        if call.keywords or not 1 <= len(call.args) <= 3:
            raise self.syntax("range() takes 1 to 3 positional arguments", call, "range")
        args = [self.expr(a) for a in call.args]
        if len(args) == 1:
            args = [0, args[0], 1]
        elif len(args) == 2:
            args.append(1)
        return args

    def unrolled(self, node: ast.For, call: ast.Call) -> None:
        inner = call.args[0] if len(call.args) == 1 and not call.keywords else None
        if not (isinstance(inner, ast.Call) and self.expr(inner.func) is builtins.range):
            raise self.syntax("unroll() takes one range(...)", call, "unroll")
        args = self.range_args(inner)
        values = [known(a) for a in args]
        if any(not isinstance(v, int) or isinstance(v, bool) for v in values):
            raise self.syntax("unroll(range(...)) needs comptime int bounds (literals, Comptime params, "
                              "CUBE_DIM); use a plain range() for runtime bounds", inner, "unroll")
        r = range(*values)
        if len(r) > UNROLL_CAP:
            raise self.syntax(f"unroll of {len(r)} iterations exceeds the cap of {UNROLL_CAP}", call,
                              "unroll")
        target = node.target.id  # type: ignore[attr-defined]
        self.loops.append("unroll")
        try:
            for v in r:
                self.frame.env[target] = v
                for s in node.body:
                    self.stmt(s)
        finally:
            self.loops.pop()

    def range_loop(self, node: ast.For, call: ast.Call) -> None:
        loc = self.loc(node)
        start, stop, step = self.range_args(call)
        typed = [a for a in (start, stop, step) if is_expr(a)]
        ty = typed[0].ty if typed else u32 if all(int(v) >= 0 for v in (start, stop, step)) else i32
        if not ty.is_int or ty.is_vector:
            raise KernelTypeError(f"range() needs integer bounds, got {ty}", loc, "range", kernel=self.name)
        es = [infer.to_expr(a, loc, "range", ty) for a in (start, stop, step)]
        if known(es[2]) == 0:
            raise self.syntax("range() step must not be zero", call, "range")
        name = node.target.id  # type: ignore[attr-defined]
        for sub in ast.walk(ast.Module(body=node.body, type_ignores=[])):
            targets = sub.targets if isinstance(sub, ast.Assign) else (
                [sub.target] if isinstance(sub, (ast.AugAssign, ast.AnnAssign)) else [])
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                raise self.syntax(f"the loop variable {name!r} is assigned in the loop body", sub, name)
        bound = self.frame.env.get(name)
        if isinstance(bound, ir.Var) and bound.kind == "local":
            if bound.ty != ty:
                raise KernelTypeError(f"{name!r} is {bound.ty}; this loop counts in {ty}", loc, name,
                                      kernel=self.name)
            var = bound.name
        else:
            var = self.declare(name + self.frame.suffix, ty, loc)
            self.frame.env[name] = ir.Var(var, ty, loc)
        stop_e = es[1]
        if not (isinstance(stop_e, ir.Const) or (isinstance(stop_e, ir.Var) and stop_e.kind != "local")):
            tmp = self.declare(f"{var}_end", ty, loc)
            self.emit(ir.Assign(tmp, stop_e, loc))
            stop_e = ir.Var(tmp, ty, loc)
        self.loops.append("runtime")
        try:
            body = self.block(node.body, True)
        finally:
            self.loops.pop()
        self.emit(ir.RangeFor(var, es[0], stop_e, es[2], body, loc))

    def stmt_Break(self, node: ast.Break) -> None:
        self.loop_exit(node, "break")
        self.emit(ir.Break(self.loc(node)))

    def stmt_Continue(self, node: ast.Continue) -> None:
        self.loop_exit(node, "continue")
        self.emit(ir.Continue(self.loc(node)))

    def loop_exit(self, node: ast.stmt, what: str) -> None:
        if not self.loops:
            raise self.syntax(f"`{what}` outside a loop", node, what)
        if self.loops[-1] == "unroll":
            raise self.syntax(f"`{what}` in an unrolled loop is not supported", node, what)

    def stmt_Return(self, node: ast.Return) -> None:
        if self.frame.returns:  # a helper's hoisted return: it ends its branch
            if node.value is not None:
                self.assign_name("cl__result", self.expr(node.value), self.loc(node), None)
            return
        if self.frame.is_func:
            raise self.syntax("a @cl.func may only `return` as its last statement", node, "return")
        if node.value is not None:
            raise self.syntax("kernels return nothing; write results into an array", node, "return")
        self.emit(ir.Return(self.loc(node)))

    # ---------------------------------------------------------------------------- memory
    def subscript_target(self, node: ast.Subscript) -> tuple[ArrayRef, ir.Expr, ir.Expr | None]:
        arr = self.expr(node.value)
        if not isinstance(arr, ArrayRef):
            raise self.syntax("only arrays can be indexed and assigned", node, "subscript")
        return (arr, *self.element(arr, node.slice))

    def element(self, arr: ArrayRef, node: ast.expr) -> tuple[ir.Expr, ir.Expr | None]:
        """The flat index of ``arr[node]`` and, for a checked tensor access, its shape guard."""
        if arr.tensor:
            return tensors.index(self, arr, node)
        return self.index(node), None

    def index(self, node: ast.expr) -> ir.Expr:
        loc = self.loc(node)
        if isinstance(node, ast.Tuple):
            raise self.syntax("multi-dimensional indexing needs a Tensor[T] parameter; compute a "
                              "flat index for an Array", node, "index")
        v = self.expr(node)
        if not is_expr(v):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise KernelTypeError(f"an index must be a non-negative int, got {v!r}", loc, "index",
                                      kernel=self.name)
            return ir.Const(v, u32, loc)
        if not v.ty.is_int or v.ty.is_vector:
            raise KernelTypeError(f"an index must be an integer, got {v.ty}", loc, "index", kernel=self.name)
        return v

    def touch(self, arr: ArrayRef, idx: ir.Expr, write: bool) -> bool:
        """Record a use of ``arr``; True when the access is bound-checked (``shared`` and ``local``
        accesses whose index is provably in bounds are not)."""
        st = self.arrays.get(arr.name)
        if st is not None:
            st.written |= write
            if self.checked:
                st.len_used = True
        if self.checked and arr.size is not None:
            top = upper_bound(idx, self.cube_dim)
            return top is None or top >= arr.size
        return self.checked

    def load(self, arr: ArrayRef, idx: ir.Expr, loc: Loc, guard: ir.Expr | None = None) -> ir.Expr:
        return ir.Load(arr.name, idx, arr.elem, loc, self.touch(arr, idx, False), guard)

    def store(self, arr: ArrayRef, idx: ir.Expr, v: Val, loc: Loc, guard: ir.Expr | None = None) -> None:
        e = infer.to_expr(v, loc, "store", arr.elem) if not is_expr(v) else v
        if e.ty != arr.elem:
            raise KernelTypeError(f"cannot store a {e.ty} value into an array of {arr.elem}; cast it "
                                  f"with {arr.elem}(...)", loc, "store", kernel=self.name)
        self.emit(ir.Store(arr.name, idx, e, loc, self.touch(arr, idx, True), guard))

    # ---------------------------------------------------------------------------- expressions
    def lookup(self, name: str, node: ast.AST) -> Any:
        env = self.frame.env
        if name in env:
            return env[name]
        found, value = self.frame.captured.resolve(name)
        if not found:
            raise self.syntax(f"unknown name {name!r}", node, name)
        return value

    def expr(self, node: ast.expr) -> Val:
        method = getattr(self, "expr_" + type(node).__name__, None)
        if method is None:
            raise self.syntax(f"`{describe(node)}` expressions are not supported in kernels", node)
        v = method(node)
        if isinstance(v, clb.Position):
            return position(v.name, self.loc(node), self.cube_dim)
        if isinstance(v, ir.Var):
            return dataclasses.replace(v, loc=self.loc(node))
        return v

    def expr_Constant(self, node: ast.Constant) -> Val:
        if isinstance(node.value, (bool, int, float)):
            return node.value
        raise self.syntax(f"{type(node.value).__name__} constants are not supported in kernels", node)

    def expr_Name(self, node: ast.Name) -> Val:
        return self.lookup(node.id, node)

    def expr_Attribute(self, node: ast.Attribute) -> Val:
        base = self.expr(node.value)
        if isinstance(base, ArrayRef):
            return tensors.attribute(self, base, node)
        if vectors.is_vec(base):
            return vectors.get(base, vectors.lane_of(base, node.attr, self.loc(node)), self.loc(node))
        if is_expr(base):
            raise self.syntax(f"attribute {node.attr!r} of a kernel value is not supported", node, node.attr)
        if not hasattr(base, node.attr):
            raise self.syntax(f"{getattr(base, '__name__', base)!r} has no attribute {node.attr!r}", node,
                              node.attr)
        return getattr(base, node.attr)

    def expr_Tuple(self, node: ast.Tuple) -> Val:
        vals = tuple(self.expr(e) for e in node.elts)
        if any(is_expr(v) for v in vals):
            raise self.syntax("tuples of runtime values are not supported", node, "tuple")
        return vals

    def expr_Subscript(self, node: ast.Subscript) -> Val:
        base = self.expr(node.value)
        if isinstance(base, ArrayRef):
            idx, guard = self.element(base, node.slice)
            return self.load(base, idx, self.loc(node), guard)
        if isinstance(base, tensors.TensorMeta):
            return tensors.meta_index(self, base, node)
        if vectors.is_vec(base):
            key = self.expr(node.slice)
            if is_expr(key):
                raise self.syntax("a vector lane index must be a comptime int", node, "lane")
            return vectors.get(base, vectors.lane_of(base, key, self.loc(node)), self.loc(node))
        if isinstance(base, type) and hasattr(base, "__class_getitem__"):  # cl.Vec[f32, 4]
            try:
                return base[self.expr(node.slice)]  # type: ignore[index]
            except TypeError as e:
                raise self.syntax(str(e), node) from e
        if isinstance(base, (tuple, list)):
            i = self.expr(node.slice)
            if not isinstance(i, int):
                raise self.syntax("a comptime tuple needs a comptime index", node, "subscript")
            return base[i]
        raise self.syntax("only arrays (and comptime tuples) can be indexed", node, "subscript")

    def expr_BinOp(self, node: ast.BinOp) -> Val:
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.syntax(f"the operator `{type(node.op).__name__}` is not supported", node)
        return self.binop(op, self.expr(node.left), self.expr(node.right), self.loc(node), op)

    def expr_UnaryOp(self, node: ast.UnaryOp) -> Val:
        return infer.unop(_UNOPS[type(node.op)], self.expr(node.operand), self.loc(node), "unary operator")

    def expr_Compare(self, node: ast.Compare) -> Val:
        loc = self.loc(node)
        left = self.expr(node.left)
        result: Val = None
        for op_node, right_node in zip(node.ops, node.comparators):
            op = _CMPOPS.get(type(op_node))
            if op is None:
                raise self.syntax(f"the comparison `{type(op_node).__name__}` is not supported", node)
            right = self.expr(right_node)
            cmp = self.binop(op, left, right, loc, op)
            result = cmp if result is None else infer.binop("and", result, cmp, loc, "comparison")
            left = right
        return result

    def expr_BoolOp(self, node: ast.BoolOp) -> Val:
        op = "and" if isinstance(node.op, ast.And) else "or"
        loc = self.loc(node)
        acc = self.expr(node.values[0])
        for sub in node.values[1:]:
            k = known(acc)
            if k is not None:
                if (op == "and" and not k) or (op == "or" and k):
                    return acc
                acc = self.expr(sub)
                continue
            self.out.append([])
            right = self.expr(sub)
            stmts = self.out.pop()
            if not stmts:
                acc = infer.binop(op, acc, right, loc, op)
                continue
            # The right side emitted statements: evaluate it only when needed.
            tmp = self.declare("t_" + op, bool_, loc)
            self.emit(ir.Assign(tmp, self.condition(acc, node), loc))
            var = ir.Var(tmp, bool_, loc)
            test = var if op == "and" else ir.UnOp("not", var, bool_, loc)
            then = ir.Block((*stmts, ir.Assign(tmp, self.condition(right, sub), loc)))
            self.emit(ir.If(test, then, ir.Block(()), loc))
            acc = var
        return acc

    def expr_IfExp(self, node: ast.IfExp) -> Val:
        loc = self.loc(node)
        cond = self.expr(node.test)
        k = known(cond)
        if k is not None:
            return self.expr(node.body if k else node.orelse)
        c = self.condition(cond, node.test)
        self.out.append([])
        a = self.expr(node.body)
        sa = self.out.pop()
        self.out.append([])
        b = self.expr(node.orelse)
        sb = self.out.pop()
        ea, eb = infer.unify(a, b, loc, "conditional expression")
        if not sa and not sb and not ir.reads_memory(ea) and not ir.reads_memory(eb):
            return ir.Select(c, ea, eb, ea.ty, loc)
        tmp = self.declare("t_sel", ea.ty, loc)
        self.emit(ir.If(c, ir.Block((*sa, ir.Assign(tmp, ea, loc))), ir.Block((*sb, ir.Assign(tmp, eb, loc))),
                        loc))
        return ir.Var(tmp, ea.ty, loc)

    def expr_Call(self, node: ast.Call) -> Val:
        return lower_call(self, node, statement=False)
