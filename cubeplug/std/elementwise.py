"""What the elementwise std ops (``fill``, ``copy``, ``axpy``) share: the cube size, the dtypes they
take, what each call needs of its dtype (worked out once per dtype), and the choice between their
two kernels, both written in :mod:`cubeplug.lang`.

Each op has a ``scalar`` kernel (a grid-stride loop over elements: any alignment, any count) and a
``vector`` kernel, which reads and writes 16 bytes per access through ``Array[Vec[..., 4]]`` views
of the first ``16 * (nbytes // 16)`` bytes, while unit 0 of cube 0 does the last elements. The
vector kernel runs when every view starts 16-byte aligned and there is at least one vector; both
launch at most :data:`~cubeplug.std.checks.MAX_GROUPS` cubes, each unit looping over the rest.

These ops are a few microseconds of device work on small inputs, and the WebGPU scheduler encodes
up to 64 launches before it submits, so their host cost per call adds to what a caller waits for:
everything that depends only on the dtype (:class:`Element`) or on the cube count is made once,
and a call looks it up (bench/probes/std_host_cost.py measures the cost per call).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cubeplug.core.handle import Handle
from cubeplug.core.kernel import DTYPES, CubeCount
from cubeplug.std import checks
from cubeplug.std.combine import element_type, lang_type

#: Units per cube of every elementwise kernel.
CUBE = 256
#: Bytes of one vector access (``Vec[u32, 4]``, ``Vec[f32, 4]``).
VECTOR_BYTES = 16
#: Element types of fill and copy (each where the device declares it).
DATA_DTYPES = ("f16", "f32", "f64", "i32", "u32", "i64", "u64")
#: Element types of axpy.
FLOAT_DTYPES = ("f16", "f32", "f64")


@dataclass(frozen=True)
class Element:
    """What an elementwise call needs of its element type."""

    #: The dtype's name (``"f32"``).
    name: str
    #: Bytes of one element.
    size: int
    #: The ``cl`` dtype (the comptime ``T`` of the kernels).
    T: Any
    #: Elements in one 16-byte vector.
    per: int
    #: The ``cl`` dtype that moves the element's bits: ``u32`` for the 4-byte dtypes (their bits are
    #: stored as words, so that no float store can touch a NaN's payload), else ``T``.
    word: Any


ELEMENTS = {
    name: Element(name, DTYPES[name].itemsize, lang_type(name), VECTOR_BYTES // DTYPES[name].itemsize,
                  lang_type("u32") if DTYPES[name].itemsize == 4 else lang_type(name))
    for name in DATA_DTYPES
}  # fmt: skip


#: The dtype spellings :class:`Elements` remembers: names, numpy dtypes and scalar types. Not values
#: such as ``np.float32(1.0)``, which ``dtype_of`` takes too: values of different types compare
#: and hash equal (``np.float64(1.0) == np.float32(1.0) == 1``), and not unhashable objects.
_SPELLINGS = (str, type, np.dtype)


class Elements:
    """The element types one op takes (``allowed``), looked up by the dtype as the caller gave it
    (a name, a numpy dtype or scalar type): :func:`~cubeplug.std.combine.element_type` checks a
    dtype the first time it is given, and names the error; later calls take it from a dict, and
    check only that the client's device declares it. Other spellings go through ``element_type``
    every time (:data:`_SPELLINGS`)."""

    #: Most dtype spellings remembered per op (every spelling of the seven dtypes fits).
    LIMIT = 256

    def __init__(self, what: str, allowed: tuple[str, ...]) -> None:
        self.what = what
        self.allowed = allowed
        self._given: dict[Any, Element] = {}

    def __call__(self, client: Any, dtype: Any) -> Element:
        """The :class:`Element` of ``dtype``, or the ValidationError of ``element_type``."""
        plain = isinstance(dtype, _SPELLINGS)
        element = self._given.get(dtype) if plain else None
        if element is None or element.name not in client.capabilities.dtypes:
            element = ELEMENTS[element_type(client, dtype, self.what, self.allowed)]
            if plain and len(self._given) < self.LIMIT:
                self._given[dtype] = element
        return element


def vector_views(handles: Sequence[Handle], nbytes: int) -> list[Handle] | None:
    """The vector views of ``handles`` (their first ``16 * (nbytes // 16)`` bytes), or None when a
    view does not start 16-byte aligned or ``nbytes`` hold no whole vector (the scalar kernel's
    case)."""
    if nbytes < VECTOR_BYTES:
        return None
    whole = nbytes - nbytes % VECTOR_BYTES
    views = []
    for h in handles:
        if h.start % VECTOR_BYTES:
            return None
        views.append(checks.prefix(h, whole))
    return views


def cubes(items: int) -> CubeCount:
    """The cube count of a grid-stride loop over ``items`` (one item per unit, at most MAX_GROUPS
    cubes)."""
    return _cube_count(checks.groups(items, CUBE))


@functools.cache
def _cube_count(groups: int) -> CubeCount:
    """One CubeCount per count of cubes (at most MAX_GROUPS of them): a launch only reads it."""
    return CubeCount(groups)
