"""What lowering keeps track of: arrays bound to names, frames of names (the kernel, each inlined
``@cl.func``), per-array state, and small AST helpers."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from cubeplug.lang import ir
from cubeplug.lang.source import Captured
from cubeplug.lang.types import DType


@dataclass(frozen=True)
class ArrayRef:
    """A name bound to an array: a global param (an ``Array`` or a ``Tensor``), a ``shared`` or a
    ``local`` array."""

    name: str
    elem: DType
    atomic: bool
    space: str
    size: int | None
    tensor: bool = False


@dataclass
class Frame:
    """The names of one function being lowered: the kernel, or an inlined ``@cl.func``."""

    captured: Captured
    env: dict[str, Any]
    counts: dict[str, int]
    suffix: str
    is_func: bool
    #: A helper with early returns: each ``return e`` assigns its result local.
    returns: bool = False


@dataclass
class ArrayState:
    """A global array parameter's element type, whether it is written and whether its length is
    used; for a tensor, the rank its indexing needs and its hidden metadata ((what, dim) -> name)."""

    elem: DType
    atomic: bool
    written: bool = False
    len_name: str = ""
    len_used: bool = False
    tensor: bool = False
    rank: int | None = None
    meta: dict[tuple[str, int], str] = field(default_factory=dict)


@dataclass
class Lowered:
    """The result of lowering: the kernel IR and the order of the user's positional arguments."""

    ir: ir.KernelIR
    #: Per positional (non-comptime) parameter: ("array" | "scalar", IR name).
    signature: tuple[tuple[str, str], ...]
    arg_names: tuple[str, ...] = field(default=())


def assign_counts(fn: ast.FunctionDef) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    counts[t.id] = counts.get(t.id, 0) + 1
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            counts[node.target.id] = counts.get(node.target.id, 0) + 1
        elif isinstance(node, (ast.AugAssign, ast.For)) and isinstance(node.target, ast.Name):
            counts[node.target.id] = counts.get(node.target.id, 0) + 2
    return counts


def hashable(v: Any) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True


def is_comptime_ann(node: ast.expr) -> bool:
    text = ast.unparse(node)
    return "Comptime" in text


def describe(node: ast.AST) -> str:
    try:
        text = ast.unparse(node)
    except Exception:
        text = type(node).__name__
    first = text.splitlines()[0] if text else type(node).__name__
    return first if len(first) <= 60 else first[:57] + "..."
