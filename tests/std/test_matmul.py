"""matmul on every backend: every candidate at odd and aligned shapes, ``out=``, edge sizes, errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cubeplug import ValidationError, std
from cubeplug.std.matmul import MATMUL

SHAPES = ((1, 1, 1), (5, 7, 3), (64, 64, 64), (131, 93, 77), (132, 92, 76), (33, 130, 8))


def _ab(m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(m * 10007 + n * 101 + k)
    return rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)


def _check(got: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(a.shape[1]))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_candidate_is_correct(client: Any, shape: tuple[int, int, int]) -> None:
    m, n, k = shape
    a, b = _ab(m, n, k)
    ha, hb = client.create(a), client.create(b)
    key = MATMUL.key(client, "full", ha, hb, m, n, k, None)
    ran = []
    for tunable in MATMUL.tunables:
        if tunable.can_run(client, key):
            _check(client.to_numpy(tunable.fn(client, ha, hb, m, n, k, None), "f32", (m, n)), a, b)
            ran.append(tunable.name)
    assert len(ran) == (8 if k % 4 == 0 and n % 4 == 0 else 6)


@pytest.mark.parametrize("shape", ((17, 19, 23), (128, 128, 128)), ids=lambda s: "x".join(map(str, s)))
def test_public_matmul_autotunes_and_writes_out(client: Any, shape: tuple[int, int, int]) -> None:
    m, n, k = shape
    a, b = _ab(m, n, k)
    ha, hb = client.create(a), client.create(b)
    _check(client.to_numpy(std.matmul(client, ha, hb, m, n, k), "f32", (m, n)), a, b)
    out = client.empty(4 * m * n)
    assert std.matmul(client, ha, hb, m, n, k, out=out) is out
    _check(client.to_numpy(out, "f32", (m, n)), a, b)


def test_edge_sizes(client: Any) -> None:
    a = client.create(np.ones(12, np.float32))
    zeros = std.matmul(client, a, a, 3, 4, 0)
    np.testing.assert_array_equal(client.to_numpy(zeros, "f32"), np.zeros(12, np.float32))
    assert std.matmul(client, a, a, 0, 4, 3).size == 0


def test_matmul_errors(client: Any) -> None:
    a = client.create(np.ones(12, np.float32))
    with pytest.raises(ValidationError, match="matmul: b"):
        std.matmul(client, a, a, 3, 8, 4)
    with pytest.raises(ValidationError, match="exceeds"):
        std.matmul(client, a, a, 1 << 20, 1, 1)
    with pytest.raises(ValidationError, match="matmul: out"):
        std.matmul(client, a, a, 2, 2, 2, out=client.empty(8))
    np.testing.assert_array_equal(client.to_numpy(std.matmul(client, a, a, 2, 2, 3), "f32"), np.full(4, 3.0))
