"""``cubeplug.lang`` kernels on the backend under test, checked against numpy.

A lang kernel becomes a plain :class:`~cubeplug.Kernel` in the ``c``, ``wgsl`` or ``python`` dialect,
so any backend that compiles one of those runs these tests unchanged; one that compiles none skips
them with the reason :func:`lang_missing` gives (through :func:`cubeplug.testing.gates.lacks`).
The kernels live in this file so that ``@cl.kernel`` can capture their source.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pytest

from cubeplug import lang as cl
from cubeplug.core.kernel import CubeCount
from cubeplug.lang import Array, Atomic, Comptime, Vec, f32, i32, u32
from cubeplug.lang.compile import DIALECTS, pick_dialect
from cubeplug.testing import gates


# --------------------------------------------------------------------------------------- kernels
# The kernels type-check (cubeplug.lang declares its names for mypy), as users' kernels do.
@cl.kernel
def lang_axpy(x: Array[f32], y: Array[f32], a: f32) -> None:
    i = cl.ABSOLUTE_POS
    if i < len(y):
        y[i] += a * x[i]


@cl.kernel
def lang_block_sum(x: Array[f32], out: Array[f32], BLOCK: Comptime[int]) -> None:
    """Each cube sums its BLOCK values in shared memory (a tree reduction) into out[CUBE_POS]."""
    buf = cl.shared(f32, BLOCK)
    i = cl.ABSOLUTE_POS
    buf[cl.UNIT_POS] = x[i] if i < len(x) else 0.0
    cl.sync_cube()
    s = u32(BLOCK // 2)
    while s > 0:
        if s > cl.UNIT_POS:
            buf[cl.UNIT_POS] += buf[cl.UNIT_POS + s]
        cl.sync_cube()
        s = s >> 1
    if cl.UNIT_POS == 0:
        out[cl.CUBE_POS] = buf[0]


@cl.kernel
def lang_scale_or_square(
    x: Array[f32], y: Array[f32], SQUARE: Comptime[bool], FACTOR: Comptime[float]
) -> None:
    i = cl.ABSOLUTE_POS
    if i < len(x):
        if SQUARE:
            y[i] = x[i] * x[i]
        else:
            y[i] = x[i] * FACTOR


@cl.func
def lang_clamp01(v: f32) -> f32:
    lo = max(v, 0.0)
    return min(lo, 1.0)


@cl.func
def lang_smooth(v: f32) -> f32:
    c = lang_clamp01(v)
    return c * c * (3.0 - 2.0 * c)


@cl.kernel
def lang_smoothstep(x: Array[f32], y: Array[f32]) -> None:
    i = cl.ABSOLUTE_POS
    if i < len(x):
        y[i] = lang_smooth(x[i])


@cl.kernel
def lang_first_above(x: Array[f32], out: Array[i32], limit: f32, stride: u32) -> None:
    """Each unit scans its row of ``stride`` values for the first one above ``limit`` (-1: none)."""
    row = cl.ABSOLUTE_POS
    if row * stride >= len(x):
        return
    found = i32(-1)
    j = u32(0)
    while True:
        if j >= stride:
            break
        if x[row * stride + j] > limit:
            found = i32(j)
            break
        j += 1
    out[row] = found


@cl.kernel
def lang_histogram(x: Array[u32], bins: Array[Atomic[u32]], NBINS: Comptime[int]) -> None:
    i = cl.ABSOLUTE_POS
    if i < len(x):
        cl.atomic_add(bins, x[i] % NBINS, 1)


@cl.kernel
def lang_write_all(y: Array[f32], n: u32) -> None:
    """Writes i to y[i] for every i < n, whatever len(y) is (out of bounds when n > len(y))."""
    i = cl.ABSOLUTE_POS
    if i < n:
        y[i] = f32(i)


@cl.kernel
def lang_f32_extremes(x: Array[f32], ext: Array[Atomic[f32]]) -> None:
    """Every unit updates the same three f32 elements: min, max (compare-and-swap loops) and a count."""
    i = cl.ABSOLUTE_POS
    if i < len(x):
        cl.atomic_min(ext, 0, x[i])
        cl.atomic_max(ext, 1, x[i])
        cl.atomic_add(ext, 2, 1.0)


@cl.kernel
def lang_vec_select(
    x: Array[Vec[f32, Literal[4]]], y: Array[Vec[f32, Literal[4]]], flags: Array[u32]
) -> None:
    """Per lane: sqrt(-v) where v < 0, else v * v + 1; a flag when any lane was negative."""
    i = cl.ABSOLUTE_POS
    if i < len(x):
        v = x[i]
        m = v < 0.0
        y[i] = cl.sqrt(-v) if m else cl.fma(v, v, 1.0)
        flags[i] = u32(1) if any(m) else u32(0)


# ------------------------------------------------------------------------------------------ gate


def lang_missing(client: Any) -> str | None:
    """The skip reason of a backend that compiles none of the dialects cubeplug.lang generates."""
    dialects = tuple(client.server.dialects)
    if pick_dialect(dialects) is not None:
        return None
    wanted, has = ", ".join(DIALECTS), ", ".join(dialects) or "none"
    return gates.lacks(f"a dialect cubeplug.lang generates ({wanted}); it compiles {has}")


@pytest.fixture
def lang_client(cubeplug_client: Any) -> Any:
    """The backend's shared client, once cubeplug.lang can target one of its dialects."""
    reason = lang_missing(cubeplug_client)
    if reason is not None:
        pytest.skip(reason)
    return cubeplug_client


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


