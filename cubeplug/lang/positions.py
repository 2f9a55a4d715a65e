"""Position builtins: per-axis ones become IR builtins (``UNIT_POS_*`` is 0 on an axis of cube dim 1,
``CUBE_DIM*`` are constants); ``UNIT_POS``, ``CUBE_POS``, ``ABSOLUTE_POS`` and ``CUBE_COUNT`` are
lowered here from the per-axis ones. :func:`upper_bound` bounds an unsigned index from them."""

from __future__ import annotations

from collections.abc import Mapping

from cubeplug.lang import infer, ir
from cubeplug.lang.errors import Loc
from cubeplug.lang.infer import Val
from cubeplug.lang.types import u32

_AXES = {"X": 0, "Y": 1, "Z": 2}


def position(name: str, loc: Loc, dims: tuple[int, int, int]) -> Val:
    """The value of the position builtin ``name`` for a cube dim ``dims``."""
    if name.startswith("CUBE_DIM"):
        value = dims[0] * dims[1] * dims[2] if name == "CUBE_DIM" else dims[_AXES[name[-1]]]
        return ir.Const(value, u32, loc)
    if name[-2:] in ("_X", "_Y", "_Z"):
        if name.startswith("UNIT_POS") and dims[_AXES[name[-1]]] == 1:
            return ir.Const(0, u32, loc)
        return ir.Builtin(name, u32, loc)

    def b(n: str) -> Val:
        return position(n, loc, dims)

    def mul(a: Val, c: Val) -> Val:
        return infer.binop("*", a, c, loc, name)

    def add(a: Val, c: Val) -> Val:
        return infer.binop("+", a, c, loc, name)

    if name == "UNIT_POS":
        return add(add(b("UNIT_POS_X"), mul(b("UNIT_POS_Y"), dims[0])),
                   mul(b("UNIT_POS_Z"), dims[0] * dims[1]))
    if name == "CUBE_COUNT":
        return mul(mul(b("CUBE_COUNT_X"), b("CUBE_COUNT_Y")), b("CUBE_COUNT_Z"))
    if name == "CUBE_POS":
        cx = b("CUBE_COUNT_X")
        return add(add(b("CUBE_POS_X"), mul(b("CUBE_POS_Y"), cx)),
                   mul(b("CUBE_POS_Z"), mul(cx, b("CUBE_COUNT_Y"))))
    # ABSOLUTE_POS: linear over the whole launch, x fastest.
    width = mul(b("CUBE_COUNT_X"), dims[0])
    height = mul(b("CUBE_COUNT_Y"), dims[1])
    return add(add(b("ABSOLUTE_POS_X"), mul(b("ABSOLUTE_POS_Y"), width)),
               mul(b("ABSOLUTE_POS_Z"), mul(width, height)))


def upper_bound(
    e: ir.Expr, dims: tuple[int, int, int], bounds: Mapping[str, int] | None = None
) -> int | None:
    """The largest value an unsigned index can take, when a simple analysis knows it (``bounds``:
    the largest values of some locals, such as a constant ``range`` loop's variable in its body)."""
    if e.ty.kind != "u":
        return None
    if isinstance(e, ir.Const):
        return int(e.value)
    if isinstance(e, ir.Builtin) and e.name.startswith("UNIT_POS_"):
        return dims[_AXES[e.name[-1]]] - 1
    if isinstance(e, ir.Var) and e.kind == "local" and bounds:
        return bounds.get(e.name)
    if isinstance(e, ir.BinOp) and e.op in ("+", "*", "//", "%", "&", ">>"):
        a, b = upper_bound(e.a, dims, bounds), upper_bound(e.b, dims, bounds)
        if e.op in ("%", "&") and isinstance(e.b, ir.Const):
            top = int(e.b.value) - 1 if e.op == "%" else int(e.b.value)
            return top if a is None else min(a, top)
        if a is None or b is None:
            return None
        if e.op == "+":
            r = a + b
        elif e.op == "*":
            r = a * b
        elif e.op == "//":
            return a if isinstance(e.b, ir.Const) and e.b.value else None
        elif e.op == ">>":
            return a
        else:
            return None
        return r if r < 2 ** e.ty.bits else None
    return None
