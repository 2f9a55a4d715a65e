"""The ``c`` generator's index arithmetic of shared and local arrays (``CGen.signed_index``)."""

from __future__ import annotations

from typing import Any

import numpy as np

import cubeplug
from cubeplug import lang as cl
from cubeplug.lang import Array, f32, i32, u32

DTYPES = frozenset({"f32", "u32", "i32"})
CUBE = 64


@cl.kernel
def shuffled(x: Array[f32], out: Array[f32], k: u32) -> None:
    """Each unit stages its element in shared memory and a local array, then reads another unit's
    through indices whose intermediate values leave [0, 2**32) and come back (``u + 3 - 5 + 2``
    below zero for units 0 and 1), and through a product of sums."""
    tile = cl.shared(f32, CUBE)
    mine = cl.local(f32, 4)
    u = cl.UNIT_POS_X
    tile[u] = x[cl.ABSOLUTE_POS_X]
    for j in range(4):
        mine[j] = x[cl.ABSOLUTE_POS_X] * f32(j)
    cl.sync_cube()
    back = tile[u + 3 - 5 + 2]  # u itself, through values below zero
    rows = tile[((u // 8 + 1) * 8 + u % 8) % CUBE]  # the unit one row (8 units) further on
    out[cl.ABSOLUTE_POS_X] = back + rows * f32(k) + mine[k - 1 + 1 - k + 3]


@cl.kernel
def signed_index(x: Array[f32], out: Array[f32]) -> None:
    """A shared array indexed in i32: C's own signed arithmetic, nothing to convert."""
    tile = cl.shared(f32, CUBE)
    u = cl.UNIT_POS_X
    tile[u] = x[cl.ABSOLUTE_POS_X]
    cl.sync_cube()
    out[cl.ABSOLUTE_POS_X] = tile[(i32(u) + 1) % CUBE]


def _source(checked: bool) -> str:
    made: str = shuffled.specialize_for("c", DTYPES, (CUBE, 1, 1), checked, {}).source
    return made


def test_unchecked_indices_of_shared_and_local_arrays_take_the_index_type() -> None:
    source = _source(checked=False)
    assert "#define CL_IX int" in source and "#define CL_IX unsigned int" in source
    # shared and local arrays: + - * in CL_IX, other operands converted; constants stay int
    assert "tile[((((CL_IX)u) + 3) - 5) + 2]" in source
    assert "mine[(((((CL_IX)k) - 1) + 1) - ((CL_IX)k)) + 3]" in source
    # an operand of another operator is computed as the language says, then converted
    assert "tile[(CL_IX)(((((u / 8u) + 1u) * 8u) + (u % 8u)) % 64u)]" in source
    # global arrays keep the language's u32 arithmetic
    assert "x[ABSOLUTE_POS_X]" in source and "out[ABSOLUTE_POS_X] =" in source


def test_i32_indices_stay_as_they_are() -> None:
    source = signed_index.specialize_for("c", DTYPES, (CUBE, 1, 1), False, {}).source
    assert "= tile[((((int)(u)) + 1) % 64)];" in source  # as the expression is
    assert "tile[(CL_IX)u] =" in source  # a u32 index beside it


def test_checked_indices_keep_the_language_arithmetic() -> None:
    # An access the bounds check guards keeps u32 arithmetic, in the test and in the access; one
    # proven in bounds (``tile[u]``) needs no check and takes CL_IX.
    source = _source(checked=True)
    assert "(((u + 3u) - 5u) + 2u) < 64u ? tile[(((u + 3u) - 5u) + 2u)] : 0.0f" in source
    assert "mine[((((k - 1u) + 1u) - k) + 3u)]" in source
    assert "tile[(CL_IX)u] =" in source


def test_indices_through_negative_intermediates_read_the_same_element(client: Any) -> None:
    # On CUDA the index is int arithmetic, elsewhere u32 (OpenCL) or the interpreter's and WGSL's:
    # every backend must read the same elements.
    n = 4 * CUBE
    xs = np.arange(1, n + 1, dtype=np.float32)
    x, out = client.create(xs), client.empty(4 * n)
    shuffled.launch_unchecked(client, cubeplug.CubeCount(n // CUBE), CUBE, x, out, 2)
    u = np.arange(n) % CUBE
    base = np.arange(n) - u
    rows = xs[base + ((u // 8 + 1) * 8 + u % 8) % CUBE]
    want = xs + rows * 2 + xs * 3
    np.testing.assert_array_equal(client.to_numpy(out, "f32"), want)
