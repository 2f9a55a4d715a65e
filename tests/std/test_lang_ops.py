"""The lang-written std ops (map, reduce, argmax/argmin, reduce_axis, scan, transpose) against
numpy on every backend: every dtype the device declares, sizes that are not multiples of the cube
size, empty inputs, views at offsets, NaN/inf where the op defines them, and the error cases."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cubeplug import ValidationError, std
from cubeplug import lang as cl
from cubeplug.std import argreduce
from cubeplug.std import axis as axis_module
from cubeplug.std.combine import MAX, OPS, identity
from cubeplug.std.reduction import reduce_set
from cubeplug.std.transpose import transpose_set
from tests.std.ufuncs import fma3, neg, saxpy

DTYPES = ("f16", "f32", "f64", "i32", "u32")
SIZES = (1, 255, 257, 4099, 70001)
ACCUMULATE = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


def _dtype(client: Any, name: str) -> np.dtype[Any]:
    if name not in client.capabilities.dtypes:
        pytest.skip(f"the device does not declare {name}")
    return np.dtype({"f16": np.float16, "f32": np.float32, "f64": np.float64, "i32": np.int32,
                     "u32": np.uint32}[name])


def _data(dt: np.dtype[Any], n: int, seed: int = 0, high: float = 8.0) -> np.ndarray:
    rng = np.random.default_rng(seed + n)
    if dt.kind == "f":
        return (rng.random(n) * high - high / 4).astype(dt)
    return rng.integers(0, int(high), n).astype(dt)


def _sizes(dt: np.dtype[Any], sizes: tuple[int, ...]) -> list[int]:
    """f16 sums of many elements stall where the next addend is below half an ulp (numpy's at 4096
    for values near 1), in an order-dependent way: f16 is checked on small sizes."""
    return [n for n in sizes if dt.itemsize > 2 or n <= 257]


def _host(op: str, x: np.ndarray) -> Any:
    return getattr(x, op)(dtype=x.dtype) if op in ("sum", "prod") else getattr(x, op)()


def _close(got: Any, want: Any, dt: np.dtype[Any], n: int) -> bool:
    if dt.kind != "f":
        return bool(np.all(got == want))
    rtol = 1e-2 if dt.itemsize == 2 else 1e-4
    return bool(np.allclose(got, want, rtol=rtol, atol=rtol * np.log2(n + 2), equal_nan=True))


# ---------------------------------------------------------------------------------------- reduce
@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("op", tuple(OPS))
def test_reduce_matches_numpy(client: Any, name: str, op: str) -> None:
    dt = _dtype(client, name)
    for n in _sizes(dt, SIZES):
        # Products stay finite and exact enough: values near 1 (floats), 0/1 (integers).
        x = _data(dt, n, high=2.0) if op == "prod" else _data(dt, n)
        if op == "prod" and dt.kind == "f":
            x = (1 + (x.astype(np.float64) - 0.5) / n).astype(dt)
        got = client.to_numpy(std.reduce(client, client.create(x), n, op, name), name)[0]
        assert _close(got, _host(op, x), dt, n), (n, got, _host(op, x))


@pytest.mark.parametrize("op", tuple(OPS))
def test_every_reduce_candidate_is_correct(client: Any, op: str) -> None:
    x = _data(np.dtype(np.int32), 70001)
    if op == "prod":  # 3 ** 71, wrapped in int32 as numpy's prod(dtype=int32) wraps it
        x = np.ones(70001, np.int32)
        x[::997] = 3
    h = client.create(x)
    tunables = reduce_set(OPS[op], "i32")
    key = tunables.key(client, "full", h, 70001)
    ran = [t.name for t in tunables.tunables if t.can_run(client, key)]
    for t in tunables.tunables:
        if t.can_run(client, key):
            assert client.to_numpy(t.fn(client, h, 70001), "i32")[0] == _host(op, x), t.name
    assert {"tree", "tree_x16", "tree_x16_ilp4", "resident_ilp4"} <= set(ran)
    atomics = op != "prod" and bool(client.capabilities.atomics)
    assert ("atomic_x16_ilp4" in ran) == atomics and ("atomic_x16_ilp1" in ran) == atomics


def test_reduce_of_empty_inputs_and_of_views(client: Any) -> None:
    assert client.to_numpy(std.reduce(client, client.empty(0), 0, "sum", "i32"), "i32")[0] == 0
    assert client.to_numpy(std.reduce(client, client.empty(0), 0, "prod"), "f32")[0] == 1
    with pytest.raises(ValidationError, match="empty"):
        std.reduce(client, client.empty(0), 0, "max")
    off = max(16, client.capabilities.offset_alignment)
    x = np.arange(off // 4 + 1000, dtype=np.float32)
    h = client.create(x).offset_start(off)
    assert client.to_numpy(std.reduce(client, h, 999, "max"), "f32")[0] == x[off // 4 : off // 4 + 999].max()


def test_reduce_nan_and_inf(client: Any) -> None:
    x = np.array([1.0, np.inf, -np.inf, 3.0] * 100, dtype=np.float32)
    assert client.to_numpy(std.reduce(client, client.create(x), 400, "max"), "f32")[0] == np.inf
    assert client.to_numpy(std.reduce(client, client.create(x), 400, "min"), "f32")[0] == -np.inf
    assert np.isnan(client.to_numpy(std.reduce(client, client.create(x), 400, "sum"), "f32")[0])
    for at in (0, 301, 399):
        y = x.copy()
        y[at] = np.nan
        for op in ("max", "min"):
            assert np.isnan(client.to_numpy(std.reduce(client, client.create(y), 400, op), "f32")[0])


def test_reduce_errors(client: Any) -> None:
    h = client.create(np.ones(8, np.float32))
    with pytest.raises(ValidationError, match="op must be one of"):
        std.reduce(client, h, 8, "mean")
    with pytest.raises(ValidationError, match="not supported"):
        std.reduce(client, h, 8, dtype="i64")
    with pytest.raises(ValidationError, match="needs 36 B"):
        std.reduce(client, h, 9)
    missing = [d for d in DTYPES if d not in client.capabilities.dtypes]
    if missing:
        with pytest.raises(ValidationError, match="does not support"):
            std.reduce(client, h, 2, dtype=missing[0])


# ---------------------------------------------------------------------------------------- argmax
@pytest.mark.parametrize("name", ("f32", "f64", "i32", "u32"))
def test_argmax_argmin_match_numpy(client: Any, name: str) -> None:
    dt = _dtype(client, name)
    for n in (1, 257, 70001):
        x = _data(dt, n, high=50)  # many ties: the first index must win
        h = client.create(x)
        assert client.to_numpy(std.argmax(client, h, n, name), "u32")[0] == np.argmax(x)
        assert client.to_numpy(std.argmin(client, h, n, name), "u32")[0] == np.argmin(x)


def test_argmax_over_few_cubes_and_later_passes_over_many_partials(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two cubes for 70001 elements: each unit runs many steps of ILP loads (the sizes above run one).
    monkeypatch.setattr(argreduce, "MAX_CUBES", 2)
    x = np.floor(_data(np.dtype(np.float32), 70001, seed=3))  # many ties of the largest value
    h = client.create(x)
    assert client.to_numpy(std.argmax(client, h, x.size), "u32")[0] == np.argmax(x)
    assert client.to_numpy(std.argmin(client, h, x.size), "u32")[0] == np.argmin(x)
    # A later pass (its indices read from the partials') over 4096 partials: ILP steps there too;
    # ties go to the lowest original index, wherever its partial stands.
    vals = np.floor(_data(np.dtype(np.float32), 4096, seed=4))
    idx = np.random.default_rng(5).permutation(1 << 20)[:4096].astype(np.uint32)
    out_v, out_i = client.empty(4), client.empty(4)
    argreduce.arg_pass.launch_unchecked(client, 1, 256, client.create(vals), client.create(idx), out_v, out_i,
                                        vals.size, OP=MAX, FIRST=False, T=cl.f32)
    best = vals.max()
    assert client.to_numpy(out_i, "u32")[0] == idx[vals == best].min()
    assert client.to_numpy(out_v, "f32")[0] == best


def test_argmax_nan_inf_and_errors(client: Any) -> None:
    x = np.array([1.0, -np.inf, np.inf, 5.0, np.inf], dtype=np.float32)
    assert client.to_numpy(std.argmax(client, client.create(x), 5), "u32")[0] == 2
    assert client.to_numpy(std.argmin(client, client.create(x), 5), "u32")[0] == 1
    y = np.arange(70001, dtype=np.float32)
    y[[1700, 2500, 60000]] = np.nan
    assert client.to_numpy(std.argmax(client, client.create(y), 70001), "u32")[0] == 1700
    assert client.to_numpy(std.argmin(client, client.create(y), 70001), "u32")[0] == 1700
    y[0] = np.nan
    assert client.to_numpy(std.argmax(client, client.create(y), 70001), "u32")[0] == 0
    with pytest.raises(ValidationError, match="empty"):
        std.argmax(client, client.empty(0), 0)


# ---------------------------------------------------------------------------------------- axis
@pytest.mark.parametrize("name", ("f32", "i32"))
def test_reduce_axis_matches_numpy(client: Any, name: str) -> None:
    dt = _dtype(client, name)
    for shape in ((1, 1), (3, 300), (257, 5)):
        a = _data(dt, shape[0] * shape[1]).reshape(shape)
        arr = client.asarray(a)
        for axis in (0, 1):
            for op in ("sum", "max", "min"):
                got = std.reduce_axis(client, arr, axis, op).numpy()
                assert _close(got, getattr(a, op)(axis=axis, **({"dtype": dt} if op == "sum" else {})),
                              dt, shape[axis]), (shape, axis, op)


def test_reduce_axis_0_over_long_columns_splits_them(client: Any) -> None:
    """Along axis 0 of a row-major input (lines side by side) a long axis is split over several
    cubes and the splits folded by a second launch: ragged splits, NaN in one column, 33 lines (a
    cube of 32 and one of 1)."""
    a = np.random.default_rng(5).standard_normal((1003, 33)).astype(np.float32)
    a[517, 4] = np.nan
    arr = client.asarray(a)
    for op in ("sum", "max", "min"):
        got = std.reduce_axis(client, arr, 0, op).numpy()
        want = getattr(a, op)(axis=0)
        assert np.isnan(got[4]) and np.allclose(np.delete(got, 4), np.delete(want, 4), rtol=1e-4), op


def test_reduce_axis_0_past_the_column_kernels_lines(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lines beyond what column_pass's cubes cover (65535 x 32 of them) go to axis_pass: here the
    limit is lowered to 64 lines, and column_pass must not be called."""
    monkeypatch.setattr(axis_module, "MAX_COLUMN_LINES", 64)
    monkeypatch.setattr(axis_module, "_columns", lambda *args: pytest.fail("column_pass past its limit"))
    a = np.arange(5 * 100, dtype=np.int32).reshape(5, 100)
    assert np.array_equal(std.reduce_axis(client, client.asarray(a), 0, "sum").numpy(), a.sum(axis=0))


