"""Test kernels for the CUDA backend: a ``c`` (or ``cuda``) source each, plus a python stand-in for the fake.

The stand-ins are registered in :data:`fake_cupy.KERNELS` under the entry name and do what the C
source does over the whole launch grid, through bounds-checked views of the fake device memory.
"""

from __future__ import annotations

import numpy as np

from cubeplug import Buffer, Kernel, Scalar
from cubeplug.core.kernel import DTYPES
from tests.backends.cuda.fake_cupy import KERNELS, device_view

C_TYPES = {
    "f16": "half",
    "f32": "float",
    "f64": "double",
    "i8": "i8",
    "i16": "i16",
    "i32": "int",
    "i64": "long long",
    "u8": "u8",
    "u16": "u16",
    "u32": "unsigned int",
    "u64": "unsigned long long",
    "bool": "bool",
}


def _threads(grid: tuple[int, ...], block: tuple[int, ...]) -> int:
    return grid[0] * block[0]


def _fake(name: str):  # type: ignore[no-untyped-def]
    def register(fn):  # type: ignore[no-untyped-def]
        KERNELS[name] = fn
        return fn

    return register


FILL = Kernel(
    "fill",
    [Buffer("out", "f32", "write"), Scalar("value", "f32"), Scalar("n", "u32")],
    {
        "c": "KERNEL fill(GLOBAL float* out, float value, unsigned int n) {\n"
        "  unsigned int i = ABSOLUTE_POS_X; if (i < n) out[i] = value;\n}\n"
    },
    cube_dim=256,
)


@_fake("fill")
def _fill(grid, block, args):  # type: ignore[no-untyped-def]
    out, value, n = args
    m = min(int(n), _threads(grid, block))
    device_view(out, np.float32, m)[:] = value


AXPY = Kernel(
    "axpy",
    [Buffer("x", "f32", "read"), Buffer("y", "f32", "read_write"), Scalar("a", "f32"), Scalar("n", "u32")],
    {
        "c": "KERNEL axpy(GLOBAL const float* x, GLOBAL float* y, float a, unsigned int n) {\n"
        "  unsigned int i = ABSOLUTE_POS_X; if (i < n) y[i] += a * x[i];\n}\n"
    },
    cube_dim=128,
)


@_fake("axpy")
def _axpy(grid, block, args):  # type: ignore[no-untyped-def]
    x, y, a, n = args
    m = min(int(n), _threads(grid, block))
    device_view(y, np.float32, m)[:] += a * device_view(x, np.float32, m)


ADD_ONE = Kernel(
    "add_one",
    [Buffer("x", "i32"), Scalar("n", "u32")],
    {
        "c": "KERNEL add_one(GLOBAL int* x, unsigned int n) {\n"
        "  unsigned int i = ABSOLUTE_POS_X; if (i < n) x[i] += 1;\n}\n"
    },
    cube_dim=256,
)


@_fake("add_one")
def _add_one(grid, block, args):  # type: ignore[no-untyped-def]
    x, n = args
    device_view(x, np.int32, min(int(n), _threads(grid, block)))[:] += 1


# Scalars between buffers: the declared order must be kept.
MIXED = Kernel(
    "mixed",
    [
        Scalar("a", "f64"),
        Buffer("out", "f64", "write"),
        Scalar("b", "i64"),
        Buffer("out2", "i64", "write"),
        Scalar("c", "u8"),
    ],
    {
        "c": "KERNEL mixed(double a, GLOBAL double* out, long long b, GLOBAL long long* out2, u8 c) {\n"
        "  if (ABSOLUTE_POS_X == 0) { out[0] = a; out2[0] = b; out2[1] = c; }\n}\n"
    },
    cube_dim=32,
)


@_fake("mixed")
def _mixed(grid, block, args):  # type: ignore[no-untyped-def]
    a, out, b, out2, c = args
    device_view(out, np.float64, 1)[0] = a
    o2 = device_view(out2, np.int64, 2)
    o2[0], o2[1] = b, c


