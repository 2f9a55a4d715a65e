"""reduce's candidates (one lang source for every operator and dtype) and reduce_sum on every backend:
each candidate against numpy, vector loads with tails, views, NaN/inf, empty inputs and errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cubeplug import ValidationError, std
from cubeplug.std.combine import OPS
from cubeplug.std.reduce import REDUCE_SUM
from cubeplug.std.reduction import VECTOR_DTYPES, reduce_set

SIZES = (1, 3, 4, 5, 255, 256, 257, 1000, 4099, 65539, 1 << 20)
NP = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "i32": np.int32, "u32": np.uint32}
#: Every candidate name, and those that need vector loads or atomics.
ALL = {"tree", "tree_x16", "tree_x16_ilp4", "resident_ilp4", "atomic_x16_ilp4", "atomic_x16_ilp1", "vec4",
       "vec4_x4", "vec4_x16", "vec4_x64", "vec4_resident", "atomic_vec4_x16"}
VECTOR = {name for name in ALL if "vec4" in name}
ATOMIC = {"atomic_x16_ilp4", "atomic_x16_ilp1", "atomic_vec4_x16"}


def _check(got: float, x: np.ndarray) -> None:
    expected = float(x.sum(dtype=np.float64))
    scale = float(np.abs(x).sum(dtype=np.float64))
    assert abs(got - expected) <= 1e-5 * scale + 1e-6, (got, expected)


def _dtype(client: Any, name: str) -> np.dtype[Any]:
    if name not in client.capabilities.dtypes:
        pytest.skip(f"the device does not declare {name}")
    return np.dtype(NP[name])


def _data(op: str, dt: np.dtype[Any], n: int) -> np.ndarray:
    rng = np.random.default_rng(n)
    if op == "prod":  # values whose product stays finite (floats) and exact (integers, wrapping)
        if dt.kind == "f":
            return (1 + (rng.random(n) - 0.5) / n).astype(dt)
        x = np.ones(n, dt)
        x[:: max(1, n // 13)] = 3
        return x
    if dt.kind == "f":
        return (rng.random(n) * 8 - 2).astype(dt)
    return rng.integers(0, 100, n).astype(dt)


def _expect(op: str, x: np.ndarray) -> Any:
    return getattr(x, op)(dtype=x.dtype) if op in ("sum", "prod") else getattr(x, op)()


def _same(got: Any, want: Any, dt: np.dtype[Any], n: int) -> bool:
    if dt.kind != "f":
        return bool(got == want)
    tol = 2e-2 if dt.itemsize == 2 else 1e-4
    return bool(np.isclose(float(got), float(want), rtol=tol, atol=tol * np.log2(n + 2), equal_nan=True))


def _candidates(client: Any, op: str, name: str, h: Any, n: int) -> list[Any]:
    tunables = reduce_set(OPS[op], name)
    key = tunables.key(client, "full", h, n)
    return [t for t in tunables.tunables if t.can_run(client, key)]


@pytest.mark.parametrize("name", tuple(NP))
@pytest.mark.parametrize("op", tuple(OPS))
def test_every_candidate_of_every_op_and_dtype_matches_numpy(client: Any, op: str, name: str) -> None:
    dt = _dtype(client, name)
    # 4099: vectors and a 3-element tail; 2: too few for a vector (scalar candidates only).
    for n in (2, 4099) if dt.itemsize > 2 else (2, 203):
        x = _data(op, dt, n)
        h = client.create(x)
        ran = set()
        for t in _candidates(client, op, name, h, n):
            got = client.to_numpy(t.fn(client, h, n), name)[0]
            assert _same(got, _expect(op, x), dt, n), (t.name, n, got, _expect(op, x))
            ran.add(t.name)
        expected = {"tree", "tree_x16", "tree_x16_ilp4", "resident_ilp4"}
        if name in VECTOR_DTYPES and n >= 4:
            expected |= VECTOR - ATOMIC
        if client.capabilities.atomics and op in ("sum", "max", "min") and name in ("f32", "i32", "u32"):
            expected |= (ATOMIC - VECTOR) | ({"atomic_vec4_x16"} if expected & VECTOR else set())
        assert ran == expected, (n, sorted(ran))


@pytest.mark.parametrize("op", ("max", "min"))
def test_nan_in_a_vector_lane_or_the_tail_wins_in_every_candidate(client: Any, op: str) -> None:
    n = 1027  # 256 vectors and a 3-element tail
    for at in (0, 5, 514, 1026):
        x = np.linspace(-3, 3, n, dtype=np.float32)
        x[7] = np.inf if op == "max" else -np.inf
        x[at] = np.nan
        h = client.create(x)
        for t in _candidates(client, op, "f32", h, n):
            assert np.isnan(client.to_numpy(t.fn(client, h, n), "f32")[0]), (t.name, at)
        y = np.delete(x, at)
        h = client.create(y)
        for t in _candidates(client, op, "f32", h, n - 1):
            want = np.inf if op == "max" else -np.inf
            assert client.to_numpy(t.fn(client, h, n - 1), "f32")[0] == want, (t.name, at)


@pytest.mark.parametrize("n", (0, *SIZES))
def test_reduce_sum_matches_numpy(client: Any, n: int) -> None:
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    out = std.reduce_sum(client, client.create(x) if n else client.empty(0), n)
    assert out.size == 4
    _check(float(client.to_numpy(out, "f32")[0]), x)


@pytest.mark.parametrize("n", (5, 4099, 300007))
def test_every_reduce_sum_candidate_is_correct(client: Any, n: int) -> None:
    x = np.random.default_rng(7).random(n, dtype=np.float32) - 0.25
    h = client.create(x)
    key = REDUCE_SUM.key(client, "full", h, n)
    ran = []
    for tunable in REDUCE_SUM.tunables:
        if not tunable.can_run(client, key):
            continue
        _check(float(client.to_numpy(tunable.fn(client, h, n), "f32")[0]), x)
        ran.append(tunable.name)
    assert set(ran) >= (ALL - ATOMIC)
    assert (set(ran) >= ATOMIC) == bool(client.capabilities.atomics)


def test_reduce_sum_is_the_f32_sum_of_reduce() -> None:
    assert REDUCE_SUM is reduce_set(OPS["sum"], "f32") and REDUCE_SUM in std.TUNABLE_SETS
    assert set(REDUCE_SUM.names) == ALL


def test_reduce_of_a_view_and_of_a_prefix(client: Any) -> None:
    off = max(16, client.capabilities.offset_alignment)
    x = np.arange(off // 4 + 1000, dtype=np.float32)
    h = client.create(x)
    _check(float(client.to_numpy(std.reduce_sum(client, h.offset_start(off), 1000), "f32")[0]), x[off // 4 :])
    _check(float(client.to_numpy(std.reduce_sum(client, h, 999), "f32")[0]), x[:999])


def test_views_that_are_not_16_byte_aligned_take_the_scalar_candidates(client: Any) -> None:
    if client.capabilities.offset_alignment % 16 == 0 and client.capabilities.offset_alignment > 1:
        pytest.skip("this backend binds views only at 16-byte aligned offsets")
    x = np.arange(1001, dtype=np.int32)
    h = client.create(x).offset_start(4)
    ran = {t.name for t in _candidates(client, "max", "i32", h, 1000)}
    assert ran and not ran & VECTOR
    for t in _candidates(client, "sum", "i32", h, 1000):
        assert client.to_numpy(t.fn(client, h, 1000), "i32")[0] == x[1:].sum(), t.name
    _check(float(client.to_numpy(std.reduce_sum(client, client.create(x.astype(np.float32)).offset_start(4),
                                                 1000), "f32")[0]), x[1:].astype(np.float32))


def test_inf_sums_to_inf_and_inf_minus_inf_to_nan(client: Any) -> None:
    x = np.ones(4099, np.float32)
    x[4097] = np.inf  # in the tail of the vector candidates
    h = client.create(x)
    for t in _candidates(client, "sum", "f32", h, 4099):
        assert client.to_numpy(t.fn(client, h, 4099), "f32")[0] == np.inf, t.name
    x[3] = -np.inf
    h = client.create(x)
    for t in _candidates(client, "sum", "f32", h, 4099):
        assert np.isnan(client.to_numpy(t.fn(client, h, 4099), "f32")[0]), t.name


def test_reduce_errors(client: Any) -> None:
    h = client.create(np.ones(8, np.float32))
    with pytest.raises(ValidationError, match="needs 64 B"):
        std.reduce_sum(client, h, 16)
    with pytest.raises(ValidationError, match="exceeds"):
        std.reduce_sum(client, h, 1 << 40)
    with pytest.raises(ValidationError, match="int element count"):
        std.reduce_sum(client, h, 2.0)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="Handle"):
        std.reduce_sum(client, np.ones(8, np.float32), 8)  # type: ignore[arg-type]
    assert float(client.to_numpy(std.reduce_sum(client, h, 8), "f32")[0]) == 8.0