def test_reduce_axis_over_more_lines_than_cubes_along_x(client: Any) -> None:
    """65537 lines (one cube each along axis 1): the last line is in the second row of cubes."""
    a = np.arange(65537 * 2, dtype=np.int32).reshape(65537, 2)
    a[-1] = (7, 9)
    got = std.reduce_axis(client, client.asarray(a), 1, "sum").numpy()
    assert np.array_equal(got, a.sum(axis=1, dtype=np.int32))


def test_reduce_axis_of_a_strided_view_and_errors(client: Any) -> None:
    a = np.arange(40 * 30, dtype=np.float32).reshape(40, 30)
    view = client.asarray(a)[::2, ::3]  # starts at element 0: every backend binds it
    assert np.array_equal(std.reduce_axis(client, view, 1, "sum").numpy(), a[::2, ::3].sum(axis=1))
    assert np.array_equal(std.reduce_axis(client, view, 0, "max").numpy(), a[::2, ::3].max(axis=0))
    empty = client.asarray(np.zeros((3, 0), np.float32))
    assert np.array_equal(std.reduce_axis(client, empty, 1, "sum").numpy(), np.zeros(3, np.float32))
    with pytest.raises(ValidationError, match="empty axis"):
        std.reduce_axis(client, empty, 1, "max")
    with pytest.raises(ValidationError, match="2-D"):
        std.reduce_axis(client, client.asarray(np.zeros(4, np.float32)), 0)
    with pytest.raises(ValidationError, match="axis must be"):
        std.reduce_axis(client, client.asarray(a), 2)


