"""What the lowering helpers (:mod:`.calls`, :mod:`.tensors`) use of the lowerer: a Protocol, so
they depend on this contract and not on :mod:`.lower`, which imports them (no import circle)."""

from __future__ import annotations

import ast
from typing import Protocol

from cubeplug.lang import ir
from cubeplug.lang.errors import KernelSyntaxError, Loc
from cubeplug.lang.infer import Val
from cubeplug.lang.scope import ArrayRef, ArrayState, Frame
from cubeplug.lang.types import DType


class Lowering(Protocol):
    """The state and operations of one kernel's lowering that its helpers read and call."""

    name: str
    checked: bool
    name_hint: str
    inline_count: int
    loops: list[str]
    frames: list[Frame]
    arrays: dict[str, ArrayState]
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

    def stmt(self, node: ast.stmt) -> None:
        """Lower one statement."""

    def expr(self, node: ast.expr) -> Val:
        """Lower one expression (a comptime value or an IR expression)."""

    def index(self, node: ast.expr) -> ir.Expr:
        """Lower an index expression."""

    def touch(self, arr: ArrayRef, idx: ir.Expr, write: bool) -> bool:
        """Record a use of ``arr``; True when the access is bound-checked."""
