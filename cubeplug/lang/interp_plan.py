"""What the interpreter works out once per kernel about its statements (:class:`Plan`): where a
block's live lanes can change, whether and how a block runs on a subset of the lanes alone
(:class:`Alone`: which locals it gathers and which it writes back), and its expressions compiled
into closures.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from cubeplug.lang import ir
from cubeplug.lang.interp_expr import Exprs


def has_barrier(b: ir.Block) -> bool:
    return any(isinstance(s, ir.Barrier) or any(has_barrier(c) for c in ir.children(s)) for s in b.stmts)


def _escapes(b: ir.Block, loop: bool) -> bool:
    """True when ``b`` holds a barrier, a return, or (outside a loop of its own, ``loop`` False) a
    break or continue: what a subset of the lanes cannot run alone."""
    for s in b.stmts:
        if isinstance(s, (ir.Barrier, ir.Return)) or (not loop and isinstance(s, (ir.Break, ir.Continue))):
            return True
        inner = loop or isinstance(s, (ir.RangeFor, ir.While))
        if any(_escapes(c, inner) for c in ir.children(s)):
            return True
    return False


def _flow(s: ir.Stmt) -> bool:
    """True when running ``s`` may clear lanes of the enclosing block (break, continue, return)."""
    if isinstance(s, (ir.Break, ir.Continue, ir.Return)):
        return True
    return any(_flow(t) for c in ir.children(s) for t in c.stmts)


def _assigns(s: ir.Stmt) -> tuple[str, ...]:
    """The locals ``s`` itself assigns."""
    if isinstance(s, ir.Assign):
        return (s.name,)
    if isinstance(s, ir.RangeFor):
        return (s.var,)
    if isinstance(s, ir.Atomic) and s.out:
        return (s.out,)
    return ()


def _reads(stmts: tuple[ir.Stmt, ...]) -> Counter[str]:
    """How many times ``stmts`` (nested ones included) read each local (a for loop reads its
    variable)."""
    out: Counter[str] = Counter()
    for s in stmts:
        _local_reads(s, out)
        if isinstance(s, ir.RangeFor):
            out[s.var] += 1
        for c in ir.children(s):
            out.update(_reads(c.stmts))
    return out


def _local_reads(node: Any, out: Counter[str]) -> None:
    """Count the locals read by ``node``'s own expressions, field by field (a field added to a
    statement later is read too; nested blocks are :func:`_reads`' to walk)."""
    if isinstance(node, ir.Block):
        return
    if isinstance(node, ir.Var):
        if node.kind == "local":
            out[node.name] += 1
        return
    if isinstance(node, tuple):
        for item in node:
            _local_reads(item, out)
    elif isinstance(node, (ir.Stmt, ir.Expr)):
        for f in dataclasses.fields(node):
            _local_reads(getattr(node, f.name), out)


def _walk(b: ir.Block) -> list[ir.Stmt]:
    """Every statement of ``b``, nested ones included."""
    return [t for s in b.stmts for t in (s, *(u for c in ir.children(s) for u in _walk(c)))]


@dataclass(frozen=True, slots=True)
class Alone:
    """How a block runs on a subset of the lanes: whether it may (:func:`_escapes`), the locals it
    reads or assigns (gathered), and those of them read after it (written back)."""

    ok: bool
    need: frozenset[str]
    keep: frozenset[str]


class Plan:
    """What the interpreter works out once per kernel about its statements."""

    def __init__(self, k: ir.KernelIR) -> None:
        #: The statements (by id) after which a block computes its live lanes again.
        self.flows = frozenset(id(s) for s in _walk(k.body) if _flow(s))
        self.reads = _reads(k.body.stmts)
        self.looped: set[int] = set()  # blocks (by id) inside a loop
        self._mark(k.body, False)
        self._alone: dict[int, Alone] = {}
        #: The expressions' closures, compiled once per kernel (:mod:`cubeplug.lang.interp_expr`).
        self.exprs = Exprs()
        self._conditions: dict[int, ir.BinOp] = {}
        self.types = dict(k.locals)
        #: The per-unit (``cl.local``) arrays.
        self.private = frozenset(d.name for d in k.decls if d.space != "shared")

    def _mark(self, b: ir.Block, looped: bool) -> None:
        if looped:
            self.looped.add(id(b))
        for s in b.stmts:
            for c in ir.children(s):
                self._mark(c, looped or isinstance(s, (ir.RangeFor, ir.While)))

    def fresh_env(self, n: int) -> dict[str, Any]:
        """The locals of a batch of ``n`` lanes before the kernel's first statement: zeros. A vector
        local starts as a read-only broadcast of zeros, not n rows of them: most are assigned
        before they are read (fill 1M f32: 0.8 ms of its 5 ms were these zeros)."""
        return {name: np.broadcast_to(np.zeros((1, ty.lanes), ty.np), (n, ty.lanes)) if ty.is_vector
                else ty.np.type(0) for name, ty in self.types.items()}

    def condition(self, s: ir.RangeFor) -> ir.BinOp:
        """The condition of the range loop ``s`` (``var < stop``, ``var > stop`` for a negative
        constant step), built once: its closure is compiled once and kept by the node's identity."""
        got = self._conditions.get(id(s))
        if got is None:
            ty = self.types[s.var]
            var = ir.Var(s.var, ty, s.loc)
            got = self._conditions[id(s)] = ir.BinOp(s.cmp, var, s.stop, ty, s.loc)
        return got

    def alone(self, b: ir.Block) -> Alone:
        """How ``b`` runs on a subset of the lanes. A local that ``b`` assigns is written back to
        the batch's lanes only when something outside ``b`` reads it, or ``b`` is in a loop (a
        later pass of ``b`` reads it): the std raking folds assign dozens of unrolled locals that
        die in the block (reduce_sum 1M f32 ``tree``: 64 copies of 65536 lanes per cube batch)."""
        got = self._alone.get(id(b))
        if got is None:
            inside = _reads(b.stmts)
            assigned = {n for s in _walk(b) for n in _assigns(s)}
            outside = {n for n, c in self.reads.items() if c > inside.get(n, 0)}
            keep = assigned & (outside | set(inside) if id(b) in self.looped else outside)
            got = self._alone[id(b)] = Alone(not _escapes(b, False), frozenset(set(inside) | assigned),
                                              frozenset(keep))
        return got
