"""Kernels that compute in f16 (locals, vectors, a shared array) but take f32 arrays: the language
declares the types its IR uses to the :class:`cubeplug.Kernel` (``dtypes``), so the backends enable
f16 for them; they give numpy's answer on every backend that declares f16 and are refused by name
on one that does not."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cubeplug
from cubeplug import lang as cl
from cubeplug.lang import Array, Vec, f16, f32, f64

RNG = np.random.default_rng(1616)
#: Every type the language has: specializations that need no device.
ALL_TYPES = frozenset({"f16", "f32", "f64", "i32", "u32", "i64", "u64"})
#: A device without f16 (PoCL here).
NO_F16 = frozenset({"f32", "f64", "i32", "u32"})
CUBE = 64


@cl.kernel
def half_locals(x: Array[f32], y: Array[f32]):
    i = cl.ABSOLUTE_POS
    if i < len(x):
        h = f16(x[i])
        v = Vec[f16, 2](h * f16(3.0), h)
        y[i] = f32(v.x + v.y)


@cl.kernel
def half_shared(x: Array[f32], y: Array[f32]):
    tile = cl.shared(f16, 64)
    u = cl.UNIT_POS
    i = cl.ABSOLUTE_POS
    tile[u] = f16(x[i])
    cl.sync_cube()
    if i < len(y):
        y[i] = f32(tile[63 - u]) * 2.0


@cl.kernel
def double_cast(x: Array[f32], y: Array[f32]):
    i = cl.ABSOLUTE_POS
    if i < len(x):
        y[i] = f32(f64(x[i]) * 2.0)  # f64 only in a cast and a constant: no local holds it


@cl.kernel
def plain(x: Array[f32], y: Array[f32]):
    i = cl.ABSOLUTE_POS
    if i < len(x):
        y[i] = x[i] * 2.0 if x[i] > 0.5 else x[i]


def _launch(kern: Any, client: Any, n: int, *args: Any) -> None:
    kern.launch(client, cubeplug.CubeCount(-(-n // CUBE)), CUBE, *args)


def _inputs(client: Any, n: int) -> tuple[np.ndarray, Any, Any]:
    xs = RNG.uniform(0.0, 8.0, n).astype(np.float32)  # f32 values most of which f16 cannot hold
    return xs, client.create(xs), client.create(np.zeros(n, np.float32))


def _assert_computed_in_f16(got: np.ndarray, want: np.ndarray) -> None:
    # Each result is an f16 value (a kernel computing in f32 would give few of those for these
    # inputs) and numpy's f16 answer within an ulp (a compiler may fuse h * 3 + h into one rounding).
    np.testing.assert_array_equal(got, got.astype(np.float16).astype(np.float32))
    np.testing.assert_allclose(got, want, rtol=2.0**-10)


def _ran(kernel: Any, client: Any, n: int, x: Any, y: Any) -> bool:
    """Launch ``kernel``; on a device without f16, assert it is refused by name instead (False)."""
    if "f16" not in client.capabilities.dtypes:
        with pytest.raises(cl.KernelTypeError, match="f16 is not supported by this device"):
            _launch(kernel, client, n, x, y)
        return False
    _launch(kernel, client, n, x, y)
    return True


def test_f16_locals_in_a_kernel_of_f32_arrays(client: Any) -> None:
    n = 1000
    xs, x, y = _inputs(client, n)
    if not _ran(half_locals, client, n, x, y):
        return
    h = xs.astype(np.float16)
    want = (h * np.float16(3.0) + h).astype(np.float32)
    _assert_computed_in_f16(client.to_numpy(y, "f32"), want)


def test_f16_shared_array_in_a_kernel_of_f32_arrays(client: Any) -> None:
    n = 4 * CUBE
    xs, x, y = _inputs(client, n)
    if not _ran(half_shared, client, n, x, y):
        return
    want = xs.reshape(-1, CUBE)[:, ::-1].astype(np.float16).astype(np.float32).ravel() * 2
    got = client.to_numpy(y, "f32")
    np.testing.assert_array_equal(got, want)  # a round trip through f16, then an exact doubling
    assert not np.array_equal(got, xs.reshape(-1, CUBE)[:, ::-1].ravel() * 2)  # it did round


@pytest.mark.parametrize("dialect", ["c", "wgsl", "python"])
def test_the_kernel_declares_the_types_its_ir_uses(dialect: str) -> None:
    def uses(kern: Any) -> tuple[str, ...]:
        kernel: cubeplug.Kernel = kern.specialize_for(dialect, ALL_TYPES, (CUBE, 1, 1), True, {}).kernel
        return kernel.dtypes

    assert uses(half_locals) == ("f16",)
    assert uses(half_shared) == ("f16",)
    assert uses(double_cast) == ("f64",)
    assert uses(plain) == ()  # f32, u32 and bool are every backend's: nothing to declare
    k = half_locals.specialize_for(dialect, ALL_TYPES, (CUBE, 1, 1), True, {}).kernel
    assert k.uses_dtypes == {"f16", "f32", "u32"}  # the source's, the arrays', the lengths'


@pytest.mark.parametrize("dialect", ["c", "wgsl"])
def test_f16_values_on_a_device_without_f16_are_refused_where_they_are_made(dialect: str) -> None:
    with pytest.raises(cl.KernelTypeError, match="f16 is not supported by this device") as info:
        half_locals.specialize_for(dialect, NO_F16, (CUBE, 1, 1), True, {})
    assert info.value.loc is not None and "f16(x[i])" in str(info.value)
    with pytest.raises(cl.KernelTypeError, match="f16 is not supported by this device") as info:
        half_shared.specialize_for(dialect, NO_F16, (CUBE, 1, 1), True, {})
    assert "cl.shared(f16, 64)" in str(info.value)
