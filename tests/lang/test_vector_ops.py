"""Elementwise comparisons, masks, math builtins, casts and selects on ``Vec[T, W]`` values, against
numpy, on every backend."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cubeplug
from cubeplug import lang as cl
from cubeplug.lang import Array, Vec, f16, f32, i32, u32

RNG = np.random.default_rng(16)
F4 = Vec[f32, 4]


@cl.kernel
def vec_compare(x: Array[Vec[f32, 4]], y: Array[Vec[f32, 4]], lt: Array[Vec[u32, 4]],
                ge: Array[Vec[f32, 4]], flags: Array[u32]):
    i = cl.ABSOLUTE_POS
    if i < len(x):
        m = x[i] < y[i]
        lt[i] = Vec[u32, 4](m)
        ge[i] = Vec[f32, 4](x[i] >= 0.5)
        both = m & (x[i] != 0.25)
        f = u32(0)
        if any(m):
            f += 1
        if all(m | (y[i] == x[i])):
            f += 2
        if both.x and not m.w:
            f += 4
        flags[i] = f


@cl.kernel
def vec_select(x: Array[Vec[f32, 4]], y: Array[Vec[f32, 4]], out: Array[Vec[f32, 4]],
               ints: Array[Vec[i32, 2]]):
    i = cl.ABSOLUTE_POS
    if i < len(x):
        a = x[i]
        b = y[i]
        out[i] = a if a > b else b * 2.0
        p = Vec[i32, 2](ints[i].x, ints[i].y)
        ints[i] = p if p >= 0 else 0 - p


@cl.kernel
def vec_math(x: Array[Vec[f32, 4]], y: Array[Vec[f32, 4]], out: Array[Vec[f32, 4]], k: Array[Vec[i32, 4]]):
    i = cl.ABSOLUTE_POS
    if i < len(x):
        a = x[i]
        b = y[i]
        r = cl.sqrt(a) + cl.exp(b * 0.1) - cl.log(a + 1.0) + cl.sin(a) * cl.cos(b) + cl.tanh(a - b)
        r = r + cl.floor(a * 3.0) + cl.ceil(b * 3.0) + abs(a - b) + min(a, b, 0.75) + max(a, 2.0 * b)
        out[i] = r + cl.pow(a, b) + cl.fma(a, b, 1.0)
        k[i] = abs(k[i]) + min(k[i], 3) - max(k[i], Vec[i32, 4](-2))


@cl.kernel
def vec_cast(x: Array[Vec[f32, 4]], ints: Array[Vec[i32, 4]], back: Array[Vec[f32, 4]],
             uints: Array[Vec[u32, 2]]):
    i = cl.ABSOLUTE_POS
    if i < len(x):
        v = Vec[i32, 4](x[i])
        ints[i] = v
        back[i] = Vec[f32, 4](v) * 0.5
        uints[i] = Vec[u32, 2](Vec[i32, 2](v.x, v.y) + 100)


@cl.kernel
def vec_shift(a: Array[Vec[u32, 4]], s: Array[Vec[u32, 4]], b: Array[Vec[i32, 2]], out: Array[Vec[u32, 4]],
              outi: Array[Vec[i32, 2]]):
    i = cl.ABSOLUTE_POS
    if i < len(a):
        out[i] = ((a[i] << s[i]) ^ (a[i] >> 3)) + (a[i] << 33)  # 33: taken modulo 32
        outi[i] = (b[i] >> Vec[i32, 2](1, 2)) + (b[i] << 1)


def _launch(kern: Any, client: Any, n: int, *args: Any) -> None:
    kern.launch(client, cubeplug.CubeCount(-(-n // 64)), 64, *args)


def test_vector_comparisons_and_masks(client: Any) -> None:
    n = 300
    xs = RNG.choice(np.float32([0.0, 0.25, 0.5, 0.75, 1.0]), (n, 4))
    ys = RNG.choice(np.float32([0.0, 0.25, 0.5, 0.75, 1.0]), (n, 4))
    x, y = client.create(xs), client.create(ys)
    lt = client.create(np.zeros((n, 4), np.uint32))
    ge = client.create(np.zeros((n, 4), np.float32))
    flags = client.create(np.zeros(n, np.uint32))
    _launch(vec_compare, client, n, x, y, lt, ge, flags)
    m = xs < ys
    np.testing.assert_array_equal(client.to_numpy(lt, "u32").reshape(n, 4), m.astype(np.uint32))
    np.testing.assert_array_equal(client.to_numpy(ge, "f32").reshape(n, 4), (xs >= 0.5).astype(np.float32))
    both = m & (xs != 0.25)
    want = m.any(1) * 1 + (m | (ys == xs)).all(1) * 2 + (both[:, 0] & ~m[:, 3]) * 4
    np.testing.assert_array_equal(client.to_numpy(flags, "u32"), want.astype(np.uint32))


def test_vector_select(client: Any) -> None:
    n = 200
    xs, ys = RNG.random((n, 4), np.float32), RNG.random((n, 4), np.float32)
    ps = RNG.integers(-50, 50, (n, 2), dtype=np.int32)
    x, y, out, ints = client.create(xs), client.create(ys), client.empty(n * 16), client.create(ps)
    _launch(vec_select, client, n, x, y, out, ints)
    np.testing.assert_array_equal(client.to_numpy(out, "f32").reshape(n, 4), np.where(xs > ys, xs, ys * 2))
    np.testing.assert_array_equal(client.to_numpy(ints, "i32").reshape(n, 2), np.abs(ps))


def test_vector_math(client: Any) -> None:
    n = 256
    xs = RNG.random((n, 4), np.float32) * 2
    ys = RNG.random((n, 4), np.float32) * 2
    ks = RNG.integers(-9, 9, (n, 4), dtype=np.int32)
    x, y, out, k = client.create(xs), client.create(ys), client.empty(n * 16), client.create(ks)
    _launch(vec_math, client, n, x, y, out, k)
    a, b = xs.astype(np.float64), ys.astype(np.float64)
    r = np.sqrt(a) + np.exp(b * 0.1) - np.log(a + 1) + np.sin(a) * np.cos(b) + np.tanh(a - b)
    r = r + np.floor(xs * np.float32(3)) + np.ceil(ys * np.float32(3)) + np.abs(a - b)
    r = r + np.minimum(np.minimum(a, b), 0.75) + np.maximum(a, 2 * b) + a**b + (a * b + 1)
    np.testing.assert_allclose(client.to_numpy(out, "f32").reshape(n, 4), r, rtol=2e-5, atol=2e-5)
    want_k = np.abs(ks) + np.minimum(ks, 3) - np.maximum(ks, -2)
    np.testing.assert_array_equal(client.to_numpy(k, "i32").reshape(n, 4), want_k)


def test_vector_casts(client: Any) -> None:
    n = 128
    xs = (RNG.random((n, 4), np.float32) - 0.5) * 40
    x = client.create(xs)
    ints, back, uints = client.empty(n * 16), client.empty(n * 16), client.empty(n * 8)
    _launch(vec_cast, client, n, x, ints, back, uints)
    v = np.trunc(xs).astype(np.int32)
    np.testing.assert_array_equal(client.to_numpy(ints, "i32").reshape(n, 4), v)
    np.testing.assert_array_equal(client.to_numpy(back, "f32").reshape(n, 4), v.astype(np.float32) * 0.5)
    want = (v[:, :2] + 100).astype(np.uint32)
    np.testing.assert_array_equal(client.to_numpy(uints, "u32").reshape(n, 2), want)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("if x[i] < 1.0:\n    y[i] = x[i]", "use any\\(mask\\) or all\\(mask\\)"),
        ("y[i] = x[i] if (x[i] < 1.0) + 1 else x[i]", "bool vectors take & and \\|"),
        ("y[i] = Vec[f32, 4](Vec[i32, 2](1, 2))", "converts a vector of 4 lanes"),
        ("y[i] = F4(cl.sqrt(Vec[i32, 4](x[i])))", "sqrt\\(\\) needs float vectors"),
        ("y[i] = x[i] if any(x[i]) else x[i]", "any\\(\\) takes one bool vector"),
        ("y[i] = x[i] << 1", "needs integer vectors"),
    ],
)
def test_vector_op_errors_name_the_line(cpu: Any, body: str, message: str) -> None:
    import linecache
    import textwrap

    src = "def bad(x: Array[Vec[f32, 4]], y: Array[Vec[f32, 4]]):\n    i = cl.ABSOLUTE_POS\n"
    src += textwrap.indent(body, "    ") + "\n"
    filename = f"<vector-op-error {abs(hash(body))}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    namespace: dict[str, Any] = {"cl": cl, "Array": Array, "Vec": Vec, "f32": f32, "i32": i32, "F4": F4}
    exec(compile(src, filename, "exec"), namespace)
    kern = cl.kernel(namespace["bad"])
    x = cpu.create(np.ones((4, 4), np.float32))
    with pytest.raises(cl.KernelTypeError, match=message) as info:
        kern.launch(cpu, 1, 4, x, x)
    assert f"{filename}:3:" in str(info.value)


def test_vector_shifts(client: Any) -> None:
    n = 200
    av = RNG.integers(0, 2**32, (n, 4), dtype=np.uint32)
    sv = RNG.integers(0, 32, (n, 4), dtype=np.uint32)
    bv = RNG.integers(-(2**20), 2**20, (n, 2), dtype=np.int32)
    a, s, b = client.create(av), client.create(sv), client.create(bv)
    out, outi = client.empty(n * 16), client.empty(n * 8)
    _launch(vec_shift, client, n, a, s, b, out, outi)
    want = ((av << sv) ^ (av >> np.uint32(3))) + (av << np.uint32(1))
    np.testing.assert_array_equal(client.to_numpy(out, "u32").reshape(n, 4), want)
    want_i = (bv >> np.int32([1, 2])) + (bv << np.int32(1))
    np.testing.assert_array_equal(client.to_numpy(outi, "i32").reshape(n, 2), want_i)


H4 = Vec[f16, 4]


@cl.kernel
def vec_half(x: Array[Vec[f16, 4]], y: Array[Vec[f16, 4]], pairs: Array[Vec[f16, 2]],
             wide: Array[Vec[f32, 4]]):
    i = cl.ABSOLUTE_POS
    if i < len(x):
        h = x[i]
        w = F4(h) * 2.0 + 1.0
        wide[i] = w
        y[i] = H4(w) + h * f16(0.5)  # back to f16 lanes, then arithmetic in f16 lanes
        y[i].w = h.x
        pairs[i] = Vec[f16, 2](h.y, h.z)


def test_f16_vectors_load_convert_and_store(client: Any) -> None:
    if "f16" not in client.capabilities.dtypes:
        pytest.skip(f"{client.backend} declares no f16")
    n = 96
    xs = ((RNG.random((n, 4)) - 0.5) * 8).astype(np.float16)
    x = client.create(xs)
    y, pairs, wide = client.empty(n * 8), client.empty(n * 4), client.empty(n * 16)
    _launch(vec_half, client, n, x, y, pairs, wide)
    w = xs.astype(np.float32) * 2 + 1
    np.testing.assert_array_equal(client.to_numpy(wide, "f32").reshape(n, 4), w)
    want = w.astype(np.float16) + xs * np.float16(0.5)
    want[:, 3] = xs[:, 0]
    np.testing.assert_allclose(client.to_numpy(y, "f16").reshape(n, 4).astype(np.float32),
                               want.astype(np.float32), rtol=2e-3, atol=2e-3)
    np.testing.assert_array_equal(client.to_numpy(pairs, "f16").reshape(n, 2), xs[:, 1:3])


@cl.kernel
def vec_half_math(x: Array[Vec[f16, 4]], y: Array[Vec[f16, 4]], s: Array[f16]):
    i = cl.ABSOLUTE_POS
    if i < len(x):
        a = abs(x[i]) + 0.5
        b = y[i]
        r = cl.sqrt(a) + min(a, b) * max(a, b) + cl.fma(a, b, a) + a // b + a % b + cl.exp(b * 0.25)
        y[i] = r + a ** 2.0
        h = s[i]
        s[i] = cl.sqrt(abs(h)) + max(h, f16(0.0)) + h // f16(2.0)


def test_f16_math_on_vectors_and_scalars(client: Any) -> None:
    if "f16" not in client.capabilities.dtypes:
        pytest.skip(f"{client.backend} declares no f16")
    n = 64
    xs = ((RNG.random((n, 4)) - 0.5) * 6).astype(np.float16)
    ys = (RNG.random((n, 4)) * 2 + 0.5).astype(np.float16)
    ss = ((RNG.random(n) - 0.5) * 10).astype(np.float16)
    x, y, s = client.create(xs), client.create(ys), client.create(ss)
    _launch(vec_half_math, client, n, x, y, s)
    a = np.abs(xs).astype(np.float32) + 0.5
    b = ys.astype(np.float32)
    r = (np.sqrt(a) + np.minimum(a, b) * np.maximum(a, b) + (a * b + a) + np.floor(a / b) + np.fmod(a, b)
         + np.exp(b * 0.25) + a**2)
    # f16 arithmetic rounds each step to half: compare within a few half ulps of the result
    got = client.to_numpy(y, "f16").reshape(n, 4).astype(np.float32)
    # Where a / b is within a half ulp or so of an integer, the device's half quotient may round
    # to either side, and floor (and fmod) then differ by one from numpy's f32: those are left out.
    q = a / b
    clear = np.abs(q - np.round(q)) > 4e-3 * np.maximum(np.abs(q), 1)
    assert clear.mean() > 0.9, "the test leaves out most of what it checks"
    np.testing.assert_allclose(got[clear], r[clear], rtol=1e-2, atol=1e-2)
    h = ss.astype(np.float32)
    want = np.sqrt(np.abs(h)) + np.maximum(h, 0) + np.floor(h / 2)
    np.testing.assert_allclose(client.to_numpy(s, "f16").astype(np.float32), want, rtol=1e-2, atol=1e-2)
