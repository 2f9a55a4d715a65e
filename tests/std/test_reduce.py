"""reduce_sum on every backend: the public call, every candidate on its own, views and errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cubeplug import ValidationError, std
from cubeplug.std.reduce import REDUCE_SUM

SIZES = (1, 3, 4, 5, 255, 256, 257, 1000, 4099, 65539, 1 << 20)


def _check(got: float, x: np.ndarray) -> None:
    expected = float(x.sum(dtype=np.float64))
    scale = float(np.abs(x).sum(dtype=np.float64))
    assert abs(got - expected) <= 1e-5 * scale + 1e-6, (got, expected)


@pytest.mark.parametrize("n", (0, *SIZES))
def test_reduce_sum_matches_numpy(client: Any, n: int) -> None:
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    out = std.reduce_sum(client, client.create(x) if n else client.empty(0), n)
    assert out.size == 4
    _check(float(client.to_numpy(out, "f32")[0]), x)


@pytest.mark.parametrize("n", (5, 4099, 300007))
def test_every_candidate_is_correct(client: Any, n: int) -> None:
    x = np.random.default_rng(7).random(n, dtype=np.float32) - 0.25
    h = client.create(x)
    key = REDUCE_SUM.key(client, "full", h, n)
    ran = []
    for tunable in REDUCE_SUM.tunables:
        if not tunable.can_run(client, key):
            continue
        _check(float(client.to_numpy(tunable.fn(client, h, n), "f32")[0]), x)
        ran.append(tunable.name)
    assert {"tree", "tree_x16", "vec4", "vec4_x16", "vec4_resident", "atomic_vec4_x16"} <= set(ran)


def test_reduce_of_a_view_and_of_a_prefix(client: Any) -> None:
    off = max(16, client.capabilities.offset_alignment)
    x = np.arange(off // 4 + 1000, dtype=np.float32)
    h = client.create(x)
    _check(float(client.to_numpy(std.reduce_sum(client, h.offset_start(off), 1000), "f32")[0]), x[off // 4 :])
    _check(float(client.to_numpy(std.reduce_sum(client, h, 999), "f32")[0]), x[:999])


def test_scalar_candidates_run_on_views_that_are_not_16_byte_aligned(client: Any) -> None:
    if client.capabilities.offset_alignment % 16 == 0 and client.capabilities.offset_alignment > 1:
        pytest.skip("this backend binds views only at 16-byte aligned offsets")
    x = np.arange(101, dtype=np.float32)
    h = client.create(x).offset_start(4)
    assert not REDUCE_SUM.key(client, "balanced", h, 100)["vec"]
    _check(float(client.to_numpy(std.reduce_sum(client, h, 100), "f32")[0]), x[1:])


def test_reduce_errors(client: Any) -> None:
    h = client.create(np.ones(8, np.float32))
    with pytest.raises(ValidationError, match="needs 64 B"):
        std.reduce_sum(client, h, 16)
    with pytest.raises(ValidationError, match="exceeds"):
        std.reduce_sum(client, h, 1 << 40)
    assert float(client.to_numpy(std.reduce_sum(client, h, 8), "f32")[0]) == 8.0
