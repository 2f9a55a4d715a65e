"""matmul on every backend against numpy: every candidate in every dtype the device declares, sizes
that are not multiples of the blocks, m/n/k of 1 and 0, views at offsets, NaN/inf, f16 accumulated
in f32, integers wrapping, and the errors."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np
import pytest

from cubeplug import ValidationError, std
from cubeplug.std.matmul import (
    IO_DTYPES,
    MATMUL,
    PLANS,
    REG_4X4_VEC,
    STAGING_VARIANTS,
    comptime,
    host_matmul,
    reg,
    strategy,
    tolerance,
)
from cubeplug.std.matmul_reg import matmul_reg
from tests.std.conftest import make_client, skip_reason

DTYPES = ("f16", "f32", "f64", "i32", "u32")
NUMPY = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "i32": np.int32, "u32": np.uint32}
#: (m, n, k): ones, odd sizes, n and k multiples of 4 (the float4 candidates run), past one block.
SHAPES = ((1, 1, 1), (5, 7, 3), (33, 132, 8), (131, 93, 77))


def _dtype(client: Any, name: str) -> np.dtype[Any]:
    if name not in client.capabilities.dtypes:
        pytest.skip(f"the device does not declare {name}")
    return np.dtype(NUMPY[name])


def _ab(dt: np.dtype[Any], m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(m * 10007 + n * 101 + k)
    if dt.kind == "f":
        return rng.standard_normal((m, k)).astype(dt), rng.standard_normal((k, n)).astype(dt)
    # Large enough that the sums wrap past 32 bits (i32 negative too): integers wrap, as numpy's.
    low = -(1 << 15) if dt.kind == "i" else 0
    return (rng.integers(low, 1 << 15, (m, k)).astype(dt), rng.integers(low, 1 << 15, (k, n)).astype(dt))


def _check(got: np.ndarray, a: np.ndarray, b: np.ndarray, what: str = "") -> None:
    want = host_matmul(a, b)
    if a.dtype.kind != "f":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    tol = tolerance(a.dtype, want, a.shape[1])
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=0, atol=tol,
                               equal_nan=True, err_msg=what)


def _cheap(client: Any, m: int, n: int, k: int) -> bool:
    """The CPU interpreter runs the cubes in numpy: only small products there."""
    return client.backend != "cpu" or m * n * k <= 40_000


def _operands(client: Any, name: str, shape: tuple[int, int, int]) -> tuple[Any, Any, Any, Any, Any]:
    """Random ``a``, ``b`` of ``name`` for ``shape``, their handles and the tuning key (a skip where
    the interpreter would take too long)."""
    m, n, k = shape
    if not _cheap(client, m, n, k):
        pytest.skip("too slow for the CPU interpreter; the GPU backends and PoCL run it")
    a, b = _ab(_dtype(client, name), m, n, k)
    ha, hb = client.create(a), client.create(b)
    return a, b, ha, hb, MATMUL.key(client, "full", ha, hb, m, n, k, None, name)


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_candidate_in_every_dtype(client: Any, name: str, shape: tuple[int, int, int]) -> None:
    m, n, k = shape
    a, b, ha, hb, key = _operands(client, name, shape)
    ran = []
    for tunable in MATMUL.tunables:
        if tunable.can_run(client, key):
            got = client.to_numpy(tunable.fn(client, ha, hb, m, n, k, None, name), name, (m, n))
            _check(got, a, b, f"{tunable.name} {name} {shape}")
            ran.append(tunable.name)
    vec = name in IO_DTYPES and k % 4 == 0 and n % 4 == 0
    acc = 4 if name == "f16" else a.dtype.itemsize
    fits = {t for t, plan in PLANS.items() if plan.shared * acc <= client.capabilities.max_shared_bytes}
    assert set(ran) == {t for t in fits if vec or not PLANS[t].vec}, ran
    assert {"naive", "tiled_8", "tiled_16", "tiled_32", "reg_4x4", "reg_8x8"} <= set(ran)
    assert ("reg_8x8_vec" in ran) == vec


@pytest.mark.parametrize("name", DTYPES)
def test_public_matmul_autotunes_and_writes_out(client: Any, name: str) -> None:
    dt = _dtype(client, name)
    m, n, k = (17, 19, 23) if client.backend == "cpu" else (130, 128, 68)
    a, b = _ab(dt, m, n, k)
    ha, hb = client.create(a), client.create(b)
    _check(client.to_numpy(std.matmul(client, ha, hb, m, n, k, dtype=name), name, (m, n)), a, b)
    out = client.empty(dt.itemsize * m * n)
    assert std.matmul(client, ha, hb, m, n, k, out=out, dtype=dt) is out  # a numpy dtype works too
    _check(client.to_numpy(out, name, (m, n)), a, b)


def test_the_key_holds_the_dtype_and_4_lane_io_only_where_the_dtype_has_it(client: Any) -> None:
    h = client.empty(1024)
    keys = {name: MATMUL.key(client, "full", h, h, 8, 8, 8, None, name) for name in DTYPES}
    assert len({str(key) for key in keys.values()}) == len(DTYPES)
    assert [name for name, key in keys.items() if key["vec"]] == ["f16", "f32", "i32", "u32"]
    assert not MATMUL.key(client, "full", h, h, 8, 7, 8, None, "f32")["vec"]


def test_f16_accumulates_in_f32(client: Any) -> None:
    _dtype(client, "f16")
    # 3000 products of 1: an f16 accumulator stalls at 2048 (2048 + 1 rounds back to 2048); an f32
    # one reaches 3000, which f16 holds exactly.
    m, n, k = 2, 3, 3000
    a, b = np.ones((m, k), np.float16), np.ones((k, n), np.float16)
    ha, hb = client.create(a), client.create(b)
    key = MATMUL.key(client, "full", ha, hb, m, n, k, None, "f16")
    for tunable in MATMUL.tunables:
        cheap = client.backend != "cpu" or tunable.name in ("naive", "tiled_32")
        if tunable.can_run(client, key) and cheap:
            got = client.to_numpy(tunable.fn(client, ha, hb, m, n, k, None, "f16"), "f16")
            np.testing.assert_array_equal(got, np.full(m * n, 3000, np.float16), err_msg=tunable.name)


@pytest.mark.parametrize("name", DTYPES)
def test_empty_and_k_zero(client: Any, name: str) -> None:
    dt = _dtype(client, name)
    a = client.create(np.ones(12, dt))
    zeros = std.matmul(client, a, a, 3, 4, 0, dtype=name)
    np.testing.assert_array_equal(client.to_numpy(zeros, name), np.zeros(12, dt))
    out = client.create(np.full(12, 7, dt))
    assert std.matmul(client, a, a, 3, 4, 0, out=out, dtype=name) is out
    np.testing.assert_array_equal(client.to_numpy(out, name), np.zeros(12, dt))
    assert std.matmul(client, a, a, 0, 4, 3, dtype=name).size == 0
    assert std.matmul(client, a, a, 4, 0, 3, dtype=name).size == 0
    untouched = client.create(np.full(4, 5, dt))
    assert std.matmul(client, a, a, 0, 4, 3, out=untouched, dtype=name) is untouched
    np.testing.assert_array_equal(client.to_numpy(untouched, name), np.full(4, 5, dt))


@pytest.mark.parametrize("name", ("f32", "i32", "f16"))
def test_views_at_offsets(client: Any, name: str) -> None:
    dt = _dtype(client, name)
    # One element past the start where the backend allows it (no float4 then), and 16 of them.
    step = max(client.capabilities.offset_alignment, dt.itemsize)
    m, n, k = 9, 12, 8
    a, b = _ab(dt, m, n, k)
    for offset in (step, 16 * step):
        pad = offset // dt.itemsize
        ha = client.create(np.concatenate([np.zeros(pad, dt), a.ravel()])).offset_start(offset)
        hb = client.create(np.concatenate([np.zeros(pad, dt), b.ravel(), np.ones(5, dt)]))
        hb = hb.offset_start(offset)
        base = client.create(np.full(pad + m * n + 3, 9, dt))
        out = base.offset_start(offset).offset_end(3 * dt.itemsize)
        assert std.matmul(client, ha, hb, m, n, k, out=out, dtype=name) is out
        host = client.to_numpy(base, name)
        _check(host[pad : pad + m * n].reshape(m, n), a, b, f"offset {offset}")
        np.testing.assert_array_equal(host[:pad], np.full(pad, 9, dt))  # nothing outside the view
        np.testing.assert_array_equal(host[pad + m * n :], np.full(3, 9, dt))


@pytest.mark.parametrize("name", ("f16", "f32", "f64"))
def test_nan_and_inf_propagate(client: Any, name: str) -> None:
    dt = _dtype(client, name)
    m, n, k = 6, 8, 12
    a, b = np.abs(_ab(dt, m, n, k)[0]) + 1, np.abs(_ab(dt, m, n, k)[1]) + 1
    a[1, 3] = np.nan  # row 1 of the product is NaN
    b[5, 2] = np.inf  # column 2 is +inf ...
    a[4, 5] = 0  # ... except row 4, where inf * 0 is NaN
    ha, hb = client.create(a), client.create(b)
    key = MATMUL.key(client, "full", ha, hb, m, n, k, None, name)
    for tunable in MATMUL.tunables:
        if tunable.can_run(client, key):
            got = client.to_numpy(tunable.fn(client, ha, hb, m, n, k, None, name), name, (m, n))
            assert np.isnan(got[1]).all() and np.isnan(got[4, 2]), tunable.name
            assert np.isposinf(np.delete(got[:, 2], [1, 4])).all(), tunable.name
            _check(got, a, b, tunable.name)


@pytest.mark.parametrize("name", ("f32", "i32", "f16"))
@pytest.mark.parametrize("shape", ((33, 132, 8), (70, 68, 36)), ids=lambda s: "x".join(map(str, s)))
def test_other_stagings_are_exact(client: Any, name: str, shape: tuple[int, int, int]) -> None:
    m, n, k = shape
    a, b, ha, hb, key = _operands(client, name, shape)
    ran = []
    for what, plan in STAGING_VARIANTS.items():
        if plan.fits(client, key):
            got = client.to_numpy(strategy(plan)(client, ha, hb, m, n, k, None, name), name, (m, n))
            _check(got, a, b, f"{what} {name} {shape}")
            ran.append(what)
    assert {"tiled_32@unrolled", "reg_4x4_vec@scalar", "reg_4x4_vec@squares"} <= set(ran)


def test_f16_fetched_registers_stay_f16_until_stash() -> None:
    """Every staging path of the register-blocked kernel (A with AQ 0, 1, 2; B with scalar or
    4-lane loads; one or two stages) holds the loaded f16 in the registers fetch fills and converts
    only in stash (a conversion at the load waits for it: on Vulkan, H100, f16 reg_8x8_vec_db16
    ran 5.1 ms converting at the load, 3.45 at stash). Read from the specialization's IR, no device."""
    paths = {}
    for name, plan in {**PLANS, **STAGING_VARIANTS}.items():
        if plan.kernel is matmul_reg:
            ct = comptime(plan, "f16")
            paths.setdefault((ct["AQ"], ct["VIO"], ct["STAGES"]), name)
    assert {(aq, vio) for aq, vio, _ in paths} == {(0, 1), (0, 4), (1, 4), (2, 4)}
    assert {stages for _, _, stages in paths} == {1, 2}
    for name in paths.values():
        plan = {**PLANS, **STAGING_VARIANTS}[name]
        spec = matmul_reg.specialize_for("python", None, plan.cube, False, comptime(plan, "f16"))
        held = {d.name: str(d.elem) for d in spec.ir.decls}
        fetched = {reg: held[reg] for reg in ("x", "quad", "sa", "sb")}
        assert all(ty.startswith("f16") for ty in fetched.values()), (name, fetched)
        assert held["a_tile"] == held["b_tile"] == held["acc"] == "f32x4", (name, held)


