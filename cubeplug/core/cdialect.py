"""The portable ``c`` kernel dialect: one C source for CUDA and OpenCL (docs/kernels.md).

A backend that compiles the ``c`` dialect prepends :func:`prelude` for its API and the kernel's
defines (:func:`defines_block`). The prelude maps the portable macros below and the type spellings
to the API, so the same source compiles with NVRTC and with an OpenCL driver:

=================  =========================================  =====================================
macro              CUDA                                       OpenCL
=================  =========================================  =====================================
KERNEL             ``extern "C" __global__ void``             ``__kernel void``
DEVICE_FN          ``__device__ inline`` (helper functions)   ``inline``
GLOBAL             (nothing)                                  ``__global``
LOCAL              ``__shared__``                             ``__local``
ABSOLUTE_POS_X     ``blockIdx.x * blockDim.x + threadIdx.x``  ``get_global_id(0)``
CUBE_POS_X         ``blockIdx.x``                             ``get_group_id(0)``
UNIT_POS_X         ``threadIdx.x``                            ``get_local_id(0)``
CUBE_DIM_X         ``blockDim.x``                             ``get_local_size(0)``
CUBE_COUNT_X       ``gridDim.x``                              ``get_num_groups(0)``
SYNC_CUBE()        ``__syncthreads()``                        ``barrier(CLK_LOCAL_MEM_FENCE | ...)``
ATOMIC_ADD(p, v)   ``atomicAdd(p, v)``                        ``atomic_add(p, v)``
=================  =========================================  =====================================

(``_Y`` and ``_Z`` variants exist for every position macro.) ``KERNEL`` includes the return type:
``KERNEL axpy(GLOBAL const float* x, GLOBAL float* y, float a, unsigned int n) { ... }``.
Types: ``half float double int "unsigned int" "long long" "unsigned long long"`` plus the typedefs
``f16 f32 f64 i8 i16 i32 i64 u8 u16 u32 u64`` on both APIs. Parameters keep their declared order;
buffers arrive as pointers already offset to the handle's byte offset.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cubeplug.core.kernel import Kernel

_COMMON_TYPEDEFS = """\
typedef signed char i8;
typedef short i16;
typedef int i32;
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef float f32;
"""

CUDA_PRELUDE = (
    """\
#define KERNEL extern "C" __global__ void
#define DEVICE_FN __device__ inline
#define GLOBAL
#define LOCAL __shared__
#define ABSOLUTE_POS_X (blockIdx.x * blockDim.x + threadIdx.x)
#define ABSOLUTE_POS_Y (blockIdx.y * blockDim.y + threadIdx.y)
#define ABSOLUTE_POS_Z (blockIdx.z * blockDim.z + threadIdx.z)
#define CUBE_POS_X blockIdx.x
#define CUBE_POS_Y blockIdx.y
#define CUBE_POS_Z blockIdx.z
#define UNIT_POS_X threadIdx.x
#define UNIT_POS_Y threadIdx.y
#define UNIT_POS_Z threadIdx.z
#define CUBE_DIM_X blockDim.x
#define CUBE_DIM_Y blockDim.y
#define CUBE_DIM_Z blockDim.z
#define CUBE_COUNT_X gridDim.x
#define CUBE_COUNT_Y gridDim.y
#define CUBE_COUNT_Z gridDim.z
#define SYNC_CUBE() __syncthreads()
#define ATOMIC_ADD(p, v) atomicAdd((p), (v))
"""
    + _COMMON_TYPEDEFS
    + """\
typedef long long i64;
typedef unsigned long long u64;
typedef double f64;
"""
)

OPENCL_PRELUDE = (
    """\
