"""Kernels in the ``c`` and ``opencl`` dialects used by the OpenCL backend tests."""

from __future__ import annotations

from cubeplug import Buffer, Kernel, Scalar

ADD_ONE = Kernel(
    "add_one",
    [Buffer("x", "i32"), Scalar("n", "u32")],
    {
        "c": "KERNEL add_one(GLOBAL int* x, unsigned int n) "
        "{ unsigned int i = ABSOLUTE_POS_X; if (i < n) x[i] += 1; }"
    },
    cube_dim=64,
)

AXPY = Kernel(
    "axpy",
    [Buffer("x", "f32", "read"), Buffer("y", "f32"), Scalar("a", "f32"), Scalar("n", "u32")],
    {
        "c": """
KERNEL axpy(GLOBAL const float* x, GLOBAL float* y, float a, unsigned int n) {
    unsigned int i = ABSOLUTE_POS_X;
    if (i < n) y[i] += a * x[i];
}
"""
    },
    cube_dim=128,
)

# Native OpenCL: the dialect preferred over ``c`` when a kernel has both.
SCALE = Kernel(
    "scale",
    [Buffer("x", "f32"), Scalar("a", "f32"), Scalar("n", "u32")],
    {
        "opencl": "__kernel void scale(__global float* x, float a, uint n) "
        "{ size_t i = get_global_id(0); if (i < n) x[i] *= a; }",
        "c": "this is not C and must not be compiled",
    },
    cube_dim=32,
)

FILL = Kernel(
    "fill",
    [Buffer("out", "f32", "write"), Scalar("value", "f32"), Scalar("n", "u32")],
    {
        "c": "KERNEL fill(GLOBAL float* out, float value, unsigned int n) "
        "{ unsigned int i = ABSOLUTE_POS_X; if (i < n) out[i] = value; }"
    },
    cube_dim=64,
)

# Writes its launch geometry: count, cube dim and position macros, 3-D.
GEOMETRY = Kernel(
    "geometry",
    [Buffer("out", "u32", "write")],
    {
        "c": """
KERNEL geometry(GLOBAL unsigned int* out) {
    if (ABSOLUTE_POS_X == 0 && ABSOLUTE_POS_Y == 0 && ABSOLUTE_POS_Z == 0) {
        out[0] = CUBE_COUNT_X; out[1] = CUBE_COUNT_Y; out[2] = CUBE_COUNT_Z;
        out[3] = CUBE_DIM_X; out[4] = CUBE_DIM_Y; out[5] = CUBE_DIM_Z;
        out[6] = CUBE_DIM_STATIC_X * CUBE_DIM_STATIC_Y * CUBE_DIM_STATIC_Z;
    }
    unsigned int flat = ABSOLUTE_POS_X + ABSOLUTE_POS_Y * CUBE_COUNT_X * CUBE_DIM_X
        + ABSOLUTE_POS_Z * CUBE_COUNT_X * CUBE_DIM_X * CUBE_COUNT_Y * CUBE_DIM_Y;
    out[8 + flat] = CUBE_POS_X * 100 + UNIT_POS_X * 10 + UNIT_POS_Y;
}
"""
    },
    cube_dim=(4, 2, 1),
)

# Shared memory and a barrier: each cube reverses its block of 64.
REVERSE = Kernel(
    "reverse",
    [Buffer("x", "f32")],
    {
        "c": """
KERNEL reverse(GLOBAL float* x) {
    LOCAL float tile[CUBE_DIM_STATIC_X];
    unsigned int u = UNIT_POS_X;
    unsigned int base = CUBE_POS_X * CUBE_DIM_X;
    tile[u] = x[base + u];
    SYNC_CUBE();
    x[base + u] = tile[CUBE_DIM_X - 1 - u];
}
"""
    },
    cube_dim=64,
)

# Atomic counter: every unit adds one.
COUNT = Kernel(
    "count",
    [Buffer("counter", "u32", atomic=True)],
    {"c": "KERNEL count(GLOBAL unsigned int* counter) { ATOMIC_ADD(&counter[0], 1u); }"},
    cube_dim=64,
)

# Vector buffers: float4 elements.
VEC4 = Kernel(
    "vec4",
    [Buffer("x", "f32", "read", vector=4), Buffer("y", "f32", "write", vector=4), Scalar("n", "u32")],
    {
        "c": "KERNEL vec4(GLOBAL const float4* x, GLOBAL float4* y, unsigned int n) "
        "{ unsigned int i = ABSOLUTE_POS_X; if (i < n) y[i] = x[i] * 2.0f + (float4)(0, 1, 2, 3); }"
    },
    cube_dim=16,
)

# Defines become #define lines.
DEFINES = Kernel(
    "defines",
    [Buffer("out", "i32", "write")],
    {"c": "KERNEL defines(GLOBAL int* out) { out[0] = VALUE * 2 + FLAG; }"},
    defines={"VALUE": 21, "FLAG": True},
)

# A different entry point than the kernel's name.
ENTRY = Kernel(
    "named_differently",
    [Buffer("out", "i32", "write")],
    {"c": "KERNEL helper_entry(GLOBAL int* out) { out[0] = 7; }"},
    entry="helper_entry",
)

NOOP = Kernel("noop", [], {"c": "KERNEL noop() {}"})

C_TYPES = {
    "f16": "half",
    "f32": "float",
    "f64": "double",
    "i8": "i8",
    "i16": "short",
    "i32": "int",
    "i64": "long long",
    "u8": "unsigned char",
    "u16": "u16",
    "u32": "unsigned int",
    "u64": "unsigned long long",
    "bool": "unsigned char",
}


def add_scalar(dtype: str) -> Kernel:
    """``y[i] = x[i] + s`` (``|`` for bool) in the dtype's C spelling."""
    t = C_TYPES[dtype]
    op = "|" if dtype == "bool" else "+"
    return Kernel(
        f"add_{dtype}",
        [Buffer("x", dtype, "read"), Buffer("y", dtype, "write"), Scalar("s", dtype), Scalar("n", "u32")],
        {
            "c": f"KERNEL add_{dtype}(GLOBAL const {t}* x, GLOBAL {t}* y, {t} s, unsigned int n) "
            f"{{ unsigned int i = ABSOLUTE_POS_X; if (i < n) y[i] = ({t})(x[i] {op} s); }}"
        },
        cube_dim=32,
    )

# A kernel that runs long (on a CPU device about a second for 64Ki units at 20000 rounds) and then
# writes -1 everywhere (5 where the hash hits a value it never reaches): for ordering tests.
SLOW = Kernel(
    "slow",
    [Buffer("x", "i32"), Scalar("rounds", "i32")],
    {
        "opencl": """
__kernel void slow(__global int* x, int rounds) {
    size_t i = get_global_id(0);
    int v = x[i];
    for (int r = 0; r < rounds; ++r) v = (v * 1103515245 + 12345) & 0x7fffffff;
    x[i] = (v == 12345678) ? 5 : -1;
}
"""
    },
    cube_dim=64,
)