def test_an_f16_view_at_8_bytes_takes_the_4_lane_path(client: Any) -> None:
    """f16's 4-lane accesses are 8 bytes: views at 8 bytes (not 16) still take the vector
    candidates, and they read and write the right elements; f32 there does not (half a float4)."""
    dt = _dtype(client, "f16")
    align = client.capabilities.offset_alignment
    if 8 % align:
        pytest.skip(f"{client.backend} binds views at offsets aligned to {align} B, none at 8 B")
    m, n, k = 9, 12, 8
    a, b = _ab(dt, m, n, k)
    pad = 4  # 8 bytes of f16
    ha = client.create(np.concatenate([np.zeros(pad, dt), a.ravel()])).offset_start(8)
    hb = client.create(np.concatenate([np.zeros(pad, dt), b.ravel()])).offset_start(8)
    base = client.create(np.full(pad + m * n, 9, dt))
    out = base.offset_start(8)
    key = MATMUL.key(client, "full", ha, hb, m, n, k, out, "f16")
    assert key["vec"]
    assert not MATMUL.key(client, "full", ha, hb, m, n, k, out, "f32")["vec"]
    assert not MATMUL.key(client, "full", ha, hb, m, n, k, base.offset_start(4), "f16")["vec"]
    ran = []
    for tunable in MATMUL.tunables:
        if PLANS[tunable.name].vec and tunable.can_run(client, key):
            client.write(base, np.full(pad + m * n, 9, dt))
            assert tunable.fn(client, ha, hb, m, n, k, out, "f16") is out
            host = client.to_numpy(base, "f16")
            _check(host[pad:].reshape(m, n), a, b, tunable.name)
            np.testing.assert_array_equal(host[:pad], np.full(pad, 9, dt), err_msg=tunable.name)
            ran.append(tunable.name)
    assert {"reg_4x4_vec", "reg_8x8_vec", "reg_8x8_vec_db"} <= set(ran), ran


