"""``fill``: set the first ``n`` elements of a handle to one value (f32, i32 or u32)."""

from __future__ import annotations

import functools
from typing import Any

from cubeplug.core.errors import ValidationError
from cubeplug.core.handle import Handle
from cubeplug.core.kernel import DTYPES, Scalar, dtype_of, to_scalar
from cubeplug.std import checks
from cubeplug.std.elementwise import C_TYPES, Elementwise, Launcher

DTYPES_FILLED = tuple(C_TYPES)


def _fill_py(launch: Any, x: Any, value: Any, n: Any) -> None:
    x[: int(n)] = value


def _fill4_py(launch: Any, x4: Any, x: Any, value: Any, n: Any) -> None:
    x[: int(n)] = value


@functools.cache
def launcher(dtype: str) -> Launcher:
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


def fill(client: Any, handle: Handle, n: int, value: Any, dtype: Any = "f32") -> Handle:
    """Set the first ``n`` elements of ``handle`` (of ``dtype``: f32, i32 or u32) to ``value``; returns it."""
    name = dtype_of(dtype)
    if name not in C_TYPES:
        raise ValidationError(f"fill supports {', '.join(DTYPES_FILLED)}, not {name}")
    n = checks.count(n)
    checks.buffer(client, handle, n * DTYPES[name].itemsize, "fill: handle")
    typed = to_scalar(Scalar("value", name), value, "fill")
    launcher(name)(client, (handle,), (typed,), n)
    return handle