WRITE_COUNT = Kernel(
    "write_count",
    [Buffer("out", "u32", "write")],
    {
        "c": "KERNEL write_count(GLOBAL unsigned int* out) {\n"
        "  if (ABSOLUTE_POS_X == 0 && CUBE_POS_Y == 0 && CUBE_POS_Z == 0) {\n"
        "    out[0] = CUBE_COUNT_X; out[1] = CUBE_COUNT_Y; out[2] = CUBE_COUNT_Z; }\n}\n"
    },
    cube_dim=1,
)


@_fake("write_count")
def _write_count(grid, block, args):  # type: ignore[no-untyped-def]
    device_view(args[0], np.uint32, 3)[:] = grid


COPY4 = Kernel(
    "copy4",
    [Buffer("src", "f32", "read", vector=4), Buffer("dst", "f32", "write", vector=4), Scalar("n", "u32")],
    {
        "c": "KERNEL copy4(GLOBAL const float4* src, GLOBAL float4* dst, unsigned int n) {\n"
        "  unsigned int i = ABSOLUTE_POS_X; if (i < n) dst[i] = src[i];\n}\n"
    },
    cube_dim=64,
)


@_fake("copy4")
def _copy4(grid, block, args):  # type: ignore[no-untyped-def]
    src, dst, n = args
    m = 4 * min(int(n), _threads(grid, block))
    device_view(dst, np.float32, m)[:] = device_view(src, np.float32, m)


COUNT = Kernel(
    "count",
    [Buffer("counter", "u32", atomic=True), Scalar("n", "u32")],
    {
        "c": "KERNEL count(GLOBAL unsigned int* counter, unsigned int n) {\n"
        "  if (ABSOLUTE_POS_X < n) ATOMIC_ADD(counter, 1u);\n}\n"
    },
    cube_dim=128,
)


@_fake("count")
def _count(grid, block, args):  # type: ignore[no-untyped-def]
    counter, n = args
    device_view(counter, np.uint32, 1)[0] += min(int(n), _threads(grid, block))


NATIVE = Kernel(
    "native_scale",
    [Buffer("x", "f32"), Scalar("s", "f32"), Scalar("n", "u32")],
    {
        "cuda": 'extern "C" __global__ void native_scale(float* x, float s, unsigned int n) {\n'
        "  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  if (i < n) x[i] *= s * SCALE;\n}\n"
    },
    cube_dim=64,
    defines={"SCALE": 2},
)


@_fake("native_scale")
def _native_scale(grid, block, args):  # type: ignore[no-untyped-def]
    x, s, n = args
    device_view(x, np.float32, min(int(n), _threads(grid, block)))[:] *= s * 2


ENTRY = Kernel(
    "renamed",
    [Buffer("x", "i32"), Scalar("n", "u32")],
    {
        "c": "KERNEL real_entry(GLOBAL int* x, unsigned int n) {\n"
        "  if (ABSOLUTE_POS_X < n) x[ABSOLUTE_POS_X] = 7;\n}\n"
    },
    cube_dim=32,
    entry="real_entry",
)


@_fake("real_entry")
def _real_entry(grid, block, args):  # type: ignore[no-untyped-def]
    x, n = args
    device_view(x, np.int32, min(int(n), _threads(grid, block)))[:] = 7


BROKEN = Kernel(
    "broken",
    [Buffer("x", "f32")],
    {"c": "KERNEL broken(GLOBAL float* x) {\n  x[0] = COMPILE_ERROR_HERE;\n}\n"},
)
NO_ENTRY = Kernel("missing", [Buffer("x", "f32")], {"c": "KERNEL something_else(GLOBAL float* x) { }\n"})

# A pitched 2-D tensor: rows of ``cols`` elements, ``pitch`` elements apart.
SCALE2D = Kernel(
    "scale2d",
    [
        Buffer("x", "f32"),
        Scalar("rows", "u32"),
        Scalar("cols", "u32"),
        Scalar("pitch", "u32"),
        Scalar("s", "f32"),
    ],
    {
        "c": "KERNEL scale2d(GLOBAL float* x, unsigned int rows, unsigned int cols, unsigned int pitch,\n"
        "                float s) {\n"
        "  unsigned int c = ABSOLUTE_POS_X, r = ABSOLUTE_POS_Y;\n"
        "  if (r < rows && c < cols) x[r * pitch + c] *= s;\n}\n"
    },
    cube_dim=(16, 16, 1),
)