# ----------------------------------------------------------------------------------------- tests


class TestLang:
    """One Python source per kernel, compiled for the backend's dialect, against numpy."""

    @pytest.mark.parametrize("checked", [True, False], ids=["checked", "unchecked"])
    def test_axpy(self, lang_client: Any, checked: bool) -> None:
        rng = _rng(1)
        n = 1000  # not a multiple of the cube dim: the last cube's tail is guarded by len(y)
        xs, ys = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
        x, y = lang_client.create(xs), lang_client.create(ys)
        launch = lang_axpy.launch if checked else lang_axpy.launch_unchecked
        launch(lang_client, CubeCount(4), 256, x, y, -1.5)
        want = ys + np.float32(-1.5) * xs
        np.testing.assert_allclose(lang_client.to_numpy(y, "f32"), want, rtol=1e-5, atol=1e-6)
        launch(lang_client, CubeCount(4), (256, 1, 1), x, y, 2.0)  # cube dim as a tuple; launched again
        want = want + np.float32(2.0) * xs
        np.testing.assert_allclose(lang_client.to_numpy(y, "f32"), want, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(lang_client.to_numpy(x, "f32"), xs)  # read-only: untouched

    def test_shared_memory_block_sum(self, lang_client: Any) -> None:
        block, cubes = 128, 6
        xs = _rng(2).random(cubes * block - 37, dtype=np.float32)  # the last cube is partly empty
        x, out = lang_client.create(xs), lang_client.create(np.full(cubes + 1, -7.0, np.float32))
        lang_block_sum.launch(lang_client, CubeCount(cubes), block, x, out, BLOCK=block)
        got = lang_client.to_numpy(out, "f32")
        want = [xs[c * block : (c + 1) * block].sum(dtype=np.float64) for c in range(cubes)]
        np.testing.assert_allclose(got[:cubes], want, rtol=1e-5)
        assert got[cubes] == -7.0, "a cube past the launch wrote its sum"

    def test_comptime_variants(self, lang_client: Any) -> None:
        xs = _rng(3).random(300, dtype=np.float32)
        x, y = lang_client.create(xs), lang_client.create(np.zeros(300, np.float32))
        square: dict[str, Any] = {"SQUARE": True, "FACTOR": 0.0}
        scale: dict[str, Any] = {"SQUARE": False, "FACTOR": 3.5}
        for variant in (square, scale, square):  # each variant's launcher is found again by its values
            lang_scale_or_square.launch(lang_client, CubeCount(2), 256, x, y, **variant)
            want = xs * xs if variant["SQUARE"] else xs * np.float32(3.5)
            np.testing.assert_allclose(lang_client.to_numpy(y, "f32"), want, rtol=1e-6, err_msg=str(variant))
        square_src = lang_scale_or_square.source(lang_client, 256, **square)
        scale_src = lang_scale_or_square.source(lang_client, 256, **scale)
        assert "3.5" in scale_src and "3.5" not in square_src  # the untaken branch is folded away

    def test_func_helpers(self, lang_client: Any) -> None:
        xs = np.linspace(-0.5, 1.5, 500, dtype=np.float32)
        x, y = lang_client.create(xs), lang_client.create(np.zeros(500, np.float32))
        lang_smoothstep.launch(lang_client, CubeCount(2), 256, x, y)
        c = np.clip(xs, 0, 1)
        np.testing.assert_allclose(lang_client.to_numpy(y, "f32"), c * c * (3 - 2 * c), rtol=1e-5, atol=1e-6)

    def test_while_and_break(self, lang_client: Any) -> None:
        rows, stride = 40, 19
        xs = _rng(4).random(rows * stride, dtype=np.float32)
        xs[5 * stride : 6 * stride] = 0.0  # a row with no hit: the loop ends by its own break
        x, out = lang_client.create(xs), lang_client.create(np.full(rows, 99, np.int32))
        lang_first_above.launch(lang_client, CubeCount(1), 64, x, out, 0.9, stride)
        hits = xs.reshape(rows, stride) > np.float32(0.9)
        want = np.where(hits.any(axis=1), hits.argmax(axis=1), -1)
        assert want[5] == -1 and (want >= 0).sum() > rows // 2
        np.testing.assert_array_equal(lang_client.to_numpy(out, "i32"), want)

    def test_atomic_histogram(self, lang_client: Any) -> None:
        gates.require(lang_client, "atomics")
        n, nbins = 4000, 16
        xs = _rng(5).integers(0, 1000, n).astype(np.uint32)
        x = lang_client.create(xs)
        bins = lang_client.create(np.arange(nbins + 1, dtype=np.uint32))  # starts non-zero; one spare bin
        lang_histogram.launch(lang_client, CubeCount(-(-n // 256)), 256, x, bins.offset_end(4), NBINS=nbins)
        want = np.bincount(xs % nbins, minlength=nbins) + np.arange(nbins)
        got = lang_client.to_numpy(bins, "u32")
        np.testing.assert_array_equal(got[:nbins], want)
        assert got[nbins] == nbins, "the spare bin past the view was written"

    def test_checked_out_of_bounds_write_is_dropped(self, lang_client: Any) -> None:
        off = -(-max(int(lang_client.capabilities.offset_alignment), 128) // 4) * 4  # bytes, whole f32s
        m = off // 4  # elements in each half
        whole = lang_client.create(np.full(2 * m, -1.0, np.float32))
        y, neighbour = whole.offset_end(off), whole.offset_start(off)  # two handles, back to back
        lang_write_all.launch(lang_client, CubeCount(-(-2 * m // 64)), 64, y, 2 * m)  # writes 2m of m
        np.testing.assert_array_equal(lang_client.to_numpy(y, "f32"), np.arange(m, dtype=np.float32))
        np.testing.assert_array_equal(lang_client.to_numpy(neighbour, "f32"), np.full(m, -1.0, np.float32))

    def test_f32_atomics_under_contention(self, lang_client: Any) -> None:
        gates.require(lang_client, "atomics")
        n = 3000
        xs = _rng(6).standard_normal(n).astype(np.float32)
        x, ext = lang_client.create(xs), lang_client.create(np.array([np.inf, -np.inf, 0.0], np.float32))
        lang_f32_extremes.launch(lang_client, CubeCount(-(-n // 256)), 256, x, ext)
        want = np.array([xs.min(), xs.max(), n], np.float32)
        np.testing.assert_array_equal(lang_client.to_numpy(ext, "f32"), want)

    def test_vector_masks_and_math(self, lang_client: Any) -> None:
        n = 300
        xs = _rng(7).standard_normal((n, 4)).astype(np.float32)
        xs[::3] = np.abs(xs[::3])  # rows without a negative lane
        x, y = lang_client.create(xs), lang_client.create(np.zeros((n, 4), np.float32))
        flags = lang_client.create(np.full(n, 9, np.uint32))
        lang_vec_select.launch(lang_client, CubeCount(-(-n // 64)), 64, x, y, flags)
        want = np.where(xs < 0, np.sqrt(np.abs(xs)), xs * xs + 1)
        np.testing.assert_allclose(lang_client.to_numpy(y, "f32").reshape(n, 4), want, rtol=1e-6)
        np.testing.assert_array_equal(lang_client.to_numpy(flags, "u32"), (xs < 0).any(axis=1))
