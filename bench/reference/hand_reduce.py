"""The hand-written ``reduce_sum`` that ``cubeplug.std`` used before its candidates were written in
:mod:`cubeplug.lang` (issue 20), kept unchanged as plain ``Kernel``s: the reference figure of
``bench/bench_reduce_vs_hand.py`` only (its :data:`REDUCE_SUM` tunable set is not registered with
anything; the bench runs each candidate's ``fn`` itself).

Candidates (:data:`REDUCE_SUM`), all with 256 units per cube:

* ``tree``, ``tree_x16``: scalar loads, a per-cube tree in shared memory (warp shuffles for the last
  steps on CUDA), one partial per cube, then a second pass of one cube over the partials; one or
  sixteen elements per unit before the grid-stride loop wraps.
* ``vec4``, ``vec4_x4``, ``vec4_x16``, ``vec4_x64``: the same with float4 loads (four independent
  loads in flight per unit), 1 / 4 / 16 / 64 vectors per unit; need a 16-byte aligned view.
* ``vec4_resident``: float4 loads with one wave of cubes (8 per compute unit, as the device reports
  them), each unit looping over the whole input.
* ``atomic_x16``, ``atomic_vec4_x16``: one pass; each cube adds its partial to the result with an
  atomic compare-and-swap loop on the float's bits (``atomicAdd`` on CUDA), which works on every
  backend with 32-bit atomics. The order of the additions varies from run to run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from cubeplug.core.handle import Handle
from cubeplug.core.kernel import Buffer, CubeCount, Kernel, Scalar
from cubeplug.core.tune import AutotuneKey, Tunable, TunableSet, anchor
from cubeplug.std import checks
from reference.hand_elementwise import fill_launcher

CUBE = 256

# ---------------------------------------------------------------------------------------- c dialect
_C_LOAD_SCALAR = """\
    unsigned int stride = CUBE_DIM_X * CUBE_COUNT_X;
    unsigned int i = ABSOLUTE_POS_X;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    for (; i + 3u * stride < n; i += 4u * stride) {
        a0 += x[i]; a1 += x[i + stride]; a2 += x[i + 2u * stride]; a3 += x[i + 3u * stride];
    }
    for (; i < n; i += stride) a0 += x[i];
    float acc = (a0 + a1) + (a2 + a3);
"""
_C_LOAD_VECTOR = """\
    unsigned int n4 = n >> 2;
    unsigned int stride = CUBE_DIM_X * CUBE_COUNT_X;
    unsigned int i = ABSOLUTE_POS_X;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    for (; i + 3u * stride < n4; i += 4u * stride) {
        float4 v0 = x4[i]; float4 v1 = x4[i + stride];
        float4 v2 = x4[i + 2u * stride]; float4 v3 = x4[i + 3u * stride];
        a0 += (v0.x + v0.y) + (v0.z + v0.w); a1 += (v1.x + v1.y) + (v1.z + v1.w);
        a2 += (v2.x + v2.y) + (v2.z + v2.w); a3 += (v3.x + v3.y) + (v3.z + v3.w);
    }
    for (; i < n4; i += stride) { float4 v = x4[i]; a0 += (v.x + v.y) + (v.z + v.w); }
    float acc = (a0 + a1) + (a2 + a3);
    if (ABSOLUTE_POS_X == 0u) { for (unsigned int j = n4 << 2; j < n; ++j) acc += x[j]; }
"""
# The cube's sum ends in `acc` of unit 0.
_C_CUBE_SUM = """\
#if defined(__CUDACC__) || defined(CUBEPLUG_CUDA)
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
    if ((UNIT_POS_X & 31u) == 0u) sdata[UNIT_POS_X >> 5] = acc;
    SYNC_CUBE();
    if (UNIT_POS_X < 32u) {
        acc = UNIT_POS_X < (CUBE_DIM_STATIC_X >> 5) ? sdata[UNIT_POS_X] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
    }
#else
    sdata[UNIT_POS_X] = acc;
    SYNC_CUBE();
    for (unsigned int s = CUBE_DIM_STATIC_X / 2u; s > 0u; s >>= 1) {
        if (UNIT_POS_X < s) sdata[UNIT_POS_X] += sdata[UNIT_POS_X + s];
        SYNC_CUBE();
    }
    acc = sdata[0];
#endif
"""
_C_STORE_PARTIAL = "    if (UNIT_POS_X == 0u) partials[CUBE_POS_X] = acc;\n"
_C_STORE_ATOMIC = """\
    if (UNIT_POS_X == 0u) {
#if defined(__CUDACC__) || defined(CUBEPLUG_CUDA)
        atomicAdd((float*)out, acc);
#else
        volatile GLOBAL unsigned int* p = (volatile GLOBAL unsigned int*)out;
        unsigned int old = *p, seen;
        do { seen = old; old = atomic_cmpxchg(p, seen, as_uint(as_float(seen) + acc)); } while (old != seen);
#endif
    }
"""

# ---------------------------------------------------------------------------------------- wgsl dialect
_W_HEAD = """\
var<workgroup> sdata: array<f32, CUBE_DIM_X>;

