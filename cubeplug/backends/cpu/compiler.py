"""The ``python`` kernel dialect: a function ``fn(launch, *params)`` run with numpy views.

A source is either a callable or Python source text defining a function named as the kernel's
entry point. Buffers arrive as writable 1-D numpy arrays of the declared dtype over the bound bytes
(``(n, vector)`` for vector buffers), scalars as numpy scalars, in declared order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from cubeplug.plugin import DTYPES, Buffer, CompileError, ExecutionMode, Kernel

DIALECTS = ("python",)


@dataclass(frozen=True, slots=True)
class LaunchInfo:
    """What a python kernel learns of its launch: the cube count and the cube dim, as 3-tuples."""

    count: tuple[int, int, int]
    cube_dim: tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class PythonProgram:
    """A compiled python kernel: the function and, per param, how to bind it."""

    fn: Callable[..., Any]
    cube_dim: tuple[int, int, int]
    #: Per declared param: (is_buffer, index among its kind, dtype, vector width).
    layout: tuple[tuple[bool, int, np.dtype[Any], int], ...]
    #: The kernel's name (error messages).
    name: str = ""


def compile_python(kernel: Kernel, dialect: str, mode: ExecutionMode) -> PythonProgram:
    """Turn the kernel's python source into a :class:`PythonProgram`; CompileError if it is unusable."""
    source = kernel.sources[dialect]
    fn = source if callable(source) else _exec_source(kernel, source)
    layout = []
    nb = ns = 0
    for p in kernel.params:
        if isinstance(p, Buffer):
            layout.append((True, nb, DTYPES[p.dtype], p.vector))
            nb += 1
        else:
            layout.append((False, ns, DTYPES[p.dtype], 1))
            ns += 1
    return PythonProgram(fn, kernel.cube_dim, tuple(layout), kernel.name)


def _exec_source(kernel: Kernel, source: Any) -> Callable[..., Any]:
    if not isinstance(source, str):
        raise CompileError(
            f"python sources are callables or source text, got {type(source).__name__}",
            backend="cpu", kernel=kernel.name,
        )
    namespace: dict[str, Any] = {"np": np, "numpy": np, **{k: v for k, v in kernel.defines.items()}}
    try:
        code = compile(source, f"<kernel {kernel.name}>", "exec")
        exec(code, namespace)
    except SyntaxError as e:
        raise CompileError(
            e.msg, backend="cpu", kernel=kernel.name, source=source, log=str(e),
            line=e.lineno, col=e.offset,
        ) from e
    except Exception as e:
        raise CompileError(
            f"{type(e).__name__}: {e}", backend="cpu", kernel=kernel.name, source=source, log=repr(e)
        ) from e
    fn: Callable[..., Any] | None = namespace.get(kernel.entry_point)
    if not callable(fn):
        raise CompileError(
            f"the source defines no function named {kernel.entry_point!r}",
            backend="cpu", kernel=kernel.name, source=source,
        )
    return fn
