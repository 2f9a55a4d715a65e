"""The structured IR of ``cubeplug.lang``: frozen dataclasses, no SSA.

A kernel is a tree: a :class:`Block` of statements whose ``if``/loops own child blocks. Locals are
mutable and declared once at the top of the kernel (:attr:`KernelIR.locals`); shared and local
arrays are declared there too. Every node carries the :class:`~cubeplug.lang.errors.Loc` of the
Python construct it came from. Expressions are pure: memory reads (:class:`Load`) have no side
effects, atomics are statements (:class:`Atomic`) that write their old value into a local.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields, is_dataclass

from cubeplug.lang.errors import Loc
from cubeplug.lang.types import DType

# --------------------------------------------------------------------------------------- expressions


@dataclass(frozen=True, slots=True)
class Const:
    """A typed constant."""

    value: int | float | bool
    ty: DType
    loc: Loc


@dataclass(frozen=True, slots=True)
class Var:
    """A local variable, a scalar parameter or a hidden length (``kind``: local, param, len)."""

    name: str
    ty: DType
    loc: Loc
    kind: str = "local"


@dataclass(frozen=True, slots=True)
class Builtin:
    """A per-axis position builtin: ``UNIT_POS_X``, ``CUBE_POS_Y``, ``CUBE_COUNT_Z``, ... (u32)."""

    name: str
    ty: DType
    loc: Loc


@dataclass(frozen=True, slots=True)
class BinOp:
    """``a op b``; ``op`` is a Python operator spelling (``+ - * // / % ** << >> & | ^ < <= == != >
    >= and or``). ``//`` and ``%`` on integers truncate toward zero (C and WGSL semantics)."""

    op: str
    a: Expr
    b: Expr
    ty: DType
    loc: Loc


@dataclass(frozen=True, slots=True)
class UnOp:
    """``-a``, ``not a`` or ``~a``."""

    op: str
    a: Expr
    ty: DType
    loc: Loc


@dataclass(frozen=True, slots=True)
class Cast:
    """A conversion of ``a`` to ``ty``."""

    a: Expr
    ty: DType
    loc: Loc


@dataclass(frozen=True, slots=True)
class Call:
    """A math builtin: ``sqrt exp log sin cos tanh abs min max floor ceil pow fma``."""

    fn: str
    args: tuple[Expr, ...]
    ty: DType
    loc: Loc


@dataclass(frozen=True, slots=True)
class Select:
    """``a if cond else b`` with both sides pure and free of memory reads (else lowered to an if)."""

    cond: Expr
    a: Expr
    b: Expr
    ty: DType
    loc: Loc


@dataclass(frozen=True, slots=True)
class Load:
    """``array[index]``; ``checked`` loads read 0 out of bounds (``index`` not below the array's
    length, or ``guard`` false: a tensor index outside its shape)."""

    array: str
    index: Expr
    ty: DType
    loc: Loc
    checked: bool = False
    guard: Expr | None = None


@dataclass(frozen=True, slots=True)
class VecNew:
    """A vector of type ``ty`` from one scalar per lane, or from one scalar for every lane (a splat)."""

    args: tuple[Expr, ...]
    ty: DType
    loc: Loc


@dataclass(frozen=True, slots=True)
class VecGet:
    """Lane ``lane`` (a constant) of the vector ``v``: ``v.x``, ``v[2]``."""

    v: Expr
    lane: int
    ty: DType
    loc: Loc


Expr = Const | Var | Builtin | BinOp | UnOp | Cast | Call | Select | Load | VecNew | VecGet

# ---------------------------------------------------------------------------------------- statements


@dataclass(frozen=True, slots=True)
class Assign:
    """``name = value`` (the local is declared at the top of the kernel)."""

    name: str
    value: Expr
    loc: Loc


@dataclass(frozen=True, slots=True)
class Store:
    """``array[index] = value``; ``checked`` stores drop out-of-bounds writes (as :class:`Load`).
    With ``lane`` (an integer expression, constant or not), ``value`` is a scalar written into that
    lane of the vector element alone: ``array[index][lane] = value`` (the other lanes, which other
    units may be writing, are left alone)."""

    array: str
    index: Expr
    value: Expr
    loc: Loc
    checked: bool = False
    guard: Expr | None = None
    lane: Expr | None = None


@dataclass(frozen=True, slots=True)
class Atomic:
    """``out = atomic_<op>(array, index, *args)``; ``out`` is None when the old value is unused."""

    op: str
    array: str
    index: Expr
    args: tuple[Expr, ...]
    out: str | None
    ty: DType
    loc: Loc
    checked: bool = False
    guard: Expr | None = None


@dataclass(frozen=True, slots=True)
class If:
    """``if cond: then else: orelse``."""

    cond: Expr
    then: Block
    orelse: Block
    loc: Loc


@dataclass(frozen=True, slots=True)
class RangeFor:
    """``for var in range(start, stop, step)``; ``stop`` and ``step`` are evaluated once (the lowering
    copies them when the body could change them), ``step`` is a nonzero constant or a positive
    runtime value."""

    var: str
    start: Expr
    stop: Expr
    step: Expr
    body: Block
    loc: Loc

    @property
    def cmp(self) -> str:
        """How ``var`` is compared with ``stop``: ``>`` for a negative constant step, else ``<``."""
        return ">" if isinstance(self.step, Const) and self.step.value < 0 else "<"


@dataclass(frozen=True, slots=True)
class While:
    """``while cond: body``."""

    cond: Expr
    body: Block
    loc: Loc


