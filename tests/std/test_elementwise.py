"""fill, copy and axpy on every backend, every dtype the device declares: the scalar and the vector
kernels, tails, views (aligned and not), bit-exact special values, and bad arguments."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cubeplug import ValidationError, std
from cubeplug.std.elementwise import DATA_DTYPES, FLOAT_DTYPES

SIZES = (0, 1, 3, 4, 5, 8, 255, 1027, 70001)
NP = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "i32": np.int32, "u32": np.uint32,
      "i64": np.int64, "u64": np.uint64}


def _dtype(client: Any, name: str) -> np.dtype[Any]:
    if name not in client.capabilities.dtypes:
        pytest.skip(f"the device does not declare {name}")
    return np.dtype(NP[name])


def _offset(client: Any) -> int:
    """A view offset every backend can bind (its alignment, and at least 16 B)."""
    return max(16, client.capabilities.offset_alignment)


def _bits(dt: np.dtype[Any], n: int) -> np.ndarray:
    """``n`` elements of ``dt`` with varied bit patterns, NaN payloads and -0.0 among them for floats."""
    raw = np.arange(n * dt.itemsize, dtype=np.uint64) * np.uint64(2654435761) >> np.uint64(7)
    raw = raw.astype(np.uint8)
    x = raw.view(dt).copy()
    if dt.kind == "f" and n >= 2:
        x[0] = -0.0
        x[1:2].view(f"u{dt.itemsize}")[0] = (1 << (8 * dt.itemsize - 1)) - 1  # a NaN with a payload
    return x


@pytest.mark.parametrize("name", DATA_DTYPES)
def test_fill_sets_exactly_the_first_n_elements(client: Any, name: str) -> None:
    dt = _dtype(client, name)
    for n in SIZES:
        h = client.create(np.full(n + 7, 9, dt))
        assert std.fill(client, h, n, 3, name) is h
        expected = np.full(n + 7, 9, dt)
        expected[:n] = 3
        np.testing.assert_array_equal(client.to_numpy(h, dt), expected)


@pytest.mark.parametrize("name", ("f16", "f32", "f64"))
def test_fill_with_special_values_is_bit_exact(client: Any, name: str) -> None:
    dt = _dtype(client, name)
    for value in (-0.0, np.inf, np.nan):
        for n in (3, 1027):  # scalar (less than a vector) and vector with a tail
            h = client.create(np.ones(n, dt))
            std.fill(client, h, n, value, name)
            want = np.full(n, value, dt).view(f"u{dt.itemsize}")
            np.testing.assert_array_equal(client.to_numpy(h, dt).view(f"u{dt.itemsize}"), want)


def test_fill_of_a_view_leaves_the_rest_alone(client: Any) -> None:
    off = _offset(client)
    h = client.create(np.zeros(off // 4 + 100, np.float32))
    std.fill(client, h.offset_start(off), 50, -1.5)
    got = client.to_numpy(h, "f32")
    assert (got[: off // 4] == 0).all() and (got[off // 4 : off // 4 + 50] == -1.5).all()
    assert (got[off // 4 + 50 :] == 0).all()


@pytest.mark.parametrize("name", DATA_DTYPES)
def test_copy_is_bit_exact_into_a_new_handle(client: Any, name: str) -> None:
    dt = _dtype(client, name)
    for n in SIZES:
        bits = _bits(dt, n)
        out = std.copy(client, client.create(bits), n, dtype=name)
        assert out.size == n * dt.itemsize
        got = client.to_numpy(out, dt) if n else np.zeros(0, dt)
        np.testing.assert_array_equal(got.view(np.uint8), bits.view(np.uint8))


def test_copy_into_a_given_handle_and_between_views(client: Any) -> None:
    off = _offset(client)
    src = client.create(np.arange(off // 4 + 40, dtype=np.float32))
    dst = client.create(np.zeros(off // 4 + 40, np.float32))
    assert std.copy(client, src.offset_start(off), 37, out=dst.offset_start(off)) is not None
    got = client.to_numpy(dst, "f32")
    np.testing.assert_array_equal(got[off // 4 : off // 4 + 37], np.arange(off // 4, off // 4 + 37))
    assert (got[: off // 4] == 0).all() and (got[off // 4 + 37 :] == 0).all()


def test_views_that_are_not_16_byte_aligned_take_the_scalar_kernels(client: Any) -> None:
    if client.capabilities.offset_alignment % 16 == 0 and client.capabilities.offset_alignment > 1:
        pytest.skip("this backend binds views only at 16-byte aligned offsets")
    off = client.capabilities.offset_alignment if client.capabilities.offset_alignment > 1 else 4
    n = 1027
    base = np.arange(off // 4 + n, dtype=np.float32)
    src, dst = client.create(base), client.create(np.zeros_like(base))
    std.copy(client, src.offset_start(off), n, out=dst.offset_start(off))
    np.testing.assert_array_equal(client.to_numpy(dst, "f32")[off // 4 :], base[off // 4 :])
    std.fill(client, dst.offset_start(off), n - 1, 2.5)
    got = client.to_numpy(dst, "f32")
    assert (got[off // 4 : -1] == 2.5).all() and got[-1] == base[-1] and (got[: off // 4] == 0).all()
    std.axpy(client, 2.0, src.offset_start(off), dst.offset_start(off), n)
    np.testing.assert_array_equal(client.to_numpy(dst, "f32")[off // 4 :], np.float32(2) * base[off // 4 :]
                                  + got[off // 4 :])


@pytest.mark.parametrize("name", FLOAT_DTYPES)
def test_axpy_matches_numpy(client: Any, name: str) -> None:
    dt = _dtype(client, name)
    for n in SIZES:
        rng = np.random.default_rng(n)
        x = rng.standard_normal(n + 3).astype(dt)
        y = rng.standard_normal(n + 3).astype(dt)
        hy = client.create(y)
        assert std.axpy(client, 0.75, client.create(x), hy, n, dtype=name) is hy
        expected = y.copy()
        expected[:n] = dt.type(0.75) * x[:n] + y[:n]
        tol = 2e-3 if name == "f16" else 1e-6
        np.testing.assert_allclose(client.to_numpy(hy, dt), expected, rtol=tol, atol=tol)


def test_axpy_propagates_inf_and_nan(client: Any) -> None:
    x = np.array([np.inf, 1, np.nan, 1, 1, -np.inf, 2], np.float32)
    y = np.array([1, np.inf, 1, 1, 1, np.inf, np.nan], np.float32)
    hy = client.create(y)
    std.axpy(client, 2.0, client.create(x), hy, 7)
    with np.errstate(invalid="ignore"):  # inf - inf, on purpose
        expected = np.float32(2) * x + y
    np.testing.assert_array_equal(client.to_numpy(hy, "f32"), expected)


def test_bad_arguments_raise_validation_errors_and_the_client_keeps_working(client: Any) -> None:
    h = client.create(np.zeros(16, np.float32))
    with pytest.raises(ValidationError, match="needs 128 B"):
        std.fill(client, h, 32, 1.0)
    with pytest.raises(ValidationError, match="needs 128 B"):
        std.copy(client, h, 16, dtype="f64")
    with pytest.raises(ValidationError, match="int element count"):
        std.copy(client, h, 2.5)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=">= 0"):
        std.axpy(client, 1.0, h, h, -1)
    with pytest.raises(ValidationError, match="not supported"):
        std.fill(client, h, 4, 1.0, "i8")
    with pytest.raises(ValidationError, match="not supported"):
        std.axpy(client, 1.0, h, h, 4, dtype="i32")
    with pytest.raises(ValidationError, match="not a dtype"):
        std.copy(client, h, 4, dtype="float33")
    with pytest.raises(ValidationError, match="not a number"):
        std.axpy(client, "two", h, h, 4)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="Handle"):
        std.copy(client, np.zeros(4, np.float32), 4)  # type: ignore[arg-type]
    missing = [d for d in DATA_DTYPES if d not in client.capabilities.dtypes]
    if missing:
        with pytest.raises(ValidationError, match="does not support"):
            std.fill(client, h, 2, 0, missing[0])
    std.fill(client, h, 16, 2.0)
    assert (client.to_numpy(h, "f32") == 2.0).all()


def test_a_handle_of_another_client_is_refused(client: Any) -> None:
    from tests.conftest import make_cpu_client

    other = make_cpu_client()
    try:
        foreign = other.create(np.zeros(8, np.float32))
        with pytest.raises(ValidationError, match="another client"):
            std.fill(client, foreign, 8, 1.0)
    finally:
        other.close()


@pytest.mark.parametrize("name", ("f64", "i64", "u64"))
def test_fill_of_8_byte_values_stores_both_halves_in_order(client: Any, name: str) -> None:
    # Values whose two 32-bit halves differ and are both nonzero: the vector kernel's pattern is
    # u32x4(low, high, low, high), so swapped or repeated halves would show.
    dt = _dtype(client, name)
    value = {"f64": -1 / 3, "i64": -0x123456789ABCDF, "u64": 0x0123456789ABCDEF}[name]
    off = _offset(client)
    for n in (1, 2, 3, 1027):
        h = client.create(np.full(off // 8 + n + 3, 7, dt))
        std.fill(client, h.offset_start(off), n, value, name)
        want = np.full(off // 8 + n + 3, 7, dt)
        want[off // 8 : off // 8 + n] = value
        np.testing.assert_array_equal(client.to_numpy(h, dt).view(np.uint64), want.view(np.uint64))


def test_fill_keeps_a_nan_payload_in_both_kernels(client: Any) -> None:
    nan = np.array([0x7FC01234], np.uint32).view(np.float32)[0]  # a quiet NaN with a payload
    for n in (3, 1027):  # the scalar kernel, the vector kernel and its tail
        h = client.create(np.zeros(n, np.float32))
        std.fill(client, h, n, nan)
        assert (client.to_numpy(h, "u32") == 0x7FC01234).all()


def test_fill_and_copy_take_any_spelling_of_a_dtype(client: Any) -> None:
    for spelling in ("i32", np.int32, np.dtype("int32"), "int32"):
        h = client.create(np.zeros(37, np.int32))
        std.fill(client, h, 37, -5, spelling)
        assert (client.to_numpy(h, "i32") == -5).all()
        np.testing.assert_array_equal(client.to_numpy(std.copy(client, h, 37, dtype=spelling), "i32"), -5)


def test_a_dtype_taken_before_is_checked_against_each_device() -> None:
    # The dtype looked up by how it was spelt is still checked against the client's declared dtypes.
    from types import SimpleNamespace

    from cubeplug.std.elementwise import DATA_DTYPES, Elements

    elements = Elements("fill", DATA_DTYPES)
    every = SimpleNamespace(backend="every", capabilities=SimpleNamespace(dtypes=frozenset(DATA_DTYPES)))
    no_f64 = SimpleNamespace(backend="no_f64", capabilities=SimpleNamespace(dtypes=frozenset({"f32", "i32"})))
    assert elements(every, "f64").name == "f64" and elements(every, np.float64).size == 8
    with pytest.raises(ValidationError, match="no_f64 device does not support f64"):
        elements(no_f64, "f64")
    with pytest.raises(ValidationError, match="no_f64 device does not support f64"):
        elements(no_f64, np.float64)
    with pytest.raises(ValidationError, match="not a dtype"):
        elements(every, ["f32"])  # unhashable: checked each time
    assert elements(every, "u32").word is elements(every, "f32").word  # 4-byte bits move as u32
    # Values of different types compare and hash equal: a value is never remembered for another.
    assert elements(every, np.float64(1.0)).name == "f64"
    assert elements(every, np.float32(1.0)).name == "f32"
    assert elements(every, np.int32(0)).name == "i32" and elements(every, np.float16(0)).name == "f16"

    class Unhashable:  # a spelling element_type takes (its .dtype) that no dict can hold
        dtype = np.dtype("float32")
        __hash__ = None  # type: ignore[assignment]

    assert elements(every, Unhashable()).name == "f32"
