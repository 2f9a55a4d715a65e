"""Capturing a kernel's source: ``inspect.getsource`` (through ``linecache``), dedent, ``ast.parse``.

The AST's line and column numbers are mapped back to the user's file with :class:`SourceMap`.
Names the kernel reads from its module or closure are resolved lazily, at specialization, against a
snapshot of the function's globals and closure cells.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cubeplug.lang.errors import KernelSyntaxError, Loc


@dataclass(frozen=True)
class SourceMap:
    """Maps AST positions of the dedented source to the user's file."""

    file: str
    first_line: int
    indent: int

    def loc(self, node: ast.AST) -> Loc:
        """The file:line:col of an AST node."""
        line = getattr(node, "lineno", 1)
        col = getattr(node, "col_offset", 0)
        return Loc(self.file, self.first_line + line - 1, col + self.indent + 1)


@dataclass(frozen=True)
class Captured:
    """A function's parsed definition, where it lives and how to resolve its free names."""

    fn: Callable[..., Any]
    tree: ast.FunctionDef
    smap: SourceMap
    digest: str

    def resolve(self, name: str) -> tuple[bool, Any]:
        """(found, value) of a free name: closure first, then globals, then builtins."""
        code = getattr(self.fn, "__code__", None)
        closure = getattr(self.fn, "__closure__", None)
        if code is not None and closure:
            for cell_name, cell in zip(code.co_freevars, closure):
                if cell_name == name:
                    try:
                        return True, cell.cell_contents
                    except ValueError:
                        return False, None
        g = getattr(self.fn, "__globals__", {})
        if name in g:
            return True, g[name]
        if hasattr(builtins, name):
            return True, getattr(builtins, name)
        return False, None


def capture(fn: Callable[..., Any]) -> Captured:
    """Parse ``fn``'s definition; KernelSyntaxError when its source is not available."""
    file = getattr(getattr(fn, "__code__", None), "co_filename", "<unknown>")
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as e:
        raise KernelSyntaxError(
            f"the source of {getattr(fn, '__qualname__', fn)!r} is not available ({e}); kernels must "
            f"be defined in a file (or registered in linecache), not typed at a bare REPL or exec'd",
            Loc(file, getattr(getattr(fn, "__code__", None), "co_firstlineno", 0), 1),
            "@cl.kernel",
        ) from e
    text = "".join(lines)
    dedented = textwrap.dedent(text)
    first_text = next((ln for ln in lines if ln.strip()), "")
    indent = len(first_text) - len(first_text.lstrip())
    tree = ast.parse(dedented)
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if not defs:
        raise KernelSyntaxError(
            "kernels must be plain `def` functions (not lambdas or async functions)",
            Loc(file, first, 1), "@cl.kernel",
        )
    digest = hashlib.sha256(f"{file}\n{first}\n{dedented}".encode()).hexdigest()[:16]
    return Captured(fn, defs[0], SourceMap(file, first, indent), digest)
