"""The types of the kernel language: scalar dtypes, ``Array[T]``, ``Tensor[T]``, ``Atomic[T]``,
``Comptime[T]``.

A :class:`DType` (``f32``, ``u32``, ...) is both a type annotation and, inside a kernel, a cast:
``f32(x)``. Called from plain Python it converts to the numpy scalar.
"""

from __future__ import annotations

import functools
import typing
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, eq=True)
class DType:
    """An element type of the language: a scalar, or a vector of ``lanes`` scalars (``Vec[T, W]``,
    named ``f32x4``; ``kind`` and ``bits`` are its scalar's)."""

    name: str
    kind: str  # "f", "i", "u" or "b"
    bits: int
    lanes: int = 1

    @functools.cached_property
    def np(self) -> np.dtype[Any]:
        """The numpy dtype (of one lane for a vector)."""
        return np.dtype(_NP[self.scalar.name])

    @property
    def scalar(self) -> DType:
        """The scalar type of a vector's lanes (the type itself for a scalar)."""
        if self.lanes == 1:
            return self
        return DTYPES[self.name.rsplit("x", 1)[0]]

    @property
    def is_vector(self) -> bool:
        """True for ``Vec[T, W]`` with W > 1."""
        return self.lanes > 1

    @property
    def is_float(self) -> bool:
        """True for f16, f32, f64."""
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        """True for signed and unsigned integers."""
        return self.kind in "iu"

    def __call__(self, *values: Any) -> Any:
        """Outside kernels: the numpy scalar of this dtype (a numpy array for a vector)."""
        if self.lanes > 1:
            return np.broadcast_to(np.asarray(values, self.np), (self.lanes,)).copy()
        (value,) = values
        return self.np.type(value)

    def __repr__(self) -> str:
        return self.name

    def __str__(self) -> str:
        return self.name


_NP = {
    "f16": "float16", "f32": "float32", "f64": "float64", "i32": "int32", "u32": "uint32",
    "i64": "int64", "u64": "uint64", "bool": "bool",
}
f16 = DType("f16", "f", 16)
f32 = DType("f32", "f", 32)
f64 = DType("f64", "f", 64)
i32 = DType("i32", "i", 32)
u32 = DType("u32", "u", 32)
i64 = DType("i64", "i", 64)
u64 = DType("u64", "u", 64)
bool_ = DType("bool", "b", 8)
DTYPES: dict[str, DType] = {t.name: t for t in (f16, f32, f64, i32, u32, i64, u64, bool_)}


#: Scalar types a vector may hold, and the vector widths.
VECTOR_ELEMS = ("f16", "f32", "i32", "u32")
VECTOR_WIDTHS = (1, 2, 4)


class Vec:
    """``Vec[f32, 4]``: a vector of 2 or 4 lanes (``Vec[T, 1]`` is ``T``), as an array element
    (``Array[Vec[f32, 4]]``, bound to a ``Buffer(..., vector=4)``), a local, or constructed in a
    kernel: ``Vec[f32, 4](a, b, c, d)`` or ``Vec[f32, 4](s)`` (every lane ``s``)."""

    def __class_getitem__(cls, args: Any) -> DType:
        if not (isinstance(args, tuple) and len(args) == 2):
            raise TypeError("Vec takes an element type and a width: Vec[f32, 4]")
        elem, width = args
        # ``object``: get_origin's overloads type its result as ParamSpec for an Any argument.
        origin: object = typing.get_origin(width)
        if origin is typing.Literal:  # Vec[f32, Literal[4]], for type checkers
            (width,) = typing.get_args(width)
        if not isinstance(elem, DType) or elem.name not in VECTOR_ELEMS:
            raise TypeError(f"Vec elements are one of {', '.join(VECTOR_ELEMS)}, got {elem!r}")
        if width not in VECTOR_WIDTHS or isinstance(width, bool):
            raise TypeError(f"Vec widths are 1, 2 or 4, got {width!r}")
        if width == 1:
            return elem
        return DType(f"{elem.name}x{width}", elem.kind, elem.bits, width)


f32x2: DType = Vec.__class_getitem__((f32, 2))
f32x4: DType = Vec.__class_getitem__((f32, 4))
i32x2: DType = Vec.__class_getitem__((i32, 2))
i32x4: DType = Vec.__class_getitem__((i32, 4))
u32x2: DType = Vec.__class_getitem__((u32, 2))
u32x4: DType = Vec.__class_getitem__((u32, 4))


@dataclass(frozen=True)
class ArrayType:
    """``Array[T]`` or ``Array[Atomic[T]]``: a global buffer parameter."""

    elem: Any
    atomic: bool = False


@dataclass(frozen=True)
class TensorType:
    """``Tensor[T]``: a global buffer with a shape and strides, bound to a ``cubeplug.Tensor``."""

    elem: Any


@dataclass(frozen=True)
class AtomicType:
    """``Atomic[T]`` (i32 or u32): the element type of an atomic array."""

    elem: Any


@dataclass(frozen=True)
class ComptimeType:
    """``Comptime[int|bool|float|DType]``: a value fixed when the kernel is specialized."""

    of: Any


class Array:
    """``Array[T]``: a kernel parameter bound to a buffer (read/write access inferred from use)."""

    def __class_getitem__(cls, elem: Any) -> ArrayType:
        if isinstance(elem, AtomicType):
            return ArrayType(elem.elem, atomic=True)
        return ArrayType(elem)


class Tensor:
    """``Tensor[T]``: a kernel parameter bound to a ``cubeplug.Tensor`` (a handle with a shape and
    strides in elements). Inside the kernel: ``t.shape[d]``, ``t.stride[d]`` (comptime ``d``),
    ``t.rank`` and ``t[i, j, ...]`` (one index per dimension, through the strides)."""

    def __class_getitem__(cls, elem: Any) -> TensorType:
        return TensorType(elem)


class Atomic:
    """``Atomic[i32]`` / ``Atomic[u32]``: elements updated with ``atomic_add`` and friends."""

    def __class_getitem__(cls, elem: Any) -> AtomicType:
        return AtomicType(elem)


class Comptime:
    """``Comptime[int]``, ``Comptime[bool]``, ``Comptime[float]``, ``Comptime[DType]``: a
    specialization parameter passed by keyword at launch and folded away in the generated code."""

    def __class_getitem__(cls, of: Any) -> ComptimeType:
        return ComptimeType(of)


def unify_literal(ty: DType, value: int | float | bool) -> bool:
    """True when a Python literal can adopt ``ty`` (an int literal adopts any numeric type, a float
    literal only float types, a bool only bool)."""
    if isinstance(value, bool):
        return ty.kind == "b"
    if isinstance(value, int):
        return ty.kind in "iuf"
    return ty.is_float