#define KERNEL __kernel void
#define DEVICE_FN inline
#define GLOBAL __global
#define LOCAL __local
#define ABSOLUTE_POS_X ((unsigned int)get_global_id(0))
#define ABSOLUTE_POS_Y ((unsigned int)get_global_id(1))
#define ABSOLUTE_POS_Z ((unsigned int)get_global_id(2))
#define CUBE_POS_X ((unsigned int)get_group_id(0))
#define CUBE_POS_Y ((unsigned int)get_group_id(1))
#define CUBE_POS_Z ((unsigned int)get_group_id(2))
#define UNIT_POS_X ((unsigned int)get_local_id(0))
#define UNIT_POS_Y ((unsigned int)get_local_id(1))
#define UNIT_POS_Z ((unsigned int)get_local_id(2))
#define CUBE_DIM_X ((unsigned int)get_local_size(0))
#define CUBE_DIM_Y ((unsigned int)get_local_size(1))
#define CUBE_DIM_Z ((unsigned int)get_local_size(2))
#define CUBE_COUNT_X ((unsigned int)get_num_groups(0))
#define CUBE_COUNT_Y ((unsigned int)get_num_groups(1))
#define CUBE_COUNT_Z ((unsigned int)get_num_groups(2))
#define SYNC_CUBE() barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)
#define ATOMIC_ADD(p, v) atomic_add((p), (v))
"""
    + _COMMON_TYPEDEFS
    + """\
typedef long i64;
typedef unsigned long u64;
"""
)

_OPENCL_FP64 = """\
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double f64;
#endif
"""
_OPENCL_FP16 = """\
#ifdef cl_khr_fp16
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
typedef half f16;
#endif
"""
_CUDA_FP16 = '#include <cuda_fp16.h>\ntypedef __half f16;\n'


def prelude(api: str, *, fp16: bool = False, fp64: bool = True) -> str:
    """The prelude of the ``c`` dialect for ``api`` ("cuda" or "opencl")."""
    if api == "cuda":
        return (_CUDA_FP16 if fp16 else "") + CUDA_PRELUDE
    if api == "opencl":
        return (_OPENCL_FP64 if fp64 else "") + (_OPENCL_FP16 if fp16 else "") + OPENCL_PRELUDE
    raise ValueError(f"unknown C dialect API {api!r}; use 'cuda' or 'opencl'")


def defines_block(defines: Mapping[str, Any], cube_dim: tuple[int, int, int]) -> str:
    """``#define`` lines for the kernel's defines and its static cube dim (``CUBE_DIM_STATIC_X``...)."""
    lines = [
        f"#define CUBE_DIM_STATIC_X {cube_dim[0]}",
        f"#define CUBE_DIM_STATIC_Y {cube_dim[1]}",
        f"#define CUBE_DIM_STATIC_Z {cube_dim[2]}",
    ]
    for key, value in defines.items():
        if isinstance(value, bool):
            value = int(value)
        lines.append(f"#define {key} {value}")
    return "\n".join(lines) + "\n"


def full_source(kernel: Kernel, source: str, api: str, *, fp16: bool = False, fp64: bool = True) -> str:
    """Prelude, defines and the kernel's source, as handed to the compiler."""
    needs_fp16 = fp16 and "f16" in kernel.uses_dtypes
    if api == "opencl":
        source = opencl_spellings(source)
    return prelude(api, fp16=needs_fp16, fp64=fp64) + defines_block(kernel.defines, kernel.cube_dim) + source


_UNSIGNED_LONG_LONG = re.compile(r"\bunsigned[ \t]+long[ \t]+long\b")
_LONG_LONG = re.compile(r"\blong[ \t]+long\b")


def opencl_spellings(source: str) -> str:
    """``long long`` spellings rewritten for OpenCL C, where ``long`` is 64-bit and ``long long`` 128-bit.

    A macro cannot rename a two-word type, so ``unsigned long long`` becomes ``ulong`` and
    ``long long`` becomes ``long`` in the source text (on the same line, so line numbers hold).
    """
    if "long" not in source:
        return source
    return _LONG_LONG.sub("long", _UNSIGNED_LONG_LONG.sub("ulong", source))


def prelude_lines(api: str, kernel: Kernel, *, fp16: bool = False, fp64: bool = True) -> int:
    """How many lines precede the user's source (to map compiler line numbers back)."""
    return full_source(kernel, "", api, fp16=fp16, fp64=fp64).count("\n")
