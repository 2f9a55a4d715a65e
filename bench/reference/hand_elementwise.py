"""The hand-written elementwise kernels that ``cubeplug.std`` used before ``fill``, ``copy`` and
``axpy`` were written in :mod:`cubeplug.lang` (issue 20), kept unchanged as plain ``Kernel``s: the
reference figure of ``bench/bench_reduce_vs_hand.py`` only; nothing in ``cubeplug`` imports them.

An :class:`Elementwise` op gives a per-element statement for each dialect; this module wraps it in
the loop skeletons and builds two kernels: ``scalar`` (any alignment, any count) and ``vector``
(every buffer bound twice: as a 4-wide view of the first ``4 * (n // 4)`` elements, and as a
scalar view whose last ``n % 4`` elements unit 0 of cube 0 handles), launched by :class:`Launcher`.
``fill_launcher(dtype)`` (f32, i32, u32), ``copy_launcher()`` (u32 words) and ``axpy_launcher()``
(f32) are the three ops.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cubeplug.core.kernel import Buffer, CubeCount, Kernel, Scalar
from cubeplug.std import checks

#: Units per cube of every elementwise kernel.
CUBE = 256
#: C spellings of the element types, and of their 4-wide vectors.
C_TYPES = {"f32": ("float", "float4"), "i32": ("int", "int4"), "u32": ("unsigned int", "uint4")}
WGSL_TYPES = {"f32": "f32", "i32": "i32", "u32": "u32"}

_C_SCALAR = """\
KERNEL {name}({params}) {{
    unsigned int stride = CUBE_DIM_X * CUBE_COUNT_X;
    for (unsigned int i = ABSOLUTE_POS_X; i < n; i += stride) {{ {body} }}
}}
"""
_C_VECTOR = """\
KERNEL {name}({params}) {{
    unsigned int n4 = n >> 2;
    unsigned int stride = CUBE_DIM_X * CUBE_COUNT_X;
    for (unsigned int i = ABSOLUTE_POS_X; i < n4; i += stride) {{ {vbody} }}
    if (ABSOLUTE_POS_X == 0u) {{
        for (unsigned int i = n4 << 2; i < n; ++i) {{ {body} }}
    }}
}}
"""
_WGSL_SCALAR = """\
@compute @workgroup_size(CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z)
fn {name}(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let n = scalars.n;
    let stride = CUBE_DIM_X * nwg.x;
    for (var i = gid.x; i < n; i += stride) {{ {body} }}
}}
"""
_WGSL_VECTOR = """\
@compute @workgroup_size(CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z)
fn {name}(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let n = scalars.n;
    let n4 = n >> 2u;
    let stride = CUBE_DIM_X * nwg.x;
    for (var i = gid.x; i < n4; i += stride) {{ {vbody} }}
    if (gid.x == 0u) {{
        for (var i = n4 << 2u; i < n; i += 1u) {{ {body} }}
    }}
}}
"""


@dataclass(frozen=True)
class Elementwise:
    """One elementwise op of one dtype: its buffers, scalars and per-element statements.

    Statements index with ``i``; vector statements name each buffer's 4-wide view ``<name>4``.
    The python functions take ``(launch, *params)`` of the scalar and the vector kernel.
    """

    name: str
    dtype: str
    buffers: tuple[tuple[str, str], ...]
    scalars: tuple[tuple[str, str], ...]
    c_body: str
    c_vbody: str
    wgsl_body: str
    wgsl_vbody: str
    py_scalar: Callable[..., Any]
    py_vector: Callable[..., Any]

    def _params(self, vector: bool) -> list[Buffer | Scalar]:
        params: list[Buffer | Scalar] = []
        for bname, access in self.buffers:
            if vector:
                params.append(Buffer(f"{bname}4", self.dtype, access, vector=4))  # type: ignore[arg-type]
            params.append(Buffer(bname, self.dtype, access))  # type: ignore[arg-type]
        params += [Scalar(sname, sdtype) for sname, sdtype in self.scalars]
        params.append(Scalar("n", "u32"))
        return params

    def _c_params(self, vector: bool) -> str:
        scalar_t, vector_t = C_TYPES[self.dtype]
        out = []
        for bname, access in self.buffers:
            const = "const " if access == "read" else ""
            if vector:
                out.append(f"GLOBAL {const}{vector_t}* {bname}4")
            out.append(f"GLOBAL {const}{scalar_t}* {bname}")
        out += [f"{C_TYPES[sdtype][0]} {sname}" for sname, sdtype in self.scalars]
        out.append("unsigned int n")
        return ", ".join(out)

    def kernel(self, vector: bool) -> Kernel:
        """The scalar or the vector kernel of this op."""
        name = f"{self.name}{'4' if vector else ''}_{self.dtype}"
        c = (_C_VECTOR if vector else _C_SCALAR).format(
            name=name, params=self._c_params(vector), body=self.c_body, vbody=self.c_vbody
        )
        wgsl = (_WGSL_VECTOR if vector else _WGSL_SCALAR).format(
            name=name, body=self.wgsl_body, vbody=self.wgsl_vbody
        )
        py = self.py_vector if vector else self.py_scalar
        return Kernel(name, self._params(vector), {"c": c, "wgsl": wgsl, "python": py}, cube_dim=CUBE)


class Launcher:
    """Launches an Elementwise op with the vector kernel where the views allow it."""

    def __init__(self, op: Elementwise) -> None:
        self.op = op
        self.scalar = op.kernel(False)
        self.vector = op.kernel(True)

    def __call__(self, client: Any, handles: Sequence[Any], scalars: Sequence[Any], n: int) -> None:
        """Run the op over the first ``n`` elements of ``handles`` (already checked by the caller)."""
        if n == 0:
            return
        if all(checks.vector_ok(h, n) for h in handles):
            n4 = n >> 2
            bound = []
            for h in handles:
                bound += [checks.prefix(h, n4 * 16), h]
            count = CubeCount(checks.groups(n4, CUBE))
            client.launch_unchecked(self.vector, count, bound, [*scalars, n])
        else:
            count = CubeCount(checks.groups(n, CUBE))
            client.launch_unchecked(self.scalar, count, list(handles), [*scalars, n])


# ---------------------------------------------------------------------------------------- fill
def _fill_py(launch: Any, x: Any, value: Any, n: Any) -> None:
    x[: int(n)] = value


def _fill4_py(launch: Any, x4: Any, x: Any, value: Any, n: Any) -> None:
    x[: int(n)] = value


@functools.cache
def fill_launcher(dtype: str) -> Launcher:
    """The fill kernels of ``dtype``."""
    return Launcher(
        Elementwise(
            name="fill",
            dtype=dtype,
            buffers=(("x", "write"),),
            scalars=(("value", dtype),),
            c_body="x[i] = value;",
            c_vbody=f"{C_TYPES[dtype][1]} v; v.x = value; v.y = value; v.z = value; v.w = value; x4[i] = v;",
            wgsl_body="x[i] = scalars.value;",
            wgsl_vbody=f"x4[i] = vec4<{dtype}>(scalars.value);",
            py_scalar=_fill_py,
            py_vector=_fill4_py,
        )
    )


# ---------------------------------------------------------------------------------------- copy
def _copy_py(launch: Any, src: Any, dst: Any, n: Any) -> None:
    dst[: int(n)] = src[: int(n)]


def _copy4_py(launch: Any, src4: Any, src: Any, dst4: Any, dst: Any, n: Any) -> None:
    dst[: int(n)] = src[: int(n)]


@functools.cache
def copy_launcher() -> Launcher:
    """The copy kernels (on u32 words, so that every 4-byte dtype is copied bit for bit)."""
    return Launcher(
        Elementwise(
            name="copy",
            dtype="u32",
            buffers=(("src", "read"), ("dst", "write")),
            scalars=(),
            c_body="dst[i] = src[i];",
            c_vbody="dst4[i] = src4[i];",
            wgsl_body="dst[i] = src[i];",
            wgsl_vbody="dst4[i] = src4[i];",
            py_scalar=_copy_py,
            py_vector=_copy4_py,
        )
    )


# ---------------------------------------------------------------------------------------- axpy
def _axpy_py(launch: Any, x: Any, y: Any, a: Any, n: Any) -> None:
    k = int(n)
    y[:k] += a * x[:k]


def _axpy4_py(launch: Any, x4: Any, x: Any, y4: Any, y: Any, a: Any, n: Any) -> None:
    k = int(n)
    y[:k] += a * x[:k]


_C_VBODY = (
    "float4 xv = x4[i]; float4 yv = y4[i]; "
    "yv.x += a * xv.x; yv.y += a * xv.y; yv.z += a * xv.z; yv.w += a * xv.w; y4[i] = yv;"
)


@functools.cache
def axpy_launcher() -> Launcher:
    """The axpy kernels."""
    return Launcher(
        Elementwise(
            name="axpy",
            dtype="f32",
            buffers=(("x", "read"), ("y", "read_write")),
            scalars=(("a", "f32"),),
            c_body="y[i] += a * x[i];",
            c_vbody=_C_VBODY,
            wgsl_body="y[i] += scalars.a * x[i];",
            wgsl_vbody="y4[i] += scalars.a * x4[i];",
            py_scalar=_axpy_py,
            py_vector=_axpy4_py,
        )
    )
