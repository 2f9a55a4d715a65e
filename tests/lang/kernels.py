"""The kernels the tests launch (defined in a file, so their source can be captured)."""

from __future__ import annotations

from cubeplug import lang as cl
from cubeplug.lang import Array, Atomic, Comptime, f32, i32, u32

# The kernels the conformance suite runs on every backend, under the names these tests use.
from cubeplug.testing.suite.lang import lang_block_sum as block_sum
from cubeplug.testing.suite.lang import lang_clamp01 as clamp01
from cubeplug.testing.suite.lang import lang_first_above as first_above
from cubeplug.testing.suite.lang import lang_scale_or_square as scale_or_square
from cubeplug.testing.suite.lang import lang_smooth as smooth
from cubeplug.testing.suite.lang import lang_smoothstep as smoothstep

__all__ = ["block_sum", "clamp01", "first_above", "scale_or_square", "smooth", "smoothstep"]


@cl.kernel
def axpy(x: Array[f32], y: Array[f32], a: f32):
    i = cl.ABSOLUTE_POS
    if i < len(y):
        y[i] += a * x[i]


@cl.kernel
def stencil(src: Array[f32], dst: Array[f32], w: u32, h: u32):
    """A 5-point average on a w x h grid; the border is copied."""
    x = cl.ABSOLUTE_POS_X
    y = cl.ABSOLUTE_POS_Y
    if x >= w or y >= h:
        return
    i = y * w + x
    if x == 0 or y == 0 or x == w - 1 or y == h - 1:
        dst[i] = src[i]
    else:
        dst[i] = 0.2 * (src[i] + src[i - 1] + src[i + 1] + src[i - w] + src[i + w])


@cl.kernel
def matmul(a: Array[f32], b: Array[f32], c: Array[f32], M: u32, N: u32, K: u32, T: Comptime[int]):
    As = cl.shared(f32, T * T)
    Bs = cl.shared(f32, T * T)
    tx = cl.UNIT_POS_X
    ty = cl.UNIT_POS_Y
    row = cl.CUBE_POS_Y * T + ty
    col = cl.CUBE_POS_X * T + tx
    acc = f32(0)
    for k0 in range(0, K, T):
        As[ty * T + tx] = a[row * K + k0 + tx] if row < M and k0 + tx < K else 0.0
        Bs[ty * T + tx] = b[(k0 + ty) * N + col] if k0 + ty < K and col < N else 0.0
        cl.sync_cube()
        for k in cl.unroll(range(T)):
            acc += As[ty * T + k] * Bs[k * T + tx]
        cl.sync_cube()
    if row < M and col < N:
        c[row * N + col] = acc


@cl.kernel
def histogram(x: Array[u32], bins: Array[Atomic[u32]], NBINS: Comptime[int]):
    i = cl.ABSOLUTE_POS
    if i < len(x):
        cl.atomic_add(bins, x[i] % NBINS, 1)


@cl.kernel
def atomics(counters: Array[Atomic[i32]], olds: Array[i32], v: Array[i32]):
    """Every unit: add to 0, max into 1, min into 2, CAS-increment 3; old value of the add kept."""
    i = cl.ABSOLUTE_POS
    if i < len(v):
        olds[i] = cl.atomic_add(counters, 0, v[i])
        cl.atomic_max(counters, 1, v[i])
        cl.atomic_min(counters, 2, v[i])
        cur = cl.atomic_add(counters, 3, 0)
        while True:
            seen = cl.atomic_compare_exchange(counters, 3, cur, cur + 1)
            if seen == cur:
                break
            cur = seen


@cl.kernel
def write_all(y: Array[f32], n: u32):
    """Writes i to y[i] for i < n, whatever len(y) is (out of bounds when n > len(y))."""
    i = cl.ABSOLUTE_POS
    if i < n:
        y[i] = f32(i)


@cl.kernel
def math_mix(x: Array[f32], y: Array[f32]):
    i = cl.ABSOLUTE_POS
    if i < len(x):
        v = x[i]
        r = cl.sqrt(v) + cl.exp(-v) + cl.log(v + 1.0) + cl.sin(v) * cl.cos(v) + cl.tanh(v)
        r += abs(v - 1.0) + min(v, 0.5) + max(v, 0.25) + cl.floor(v * 3.0) + cl.ceil(v * 2.0)
        r += cl.pow(v, 2.5) + cl.fma(v, 2.0, 1.0)
        y[i] = r


@cl.kernel
def int_ops(a: Array[i32], b: Array[i32], out: Array[i32]):
    """Integer semantics: truncating // and %, shifts, bit ops, select, casts."""
    i = cl.ABSOLUTE_POS
    if i < len(a):
        p = a[i]
        q = b[i]
        r = p // q + p % q * 3
        r += (p << 2) ^ (q >> 1)
        r += (p & 0xFF) | 7
        r += -p if p < q else ~q
        r += i32(u32(p) >> 28)
        r += i32(f32(p) * 0.5)
        out[i] = r


@cl.kernel
def grid_stride(x: Array[f32], out: Array[f32]):
    """A grid-stride loop with continue: sums the positive values each unit visits."""
    stride = cl.CUBE_DIM * cl.CUBE_COUNT
    acc = f32(0)
    for j in range(cl.ABSOLUTE_POS, len(x), stride):
        if x[j] < 0.0:
            continue
        acc += x[j]
    out[cl.ABSOLUTE_POS] = acc


@cl.kernel
def generic_scale(x: Array[T], y: Array[T], T: Comptime[cl.DType]):  # noqa: F821
    """A dtype-generic kernel: T is passed by keyword at launch."""
    i = cl.ABSOLUTE_POS
    if i < len(x):
        y[i] = x[i] * T(3) + T(1)


@cl.kernel
def prefixed_names(x: Array[f32], cl_s_n: u32, n: u32):
    """Names the WGSL generator's scalar copies (``cl_s_<scalar>``) would clash with."""
    cl_s_x = cl_s_n + n
    i = cl.ABSOLUTE_POS_X
    if i < n:
        x[i] = f32(cl_s_x)


@cl.kernel
def step_changed_in_body(out: Array[u32], steps: Array[u32]) -> None:
    """range() evaluates its step once (Python's rule): a step the body changes, held in a local or
    read from memory the body stores to, does not change the passes."""
    i = cl.ABSOLUTE_POS
    if i < len(out):
        s = u32(2)
        passes = u32(0)
        for _j in range(0, 10, s):
            s = u32(100)
            passes += 1
        for _k in range(0, 10, steps[i]):
            steps[i] = u32(100)
            passes += 10
        out[i] = passes
