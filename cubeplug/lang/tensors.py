"""``Tensor[T]`` parameters: metadata and multi-dimensional indexing.

A tensor is a global array plus hidden u32 scalars that the launcher reads from the
``cubeplug.Tensor`` argument, as CubeCL's ``Tensor<T>`` passes its metadata: ``shape_<t>_<d>``,
``stride_<t>_<d>`` (in elements) and ``rank_<t>``, each only when the kernel uses it.
``t[i, j]`` is ``t[i * stride_0 + j * stride_1]``; a checked access is also guarded by
``i < shape_0 and j < shape_1`` (besides the buffer's length), so an index outside the shape is
dropped (a write) or reads 0 even where the strides would land inside the buffer (a padded row,
a transposed view).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from cubeplug.lang import access, infer, ir
from cubeplug.lang.errors import KernelTypeError
from cubeplug.lang.infer import Val, is_expr
from cubeplug.lang.lowering import Lowering
from cubeplug.lang.scope import ArrayRef
from cubeplug.lang.types import u32

#: Tensor attributes: ``shape`` and ``stride`` are indexed by a comptime dimension.
ATTRIBUTES = ("shape", "stride", "rank")


@dataclass(frozen=True)
class TensorMeta:
    """``t.shape`` or ``t.stride`` while lowering: indexed by a comptime dimension."""

    ref: ArrayRef
    what: str


def meta_var(lw: Lowering, ref: ArrayRef, what: str, dim: int, node: ast.AST) -> ir.Var:
    """The hidden scalar holding ``what`` (shape, stride, rank) of tensor ``ref`` (at ``dim``)."""
    st = lw.arrays[ref.name]
    key = (what, dim)
    name = st.meta.get(key)
    if name is None:
        base = f"rank_{ref.name}" if what == "rank" else f"{what}_{ref.name}_{dim}"
        name = lw.unique(base)
        st.meta[key] = name
        lw.hidden.append(ir.HiddenParam(name, ref.name, what, dim))
    return ir.Var(name, u32, lw.loc(node), "meta")


def attribute(lw: Lowering, ref: ArrayRef, node: ast.Attribute) -> Val:
    """``t.shape``, ``t.stride`` (to be indexed) or ``t.rank``."""
    if not ref.tensor or node.attr not in ATTRIBUTES:
        what = "a Tensor parameter" if ref.tensor else "an array"
        hint = " (tensors have shape, stride and rank)" if ref.tensor else (
            "; declare the parameter Tensor[T] for shape and strides")
        raise lw.syntax(f"{what} has no attribute {node.attr!r}{hint}", node, node.attr)
    if node.attr == "rank":
        return meta_var(lw, ref, "rank", 0, node)
    return TensorMeta(ref, node.attr)


def meta_index(lw: Lowering, meta: TensorMeta, node: ast.Subscript) -> ir.Var:
    """``t.shape[d]`` / ``t.stride[d]`` with a comptime ``d``."""
    d = lw.expr(node.slice)
    if is_expr(d) or not isinstance(d, int) or isinstance(d, bool) or d < 0:
        raise lw.syntax(f"{meta.what}[d] needs a comptime non-negative int dimension (a literal or a "
                        f"Comptime value)", node, f"{meta.what}[...]")
    return meta_var(lw, meta.ref, meta.what, d, node)


def index(lw: Lowering, ref: ArrayRef, node: ast.expr) -> tuple[ir.Expr, ir.Expr | None]:
    """``t[i, j, ...]`` as a flat u32 index through the strides, and the shape guard of a checked
    launch (None unchecked). The number of indices is the rank the launch must pass."""
    elts = node.elts if isinstance(node, ast.Tuple) else [node]
    loc = lw.loc(node)
    st = lw.arrays[ref.name]
    if st.rank is None:
        st.rank = len(elts)
    elif st.rank != len(elts):
        raise KernelTypeError(
            f"tensor {ref.name!r} is indexed with {len(elts)} indices here and {st.rank} elsewhere; "
            f"use one index per dimension", loc, "index", kernel=lw.name,
        )
    flat: Val = 0
    guard: Val = None
    for d, elt in enumerate(elts):
        i = infer.cast(access.index(lw, elt), u32, loc, "index")
        term = infer.binop("*", i, meta_var(lw, ref, "stride", d, elt), loc, "index")
        flat = infer.binop("+", flat, term, loc, "index")
        if lw.checked:
            inside = infer.binop("<", i, meta_var(lw, ref, "shape", d, elt), loc, "index")
            guard = inside if guard is None else infer.binop("and", guard, inside, loc, "index")
    return infer.to_expr(flat, loc, "index", u32), guard
