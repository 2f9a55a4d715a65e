"""What the elementwise std ops (``fill``, ``copy``, ``axpy``) share: the cube size, the dtypes they
take, and the choice between their two kernels, both written in :mod:`cubeplug.lang`.

Each op has a ``scalar`` kernel (a grid-stride loop over elements: any alignment, any count) and a
``vector`` kernel, which reads and writes 16 bytes per access through ``Array[Vec[..., 4]]`` views
of the first ``16 * (nbytes // 16)`` bytes, while unit 0 of cube 0 does the last elements. The
vector kernel runs when every view starts 16-byte aligned and there is at least one vector; both
launch at most :data:`~cubeplug.std.checks.MAX_GROUPS` cubes, each unit looping over the rest.
"""

from __future__ import annotations

from collections.abc import Sequence

from cubeplug.core.handle import Handle
from cubeplug.core.kernel import CubeCount
from cubeplug.std import checks

#: Units per cube of every elementwise kernel.
CUBE = 256
#: Bytes of one vector access (``Vec[u32, 4]``, ``Vec[f32, 4]``).
VECTOR_BYTES = 16
#: Element types of fill and copy (each where the device declares it).
DATA_DTYPES = ("f16", "f32", "f64", "i32", "u32", "i64", "u64")
#: Element types of axpy.
FLOAT_DTYPES = ("f16", "f32", "f64")


def vector_ok(handles: Sequence[Handle], nbytes: int) -> bool:
    """True when every handle's view is 16-byte aligned and ``nbytes`` hold at least one vector."""
    return nbytes >= VECTOR_BYTES and all(h.start % VECTOR_BYTES == 0 for h in handles)


def vectors(handles: Sequence[Handle], nbytes: int) -> list[Handle]:
    """The vector views of ``handles``: their first ``16 * (nbytes // 16)`` bytes."""
    whole = nbytes - nbytes % VECTOR_BYTES
    return [checks.prefix(h, whole) for h in handles]


def cubes(items: int) -> CubeCount:
    """The cube count of a grid-stride loop over ``items`` (one item per unit, at most MAX_GROUPS cubes)."""
    return CubeCount(checks.groups(items, CUBE))
