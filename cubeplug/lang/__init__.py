"""``cubeplug.lang``: kernels written once in Python, compiled for every backend.

Example::

    from cubeplug import lang as cl
    from cubeplug.lang import Array, f32

    @cl.kernel
    def axpy(x: Array[f32], y: Array[f32], a: f32):
        i = cl.ABSOLUTE_POS
        if i < len(y):
            y[i] += a * x[i]

    axpy.launch(client, cubeplug.CubeCount(4), (256, 1, 1), x, y, 2.0)

The function is captured through its AST, lowered to a small structured IR (comptime values folded,
``@cl.func`` helpers inlined, types inferred), verified, and generated as ``c`` (CUDA and OpenCL),
``wgsl`` (WebGPU) or run by the ``python`` interpreter (the CPU backend). See ``docs/lang.md``.
"""

from __future__ import annotations

from cubeplug.lang.errors import (
    BarrierDivergenceError,
    KernelError,
    KernelSyntaxError,
    KernelTypeError,
    NotInKernelError,
)
from cubeplug.lang.func import LangFunc
from cubeplug.lang.kernel import LangKernel, kernel

# The language's names. Type checkers read their declarations in typed.py (dtypes as float/int
# aliases, a generic Array...); at run time typed.py hands out the objects lowering recognises,
# those of builtins.py, types.py and func.py.
from cubeplug.lang.typed import (
    ABSOLUTE_POS,
    ABSOLUTE_POS_X,
    ABSOLUTE_POS_Y,
    ABSOLUTE_POS_Z,
    CUBE_COUNT,
    CUBE_COUNT_X,
    CUBE_COUNT_Y,
    CUBE_COUNT_Z,
    CUBE_DIM,
    CUBE_DIM_X,
    CUBE_DIM_Y,
    CUBE_DIM_Z,
    CUBE_POS,
    CUBE_POS_X,
    CUBE_POS_Y,
    CUBE_POS_Z,
    UNIT_POS,
    UNIT_POS_X,
    UNIT_POS_Y,
    UNIT_POS_Z,
    Array,
    Atomic,
    Comptime,
    Tensor,
    Vec,
    atomic_add,
    atomic_compare_exchange,
    atomic_exchange,
    atomic_max,
    atomic_min,
    atomic_sub,
    bool_,
    ceil,
    cos,
    exp,
    f16,
    f32,
    f32x2,
    f32x4,
    f64,
    floor,
    fma,
    func,
    i32,
    i32x2,
    i32x4,
    i64,
    local,
    log,
    pow,
    shared,
    sin,
    sqrt,
    sync_cube,
    tanh,
    u32,
    u32x2,
    u32x4,
    u64,
    unroll,
)
from cubeplug.lang.types import DType

# The package face: what ``from cubeplug.lang import *`` gives, and what a strict type checker lets
# users import from here (it re-exports no imported name that is not listed).
__all__ = [
    "ABSOLUTE_POS", "ABSOLUTE_POS_X", "ABSOLUTE_POS_Y", "ABSOLUTE_POS_Z",
    "CUBE_COUNT", "CUBE_COUNT_X", "CUBE_COUNT_Y", "CUBE_COUNT_Z",
    "CUBE_DIM", "CUBE_DIM_X", "CUBE_DIM_Y", "CUBE_DIM_Z",
    "CUBE_POS", "CUBE_POS_X", "CUBE_POS_Y", "CUBE_POS_Z",
    "UNIT_POS", "UNIT_POS_X", "UNIT_POS_Y", "UNIT_POS_Z",
    "Array", "Atomic", "BarrierDivergenceError", "Comptime", "DType", "KernelError",
    "KernelSyntaxError", "KernelTypeError", "LangFunc", "LangKernel", "NotInKernelError", "Tensor", "Vec",
    "atomic_add", "atomic_compare_exchange", "atomic_exchange", "atomic_max", "atomic_min",
    "atomic_sub", "bool_", "ceil", "cos", "exp", "f16", "f32", "f64", "floor", "fma", "func",
    "i32", "i64", "kernel", "local", "log", "pow", "shared", "sin", "sqrt", "sync_cube", "tanh",
    "u32", "u64", "unroll", "f32x2", "f32x4", "i32x2", "i32x4", "u32x2", "u32x4",
]
