"""f32 atomics on ``Array[Atomic[f32]]``: ``atomic_add`` (CUDA native, a CAS loop on the bits on
OpenCL and WebGPU), ``atomic_min``/``atomic_max`` (a CAS loop everywhere), ``atomic_exchange`` and
``atomic_compare_exchange`` (of the bit patterns), loads and stores of such arrays, on every backend;
with contention (every unit on one element)."""

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


def test_f32_atomic_type_errors() -> None:
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
    assert "cl_atomic_add_f32(&counter[" in c_src
    assert "GLOBAL unsigned int* counter" in c_src
    assert "atomicCompareExchangeWeak" in wgsl and "bitcast<f32>(cl_old)" in wgsl
    buf = next(p for p in spec.kernel.params if p.name == "counter")
    assert (buf.dtype, buf.atomic) == ("u32", True)


@cl.kernel
def min_max_all(x: Array[f32], lo: Array[Atomic[f32]], hi: Array[Atomic[f32]], olds: Array[f32]):
    """Every unit updates element 0 of ``lo`` and ``hi`` (contention) and its group's element."""
    i = cl.ABSOLUTE_POS
    if i < len(x):
        cl.atomic_min(lo, 0, x[i])
        olds[i] = cl.atomic_max(hi, 0, x[i])
        cl.atomic_min(lo, 1 + i % 7, x[i])
        cl.atomic_max(hi, 1 + i % 7, x[i])


@pytest.mark.parametrize("checked", [True, False])
def test_min_max_under_contention(client: Any, checked: bool) -> None:
    n = 3000
    xs = RNG.standard_normal(n).astype(np.float32)
    x, olds = client.create(xs), client.create(np.zeros(n, np.float32))
    lo = client.create(np.full(8, np.inf, np.float32))
    hi = client.create(np.full(8, -np.inf, np.float32))
    launch = min_max_all.launch if checked else min_max_all.launch_unchecked
    launch(client, cubeplug.CubeCount(-(-n // 256)), 256, x, lo, hi, olds)
    groups = np.arange(n) % 7
    want_lo = [xs.min(), *(xs[groups == g].min() for g in range(7))]
    want_hi = [xs.max(), *(xs[groups == g].max() for g in range(7))]
    np.testing.assert_array_equal(client.to_numpy(lo, "f32"), np.float32(want_lo))
    np.testing.assert_array_equal(client.to_numpy(hi, "f32"), np.float32(want_hi))
    got = client.to_numpy(olds, "f32")
    # Each old value is what the maximum was just before: -inf or another unit's value, never more
    # than the final maximum; the unit that held the maximum saw a smaller old value.
    assert np.all((got == -np.inf) | np.isin(got, xs)) and np.all(got <= xs.max())
    assert got[np.argmax(xs)] < xs.max()


@cl.kernel
def exchange_chain(slot: Array[Atomic[f32]], x: Array[f32], olds: Array[f32]):
    """Every unit swaps its value into slot 0: the olds and the final slot are a permutation of the
    initial slot and the values."""
    i = cl.ABSOLUTE_POS
    if i < len(x):
        olds[i] = cl.atomic_exchange(slot, 0, x[i])


@pytest.mark.parametrize("checked", [True, False])
def test_exchange_under_contention(client: Any, checked: bool) -> None:
    n = 1000
    xs = RNG.permutation(n).astype(np.float32) + 0.5
    slot, x = client.create(np.float32([-1.0])), client.create(xs)
    olds = client.create(np.zeros(n, np.float32))
    (exchange_chain.launch if checked else exchange_chain.launch_unchecked)(
        client, cubeplug.CubeCount(4), 256, slot, x, olds)
    seen = np.concatenate([client.to_numpy(olds, "f32"), client.to_numpy(slot, "f32")])
    np.testing.assert_array_equal(np.sort(seen), np.sort(np.concatenate([xs, [-1.0]])))


@cl.kernel
def cas_claim(slot: Array[Atomic[f32]], won: Array[u32], seen: Array[f32]):
    """Every unit tries to replace 0.0 by its own id + 1: exactly one wins; the others see its value.
    Then a second CAS (expected -0.0, whose bits differ from 0.0) must fail for everyone."""
    i = cl.ABSOLUTE_POS
    if i < len(won):
        old = cl.atomic_compare_exchange(slot, 0, 0.0, f32(i) + 1.0)
        won[i] = u32(1) if old == 0.0 else u32(0)
        seen[i] = old
        cl.atomic_compare_exchange(slot, 1, -0.0, 5.0)


@pytest.mark.parametrize("checked", [True, False])
def test_compare_exchange_under_contention(client: Any, checked: bool) -> None:
    n = 700
    slot = client.create(np.float32([0.0, 0.0]))
    won, seen = client.create(np.zeros(n, np.uint32)), client.create(np.zeros(n, np.float32))
    launch = cas_claim.launch if checked else cas_claim.launch_unchecked
    launch(client, cubeplug.CubeCount(3), 256, slot, won, seen)
    w = client.to_numpy(won, "u32")
    assert w.sum() == 1
    winner = int(np.argmax(w))
    final = client.to_numpy(slot, "f32")
    assert final[0] == winner + 1
    s = client.to_numpy(seen, "f32")
    assert s[winner] == 0.0 and np.all(np.delete(s, winner) == winner + 1)
    assert final[1] == 0.0  # -0.0 is not the bit pattern of 0.0: no exchange


def test_f32_min_max_ignore_nan_values(client: Any) -> None:
    @cl.kernel
    def nan_min(a: Array[Atomic[f32]], x: Array[f32]):
        i = cl.ABSOLUTE_POS
        if i < len(x):
            cl.atomic_min(a, 0, x[i])
            cl.atomic_max(a, 1, x[i])

    xs = np.float32([3.0, np.nan, -2.0, np.nan, 7.0])
    a, x = client.create(np.float32([np.inf, -np.inf])), client.create(xs)
    nan_min.launch(client, 1, 8, a, x)
    np.testing.assert_array_equal(client.to_numpy(a, "f32"), np.float32([-2.0, 7.0]))


def test_f32_min_max_never_replace_a_nan_element(client: Any) -> None:
    """The compare-and-swap loops replace only when the value compares less (greater): an element
    that holds NaN stays NaN on every backend, the interpreter included."""

    @cl.kernel
    def on_nan(a: Array[Atomic[f32]], x: Array[f32]):
        i = cl.ABSOLUTE_POS
        if i < len(x):
            cl.atomic_min(a, 0, x[i])
            cl.atomic_max(a, 1, x[i])

    a, x = client.create(np.float32([np.nan, np.nan])), client.create(np.float32([3.0, -2.0, 7.0]))
    on_nan.launch(client, 1, 8, a, x)
    assert np.isnan(client.to_numpy(a, "f32")).all()
