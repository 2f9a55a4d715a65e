"""What the lang-written std ops share: the operators they combine with, as one ``@cl.func``, and
the element types they take, gated by the device's declared capabilities.

An operator is a comptime int (:data:`SUM`, :data:`PROD`, :data:`MAX`, :data:`MIN`) handed to
:func:`combine` from a kernel with the comptime dtype; the branches on them fold when the kernel
is specialized, so each (op, dtype) pair compiles to straight code. ``max``/``min`` of floats
propagate NaN as numpy's ``max`` does: the result is NaN when either side is (the comparisons are
written so, not with C's ``fmax``, which drops NaN). NaN is tested as ``not (a == a)``, not
``a != a``: on WebGPU the language's ``!=`` becomes an *ordered* not-equal (false when a side is
NaN), while ``==`` is ordered everywhere.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cubeplug import lang as cl
from cubeplug.core.errors import ValidationError
from cubeplug.core.kernel import DTYPES as NUMPY_DTYPES
from cubeplug.core.kernel import dtype_of

SUM = 0
PROD = 1
MAX = 2
MIN = 3
#: The operators by their public names.
OPS = {"sum": SUM, "prod": PROD, "max": MAX, "min": MIN}
#: Element types of the lang-written ops (each where the device declares it).
DTYPES = ("f16", "f32", "f64", "i32", "u32")
#: Element types the ops load and accumulate as 16-byte 4-lane vectors (``Vec[T, 4]``): f64 has no
#: vectors in the language, and f16's are 8 bytes, which only matmul loads (accumulating in f32).
VECTOR_DTYPES = ("f32", "i32", "u32")


@cl.func
def is_nan(v: Any) -> Any:
    """True for NaN. Not ``v != v``: on WebGPU that is an ordered comparison, false for NaN."""
    return not (v == v)  # noqa: SIM201


@cl.func
def combine(op: int, T: cl.DType, a: Any, b: Any) -> Any:
    """``a op b`` of dtype ``T``; NaN-propagating for max and min of floats (the NaN test is left
    out for integers, where it is always false)."""
    if op == SUM:
        return a + b
    if op == PROD:
        return a * b
    if T.is_float:
        if op == MAX:
            return a if (a > b or is_nan(a)) else b
        return a if (a < b or is_nan(a)) else b
    if op == MAX:
        return a if a > b else b
    return a if a < b else b


@cl.func
def start(op: int, T: cl.DType, src: Any, row: Any, line: bool) -> Any:
    """The start value of a unit's fold by ``op``: 0 (sum), 1 (prod), or for max/min an element of
    the input itself, which changes nothing, so no -inf literal is needed: ``src[row, 0]`` of a
    Tensor when ``line`` (comptime), else ``src[0]`` (read only for max/min). Every reduction kernel
    starts from it; the host's identities (:func:`identity`) serve empty inputs, atomic results and
    the scan."""
    acc = T(0)
    if op == PROD:
        acc = T(1)
    if op >= MAX:
        acc = src[row, 0] if line else src[0]
    return acc


def op_code(op: Any, what: str, allowed: tuple[str, ...] = tuple(OPS)) -> int:
    """The comptime code of the operator named ``op``, else ValidationError."""
    if not isinstance(op, str) or op not in allowed:
        raise ValidationError(f"{what}: op must be one of {', '.join(map(repr, allowed))}, got {op!r}")
    return OPS[op]


def element_type(client: Any, dtype: Any, what: str, allowed: tuple[str, ...] = DTYPES) -> str:
    """The dtype name of ``dtype`` when the std op takes it (one of ``allowed``) and ``client``'s
    device declares it."""
    try:
        name = dtype_of(dtype)
    except Exception as e:
        raise ValidationError(f"{what}: {dtype!r} is not a dtype; use one of {', '.join(allowed)}") from e
    if name not in allowed:
        raise ValidationError(f"{what}: dtype {name} is not supported; use one of {', '.join(allowed)}")
    declared = client.capabilities.dtypes
    if name not in declared:
        raise ValidationError(
            f"{what}: the {client.backend} device does not support {name} (it declares "
            f"{', '.join(sorted(d for d in declared if d in allowed))}); convert the data to one of those"
        )
    return name


def lang_type(name: str) -> Any:
    """The ``cl`` dtype object of a dtype name (the comptime value a kernel's ``T`` takes)."""
    return getattr(cl, name)


def identity(op: int, name: str) -> Any:
    """The neutral element of ``op`` on ``name`` as a numpy scalar (-inf/+inf, or the integer
    extremes, for max/min)."""
    dt = NUMPY_DTYPES[name]
    if op == SUM:
        return dt.type(0)
    if op == PROD:
        return dt.type(1)
    if dt.kind == "f":
        return dt.type(-np.inf if op == MAX else np.inf)
    info = np.iinfo(dt)
    return dt.type(info.min if op == MAX else info.max)
