"""Lane values of the interpreter: :func:`cubeplug.lang.lanes.select` against ``numpy.where``."""

from __future__ import annotations

import numpy as np
import pytest

from cubeplug.lang import lanes
from cubeplug.lang.types import u32 as U32

DTYPES = ("float16", "float32", "float64", "int32", "uint32", "int64", "bool")


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8)


@pytest.mark.parametrize("name", DTYPES)
def test_select_is_numpy_where_bit_for_bit(name: str) -> None:
    dt = np.dtype(name)
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 256, size=(257, 8), dtype=np.uint8)  # every bit pattern: NaNs, -0.0, extremes
    a = raw[:, : dt.itemsize].copy().view(dt).reshape(-1) if name != "bool" else raw[:, 0] > 127
    b = raw[:, 8 - dt.itemsize:].copy().view(dt).reshape(-1) if name != "bool" else raw[:, 1] > 127
    c = rng.random(257) < 0.5
    got = lanes.select(c, a, b, dt)
    assert got.dtype == dt and got.shape == a.shape
    np.testing.assert_array_equal(_bits(got), _bits(np.where(c, a, b)))


def test_select_broadcasts_scalars_and_vector_rows() -> None:
    f32 = np.dtype(np.float32)
    c = np.array([True, False, True])
    np.testing.assert_array_equal(lanes.select(c, np.float32(-0.0), np.float32(2), f32), [-0.0, 2, -0.0])
    assert np.signbit(lanes.select(c, np.float32(-0.0), np.float32(2), f32)[0])
    rows = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(lanes.select(c[:, None], rows, np.float32(np.nan), f32),
                                  np.where(c[:, None], rows, np.float32(np.nan)))
    # operands of another dtype are converted first, as numpy.where(...).astype(dtype) does
    got = lanes.select(c, np.array([1.9, -2.9, 3.5]), np.int64(-1), np.dtype(np.int32))
    np.testing.assert_array_equal(got, [1, -1, 3])


def test_tiles_with_a_row_step_are_their_lane_values() -> None:
    u32 = np.dtype(np.uint32)
    units, rows = 4, 3
    unit = lanes.Tile(0, 1, units, rows, u32)
    cube = lanes.position("CUBE_POS_X", (8, 1, 1), (units, 1, 1), 2, 2 + rows)
    assert isinstance(cube, lanes.Tile) and cube.row == 1
    np.testing.assert_array_equal(cube.array(), np.repeat([2, 3, 4], units))
    # CUBE_POS * 16 + 2 * UNIT_POS + 1, as the interpreter's lane rules build it
    scaled = lanes.binary("*", unit, u32.type(2), U32)
    t = lanes.binary("+", lanes.binary("*", cube, u32.type(16), U32), scaled, U32)
    t = lanes.binary("+", t, u32.type(1), U32)
    want = np.repeat([2, 3, 4], units) * 16 + np.tile(np.arange(units), rows) * 2 + 1
    assert isinstance(t, lanes.Tile) and (t.step, t.row) == (2, 16)
    np.testing.assert_array_equal(t.array(), want)
    assert t.bounds() == (want.min(), want.max())
    # a value out of the dtype's range is left to the array arithmetic, which wraps
    assert lanes.binary("-", u32.type(0), t, U32) is None
    # one cube: a scalar
    assert lanes.position("CUBE_POS_X", (8, 1, 1), (units, 1, 1), 5, 6) == 5
    # a batch that spans two rows of the grid: an array
    assert isinstance(lanes.position("CUBE_POS_X", (4, 2, 1), (units, 1, 1), 3, 5), np.ndarray)
