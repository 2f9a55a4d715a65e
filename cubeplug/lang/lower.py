"""Lowering: a kernel's Python AST to the IR, with comptime folding, typing and ``@cl.func`` inlining.

A whitelist visitor: every AST node it does not know raises a :class:`KernelSyntaxError` naming the
construct and its file:line:col. Comptime values (``Comptime`` params, literals, module constants,
``CUBE_DIM``) are plain Python values while lowering, so branches on them are folded and
``unroll(range(N))`` is expanded. A name assigned once, outside runtime control flow, to a comptime
value stays comptime; any other assigned name is a runtime local, declared at the top of the kernel
with the type of its first assignment.

This module holds the :class:`Lowerer`: the state of one kernel's lowering and its primitive
operations (:class:`.lowering.Lowering`), and the dispatch of each AST node to the module that
lowers it: :mod:`.params` (the signature), :mod:`.assign`, :mod:`.control` and :mod:`.calls`
(statements), :mod:`.exprs` (expressions), which use :mod:`.access`, :mod:`.tensors` and
:mod:`.vectors`.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable
from typing import Any

from cubeplug.core.kernel import CORE_DTYPES
from cubeplug.lang import assign, control, ir
from cubeplug.lang import builtins as clb
from cubeplug.lang.calls import call_statement
from cubeplug.lang.errors import KernelSyntaxError, KernelTypeError, Loc
from cubeplug.lang.exprs import EXPRESSIONS
from cubeplug.lang.infer import Val
from cubeplug.lang.lowering import Lowering
from cubeplug.lang.names import ELEMENT_PREFIX, RESERVED, SCALAR_PREFIX
from cubeplug.lang.params import bind_params
from cubeplug.lang.positions import position
from cubeplug.lang.scope import ArrayState, Frame, Lowered, assign_counts, describe
from cubeplug.lang.source import Captured
from cubeplug.lang.types import DType

#: The lowering of each supported statement type; any other is a KernelSyntaxError.
STATEMENTS: dict[type[ast.stmt], Callable[[Lowering, Any], None]] = {
    **assign.STATEMENTS,
    **control.STATEMENTS,
    ast.Expr: call_statement,
}


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
        #: The blocks being built, innermost last; statements are emitted into the last one.
        self.out: list[list[ir.Stmt]] = [[]]
        #: The loops around the statement being lowered, innermost last: "runtime" or "unroll".
        self.loops: list[str] = []
        self.var_bounds: dict[str, int] = {}
        #: How many runtime branches and loops enclose the statement being lowered.
        self.runtime_depth = 0
        self.inline_count = 0
        #: The name being assigned, for the name of a shared/local array declared by its value.
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
        if name.startswith((SCALAR_PREFIX, ELEMENT_PREFIX)):
            name = "v_" + name
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
        if self.dtypes is not None and ty.name not in CORE_DTYPES and ty.name not in self.dtypes:
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

    def lookup(self, name: str, node: ast.AST) -> Any:
        env = self.frame.env
        if name in env:
            return env[name]
        found, value = self.frame.captured.resolve(name)
        if not found:
            raise self.syntax(f"unknown name {name!r}", node, name)
        return value

    # ---------------------------------------------------------------------------- entry
    def kernel(self) -> Lowered:
        fn = self.frame.captured.tree
        if fn.decorator_list and len(fn.decorator_list) > 1:
            raise self.syntax("a kernel takes no decorators besides @cl.kernel", fn, "decorator")
        sig = bind_params(self, fn)
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

    # ---------------------------------------------------------------------------- dispatch
    def stmt(self, node: ast.stmt) -> None:
        lower = STATEMENTS.get(type(node))
        if lower is None:
            raise self.syntax(f"`{describe(node)}` statements are not supported in kernels", node)
        lower(self, node)

    def expr(self, node: ast.expr) -> Val:
        lower = EXPRESSIONS.get(type(node))
        if lower is None:
            raise self.syntax(f"`{describe(node)}` expressions are not supported in kernels", node)
        v = lower(self, node)
        # A position builtin (UNIT_POS...) becomes its expression for this cube dim; a name's
        # variable takes the location of this use (error messages point at it).
        if isinstance(v, clb.Position):
            return position(v.name, self.loc(node), self.cube_dim)
        if isinstance(v, ir.Var):
            return dataclasses.replace(v, loc=self.loc(node))
        return v