@compute @workgroup_size(CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z)
fn @NAME@(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>) {
    let n = scalars.n;
    let stride = CUBE_DIM_X * nwg.x;
    var i = wid.x * CUBE_DIM_X + lid.x;
"""
_W_LOAD_SCALAR = """\
    var a0 = 0.0; var a1 = 0.0; var a2 = 0.0; var a3 = 0.0;
    loop {
        if (i + 3u * stride >= n) { break; }
        a0 += x[i]; a1 += x[i + stride]; a2 += x[i + 2u * stride]; a3 += x[i + 3u * stride];
        i += 4u * stride;
    }
    for (; i < n; i += stride) { a0 += x[i]; }
    var acc = (a0 + a1) + (a2 + a3);
"""
_W_LOAD_VECTOR = """\
    let n4 = n >> 2u;
    var a0 = vec4<f32>(0.0); var a1 = vec4<f32>(0.0); var a2 = vec4<f32>(0.0); var a3 = vec4<f32>(0.0);
    loop {
        if (i + 3u * stride >= n4) { break; }
        a0 += x4[i]; a1 += x4[i + stride]; a2 += x4[i + 2u * stride]; a3 += x4[i + 3u * stride];
        i += 4u * stride;
    }
    for (; i < n4; i += stride) { a0 += x4[i]; }
    let s = (a0 + a1) + (a2 + a3);
    var acc = (s.x + s.y) + (s.z + s.w);
    if (wid.x == 0u && lid.x == 0u) { for (var j = n4 << 2u; j < n; j += 1u) { acc += x[j]; } }
"""
_W_CUBE_SUM = """\
    sdata[lid.x] = acc;
    workgroupBarrier();
    for (var s2 = CUBE_DIM_X / 2u; s2 > 0u; s2 >>= 1u) {
        if (lid.x < s2) { sdata[lid.x] += sdata[lid.x + s2]; }
        workgroupBarrier();
    }
"""
_W_STORE_PARTIAL = "    if (lid.x == 0u) { partials[wid.x] = sdata[0]; }\n}\n"
_W_STORE_ATOMIC = """\
    if (lid.x == 0u) {
        let add = sdata[0];
        var old = atomicLoad(&out[0]);
        loop {
            let r = atomicCompareExchangeWeak(&out[0], old, bitcast<u32>(bitcast<f32>(old) + add));
            if (r.exchanged) { break; }
            old = r.old_value;
        }
    }
}
"""


# ---------------------------------------------------------------------------------------- python dialect
def _sum(x: np.ndarray, n: Any) -> np.float32:
    result: np.float32 = np.float32(np.sum(x[: int(n)], dtype=np.float32))
    return result


def _partial_py(launch: Any, x: np.ndarray, partials: np.ndarray, n: Any) -> None:
    partials[:] = 0
    partials[0] = _sum(x, n)


def _partial4_py(launch: Any, x4: np.ndarray, x: np.ndarray, partials: np.ndarray, n: Any) -> None:
    partials[:] = 0
    partials[0] = _sum(x, n)


def _atomic_py(launch: Any, x: np.ndarray, out: np.ndarray, n: Any) -> None:
    out.view(np.float32)[0] += _sum(x, n)


def _atomic4_py(launch: Any, x4: np.ndarray, x: np.ndarray, out: np.ndarray, n: Any) -> None:
    out.view(np.float32)[0] += _sum(x, n)


_PYTHON: dict[tuple[bool, bool], Callable[..., None]] = {
    (False, False): _partial_py,
    (True, False): _partial4_py,
    (False, True): _atomic_py,
    (True, True): _atomic4_py,
}


# ---------------------------------------------------------------------------------------- kernels
@functools.cache
def kernel(vector: bool, atomic: bool) -> Kernel:
    """The pass kernel of one strategy: scalar or float4 loads, a partial per cube or an atomic add."""
    name = "reduce_sum" + ("_v" if vector else "_s") + ("_atomic" if atomic else "")
    params: list[Buffer | Scalar] = []
    c_params = []
    if vector:
        params.append(Buffer("x4", "f32", "read", vector=4))
        c_params.append("GLOBAL const float4* x4")
    params.append(Buffer("x", "f32", "read"))
    c_params.append("GLOBAL const float* x")
    if atomic:
        params.append(Buffer("out", "u32", "read_write", atomic=True))
        c_params.append("GLOBAL unsigned int* out")
    else:
        params.append(Buffer("partials", "f32", "write"))
        c_params.append("GLOBAL float* partials")
    params.append(Scalar("n", "u32"))
    c_params.append("unsigned int n")
    c = (
        f"KERNEL {name}({', '.join(c_params)}) {{\n"
        "    LOCAL float sdata[CUBE_DIM_STATIC_X];\n"
        + (_C_LOAD_VECTOR if vector else _C_LOAD_SCALAR)
        + _C_CUBE_SUM
        + (_C_STORE_ATOMIC if atomic else _C_STORE_PARTIAL)
        + "}\n"
    )
    wgsl = (
        _W_HEAD.replace("@NAME@", name)
        + (_W_LOAD_VECTOR if vector else _W_LOAD_SCALAR)
        + _W_CUBE_SUM
        + (_W_STORE_ATOMIC if atomic else _W_STORE_PARTIAL)
    )
    py = _PYTHON[(vector, atomic)]
    return Kernel(name, params, {"c": c, "wgsl": wgsl, "python": py}, cube_dim=CUBE)


def _bind(x: Handle, n: int, vector: bool) -> tuple[list[Handle], int]:
    """The input bindings of a pass and how many load items (scalars or float4) there are."""
    if vector:
        n4 = n >> 2
        return [checks.prefix(x, n4 * 16), x], n4
    return [x], n


def resident_cubes(client: Any) -> int:
    """Cubes that fill the device once: 8 per compute unit (SM) when the device says how many it has."""
    props = client.properties
    units = props.get("sm_count") or props.get("compute_units") or 128
    return 8 * int(units)


def two_pass(vector: bool, per_unit: int, resident: bool = False) -> Any:
    """A strategy: partial sums per cube, then one cube sums the partials.

    ``per_unit`` items per unit set the cube count; ``resident`` caps it at one wave of the device.
    """
    first = kernel(vector, False)

    def run(client: Any, x: Handle, n: int) -> Handle:
        bound, items = _bind(x, n, vector)
        cubes = checks.groups(items, CUBE * per_unit)
        if resident:
            cubes = min(cubes, resident_cubes(client))
        out: Handle = client.empty(4)
        if cubes == 1:
            client.launch_unchecked(first, CubeCount(1), [*bound, out], [n])
            return out
        partials = client.empty(4 * cubes)
        client.launch_unchecked(first, CubeCount(cubes), [*bound, partials], [n])
        client.launch_unchecked(kernel(False, False), CubeCount(1), [partials, out], [cubes])
        return out

    return run


def one_pass_atomic(vector: bool, per_unit: int) -> Any:
    """A strategy: every cube adds its partial sum to the result atomically."""
    pass_kernel = kernel(vector, True)

    def run(client: Any, x: Handle, n: int) -> Handle:
        bound, items = _bind(x, n, vector)
        cubes = checks.groups(items, CUBE * per_unit)
        out: Handle = client.empty(4)
        client.launch_unchecked(fill_launcher("u32").scalar, CubeCount(1), [out], [0, 1])
        client.launch_unchecked(pass_kernel, CubeCount(cubes), [*bound, out], [n])
        return out

    return run


# ---------------------------------------------------------------------------------------- tuning
def reduce_key(client: Any, level: str, x: Handle, n: int) -> AutotuneKey:
    """The tuning key: the anchored count, and whether float4 loads are possible."""
    return AutotuneKey(("n", anchor(n, level, checks.MAX_ELEMENTS)), ("vec", checks.vector_ok(x, n)))


def _vector(client: Any, key: AutotuneKey) -> bool:
    return bool(key["vec"])


def _atomic(client: Any, key: AutotuneKey) -> bool:
    return bool(client.capabilities.atomics)


def _atomic_vector(client: Any, key: AutotuneKey) -> bool:
    return bool(key["vec"]) and bool(client.capabilities.atomics)


def _compare(client: Any, expected: Handle, got: Handle, x: Handle, n: int) -> str | None:
    want = float(client.to_numpy(expected, "f32")[0])
    have = float(client.to_numpy(got, "f32")[0])
    scale = float(np.abs(client.to_numpy(checks.prefix(x, 4 * n), "f32")).sum(dtype=np.float64))
    if abs(have - want) <= 1e-4 * scale + 1e-6:
        return None
    return f"sum {have!r}, reference {want!r} (tolerance {1e-4 * scale:.3g})"


def _reference(client: Any, x: Handle, n: int) -> Handle:
    host = client.to_numpy(checks.prefix(x, 4 * n), "f32")
    result: Handle = client.create(np.array([host.sum(dtype=np.float64)], dtype=np.float32))
    return result


#: The tunable set of reduce_sum (see the module docstring for the candidates).
REDUCE_SUM = TunableSet(
    "bench.hand_reduce_sum.f32",
    [
        Tunable("tree", two_pass(False, 1), priority=0),
        Tunable("tree_x16", two_pass(False, 16), priority=1),
        Tunable("vec4", two_pass(True, 1), priority=1, applicable=_vector),
        Tunable("vec4_x4", two_pass(True, 4), priority=2, applicable=_vector),
        Tunable("vec4_x16", two_pass(True, 16), priority=2, applicable=_vector),
        Tunable("vec4_x64", two_pass(True, 64), priority=1, applicable=_vector),
        Tunable("vec4_resident", two_pass(True, 4, resident=True), priority=2, applicable=_vector),
        Tunable("atomic_x16", one_pass_atomic(False, 16), priority=0, applicable=_atomic),
        Tunable("atomic_vec4_x16", one_pass_atomic(True, 16), priority=1, applicable=_atomic_vector),
    ],
    reduce_key,
    compare=_compare,
    reference=_reference,
)
