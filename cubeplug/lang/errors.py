"""Errors of the kernel language, with the user's file:line:column.

:class:`KernelSyntaxError` (unsupported construct, unknown name, misplaced barrier) and
:class:`KernelTypeError` (type mismatch, missing capability) are :class:`CompileError`\\ s whose
message starts with ``file:line:col`` and shows the offending source line with a caret.
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass

from cubeplug.core.errors import CompileError, CubeplugError


@dataclass(frozen=True, slots=True)
class Loc:
    """Where a construct is in the user's source (1-based line, 1-based column)."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


NOWHERE = Loc("<generated>", 0, 0)


def _excerpt(loc: Loc) -> str:
    text = linecache.getline(loc.file, loc.line).rstrip("\n")
    if not text:
        return ""
    return f"\n    {text}\n    {' ' * (loc.col - 1)}^"


class KernelError(CompileError):
    """Base of the kernel language's compile errors: ``.loc`` and ``.construct`` say where and what."""

    kind = "error"

    def __init__(self, message: str, loc: Loc, construct: str = "", *, kernel: str = "?") -> None:
        self.loc = loc
        self.construct = construct
        self.message = message
        what = f"{construct}: " if construct else ""
        super().__init__(
            f"{loc}: {what}{message}{_excerpt(loc)}",
            backend="cubeplug.lang",
            kernel=kernel,
            line=loc.line,
            col=loc.col,
        )
        self.file = loc.file


    def of_kernel(self, kernel: str) -> KernelError:
        """This error naming ``kernel`` (raise sites deep in the lowering do not know its name)."""
        if self.kernel == kernel:
            return self
        return type(self)(self.message, self.loc, self.construct, kernel=kernel)


class KernelSyntaxError(KernelError):
    """Unsupported syntax, an unknown name, a misplaced ``sync_cube()`` or a bad comptime value."""


class KernelTypeError(KernelError):
    """A type mismatch, a bad cast, or a dtype the backend's device does not support."""


class BarrierDivergenceError(CubeplugError):
    """The CPU interpreter reached ``sync_cube()`` with only some units of a cube."""


class NotInKernelError(CubeplugError, TypeError):
    """A kernel-language builtin was called from plain Python, outside a kernel."""