def test_an_unknown_staging_of_a_raises() -> None:
    with pytest.raises(ValidationError, match="stage_a is one of"):
        reg(dataclasses.replace(REG_4X4_VEC, stage_a="rows"))


def test_an_unknown_index_arithmetic_raises() -> None:
    with pytest.raises(ValidationError, match="index is 'u32' or 'i32', not 'i64'"):
        reg(dataclasses.replace(REG_4X4_VEC, index="i64"))


@pytest.mark.parametrize("name", ("f32", "i32"))
def test_both_index_arithmetics_are_exact(client: Any, name: str) -> None:
    """Every register-blocked candidate with the other arithmetic of its shared tiles' indices
    (RegBlock.index: the double-buffered ones use i32, the others u32) computes the same product."""
    m, n, k = shape = (9, 20, 40)  # three steps of 16 along k: both buffers of the db ones
    a, b, ha, hb, key = _operands(client, name, shape)
    flipped = {"u32": "i32", "i32": "u32"}
    ran = set()
    for what, plan in PLANS.items():
        if plan.kernel is matmul_reg and plan.fits(client, key):
            other = dataclasses.replace(plan, index=flipped[plan.index])
            got = client.to_numpy(strategy(other)(client, ha, hb, m, n, k, None, name), name, (m, n))
            _check(got, a, b, f"{what} in {other.index} {name}")
            ran.add(plan.index)
    if ran != {"u32", "i32"}:
        pytest.skip(f"the candidates that fit this device's shared memory index in {sorted(ran)} only")


