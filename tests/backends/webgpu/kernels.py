"""Kernels in the ``wgsl`` dialect used by the WebGPU backend tests."""

from __future__ import annotations

from cubeplug import Buffer, Kernel, Scalar

_MAIN = "@compute @workgroup_size(CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z)\n"

ADD_ONE = Kernel(
    "add_one",
    [Buffer("x", "i32"), Scalar("n", "u32")],
    {
        "wgsl": _MAIN + "fn add_one(@builtin(global_invocation_id) g: vec3<u32>) "
        "{ if (g.x < scalars.n) { x[g.x] = x[g.x] + 1; } }"
    },
    cube_dim=64,
)

AXPY = Kernel(
    "axpy",
    [Buffer("x", "f32", "read"), Buffer("y", "f32"), Scalar("a", "f32"), Scalar("n", "u32")],
    {
        "wgsl": _MAIN
        + """fn axpy(@builtin(global_invocation_id) g: vec3<u32>) {
    let i = g.x;
    if (i < scalars.n) { y[i] = y[i] + scalars.a * x[i]; }
}
"""
    },
    cube_dim=128,
)

# AXPY's bindings (its params, one read) with another body: launches share AXPY's bind groups.
AXMY = Kernel(
    "axmy",
    AXPY.params,
    {"wgsl": str(AXPY.sources["wgsl"]).replace("fn axpy", "fn axmy").replace("+ scalars.a", "- scalars.a")},
    cube_dim=128,
)
assert str(AXMY.sources["wgsl"]).count("y[i] - scalars.a") == 1

# AXPY's layout with x written too (no read buffer): its bind groups are AXPY's layout, never read-only.
XPY = Kernel(
    "xpy",
    [Buffer("x", "f32"), Buffer("y", "f32"), Scalar("a", "f32"), Scalar("n", "u32")],
    {
        "wgsl": _MAIN
        + """fn xpy(@builtin(global_invocation_id) g: vec3<u32>) {
    let i = g.x;
    if (i < scalars.n) { y[i] = y[i] + x[i]; x[i] = scalars.a; }
}
"""
    },
    cube_dim=128,
)

FILL = Kernel(
    "fill",
    [Buffer("out", "f32", "write"), Scalar("value", "f32"), Scalar("n", "u32")],
    {
        "wgsl": _MAIN + "fn fill(@builtin(global_invocation_id) g: vec3<u32>) "
        "{ if (g.x < scalars.n) { out[g.x] = scalars.value; } }"
    },
    cube_dim=64,
)

# Writes its launch geometry, 3-D.
GEOMETRY = Kernel(
    "geometry",
    [Buffer("out", "u32", "write")],
    {
        "wgsl": _MAIN
        + """fn geometry(@builtin(global_invocation_id) g: vec3<u32>,
            @builtin(num_workgroups) n: vec3<u32>, @builtin(workgroup_id) c: vec3<u32>,
            @builtin(local_invocation_id) u: vec3<u32>) {
    if (g.x == 0u && g.y == 0u && g.z == 0u) {
        out[0] = n.x; out[1] = n.y; out[2] = n.z;
        out[3] = CUBE_DIM_X; out[4] = CUBE_DIM_Y; out[5] = CUBE_DIM_Z;
    }
    let flat = g.x + g.y * n.x * CUBE_DIM_X + g.z * n.x * CUBE_DIM_X * n.y * CUBE_DIM_Y;
    out[8u + flat] = c.x * 100u + u.x * 10u + u.y;
}
"""
    },
    cube_dim=(4, 2, 1),
)

# Workgroup memory and a barrier: each cube reverses its block of 64.
REVERSE = Kernel(
    "reverse",
    [Buffer("x", "f32")],
    {
        "wgsl": """var<workgroup> tile: array<f32, 64>;
@compute @workgroup_size(CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z)
fn reverse(@builtin(local_invocation_id) u: vec3<u32>, @builtin(workgroup_id) c: vec3<u32>) {
    let base = c.x * CUBE_DIM_X;
    tile[u.x] = x[base + u.x];
    workgroupBarrier();
    x[base + u.x] = tile[CUBE_DIM_X - 1u - u.x];
}
"""
    },
    cube_dim=64,
)

VEC4 = Kernel(
    "vec4_scale",
    [Buffer("v", "f32", vector=4), Scalar("a", "f32"), Scalar("n", "u32")],
    {
        "wgsl": _MAIN + "fn vec4_scale(@builtin(global_invocation_id) g: vec3<u32>) "
        "{ if (g.x < scalars.n) { v[g.x] = v[g.x] * scalars.a + vec4<f32>(0.0, 1.0, 2.0, 3.0); } }"
    },
    cube_dim=32,
)

