"""Elementwise kernels: grid-stride loops over scalar views, or over float4 views plus a scalar tail.

An :class:`Elementwise` op gives a per-element statement for each dialect; this module wraps it in
the loop skeletons and builds two kernels: ``scalar`` (any alignment, any count) and ``vector``
(every buffer bound twice: as a 4-wide view of the first ``4 * (n // 4)`` elements, and as a
scalar view whose last ``n % 4`` elements unit 0 of cube 0 handles). The ops launch at most
:data:`~cubeplug.std.checks.MAX_GROUPS` cubes; each unit loops over the rest.
"""

from __future__ import annotations

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
