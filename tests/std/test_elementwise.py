"""fill, copy and axpy on every backend: scalar and float4 paths, tails, views, and bad arguments."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cubeplug import ValidationError, std

SIZES = (0, 1, 3, 4, 5, 8, 255, 1027, 70001)


def _offset(client: Any) -> int:
    """A view offset every backend can bind (its alignment, and at least 16 B)."""
    return max(16, client.capabilities.offset_alignment)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", ["f32", "i32", "u32"])
def test_fill_sets_exactly_the_first_n_elements(client: Any, n: int, dtype: str) -> None:
    np_dtype = np.dtype({"f32": np.float32, "i32": np.int32, "u32": np.uint32}[dtype])
    h = client.create(np.full(n + 7, 9, np_dtype))
    assert std.fill(client, h, n, 3, dtype) is h
    got = client.to_numpy(h, np_dtype)
    expected = np.full(n + 7, 9, np_dtype)
    expected[:n] = 3
    np.testing.assert_array_equal(got, expected)


def test_fill_of_a_view_leaves_the_rest_alone(client: Any) -> None:
    off = _offset(client)
    h = client.create(np.zeros(off // 4 + 100, np.float32))
    std.fill(client, h.offset_start(off), 50, -1.5)
    got = client.to_numpy(h, "f32")
    assert (got[: off // 4] == 0).all() and (got[off // 4 : off // 4 + 50] == -1.5).all()
    assert (got[off // 4 + 50 :] == 0).all()


@pytest.mark.parametrize("n", SIZES)
def test_copy_is_bit_exact_into_a_new_handle(client: Any, n: int) -> None:
    bits = np.arange(n, dtype=np.uint32) * np.uint32(2654435761)
    bits[: min(n, 2)] = 0x7FC00001  # a NaN payload must survive
    src = client.create(bits)
    out = std.copy(client, src, n)
    assert out.size == 4 * n
    np.testing.assert_array_equal(client.to_numpy(out, "u32"), bits)


def test_copy_into_a_given_handle_and_between_views(client: Any) -> None:
    off = _offset(client)
    src = client.create(np.arange(off // 4 + 40, dtype=np.float32))
    dst = client.create(np.zeros(off // 4 + 40, np.float32))
    assert std.copy(client, src.offset_start(off), 37, out=dst.offset_start(off)) is not None
    got = client.to_numpy(dst, "f32")
    np.testing.assert_array_equal(got[off // 4 : off // 4 + 37], np.arange(off // 4, off // 4 + 37))
    assert (got[: off // 4] == 0).all() and (got[off // 4 + 37 :] == 0).all()


@pytest.mark.parametrize("n", SIZES)
def test_axpy_matches_numpy(client: Any, n: int) -> None:
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n + 3).astype(np.float32)
    y = rng.standard_normal(n + 3).astype(np.float32)
    hy = client.create(y)
    assert std.axpy(client, 0.75, client.create(x), hy, n) is hy
    expected = y.copy()
    expected[:n] = np.float32(0.75) * x[:n] + y[:n]
    np.testing.assert_allclose(client.to_numpy(hy, "f32"), expected, rtol=1e-6, atol=1e-6)


def test_bad_arguments_raise_validation_errors_and_the_client_keeps_working(client: Any) -> None:
    h = client.create(np.zeros(16, np.float32))
    with pytest.raises(ValidationError, match="needs 128 B"):
        std.fill(client, h, 32, 1.0)
    with pytest.raises(ValidationError, match="int element count"):
        std.copy(client, h, 2.5)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=">= 0"):
        std.axpy(client, 1.0, h, h, -1)
    with pytest.raises(ValidationError, match="fill supports"):
        std.fill(client, h, 4, 1.0, "f64")
    with pytest.raises(ValidationError, match="not a number"):
        std.axpy(client, "two", h, h, 4)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="Handle"):
        std.copy(client, np.zeros(4, np.float32), 4)  # type: ignore[arg-type]
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
