"""f32 atomics: ``atomic_add`` on ``Array[Atomic[f32]]`` (CUDA native, a CAS loop on the bits on
OpenCL and WebGPU), loads and stores of such arrays, on every backend."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cubeplug
from cubeplug import lang as cl
from cubeplug.lang import Array, Atomic, Comptime, f32, u32

RNG = np.random.default_rng(32)


@cl.kernel
def weighted_histogram(keys: Array[u32], weights: Array[f32], bins: Array[Atomic[f32]],
                       NBINS: Comptime[int]):
    i = cl.ABSOLUTE_POS
    if i < len(keys):
        cl.atomic_add(bins, keys[i] % NBINS, weights[i])


@cl.kernel
def count_up(counter: Array[Atomic[f32]], olds: Array[f32]):
    """Every unit adds 1.0 and keeps the old value: the olds are a permutation of 0..n-1."""
    i = cl.ABSOLUTE_POS
    if i < len(olds):
        olds[i] = cl.atomic_add(counter, 0, 1.0)


@cl.kernel
def load_store_sub(acc: Array[Atomic[f32]], out: Array[f32]):
    """Reads (out = acc), subtracts 0.5 atomically, then stores acc * 2 into the next slot."""
    i = cl.ABSOLUTE_POS
    if i + 1 < len(acc):
        out[i] = acc[i]
        cl.atomic_sub(acc, i, 0.5)
    if i == 0:
        acc[len(acc) - 1] = acc[len(acc) - 1] * 2.0


def test_weighted_histogram(client: Any) -> None:
    n = 5000
    keys = RNG.integers(0, 10_000, n).astype(np.uint32)
    weights = RNG.uniform(-1, 1, n).astype(np.float32)
    k, w = client.create(keys), client.create(weights)
    bins = client.create(np.zeros(16, np.float32))
    weighted_histogram.launch(client, cubeplug.CubeCount(-(-n // 256)), 256, k, w, bins, NBINS=16)
    want = np.bincount(keys % 16, weights=weights.astype(np.float64), minlength=16)
    np.testing.assert_allclose(client.to_numpy(bins, "f32"), want, rtol=1e-4, atol=1e-3)


def test_atomic_add_returns_the_old_values(client: Any) -> None:
    n = 1000
    counter, olds = client.create(np.zeros(1, np.float32)), client.create(np.zeros(n, np.float32))
    count_up.launch(client, cubeplug.CubeCount(4), 256, counter, olds)
    assert client.to_numpy(counter, "f32")[0] == n
    np.testing.assert_array_equal(np.sort(client.to_numpy(olds, "f32")), np.arange(n, dtype=np.float32))


@pytest.mark.parametrize("checked", [True, False])
def test_loads_stores_and_sub(client: Any, checked: bool) -> None:
    vals = RNG.standard_normal(65).astype(np.float32)
    acc, out = client.create(vals), client.create(np.zeros(64, np.float32))
    launch = load_store_sub.launch if checked else load_store_sub.launch_unchecked
    launch(client, 1, 64, acc, out)
    np.testing.assert_array_equal(client.to_numpy(out, "f32"), vals[:64])
    got = client.to_numpy(acc, "f32")
    np.testing.assert_array_equal(got[:64], vals[:64] - np.float32(0.5))
    assert got[64] == vals[64] * 2


def test_f32_atomics_other_than_add_are_errors() -> None:
    @cl.kernel
    def bad_max(a: Array[Atomic[f32]]):
        cl.atomic_max(a, 0, 1.0)

    with pytest.raises(cl.KernelTypeError, match="atomic_add and atomic_sub") as info:
        bad_max.ir(32)
    assert "test_atomic_f32.py:" in str(info.value)

    @cl.kernel
    def bad_type(a: Array[Atomic[cl.f64]]):
        pass

    with pytest.raises(cl.KernelTypeError, match="i32, u32 or f32"):
        bad_type.ir(32)


def test_generated_sources_reinterpret_bits(cpu: Any) -> None:
    from cubeplug.lang import codegen_c, codegen_wgsl

    spec = count_up.specialize_for("python", None, 256, True, {})
    c_src, _ = codegen_c.generate(spec.ir)
    wgsl, _ = codegen_wgsl.generate(spec.ir)
    assert "atomicAdd((float*)p, v)" in c_src and "atomic_cmpxchg" in c_src
    assert "GLOBAL unsigned int* counter" in c_src
    assert "atomicCompareExchangeWeak" in wgsl and "bitcast<f32>(cl_old)" in wgsl
    buf = next(p for p in spec.kernel.params if p.name == "counter")
    assert (buf.dtype, buf.atomic) == ("u32", True)