def test_double_buffered_candidates_index_their_tiles_in_int() -> None:
    """The double-buffered candidates' shared tiles are indexed in int on OpenCL too (NVIDIA's
    OpenCL compiler folds signed indices into the addresses: up to 15 % faster there); the
    single-buffered ones keep the language's unsigned arithmetic there (CL_IX: int under CUDA
    only), where int took more registers. Read from the generated C, no device."""
    for name, plan in PLANS.items():
        if plan.kernel is not matmul_reg:
            continue
        spec = matmul_reg.specialize_for("c", None, plan.cube, False, comptime(plan, "f32"))
        tiles = [line for line in spec.source.splitlines() if "_tile[" in line and "=" in line]
        assert tiles, name
        stages = dict(plan.shape)["STAGES"]
        assert plan.index == ("i32" if stages == 2 else "u32"), name
        if stages == 2:
            assert "CL_IX" not in spec.source, name
            assert re.search(r"(?<!unsigned )\bint sx\b", spec.source), name
        else:
            assert all("(CL_IX)" in line for line in tiles), (name, [t for t in tiles if "(CL_IX)" not in t])


def test_bad_input_raises(client: Any) -> None:
    a = client.create(np.ones(12, np.float32))
    with pytest.raises(ValidationError, match="matmul: b"):
        std.matmul(client, a, a, 3, 8, 4)
    with pytest.raises(ValidationError, match="exceeds"):
        std.matmul(client, a, a, 1 << 20, 1, 1)
    with pytest.raises(ValidationError, match="matmul: out"):
        std.matmul(client, a, a, 2, 2, 2, out=client.empty(8))
    with pytest.raises(ValidationError, match="m must be >= 0"):
        std.matmul(client, a, a, -1, 2, 2)
    with pytest.raises(ValidationError, match="k must be an int"):
        std.matmul(client, a, a, 2, 2, 2.0)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="not supported"):
        std.matmul(client, a, a, 2, 2, 2, dtype="i64")
    with pytest.raises(ValidationError, match="not a dtype"):
        std.matmul(client, a, a, 2, 2, 2, dtype="float33")
    # The sizes count elements of the dtype: 12 f32 bytes hold 6 f64.
    if "f64" in client.capabilities.dtypes:
        with pytest.raises(ValidationError, match="matmul: a holds 48 B but the call needs 72 B"):
            std.matmul(client, a, a, 3, 3, 3, dtype="f64")
    else:
        with pytest.raises(ValidationError, match="does not support f64"):
            std.matmul(client, a, a, 2, 2, 2, dtype="f64")
    np.testing.assert_array_equal(client.to_numpy(std.matmul(client, a, a, 2, 2, 3), "f32"), np.full(4, 3.0))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ("f32", "f16"))
def test_matches_cupy_at_a_larger_size(name: str) -> None:
    """std.matmul on CUDA against cupy.matmul (cuBLAS) of the same matrices, past several blocks."""
    cupy = pytest.importorskip("cupy")
    reason = skip_reason("cuda")
    if reason is not None:
        pytest.skip(reason)
    client = make_client("cuda", bench={"samples": 2, "warmup": 1, "progress": False})
    try:
        m, n, k = 1000, 1030, 1100
        a, b = _ab(np.dtype(NUMPY[name]), m, n, k)
        got = client.to_numpy(
            std.matmul(client, client.create(a), client.create(b), m, n, k, dtype=name), name, (m, n)
        )
        want = cupy.asnumpy(cupy.matmul(cupy.asarray(a), cupy.asarray(b))).astype(np.float64)
        tol = tolerance(np.dtype(NUMPY[name]), want, k) * (4 if name == "f16" else 1)
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=0, atol=tol)
    finally:
        client.close()
