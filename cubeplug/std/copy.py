"""``copy``: copy ``n`` 4-byte elements (f32, i32 or u32: the bits are copied exactly) between handles."""

from __future__ import annotations

import functools
from typing import Any

from cubeplug.core.handle import Handle
from cubeplug.std import checks
from cubeplug.std.elementwise import Elementwise, Launcher


def _copy_py(launch: Any, src: Any, dst: Any, n: Any) -> None:
    dst[: int(n)] = src[: int(n)]


def _copy4_py(launch: Any, src4: Any, src: Any, dst4: Any, dst: Any, n: Any) -> None:
    dst[: int(n)] = src[: int(n)]


@functools.cache
def launcher() -> Launcher:
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


def copy(client: Any, src: Handle, n: int, out: Handle | None = None) -> Handle:
    """Copy the first ``n`` 4-byte elements of ``src`` into ``out`` (new when None); returns ``out``."""
    n = checks.count(n)
    checks.buffer(client, src, 4 * n, "copy: src")
    if out is None:
        out = client.empty(4 * n)
    else:
        checks.buffer(client, out, 4 * n, "copy: out")
    launcher()(client, (src, out), (), n)
    return out
