"""The suite's kernels, each written in every dialect the built-in backends compile.

``python`` (the CPU reference and the plugin template), ``c`` (CUDA and OpenCL, with the macros of
:mod:`cubeplug.core.cdialect`) and ``wgsl`` (WebGPU: the backend generates the buffer, scalar and
const declarations, the source gives the entry point). Every kernel computes the same thing in
every dialect, so one expected result checks every backend. Kernels of a dtype are built on first
use and cached, so a kernel is the same object (and compiles once) across tests.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import numpy as np

from cubeplug.core.kernel import DTYPES, Buffer, Kernel, Scalar

#: The dialects the suite writes its kernels in.
SUITE_DIALECTS = ("python", "c", "wgsl")

#: How each dtype is spelled in the ``c`` dialect (bool travels as one byte).
C_TYPES = {
    "f16": "f16", "f32": "f32", "f64": "f64", "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64",
    "u8": "u8", "u16": "u16", "u32": "u32", "u64": "u64", "bool": "u8",
}  # fmt: skip
#: How each dtype is spelled in WGSL; the others cannot be declared there.
WGSL_TYPES = {
    "f16": "f16",
    "f32": "f32",
    "f64": "f64",
    "i32": "i32",
    "u32": "u32",
    "i64": "i64",
    "u64": "u64",
}

_MAIN = "@compute @workgroup_size(CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z)\n"
_GID = "@builtin(global_invocation_id) g: vec3<u32>"
#: Units per cube of the 1-D kernels.
CUBE = 64


def cubes(n: int, cube: int = CUBE) -> int:
    """Cubes needed to cover ``n`` units with ``cube`` units per cube."""
    return -(-n // cube)


def _units_x(launch: Any) -> int:
    return int(launch.count[0]) * int(launch.cube_dim[0])


# ---------------------------------------------------------------------------------------- python bodies
def _py_typed_add(launch: Any, a: Any, x: np.ndarray, n: Any, y: np.ndarray) -> None:
    m = min(int(n), _units_x(launch))
    y[:m] = x[:m] + a


def _py_typed_xor(launch: Any, a: Any, x: np.ndarray, n: Any, y: np.ndarray) -> None:
    m = min(int(n), _units_x(launch))
    y[:m] = x[:m] != a


def _py_echo(launch: Any, *params: Any) -> None:
    for value, out in zip(params[0::2], params[1::2]):
        out[0] = value


def _py_vec_scale(launch: Any, v: np.ndarray, a: Any, n: Any) -> None:
    m = min(int(n), _units_x(launch))
    v[:m] = v[:m] * a + np.arange(v.shape[1], dtype=v.dtype)


def _py_atomic_count(launch: Any, x: np.ndarray, hits: np.ndarray, n: Any) -> None:
    m = min(int(n), _units_x(launch))
    hits[0] += np.count_nonzero(x[:m] > 0)


def _py_geometry(launch: Any, out: np.ndarray) -> None:
    (cx, cy, cz), (dx, dy, dz) = launch.count, launch.cube_dim
    w, h, d = cx * dx, cy * dy, cz * dz
    gz, gy, gx = np.meshgrid(np.arange(d), np.arange(h), np.arange(w), indexing="ij")
    out[(gx + w * gy + w * h * gz).ravel()] = (1 + gx + 100 * gy + 10000 * gz).ravel()


def _py_fill(launch: Any, out: np.ndarray, value: Any, n: Any) -> None:
    m = min(int(n), _units_x(launch))
    out[:m] = value + np.arange(m, dtype=out.dtype)


def _py_add_one(launch: Any, x: np.ndarray, n: Any) -> None:
    m = min(int(n), _units_x(launch))
    x[:m] += 1


def _py_add_from(launch: Any, src: np.ndarray, dst: np.ndarray, n: Any) -> None:
    m = min(int(n), _units_x(launch))
    dst[:m] += src[:m]


def _py_half_inside(launch: Any, x: np.ndarray, y: np.ndarray, n: Any) -> None:
    m = min(int(n), _units_x(launch))
    h = x[:m].astype(np.float16)
    y[:m] = h + h


# ---------------------------------------------------------------------------------------- kernels
def _kernel(
    name: str,
    params: list[Buffer | Scalar],
    python: Any,
    c: str | None,
    wgsl: str | None,
    cube_dim: int | tuple[int, ...] = CUBE,
    **kw: Any,
) -> Kernel:
    sources: dict[str, Any] = {"python": python}
    if c is not None:
        sources["c"] = c
    if wgsl is not None:
        sources["wgsl"] = wgsl
    return Kernel(name, params, sources, cube_dim=cube_dim, **kw)


@functools.cache
def typed_add(dtype: str) -> Kernel:
    """``y[i] = x[i] + a`` for ``i < n`` (``x[i] != a`` for bool); params interleave scalars and buffers."""
    name = f"typed_add_{dtype}"
    params: list[Buffer | Scalar] = [
        Scalar("a", dtype), Buffer("x", dtype, "read"), Scalar("n", "u32"), Buffer("y", dtype, "write"),
    ]  # fmt: skip
    t = C_TYPES[dtype]
    expr = "(x[i] != a) ? 1 : 0" if dtype == "bool" else "x[i] + a"
    c = (
        f"KERNEL {name}({t} a, GLOBAL const {t}* x, unsigned int n, GLOBAL {t}* y) {{\n"
        f"    unsigned int i = ABSOLUTE_POS_X;\n"
        f"    if (i < n) {{ y[i] = ({t})({expr}); }}\n"
        f"}}\n"
    )
    wgsl = None
    if dtype in WGSL_TYPES:
        wgsl = (
            _MAIN + f"fn {name}({_GID}) {{\n    if (g.x < scalars.n) {{ y[g.x] = x[g.x] + scalars.a; }}\n}}\n"
        )
    python = _py_typed_xor if dtype == "bool" else _py_typed_add
    return _kernel(name, params, python, c, wgsl)


@functools.cache
def echo(dtypes: tuple[str, ...]) -> Kernel:
    """For each dtype in order, a scalar then a buffer; unit 0 writes every scalar to its buffer."""
    name = "echo_" + "_".join(dtypes)
    params: list[Buffer | Scalar] = []
    for d in dtypes:
        params += [Scalar(f"s_{d}", d), Buffer(f"o_{d}", d, "write")]
    c_params = ", ".join(f"{C_TYPES[d]} s_{d}, GLOBAL {C_TYPES[d]}* o_{d}" for d in dtypes)
    c_body = " ".join(f"o_{d}[0] = s_{d};" for d in dtypes)
    c = f"KERNEL {name}({c_params}) {{\n    if (ABSOLUTE_POS_X == 0) {{ {c_body} }}\n}}\n"
    wgsl = None
    if all(d in WGSL_TYPES for d in dtypes):
        body = " ".join(f"o_{d}[0] = scalars.s_{d};" for d in dtypes)
        wgsl = _MAIN + f"fn {name}({_GID}) {{\n    if (g.x == 0u) {{ {body} }}\n}}\n"
    return _kernel(name, params, _py_echo, c, wgsl, cube_dim=1)


@functools.cache
def vec_scale(width: int) -> Kernel:
    """``v[i] = v[i] * a + (0, 1, 2, 3)[:width]`` on a ``vector=width`` f32 buffer."""
    name = f"vec_scale{width}"
    params: list[Buffer | Scalar] = [Buffer("v", "f32", vector=width), Scalar("a", "f32"), Scalar("n", "u32")]
    lanes = "xyzw"[:width]
    c_body = " ".join(f"e.{lane} = e.{lane} * a + {k}.0f;" for k, lane in enumerate(lanes))
    c = (
        f"KERNEL {name}(GLOBAL float{width}* v, float a, unsigned int n) {{\n"
        f"    unsigned int i = ABSOLUTE_POS_X;\n"
        f"    if (i < n) {{ float{width} e = v[i]; {c_body} v[i] = e; }}\n"
        f"}}\n"
    )
    offsets = ", ".join(f"{k}.0" for k in range(width))
    wgsl = _MAIN + (
        f"fn {name}({_GID}) {{\n"
        f"    if (g.x < scalars.n) {{ v[g.x] = v[g.x] * scalars.a + vec{width}<f32>({offsets}); }}\n"
        f"}}\n"
    )
    return _kernel(name, params, _py_vec_scale, c, wgsl)


@functools.cache
def atomic_count(dtype: str) -> Kernel:
    """``hits[0]`` (an atomic i32 or u32 buffer) counts the positive elements of ``x[:n]``."""
    name = f"atomic_count_{dtype}"
    params: list[Buffer | Scalar] = [
        Buffer("x", "i32", "read"), Buffer("hits", dtype, "read_write", atomic=True), Scalar("n", "u32"),
    ]  # fmt: skip
    t, one = ("unsigned int", "1u") if dtype == "u32" else ("int", "1")
    c = (
        f"KERNEL {name}(GLOBAL const int* x, GLOBAL {t}* hits, unsigned int n) {{\n"
        f"    unsigned int i = ABSOLUTE_POS_X;\n"
        f"    if (i < n && x[i] > 0) {{ ATOMIC_ADD(&hits[0], {one}); }}\n"
        f"}}\n"
    )
    wone = "1u" if dtype == "u32" else "1i"
    wgsl = _MAIN + (
        f"fn {name}({_GID}) {{\n"
        f"    if (g.x < scalars.n && x[g.x] > 0) {{ atomicAdd(&hits[0], {wone}); }}\n"
        f"}}\n"
    )
    return _kernel(name, params, _py_atomic_count, c, wgsl)


#: Cube dim of :data:`GEOMETRY`.
GEOMETRY_CUBE = (4, 2, 2)

#: Every unit writes ``1 + gx + 100 gy + 10000 gz`` at its flat absolute position (3-D).
GEOMETRY = _kernel(
    "geometry",
    [Buffer("out", "u32", "read_write")],
    _py_geometry,
    """KERNEL geometry(GLOBAL unsigned int* out) {
    unsigned int w = CUBE_COUNT_X * CUBE_DIM_X;
    unsigned int h = CUBE_COUNT_Y * CUBE_DIM_Y;
    unsigned int gx = ABSOLUTE_POS_X, gy = ABSOLUTE_POS_Y, gz = ABSOLUTE_POS_Z;
    out[gx + w * gy + w * h * gz] = 1u + gx + 100u * gy + 10000u * gz;
}
""",
    _MAIN
    + f"""fn geometry({_GID}, @builtin(num_workgroups) nw: vec3<u32>) {{
    let w = nw.x * CUBE_DIM_X;
    let h = nw.y * CUBE_DIM_Y;
    out[g.x + w * g.y + w * h * g.z] = 1u + g.x + 100u * g.y + 10000u * g.z;
}}
""",
    cube_dim=GEOMETRY_CUBE,
)


def geometry_expected(count: tuple[int, int, int]) -> np.ndarray:
    """What :data:`GEOMETRY` writes for a cube count, as a flat u32 array."""
    (cx, cy, cz), (dx, dy, dz) = count, GEOMETRY_CUBE
    w, h, d = cx * dx, cy * dy, cz * dz
    gz, gy, gx = np.meshgrid(np.arange(d), np.arange(h), np.arange(w), indexing="ij")
    return (1 + gx + 100 * gy + 10000 * gz).astype(np.uint32).ravel()


def _fill_kernel(name: str, defines: dict[str, Any] | None = None) -> Kernel:
    return _kernel(
        name,
        [Buffer("out", "u32", "write"), Scalar("value", "u32"), Scalar("n", "u32")],
        _py_fill,
        f"""KERNEL {name}(GLOBAL unsigned int* out, unsigned int value, unsigned int n) {{
    unsigned int i = ABSOLUTE_POS_X;
    if (i < n) {{ out[i] = value + i; }}
}}
""",
        _MAIN + f"fn {name}({_GID}) {{\n    if (g.x < scalars.n) {{ out[g.x] = scalars.value + g.x; }}\n}}\n",
        defines=defines,
    )


#: ``out[i] = value + i`` for ``i < n`` (u32).
FILL = _fill_kernel("fill_u32")

_tags = itertools.count(1)


def cache_probe_pair() -> tuple[Kernel, Kernel]:
    """Two distinct Kernel objects with the same definition, never compiled before in this process."""
    tag = {"SUITE_TAG": next(_tags)}
    return _fill_kernel("cache_probe", tag), _fill_kernel("cache_probe", tag)


#: ``x[i] += 1`` for ``i < n`` (i32).
ADD_ONE = _kernel(
    "add_one",
    [Buffer("x", "i32"), Scalar("n", "u32")],
    _py_add_one,
    """KERNEL add_one(GLOBAL int* x, unsigned int n) {
    unsigned int i = ABSOLUTE_POS_X;
    if (i < n) { x[i] = x[i] + 1; }
}
""",
    _MAIN + f"fn add_one({_GID}) {{\n    if (g.x < scalars.n) {{ x[g.x] = x[g.x] + 1; }}\n}}\n",
)

#: ``dst[i] += src[i]`` for ``i < n`` (i32).
ADD_FROM = _kernel(
    "add_from",
    [Buffer("src", "i32", "read"), Buffer("dst", "i32"), Scalar("n", "u32")],
    _py_add_from,
    """KERNEL add_from(GLOBAL const int* src, GLOBAL int* dst, unsigned int n) {
    unsigned int i = ABSOLUTE_POS_X;
    if (i < n) { dst[i] = dst[i] + src[i]; }
}
""",
    _MAIN + f"fn add_from({_GID}) {{\n    if (g.x < scalars.n) {{ dst[g.x] = dst[g.x] + src[g.x]; }}\n}}\n",
)

#: ``y[i] = 2 * f16(x[i])`` for ``i < n``, computed in an f16 local of a kernel of f32 arrays: the
#: kernel says that its source uses f16 (``dtypes=``), so the backend enables it.
HALF_INSIDE = _kernel(
    "half_inside",
    [Buffer("x", "f32", "read"), Buffer("y", "f32", "write"), Scalar("n", "u32")],
    _py_half_inside,
    """KERNEL half_inside(GLOBAL const float* x, GLOBAL float* y, unsigned int n) {
    unsigned int i = ABSOLUTE_POS_X;
    if (i < n) { f16 h = (f16)x[i]; h = h + h; y[i] = (float)h; }
}
""",
    _MAIN
    + f"""fn half_inside({_GID}) {{
    if (g.x < scalars.n) {{ var h = f16(x[g.x]); h = h + h; y[g.x] = f32(h); }}
}}
""",
    dtypes=("f16",),
)

#: Entry point named by ``entry=``; writes ``SUITE_VALUE * SUITE_SCALE`` and the cube dim's x.
ENTRY_DEFINES = _kernel(
    "defined_value",
    [Buffer("out", "i32", "write")],
    "def suite_entry(launch, out):\n"
    "    out[0] = SUITE_VALUE * SUITE_SCALE\n"
    "    out[1] = launch.cube_dim[0]\n",
    """KERNEL suite_entry(GLOBAL int* out) {
    if (ABSOLUTE_POS_X == 0) { out[0] = SUITE_VALUE * SUITE_SCALE; out[1] = (int)CUBE_DIM_X; }
}
""",
    _MAIN
    + f"""fn suite_entry({_GID}) {{
    if (g.x == 0u) {{ out[0] = SUITE_VALUE * SUITE_SCALE; out[1] = i32(CUBE_DIM_X); }}
}}
""",
    cube_dim=8,
    defines={"SUITE_VALUE": 7, "SUITE_SCALE": 3},
    entry="suite_entry",
)

#: A kernel whose source does not compile, in every dialect (the error is on line 2).
BROKEN = _kernel(
    "broken",
    [Buffer("x", "f32")],
    "def broken(launch, x):\n    x[0] = (\n",
    "KERNEL broken(GLOBAL float* x) {\n    x[0] = undefined_suite_symbol;\n}\n",
    "@compute @workgroup_size(1)\nfn broken() {\n    let v: f32 = undefined_suite_symbol;\n}\n",
    cube_dim=1,
)

#: A kernel with a source only for a dialect no backend compiles.
NOWHERE = Kernel("nowhere", [Buffer("x", "f32")], {"no_such_dialect": "nothing"})


# ---------------------------------------------------------------------------------------- values
def sample(dtype: str, n: int) -> np.ndarray:
    """``n`` small, exactly representable values of ``dtype`` (no overflow when 3 is added)."""
    if dtype == "bool":
        result: np.ndarray = np.arange(n) % 3 == 0
        return result
    return (np.arange(n) % 50).astype(DTYPES[dtype])


#: A scalar per dtype that is lost if the backend narrows, widens or reorders its bytes.
WIDE_VALUES: dict[str, Any] = {
    "f16": np.float16(0.333251953125),
    "f32": np.float32(1.0 / 3.0),
    "f64": 1.0 / 3.0,
    "i8": -100,
    "i16": -32000,
    "i32": -(2**31) + 7,
    "i64": -(2**40) - 3,
    "u8": 250,
    "u16": 65000,
    "u32": 2**32 - 2,
    "u64": 2**63 + 5,
    "bool": True,
}