@dataclass(frozen=True, slots=True)
class Break:
    """``break``."""

    loc: Loc


@dataclass(frozen=True, slots=True)
class Continue:
    """``continue``."""

    loc: Loc


@dataclass(frozen=True, slots=True)
class Return:
    """``return`` (kernels return nothing)."""

    loc: Loc


@dataclass(frozen=True, slots=True)
class Barrier:
    """``sync_cube()``: every unit of the cube waits here (uniform control flow only)."""

    loc: Loc


Stmt = Assign | Store | Atomic | If | RangeFor | While | Break | Continue | Return | Barrier


@dataclass(frozen=True, slots=True)
class Block:
    """A scope: statements in order."""

    stmts: tuple[Stmt, ...]


# ------------------------------------------------------------------------------------------- kernel


@dataclass(frozen=True, slots=True)
class ArrayParam:
    """A global array parameter: element type, atomic, whether it is written, hidden length name;
    for a ``Tensor[T]``, ``tensor`` and the rank its multi-indexing needs (None: not indexed)."""

    name: str
    elem: DType
    atomic: bool
    written: bool
    len_name: str | None
    tensor: bool = False
    rank: int | None = None


@dataclass(frozen=True, slots=True)
class HiddenParam:
    """A u32 scalar the launcher passes after the user's: ``what`` is ``len`` (an array's element
    count), ``shape``/``stride`` (dimension ``dim`` of a tensor) or ``rank`` (a tensor's)."""

    name: str
    array: str
    what: str
    dim: int = 0


@dataclass(frozen=True, slots=True)
class ScalarParam:
    """A scalar parameter (runtime value)."""

    name: str
    ty: DType


@dataclass(frozen=True, slots=True)
class ArrayDecl:
    """A ``shared`` (per cube) or ``local`` (per unit) array of comptime size."""

    name: str
    elem: DType
    size: int
    space: str
    loc: Loc


@dataclass(frozen=True, slots=True)
class KernelIR:
    """A specialized kernel: params in launch order (arrays, scalars, hidden lengths), locals, body."""

    name: str
    arrays: tuple[ArrayParam, ...]
    scalars: tuple[ScalarParam, ...]
    locals: tuple[tuple[str, DType], ...]
    decls: tuple[ArrayDecl, ...]
    body: Block
    cube_dim: tuple[int, int, int]
    checked: bool
    #: The array and scalar param names in the user's declared order (hidden scalars follow them).
    order: tuple[str, ...]
    #: The hidden u32 scalars, in the order they follow the user's scalars.
    hidden: tuple[HiddenParam, ...] = ()

    def array(self, name: str) -> ArrayParam | ArrayDecl:
        """The global array param or declared array called ``name``."""
        for a in self.arrays:
            if a.name == name:
                return a
        for d in self.decls:
            if d.name == name:
                return d
        raise KeyError(name)

    @property
    def hidden_lengths(self) -> tuple[str, ...]:
        """The names of the hidden array lengths (a subset of :attr:`hidden`)."""
        return tuple(h.name for h in self.hidden if h.what == "len")

    @property
    def hidden_names(self) -> tuple[str, ...]:
        """The names of the hidden u32 scalars, in the order they follow the user's scalars."""
        return tuple(h.name for h in self.hidden)


def children(stmt: Stmt) -> tuple[Block, ...]:
    """The child blocks of a statement."""
    if isinstance(stmt, If):
        return (stmt.then, stmt.orelse)
    if isinstance(stmt, (RangeFor, While)):
        return (stmt.body,)
    return ()


def reads_memory(e: Expr) -> bool:
    """True when evaluating ``e`` reads an array."""
    if isinstance(e, Load):
        return True
    if isinstance(e, (BinOp,)):
        return reads_memory(e.a) or reads_memory(e.b)
    if isinstance(e, (UnOp, Cast)):
        return reads_memory(e.a)
    if isinstance(e, Call):
        return any(reads_memory(a) for a in e.args)
    if isinstance(e, Select):
        return reads_memory(e.cond) or reads_memory(e.a) or reads_memory(e.b)
    if isinstance(e, VecNew):
        return any(reads_memory(a) for a in e.args)
    if isinstance(e, VecGet):
        return reads_memory(e.v)
    return False


def nodes(root: object) -> Iterator[object]:
    """Every IR node under ``root`` (``root`` too): the dataclasses reached through the fields of
    nodes and the tuples they hold, types and locations left out. Walking the fields, not naming
    the node kinds, keeps a node kind added later covered."""
    stack: list[object] = [root]
    while stack:
        node = stack.pop()
        yield node
        for f in fields(node):  # type: ignore[arg-type]
            value = getattr(node, f.name)
            for v in value if isinstance(value, tuple) else (value,):
                if is_dataclass(v) and not isinstance(v, (type, DType, Loc)):
                    stack.append(v)


def scalar_types(k: KernelIR) -> frozenset[str]:
    """The names of every scalar type the kernel holds: its params', its locals', its shared and
    local arrays', and every expression's and statement's (a cast or a constant no local keeps),
    vectors by their lanes'."""
    found = {a.elem.scalar.name for a in k.arrays}
    found.update(s.ty.name for s in k.scalars)
    found.update(t.scalar.name for _, t in k.locals)
    found.update(d.elem.scalar.name for d in k.decls)
    types = (getattr(n, "ty", None) for n in nodes(k.body))
    found.update(t.scalar.name for t in types if isinstance(t, DType))
    return frozenset(found)
