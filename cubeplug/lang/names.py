"""Identifiers generated code must not use for locals and params: C and WGSL keywords, the ``c``
prelude's macros and the WGSL names the generators emit. The lowering renames a clashing user
name (``float`` -> ``float_2``)."""

from __future__ import annotations

_C = """auto break case char const continue default do double else enum extern float for goto if inline
int long register restrict return short signed sizeof static struct switch typedef union unsigned void
volatile while bool true false half kernel global local constant private uint ushort uchar ulong size_t
ptrdiff_t class namespace template this new delete operator private public protected virtual friend
float2 float4 int2 int4 uint2 uint4 min max abs sqrt exp log sin cos tanh floor ceil pow fma fmin fmax
fmod fabs barrier atomic_add atomic_sub atomic_min atomic_max atomic_xchg atomic_cmpxchg printf
atomicAdd atomicSub atomicMin atomicMax atomicExch atomicCAS threadIdx blockIdx blockDim gridDim
f16 f32 f64 i8 i16 i32 i64 u8 u16 u32 u64 select"""
_WGSL = """alias break case const const_assert continue continuing default diagnostic discard else enable
fn for if let loop override requires return struct switch var while array atomic mat2x2 mat3x3 mat4x4
ptr sampler texture vec2 vec3 vec4 storage uniform workgroup function private read write read_write
scalars main arrayLength atomicLoad atomicStore atomicExchange atomicCompareExchangeWeak
workgroupBarrier storageBarrier bitcast"""
_MACROS = """KERNEL DEVICE_FN GLOBAL LOCAL SYNC_CUBE ATOMIC_ADD ABSOLUTE_POS_X ABSOLUTE_POS_Y ABSOLUTE_POS_Z
CUBE_POS_X CUBE_POS_Y CUBE_POS_Z UNIT_POS_X UNIT_POS_Y UNIT_POS_Z CUBE_DIM_X CUBE_DIM_Y CUBE_DIM_Z
CUBE_COUNT_X CUBE_COUNT_Y CUBE_COUNT_Z CUBE_DIM_STATIC_X CUBE_DIM_STATIC_Y CUBE_DIM_STATIC_Z
INFINITY NAN NULL cl_lid cl_wid cl_gid cl_nwg cl_cas cl_old cl_seen cl_v cl_e cl_n CL_U2F CL_F2U CL_F32_FN
CL_F32_PTR CL_F32_CAS CL_F32_XCHG CL_VFN CL_SHARED_PTR"""

#: The prefix of the WGSL generator's copies of the scalars (``cl_s_<scalar>``): a user name that
#: starts with it is renamed too.
SCALAR_PREFIX = "cl_s_"
#: The prefix of the WGSL generator's variables for the elements of a local array it splits
#: (``cl_x_<array>_<index>``, codegen_wgsl.py): a user name that starts with it is renamed too.
ELEMENT_PREFIX = "cl_x_"

#: Reserved identifiers (compared case-sensitively and by lower case).
RESERVED: frozenset[str] = frozenset((_C + " " + _WGSL + " " + _MACROS).split()) | frozenset(
    (_C + " " + _WGSL + " " + _MACROS).lower().split()
)


def entry_name(kernel: str) -> str:
    """The entry point of a generated kernel: the function's name with a suffix, so that it never
    clashes with a builtin of the target language (OpenCL has ``smoothstep``, ``clamp``...)."""
    return f"{kernel}_kernel"


def unwrap(text: str) -> str:
    """``text`` without one pair of parentheses around the whole of it (``(a < b)`` -> ``a < b``)."""
    if not (text.startswith("(") and text.endswith(")")):
        return text
    depth = 0
    for i, c in enumerate(text):
        depth += c == "("
        depth -= c == ")"
        if depth == 0 and i < len(text) - 1:
            return text
    return text[1:-1]