COUNT = Kernel(
    "count",
    [Buffer("x", "i32", "read"), Buffer("hits", "u32", atomic=True), Scalar("n", "u32")],
    {
        "wgsl": _MAIN + "fn count(@builtin(global_invocation_id) g: vec3<u32>) "
        "{ if (g.x < scalars.n && x[g.x] > 0) { atomicAdd(&hits[0], 1u); } }"
    },
    cube_dim=64,
)

DEFINES = Kernel(
    "defines",
    [Buffer("out", "f32", "write")],
    {
        "wgsl": _MAIN
        + """fn defines(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x == 0u) {
        out[0] = f32(WIDTH); out[1] = SCALE; out[2] = select(0.0, 1.0, FLAG);
        let t: ELEM = ELEM(7); out[3] = f32(t);
    }
}
"""
    },
    cube_dim=1,
    defines={"WIDTH": 17, "SCALE": 2.5, "FLAG": True, "ELEM": "i32"},
)

ENTRY = Kernel(
    "named_differently",
    [Buffer("x", "u32", "write")],
    {"wgsl": _MAIN + "fn main_entry(@builtin(global_invocation_id) g: vec3<u32>) { x[g.x] = 42u + g.x; }"},
    cube_dim=4,
    entry="main_entry",
)

NOOP = Kernel("noop", [Buffer("x", "u32")], {"wgsl": _MAIN + "fn noop() {}"}, cube_dim=1)

# Scalars of every alignment class in one struct (f16 2 B, u32 4 B, f64 8 B, i64 8 B).
MIXED = Kernel(
    "mixed",
    [
        Buffer("out", "f64", "write"),
        Scalar("h", "f16"),
        Scalar("u", "u32"),
        Scalar("d", "f64"),
        Scalar("q", "i64"),
        Scalar("f", "f32"),
    ],
    {
        "wgsl": _MAIN
        + """fn mixed(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x == 0u) {
        out[0] = f64(scalars.h); out[1] = f64(scalars.u); out[2] = scalars.d;
        out[3] = f64(scalars.q); out[4] = f64(scalars.f);
    }
}
"""
    },
    cube_dim=1,
)

# Many scalars: 160 B of scalars per launch, so a batch overflows the scalar arena.
WIDE = Kernel(
    "wide",
    [Buffer("out", "u32"), *[Scalar(f"s{i}", "u32") for i in range(40)]],
    {
        "wgsl": _MAIN + "fn wide(@builtin(global_invocation_id) g: vec3<u32>) "
        "{ out[scalars.s0] = scalars.s0 + scalars.s39; }"
    },
    cube_dim=1,
)


def add_scalar(dtype: str) -> Kernel:
    """``y[i] = x[i] * 2 + a`` for one dtype (needs ``enable f16`` for f16, added by the backend)."""
    t = {"f16": "f16", "f32": "f32", "f64": "f64", "i32": "i32", "u32": "u32", "i64": "i64", "u64": "u64"}[
        dtype
    ]
    return Kernel(
        f"add_scalar_{dtype}",
        [Buffer("x", dtype, "read"), Buffer("y", dtype, "write"), Scalar("a", dtype), Scalar("n", "u32")],
        {
            "wgsl": _MAIN + f"fn add_scalar_{dtype}(@builtin(global_invocation_id) g: vec3<u32>) "
            f"{{ if (g.x < scalars.n) {{ y[g.x] = x[g.x] * {t}(2) + scalars.a; }} }}"
        },
        cube_dim=64,
    )


# Busy for a while: ``rounds`` times 16 steps of a linear congruential generator per element
# (lavapipe ends a loop after about 65535 iterations, so each iteration does 16 steps; rounds < 65535).
_STEPS = " ".join(["v = ((v * 1103515245 + 12345) & 0x7fffffff) ^ (v >> 13);"] * 16)
SLOW = Kernel(
    "slow",
    [Buffer("x", "i32"), Scalar("rounds", "i32")],
    {
        "wgsl": _MAIN
        + f"""fn slow(@builtin(global_invocation_id) g: vec3<u32>) {{
    var v = x[g.x];
    for (var r = 0; r < scalars.rounds; r++) {{ {_STEPS} }}
    x[g.x] = select(-1, 5, v == 12345678);
}}
"""
    },
    cube_dim=64,
)
