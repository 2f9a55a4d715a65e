"""The kernel compiler: turns a ``python``-dialect source into something the server can run.

A python kernel is ``fn(launch, *params)``: ``launch.count`` and ``launch.cube_dim`` are 3-tuples,
buffers arrive as writable 1-D numpy arrays of the declared dtype (``(n, vector)`` for vector
buffers), scalars as numpy scalars, in declared order. A source is a callable or Python text
defining a function named as the kernel's entry point. A device backend would call its driver's
compiler here and raise CompileError with the build log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from cubeplug.plugin import Buffer, CompileError, Kernel
from cubeplug_template import NAME


@dataclass(frozen=True)
class LaunchInfo:
    """What a kernel learns of its launch: the cube count and the cube dim."""

    count: tuple[int, int, int]
    cube_dim: tuple[int, int, int]


@dataclass(frozen=True)
class Program:
    """A compiled kernel: the function, its cube dim, and per param (is_buffer, dtype, vector)."""

    fn: Callable[..., Any]
    cube_dim: tuple[int, int, int]
    layout: tuple[tuple[bool, np.dtype[Any], int], ...]


def compile_kernel(kernel: Kernel, dialect: str) -> Program:
    """Compile the kernel's ``dialect`` source; CompileError (with line and column) when it is unusable."""
    source = kernel.sources[dialect]
    fn = source if callable(source) else _exec(kernel, source)
    layout = tuple(
        (isinstance(p, Buffer), np.dtype(_NUMPY[p.dtype]), p.vector if isinstance(p, Buffer) else 1)
        for p in kernel.params
    )
    return Program(fn, kernel.cube_dim, layout)


_NUMPY = {
    "f16": "float16", "f32": "float32", "f64": "float64", "i8": "int8", "i16": "int16", "i32": "int32",
    "i64": "int64", "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64", "bool": "bool",
}  # fmt: skip


def _exec(kernel: Kernel, source: Any) -> Callable[..., Any]:
    if not isinstance(source, str):
        raise CompileError("a python source is a callable or source text", backend=NAME, kernel=kernel.name)
    namespace: dict[str, Any] = {"np": np, "numpy": np, **dict(kernel.defines)}
    try:
        exec(compile(source, f"<kernel {kernel.name}>", "exec"), namespace)
    except SyntaxError as e:
        raise CompileError(
            e.msg or "syntax error", backend=NAME, kernel=kernel.name, source=source, log=str(e),
            line=e.lineno, col=e.offset,
        ) from e  # fmt: skip
    fn = namespace.get(kernel.entry_point)
    if not callable(fn):
        raise CompileError(
            f"the source defines no function named {kernel.entry_point!r}",
            backend=NAME, kernel=kernel.name, source=source,
        )  # fmt: skip
    return fn
