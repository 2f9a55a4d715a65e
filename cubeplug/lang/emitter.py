"""The statement walk shared by the ``c`` and ``wgsl`` generators.

Both dialects spell control flow the same way (``if``/``while``/``for``/``break``...); a
generator supplies :meth:`Emitter.expr` and :meth:`Emitter.stmt_memory` (stores, atomics and
barriers, which differ per dialect).
"""

from __future__ import annotations

from cubeplug.lang import ir
from cubeplug.lang.errors import Loc
from cubeplug.lang.names import unwrap


class Emitter:
    """Indented lines with their source locations, and the dialect-neutral statements."""

    def __init__(self, k: ir.KernelIR) -> None:
        self.k = k
        self.lines: list[str] = []
        self.locs: list[Loc | None] = []
        self.depth = 0
        self.lens = {a.name: a.len_name for a in k.arrays}
        #: f32 atomic arrays (u32 buffers holding f32 bits).
        self.fbits = {a.name for a in k.arrays if a.atomic and a.elem.is_float}

    def line(self, text: str, loc: Loc | None = None) -> None:
        self.lines.append("    " * self.depth + text)
        self.locs.append(loc)

    def expr(self, e: ir.Expr) -> str:
        raise NotImplementedError

    def stmt_memory(self, s: ir.Store | ir.Atomic | ir.Barrier) -> None:
        raise NotImplementedError

    def block(self, b: ir.Block) -> None:
        for s in b.stmts:
            self.stmt(s)

    def nested(self, b: ir.Block) -> None:
        self.depth += 1
        self.block(b)
        self.depth -= 1

    def stmt(self, s: ir.Stmt) -> None:
        if isinstance(s, ir.Assign):
            self.line(f"{s.name} = {unwrap(self.expr(s.value))};", s.loc)
        elif isinstance(s, (ir.Store, ir.Atomic, ir.Barrier)):
            self.stmt_memory(s)
        elif isinstance(s, ir.If):
            self.line(f"if ({unwrap(self.expr(s.cond))}) {{", s.loc)
            self.nested(s.then)
            if s.orelse.stmts:
                self.line("} else {", s.loc)
                self.nested(s.orelse)
            self.line("}")
        elif isinstance(s, ir.While):
            self.line(f"while ({unwrap(self.expr(s.cond))}) {{", s.loc)
            self.nested(s.body)
            self.line("}")
        elif isinstance(s, ir.RangeFor):
            cmp = s.cmp
            self.line(
                f"for ({s.var} = {self.expr(s.start)}; {s.var} {cmp} {self.expr(s.stop)}; "
                f"{s.var} += {self.expr(s.step)}) {{", s.loc,
            )
            self.nested(s.body)
            self.line("}")
        elif isinstance(s, ir.Break):
            self.line("break;", s.loc)
        elif isinstance(s, ir.Continue):
            self.line("continue;", s.loc)
        elif isinstance(s, ir.Return):
            self.line("return;", s.loc)
        else:  # pragma: no cover
            raise TypeError(s)