@_fake("scale2d")
def _scale2d(grid, block, args):  # type: ignore[no-untyped-def]
    x, rows, cols, pitch, s = (int(a) if i < 4 else a for i, a in enumerate(args))
    if rows == 0:
        return
    view = device_view(x, np.float32, (rows - 1) * pitch + cols)
    for r in range(rows):
        view[r * pitch : r * pitch + cols] *= s


def store_kernel(dt: str) -> Kernel:
    """``out[i] = v`` for i < n, for one dtype (scalar passing of every dtype)."""
    ct = C_TYPES[dt]
    return Kernel(
        f"store_{dt}",
        [Buffer("out", dt, "write"), Scalar("v", dt), Scalar("n", "u32")],
        {
            "c": f"KERNEL store_{dt}(GLOBAL {ct}* out, {ct} v, unsigned int n) {{\n"
            f"  unsigned int i = ABSOLUTE_POS_X; if (i < n) out[i] = v;\n}}\n"
        },
        cube_dim=64,
    )


def bump_kernel(dt: str) -> Kernel:
    """``x[i] = x[i] + 1`` (``!x[i]`` for bool), for one dtype (buffers of every dtype)."""
    ct = C_TYPES[dt]
    if dt == "f16":
        body = "x[i] = __float2half(__half2float(x[i]) + 1.0f);"
    elif dt == "bool":
        body = "x[i] = !x[i];"
    else:
        body = f"x[i] = ({ct})(x[i] + 1);"
    return Kernel(
        f"bump_{dt}",
        [Buffer("x", dt), Scalar("n", "u32")],
        {
            "c": f"KERNEL bump_{dt}(GLOBAL {ct}* x, unsigned int n) {{\n"
            f"  unsigned int i = ABSOLUTE_POS_X; if (i < n) {{ {body} }}\n}}\n"
        },
        cube_dim=64,
    )


def _register_dtype_fakes() -> None:
    for dt, np_dt in DTYPES.items():

        def store(grid, block, args, np_dt=np_dt):  # type: ignore[no-untyped-def]
            out, v, n = args
            device_view(out, np_dt, min(int(n), _threads(grid, block)))[:] = v

        def bump(grid, block, args, np_dt=np_dt, dt=dt):  # type: ignore[no-untyped-def]
            x, n = args
            view = device_view(x, np_dt, min(int(n), _threads(grid, block)))
            if dt == "bool":
                view[:] = ~view
            else:
                view[:] = (view + 1).astype(np_dt)

        KERNELS[f"store_{dt}"] = store
        KERNELS[f"bump_{dt}"] = bump


_register_dtype_fakes()


SLOW = Kernel(
    "slow",
    [Buffer("x", "i32"), Scalar("rounds", "u32")],
    {
        "c": "KERNEL slow(GLOBAL int* x, unsigned int rounds) {\n"
        "  unsigned int i = ABSOLUTE_POS_X;\n"
        "  unsigned int v = (unsigned int)x[i];\n"
        "  for (unsigned int k = 0; k < rounds; ++k) v = v * 1103515245u + 12345u;\n"
        "  x[i] = (int)v;\n}\n"
    },
    cube_dim=64,
)


def slow_reference(x: np.ndarray, rounds: int) -> np.ndarray:
    """What SLOW computes, on the host (uint32 wrap-around arithmetic)."""
    v = x.astype(np.uint32)
    for _ in range(rounds):
        v = (v * np.uint32(1103515245) + np.uint32(12345)).astype(np.uint32)
    return v.astype(np.int32)


@_fake("slow")
def _slow(grid, block, args):  # type: ignore[no-untyped-def]
    x, rounds = args
    view = device_view(x, np.int32, _threads(grid, block))
    view[:] = slow_reference(view, min(int(rounds), 50))  # the fake caps the work