# ---------------------------------------------------------------------------------------- scan
@pytest.mark.parametrize("name", DTYPES)
def test_scan_matches_numpy(client: Any, name: str) -> None:
    dt = _dtype(client, name)
    for n in _sizes(dt, (1, 200, 2047, 2049, 70001)):
        x = _data(dt, n, high=2.0 if dt.itemsize == 2 else 8.0)
        h = client.create(x)
        for op in ("sum", "max") if n > 3000 else tuple(ACCUMULATE):
            if op == "prod" and dt.kind == "f":  # values near 1: the products stay finite
                x = (1 + (x.astype(np.float64) - 0.5) / n).astype(dt)
                h = client.create(x)
            want = ACCUMULATE[op].accumulate(x, dtype=dt)
            got = client.to_numpy(std.scan(client, h, n, True, op, name), name)
            assert _close(got, want, dt, n), (n, op)
            ex = client.to_numpy(std.scan(client, h, n, False, op, name), name)
            assert ex[0] == identity(OPS[op], name)
            assert _close(ex[1:], want[:-1], dt, n), (n, op, "exclusive")


def test_scan_of_many_blocks_views_and_empty(client: Any) -> None:
    n = 2048 * 2048 + 5  # three levels of block totals
    x = np.ones(n, dtype=np.int32)
    got = client.to_numpy(std.scan(client, client.create(x), n, dtype="i32"), "i32")
    assert np.array_equal(got, np.arange(1, n + 1, dtype=np.int32))
    off = max(16, client.capabilities.offset_alignment)
    y = np.arange(off // 4 + 100, dtype=np.float32)
    view = client.create(y).offset_start(off)
    want = np.cumsum(y[off // 4 : off // 4 + 99])
    assert np.allclose(client.to_numpy(std.scan(client, view, 99), "f32"), want)
    assert std.scan(client, client.empty(0), 0).size == 0
    z = np.arange(5000, dtype=np.float32)
    z[[10, 3000]] = [np.inf, np.nan]
    for op in ("max", "sum"):
        got = client.to_numpy(std.scan(client, client.create(z), 5000, op=op), "f32")
        assert np.array_equal(got, ACCUMULATE[op].accumulate(z), equal_nan=True), op
    with pytest.raises(ValidationError, match="op must be one of"):
        std.scan(client, view, 4, op="mean")


# ---------------------------------------------------------------------------------------- transpose
@pytest.mark.parametrize("name", ("f32", "f64", "i32"))
def test_transpose_matches_numpy(client: Any, name: str) -> None:
    dt = _dtype(client, name)
    for rows, cols in ((1, 1), (1, 77), (33, 65), (300, 257)):
        x = _data(dt, rows * cols).reshape(rows, cols)
        h = client.create(x)
        assert np.array_equal(client.to_numpy(std.transpose(client, h, rows, cols, name), name),
                              x.T.ravel())
        for t in transpose_set(name).tunables:
            assert np.array_equal(client.to_numpy(t.fn(client, h, rows, cols), name), x.T.ravel()), t.name


def test_transpose_view_empty_and_errors(client: Any) -> None:
    off = max(16, client.capabilities.offset_alignment)
    x = np.arange(off // 4 + 6, dtype=np.float32)
    view = client.create(x).offset_start(off)
    assert np.array_equal(client.to_numpy(std.transpose(client, view, 2, 3), "f32"),
                          x[off // 4 :].reshape(2, 3).T.ravel())
    assert std.transpose(client, client.empty(0), 0, 5).size == 0
    with pytest.raises(ValidationError, match="needs"):
        std.transpose(client, view, 3, 3)
    with pytest.raises(ValidationError, match="cols"):
        std.transpose(client, view, 1, -1)


# ---------------------------------------------------------------------------------------- map
@pytest.mark.parametrize("name", DTYPES)
def test_map_matches_numpy(client: Any, name: str) -> None:
    dt = _dtype(client, name)
    for n in (1, 257, 4099):
        a, b = _data(dt, n), _data(dt, n, seed=1)
        ha, hb = client.create(a), client.create(b)
        assert _close(client.to_numpy(std.map(client, saxpy, ha, hb, dtype=name), name), a * 2 + b, dt, 1)
        assert _close(client.to_numpy(std.map(client, neg, ha, dtype=name), name), (0 - a).astype(dt), dt, 1)
        got = client.to_numpy(std.map(client, fma3, ha, hb, ha, dtype=name, out_dtype="f32"), "f32")
        want = (a * b + a).astype(np.float32)
        # A device may fuse a*b+a (one rounding, CUDA and Vulkan do) where numpy rounds the product
        # first: near zero that differs by a rounding of the product, not of the result.
        atol = 1e-2 * float(np.abs(a.astype(np.float32) * b).max(initial=0)) if dt.itemsize == 2 else 0
        assert np.allclose(got, want, rtol=1e-2, atol=atol)


def test_map_arrays_out_views_and_empty(client: Any) -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = std.map(client, neg, client.asarray(a))
    assert got.shape == (3, 4) and np.array_equal(got.numpy(), -a)
    off = max(16, client.capabilities.offset_alignment)
    x = np.arange(off // 4 + 10, dtype=np.float32)
    view = client.create(x).offset_start(off)
    out = client.create(np.zeros(10, np.float32))
    assert std.map(client, saxpy, view, view, out=out) is out
    assert np.array_equal(client.to_numpy(out, "f32"), 3 * x[off // 4 :])
    assert std.map(client, neg, client.empty(0)).size == 0


def test_map_errors(client: Any) -> None:
    h = client.create(np.ones(8, np.float32))
    with pytest.raises(ValidationError, match="@cl.func"):
        std.map(client, lambda v: v, h)
    with pytest.raises(ValidationError, match="1 to 3 inputs"):
        std.map(client, saxpy)
    with pytest.raises(ValidationError, match="different element counts"):
        std.map(client, saxpy, h, client.create(np.ones(4, np.float32)))
    with pytest.raises(ValidationError, match="needs"):
        std.map(client, neg, h, out=client.empty(4))


def test_map_takes_the_dtype_of_its_arrays(client: Any) -> None:
    """Arrays carry their dtype: map reads them as such, and refuses a dtype that disagrees."""
    if "i32" not in client.capabilities.dtypes:
        pytest.skip("backend lacks i32")
    a = client.asarray(np.arange(6, dtype=np.int32))
    got = std.map(client, neg, a)
    np.testing.assert_array_equal(client.to_numpy(got.handle, "i32"), -np.arange(6, dtype=np.int32))
    with pytest.raises(ValidationError, match="Array of int32"):
        std.map(client, neg, a, dtype="f32")
