"""The interpreter runs barrier-free kernels in large batches with ramp (slice) indexing; the result
must not depend on how the cubes are batched."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cubeplug.lang import interp, lanes
from cubeplug.lang.types import i32, u32
from tests.lang.batched_kernels import loops


class Launch:
    def __init__(self, count: tuple[int, int, int], dims: tuple[int, int, int]) -> None:
        self.count, self.cube_dim = count, dims


def run_loops(count: tuple[int, int, int], dims: tuple[int, int, int], checked: bool) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    n, w = 300, 6
    x = rng.uniform(-2, 7, n * w).astype(np.float32)
    arrays = {"x": x, "y": np.zeros(3 * n, np.float32), "z": np.zeros(n + 2, np.float32),
              "out": np.zeros(n, np.int32), "back": np.zeros(n, np.int32), "hist": np.zeros(4, np.uint32)}
    spec = loops.specialize_for("python", None, dims, checked, {})
    hidden = [np.uint32(len(arrays[h.array])) for h in spec.ir.hidden]
    spec.source(Launch(count, dims), *arrays.values(), np.uint32(w), *hidden)
    return list(arrays.values())


@pytest.mark.parametrize("checked", [True, False])
@pytest.mark.parametrize(("count", "dims"), [((10, 1, 1), (32, 1, 1)), ((5, 3, 1), (32, 1, 1)),
                                             ((3, 2, 2), (4, 2, 2))])
def test_batched_matches_per_cube(monkeypatch: Any, count: Any, dims: Any, checked: bool) -> None:
    assert interp.Interpreter(loops.specialize_for("python", None, dims, checked, {}).ir).flat
    batched = run_loops(count, dims, checked)
    for lanes_per_batch in (1, 64, 96):  # one cube per batch, then batches ending inside rows
        monkeypatch.setattr(interp, "FLAT_LANES", lanes_per_batch)
        monkeypatch.setattr(interp, "LANES", lanes_per_batch)
        for got, want in zip(run_loops(count, dims, checked), batched):
            np.testing.assert_array_equal(got, want)


def test_ramp_compare_matches_numpy() -> None:
    rng = np.random.default_rng(1)
    for _ in range(300):
        start, step = int(rng.integers(-50, 50)), int(rng.choice([-3, -1, 1, 2, 5]))
        n = int(rng.integers(1, 40))
        r = lanes.make(start, step, n, i32.np)
        assert isinstance(r, lanes.Ramp)
        np.testing.assert_array_equal(r.array(), start + step * np.arange(n))
        s = int(rng.integers(-80, 80))
        for op, fn in (("<", np.less), ("<=", np.less_equal), (">", np.greater), (">=", np.greater_equal),
                       ("==", np.equal), ("!=", np.not_equal)):
            np.testing.assert_array_equal(lanes.compare(op, r, s), fn(r.array(), s), err_msg=f"{r} {op} {s}")


def test_ramp_leaves_its_type_range_as_an_array() -> None:
    r = lanes.make(0, 1, 10, u32.np)
    assert isinstance(r, lanes.Ramp)
    assert lanes.binary("-", r, np.uint32(1), u32) is None  # wraps below 0: left to the arrays
    assert lanes.unary("-", r, u32) is None
    assert lanes.cast(r, i32) == lanes.Ramp(0, 1, 10, i32.np)
    assert lanes.binary("*", r, np.uint32(0), u32) == np.uint32(0)


def test_ramp_span_is_where_the_comparison_holds() -> None:
    rng = np.random.default_rng(2)
    for _ in range(300):
        step = int(rng.choice([-3, -1, 1, 2, 5]))
        r = lanes.make(int(rng.integers(-50, 50)), step, int(rng.integers(1, 40)), i32.np)
        s = int(rng.integers(-80, 80))
        for op in lanes.ORDERED:
            got = lanes.span(op, r, i32.np.type(s))
            assert got is not None
            # numpy's answer, not lanes.compare's: both of lanes' answers come from one _switch
            values = r.start + r.step * np.arange(r.n, dtype=np.int64)
            holds = np.flatnonzero({"<": values < s, "<=": values <= s, ">": values > s,
                                    ">=": values >= s, "==": values == s}[op])
            assert got == ((holds[0], holds[-1] + 1) if len(holds) else (got[0], got[0])), (r, op, s)
            assert got[1] - got[0] == len(holds)


def test_tile_cut_is_the_units_in_bounds() -> None:
    rng = np.random.default_rng(4)
    for _ in range(2000):
        start, step = int(rng.integers(-40, 40)), int(rng.integers(1, 5))
        units, size = int(rng.integers(1, 20)), int(rng.integers(1, 40))
        t = lanes.Tile(start, step, units, 2, np.dtype(np.int64))
        values = start + step * np.arange(units)
        inside = np.flatnonzero((values >= 0) & (values < size))
        cut = t.cut(size)
        assert cut is not None
        lo, hi, sl = cut
        assert hi - lo == len(inside) and (not len(inside) or (lo, hi - 1) == (inside[0], inside[-1]))
        assert list(range(size)[sl]) == list(values[lo:hi])
        np.testing.assert_array_equal(t.array(), np.tile(values, 2))
    assert lanes.Tile(5, -1, 4, 1, np.dtype(np.int64)).cut(10) is None  # reversed: gathers
