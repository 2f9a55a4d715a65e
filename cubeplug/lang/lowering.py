"""What the lowering modules (:mod:`.params`, :mod:`.access`, :mod:`.exprs`, :mod:`.assign`,
:mod:`.control`, :mod:`.calls`, :mod:`.tensors`) use of the lowerer: a Protocol, so they depend on
this contract and not on :mod:`.lower`, which imports them all (no import circle)."""

from __future__ import annotations

import ast
from typing import Any, Protocol

from cubeplug.lang import ir
from cubeplug.lang.errors import KernelSyntaxError, Loc
from cubeplug.lang.infer import Val
from cubeplug.lang.scope import ArrayState, Frame
from cubeplug.lang.types import DType


class Lowering(Protocol):
    """The state and primitive operations of one kernel's lowering that its modules read and call."""

    name: str
    comptime: dict[str, Any]
    cube_dim: tuple[int, int, int]
    checked: bool
    name_hint: str
    inline_count: int
    runtime_depth: int
    loops: list[str]
    #: Locals known to stay at most a value where they are read: the variable of a ``range`` loop
    #: with constant bounds, while its body is lowered (for the bound-check analysis).
    var_bounds: dict[str, int]
    frames: list[Frame]
    out: list[list[ir.Stmt]]
    arrays: dict[str, ArrayState]
    scalars: list[ir.ScalarParam]
    decls: list[ir.ArrayDecl]
    hidden: list[ir.HiddenParam]

    @property
    def frame(self) -> Frame:
        """The innermost frame (the kernel, or an inlined @cl.func)."""

    def loc(self, node: ast.AST) -> Loc:
        """The user's source location of ``node``."""

    def syntax(self, message: str, node: ast.AST, construct: str = "") -> KernelSyntaxError:
        """A KernelSyntaxError at ``node``."""

    def unique(self, base: str) -> str:
        """A fresh identifier from ``base``."""

    def need(self, ty: DType, loc: Loc) -> None:
        """KernelTypeError when the device lacks ``ty``."""

    def declare(self, base: str, ty: DType, loc: Loc) -> str:
        """A new local of type ``ty``; its identifier."""

    def emit(self, stmt: ir.Stmt) -> None:
        """Append ``stmt`` to the current block."""

    def block(self, body: list[ast.stmt], runtime: bool) -> ir.Block:
        """Lower ``body`` into a new block; ``runtime`` when it runs under runtime control flow."""

    def lookup(self, name: str, node: ast.AST) -> Any:
        """The value bound to ``name``: the frame's names, then the function's closure, globals and
        builtins."""

    def stmt(self, node: ast.stmt) -> None:
        """Lower one statement."""

    def expr(self, node: ast.expr) -> Val:
        """Lower one expression (a comptime value or an IR expression)."""
