"""``axpy``: ``y = a * x + y`` over the first ``n`` f32 elements, in place (BLAS saxpy)."""

from __future__ import annotations

import functools
from typing import Any

from cubeplug.core.handle import Handle
from cubeplug.core.kernel import Scalar, to_scalar
from cubeplug.std import checks
from cubeplug.std.elementwise import Elementwise, Launcher


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
def launcher() -> Launcher:
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


def axpy(client: Any, a: float, x: Handle, y: Handle, n: int) -> Handle:
    """``y[:n] = a * x[:n] + y[:n]`` on f32 elements, in place; returns ``y``."""
    n = checks.count(n)
    checks.buffer(client, x, 4 * n, "axpy: x")
    checks.buffer(client, y, 4 * n, "axpy: y")
    launcher()(client, (x, y), (to_scalar(Scalar("a", "f32"), a, "axpy"),), n)
    return y
