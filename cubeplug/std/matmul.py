"""``matmul``: ``C = A @ B`` for row-major matrices (A is m x k, B is k x n), in any std dtype, autotuned.

Written once in :mod:`cubeplug.lang`: three generic kernels, specialized by comptime values (the
element type ``T``, the accumulator type ``ACC``, the block shape, float4 global I/O).
Candidates (:data:`MATMUL`):

* ``naive``: one unit per output element, 16 x 16 units per cube.
* ``tiled_8``, ``tiled_16``, ``tiled_32``: square tiles of A and B staged in shared memory; the
  32-wide tile uses 32 x 8 units, each computing four rows.
* ``reg_4x4``, ``reg_8x8``: register blocking: 16 x 16 units per cube compute a 64 x 64 (128 x 128)
  block, each unit a 4 x 4 (8 x 8) patch held in registers as rows of 4-lane vectors; A's tile is
  stored transposed in shared memory so every unit reads vectors of A and of B per step.
* ``reg_4x4_vec``, ``reg_8x8_vec``: the same with float4 loads from global memory and float4
  stores (they need ``k`` and ``n`` multiples of 4, views aligned to 4 elements, and a dtype of
  :data:`IO_DTYPES`: f16, f32, i32, u32; f16 moves 4 lanes, 8 bytes, at once).
* ``reg_8x8_db``, ``reg_8x8_vec_db``, ``reg_8x8_vec_db16``, ``reg_8x16_vec_db16``,
  ``reg_8x16_vec_db16_sq``: double-buffered (the next step's tiles loaded into registers during
  the multiply-adds, one barrier a step); steps of 16 along ``k`` for the ``db16`` ones; a 128 x 256
  block, 8 x 16 per unit, for the last two (A staged in lanes, and in 4 x 4 squares).
* ``reg_8x8_vec_db_lanes``: ``reg_8x8_vec_db`` staging A in lanes (Vulkan's f16 pick on the H100).

The double-buffered candidates' shared tiles' indices are i32 arithmetic (:attr:`RegBlock.index`:
NVIDIA's OpenCL compiler then folds them into the addresses, as CUDA's does for every candidate).

Dtypes: f32 (default), f64, f16, i32, u32, each where the device declares it. f16 reads f16 and
writes f16 but accumulates in f32 (as ``cupy.matmul`` on f16 does through cuBLAS): the tiles are
converted to f32 as they are stored into shared memory, not as they are loaded (see
:func:`~cubeplug.std.matmul_reg.stash`). Integer products and sums wrap. f64 has no vectors in the
language: its register-blocked kernels hold scalars (the same source, with one lane). ``k = 0``
gives zeros; ``m = 0`` or ``n = 0`` an empty result. Every kernel guards its loads and stores, so
any m, n, k works.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from cubeplug import lang as cl
from cubeplug.core.errors import ValidationError
from cubeplug.core.handle import Handle
from cubeplug.core.kernel import DTYPES, CubeCount
from cubeplug.core.tune import AutotuneKey, Tunable, TunableSet, anchor, autotune
from cubeplug.lang import Array, Comptime, u32
from cubeplug.lang.types import Vec
from cubeplug.std import checks
from cubeplug.std.combine import VECTOR_DTYPES, element_type, lang_type
from cubeplug.std.matmul_reg import matmul_reg

#: Largest m, n or k (a launch has at most 65535 cubes along x and y, of at least 8 rows or columns).
MAX_DIM = 8 * checks.MAX_GROUPS
#: Dtypes whose candidates may load and store 4 lanes of global memory at once (``vec``): f16's
#: lanes (8 bytes) are converted to and from f32 in registers. On Vulkan (H100) the f16 kernels
#: with scalar 16-bit loads ran at 1.40x CUDA's time where f32 with float4 loads ran at 1.05x.
#: The views must be aligned to 4 lanes (see :func:`matmul_key`): 16 bytes, 8 for f16.
IO_DTYPES = ("f16", *VECTOR_DTYPES)


# ---------------------------------------------------------------------------------------- kernels
@cl.kernel
def matmul_naive(
    a: Array[T], b: Array[T], c: Array[T], m: u32, n: u32, k: u32,  # type: ignore[name-defined]  # noqa: F821
    T: Comptime[cl.DType], ACC: Comptime[cl.DType],
) -> None:
    """One unit per output element."""
    col = cl.ABSOLUTE_POS_X
    row = cl.ABSOLUTE_POS_Y
    if row < m and col < n:
        acc = ACC(0)
        for p in range(k):
            acc += ACC(a[row * k + p]) * ACC(b[p * n + col])
        c[row * n + col] = T(acc)


@cl.func
def stage_row(
    a: Array[Any], b: Array[Any], m: Any, n: Any, k: Any, t: Any, row0: Any, col: Any, tx: Any, rr: Any,
    a_tile: Array[Any], b_tile: Array[Any], ACC: cl.DType, TILE: int,
) -> None:
    """Row ``rr`` of the step at ``t``: A's and B's elements of this unit into the shared tiles."""
    row = row0 + rr
    a_tile[rr * TILE + tx] = ACC(a[row * k + t + tx]) if row < m and t + tx < k else ACC(0)
    b_tile[rr * TILE + tx] = ACC(b[(t + rr) * n + col]) if t + rr < k and col < n else ACC(0)


@cl.kernel
def matmul_tiled(
    a: Array[T], b: Array[T], c: Array[T], m: u32, n: u32, k: u32,  # type: ignore[name-defined]  # noqa: F821
    T: Comptime[cl.DType], ACC: Comptime[cl.DType], TILE: Comptime[int], RPT: Comptime[int],
    SU: Comptime[int],
) -> None:
    """Square TILE x TILE tiles of A and B in shared memory (as ACC); TILE x TILE / RPT units,
    each computing RPT rows of one column. ``SU`` = 1 unrolls the staging of the RPT rows in the
    generated source; 0 leaves a loop of RPT steps (RPT > 1), as the hand kernel had."""
    a_tile = cl.shared(ACC, TILE * TILE)
    b_tile = cl.shared(ACC, TILE * TILE)
    tx = cl.UNIT_POS_X
    ty = cl.UNIT_POS_Y
    col = cl.CUBE_POS_X * TILE + tx
    row0 = cl.CUBE_POS_Y * TILE
    acc = cl.local(ACC, RPT)
    for r in cl.unroll(range(RPT)):
        acc[r] = ACC(0)
    for t in range(0, k, TILE):
        # STAGING: a loop, not unrolled in the source. NVCC unrolls both, but from the loop its
        # code takes fewer registers: tiled_32 (sm_90, ptxas -v) 36 registers a unit as a loop, 42
        # unrolled (hand kernel 35), 6 or 5 cubes of 256 units an SM. With SU = 1, unrolled (the
        # bench's variant tiled_32@unrolled). One row (RPT = 1) needs no loop.
        if SU == 1 or RPT == 1:
            for r in cl.unroll(range(RPT)):
                stage_row(a, b, m, n, k, t, row0, col, tx, ty + r * (TILE // RPT), a_tile, b_tile, ACC, TILE)
        else:
            for r in range(RPT):
                stage_row(a, b, m, n, k, t, row0, col, tx, ty + r * (TILE // RPT), a_tile, b_tile, ACC, TILE)
        cl.sync_cube()
        # A runtime loop of constant trip count, as the hand kernel had: the compilers unroll it
        # or not (forcing it made the 16 x 16 tile 2.7x slower on PoCL, bench/bench_lang_vs_c.py).
        for p in range(TILE):
            bv = b_tile[p * TILE + tx]
            for r in cl.unroll(range(RPT)):
                acc[r] += a_tile[(ty + r * (TILE // RPT)) * TILE + p] * bv
        cl.sync_cube()
    for r in cl.unroll(range(RPT)):
        row = row0 + ty + r * (TILE // RPT)
        if row < m and col < n:
            c[row * n + col] = T(acc[r])


# ---------------------------------------------------------------------------------------- plans
@dataclass(frozen=True)
class RegBlock:
    """A register-blocked kernel's shape: block BM x BN, step BK, per-unit TM x TN, float4 global
    I/O, shared buffers (2: double-buffered)."""

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    vec: bool
    stages: int = 1
    #: With float4 I/O, how A's tile is staged (matmul_reg's AQ): "lanes" (one float4 of a row a
    #: unit, stored lane by lane, as the hand kernels did), "squares" (4 x 4 squares of float4 rows,
    #: transposed in registers) or "scalar" (scalar loads of A). Without float4 I/O: scalar.
    stage_a: str = "lanes"
    #: The arithmetic of the shared tiles' indices (matmul_reg's IX): "u32", the language's own, or
    #: "i32", which a compiler may distribute into the address (docs/lang.md, "Indices of shared
    #: and local arrays"; under CUDA both give int arithmetic, see CGen.signed_index).
    index: str = "u32"

    @property
    def cube(self) -> tuple[int, int]:
        """Units per cube (x, y)."""
        return (self.bn // self.tn, self.bm // self.tm)


@dataclass(frozen=True)
class Plan:
    """A candidate: its kernel, cube, comptime shape values, block (output rows and columns per
    cube), whether it moves float4s of global memory, and its shared memory in accumulator
    elements."""

    kernel: Any
    cube: tuple[int, int]
    shape: tuple[tuple[str, int], ...]
    block_m: int
    block_n: int
    vec: bool = False
    shared: int = 0
    #: matmul_reg's IX (RegBlock.index).
    index: str = "u32"

    def fits(self, client: Any, key: AutotuneKey) -> bool:
        """True when the plan can run for ``key`` on ``client``: float4 I/O where the key allows
        it, and shared tiles within the device's shared memory."""
        acc = 4 if key["dtype"] == "f16" else DTYPES[key["dtype"]].itemsize
        limit: int = client.capabilities.max_shared_bytes
        return (bool(key["vec"]) or not self.vec) and self.shared * acc <= limit


def lanes(of: Any, count: int) -> Any:
    """``count`` lanes of the dtype ``of``: ``Vec[of, count]``, or ``of`` itself for one lane."""
    # The run-time Vec (as types.py builds f32x4): to a type checker cl.Vec[...] is a type.
    return Vec.__class_getitem__((of, count)) if count > 1 else of


def types_of(name: str, vec: bool) -> dict[str, Any]:
    """The comptime types of dtype ``name``: T, ACC (f32 for f16), and for the register-blocked
    kernel V (W-lane ACC vectors: 4 lanes where the language has them), TV (W lanes of T: the
    scalar-loaded lanes held until stash converts them to V) and IO (float4s when ``vec``)."""
    t = lang_type(name)
    acc = lang_type("f32" if name == "f16" else name)
    width = 4 if acc.name in VECTOR_DTYPES else 1
    return {"T": t, "ACC": acc, "V": lanes(acc, width), "TV": lanes(t, width), "W": width,
            "IO": lanes(t, 4 if vec else 1), "VIO": 4 if vec else 1}


NAIVE = Plan(matmul_naive, (16, 16), (), 16, 16)
#: RegBlock.stage_a -> matmul_reg's AQ.
A_STAGING = {"scalar": 0, "squares": 1, "lanes": 2}


def tiled(tile: int, unrolled: bool = False) -> Plan:
    """A shared-memory tiled kernel of ``tile`` x ``tile`` (four rows per unit for tiles above 16;
    ``unrolled``: their staging unrolled in the source, see matmul_tiled)."""
    rpt = 4 if tile > 16 else 1
    shape = (("TILE", tile), ("RPT", rpt), ("SU", int(unrolled)))
    return Plan(matmul_tiled, (tile, tile // rpt), shape, tile, tile, shared=2 * tile * tile)


def reg(rb: RegBlock) -> Plan:
    """A register-blocked kernel."""
    if rb.stage_a not in A_STAGING:
        raise ValidationError(f"RegBlock.stage_a is one of {sorted(A_STAGING)}, not {rb.stage_a!r}")
    aq = A_STAGING[rb.stage_a] if rb.vec else 0
    shape = (("BM", rb.bm), ("BN", rb.bn), ("BK", rb.bk), ("TM", rb.tm), ("TN", rb.tn), ("STAGES", rb.stages),
             ("AQ", aq))
    shared = rb.stages * rb.bk * (rb.bm + rb.bn)
    if rb.index not in ("u32", "i32"):
        raise ValidationError(f"RegBlock.index is 'u32' or 'i32', not {rb.index!r}")
    return Plan(matmul_reg, rb.cube, shape, rb.bm, rb.bn, rb.vec, shared, rb.index)


@functools.cache
def comptime(plan: Plan, name: str) -> dict[str, Any]:
    """The comptime arguments of ``plan`` for dtype ``name`` (cached: built once per pair)."""
    types = types_of(name, plan.vec)
    if plan.kernel is not matmul_reg:
        return {"T": types["T"], "ACC": types["ACC"], **dict(plan.shape)}
    shape = dict(plan.shape)
    return {**types, "AIO": types["IO"] if shape["AQ"] else types["T"], "IX": lang_type(plan.index), **shape}


def launch(
    client: Any, plan: Plan, a: Handle, b: Handle, c: Handle, m: int, n: int, k: int, name: str
) -> None:
    """Launch ``plan`` for dtype ``name`` (arguments already checked)."""
    if plan.vec:
        size = DTYPES[name].itemsize
        a, b, c = (checks.prefix(h, size * count) for h, count in ((a, m * k), (b, k * n), (c, m * n)))
    count = CubeCount(-(-n // plan.block_n), -(-m // plan.block_m))
    plan.kernel.launch_unchecked(client, count, plan.cube, a, b, c, m, n, k, **comptime(plan, name))


def strategy(plan: Plan) -> Any:
    """A candidate function launching ``plan``."""

    def run(
        client: Any, a: Handle, b: Handle, m: int, n: int, k: int, out: Handle | None, name: str = "f32"
    ) -> Handle:
        c = out if out is not None else client.empty(DTYPES[name].itemsize * m * n)
        launch(client, plan, a, b, c, m, n, k, name)
        return c

    return run


# ---------------------------------------------------------------------------------------- tuning
def matmul_key(
    client: Any, level: str, a: Handle, b: Handle, m: int, n: int, k: int, out: Any, name: str = "f32"
) -> AutotuneKey:
    """The tuning key: the dtype, anchored m, n, k, and whether 4-lane loads and stores are possible:
    k and n multiples of 4 and every view aligned to a 4-lane vector (16 bytes; 8 for f16, whose
    4-lane accesses are 8 bytes wide in every dialect: WGSL ``vec4<f16>``, OpenCL ``half4``, CUDA's
    8-byte-aligned struct)."""
    width = 4 * DTYPES[name].itemsize
    vec = name in IO_DTYPES and k % 4 == 0 and n % 4 == 0 and a.start % width == 0 and b.start % width == 0
    if out is not None:
        vec = vec and out.start % width == 0
    return AutotuneKey(
        ("dtype", name),
        ("m", anchor(m, level, MAX_DIM)), ("n", anchor(n, level, MAX_DIM)), ("k", anchor(k, level, MAX_DIM)),
        ("vec", vec),
    )  # fmt: skip


def host_matmul(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """numpy's product in the kernels' arithmetic: floats in f64 rounded to the dtype (f16 too:
    the kernels accumulate it in f32), integers wrapped to their width."""
    dt = lhs.dtype
    with np.errstate(invalid="ignore", over="ignore"):  # NaN and inf inputs give what IEEE gives
        if dt.kind == "f":
            return (lhs.astype(np.float64) @ rhs.astype(np.float64)).astype(dt)
        wide = np.int64 if dt.kind == "i" else np.uint64
        # 64-bit products and sums wrap modulo 2^64, which keeps them exact modulo 2^32.
        return (lhs.astype(wide) @ rhs.astype(wide)).astype(dt)


def tolerance(dt: np.dtype[Any], want: np.ndarray, k: int) -> float:
    """The largest difference from :func:`host_matmul` a correct kernel may show (0 for integers)."""
    if dt.kind != "f" or not want.size:
        return 0.0
    finite = want[np.isfinite(want)]
    scale = float(np.max(np.abs(finite))) if finite.size else 0.0
    if dt.itemsize == 2:
        # Accumulated in f32: the result's own rounding to f16 (2^-11 relative, on each side) dominates.
        return 2e-3 * (scale + 1.0)
    eps = 1e-5 if dt.itemsize == 4 else 1e-12
    return eps * (scale + 1.0) * float(np.sqrt(k + 1.0))


def _compare(
    client: Any, expected: Handle, got: Handle, a: Any, b: Any, m: int, n: int, k: int, out: Any,
    name: str = "f32",
) -> str | None:
    dt = DTYPES[name]
    want = client.to_numpy(checks.prefix(expected, dt.itemsize * m * n), name).astype(np.float64)
    have = client.to_numpy(checks.prefix(got, dt.itemsize * m * n), name).astype(np.float64)
    if not want.size:
        return None
    same = np.isnan(want) == np.isnan(have)
    diff = np.where(np.isnan(want), 0.0, np.abs(np.nan_to_num(have - want, nan=np.inf)))
    err, tol = float(np.max(diff)), tolerance(dt, want, k)
    return None if err <= tol and bool(np.all(same)) else f"max abs error {err:.3g} above {tol:.3g}"


def _reference(
    client: Any, a: Handle, b: Handle, m: int, n: int, k: int, out: Any, name: str = "f32"
) -> Handle:
    size = DTYPES[name].itemsize
    lhs = client.to_numpy(checks.prefix(a, size * m * k), name).reshape(m, k)
    rhs = client.to_numpy(checks.prefix(b, size * k * n), name).reshape(k, n)
    result: Handle = client.create(host_matmul(lhs, rhs))
    return result


REG_4X4 = RegBlock(64, 64, 16, 4, 4, False)
REG_8X8 = RegBlock(128, 128, 8, 8, 8, False)
# The float4 twins of the hand kernels stage A as those did ("lanes"). Before (H200, CUDA, lang /
# hand speed): reg_4x4_vec 0.944 with squares, 0.894 scalar; reg_8x8_vec 0.953 scalar, 0.718
# with squares (bench/bench_matmul_vs_hand.py --variants compares them in one run).
REG_4X4_VEC = RegBlock(64, 64, 16, 4, 4, True)
REG_8X8_VEC = RegBlock(128, 128, 8, 8, 8, True)
# Double-buffered (one barrier a step, the next tiles' loads in flight during the multiply-adds).
# Steps of 8 stage A with scalar loads (see matmul_reg.fetch for the measurements).
# Their shared tiles' indices are i32 arithmetic (RegBlock.index). On the H100 at 4096^3
# (bench/probes/matmul_blocks.py --std --index=u32,i32, matmul-index-*-h100-2026-11-26.json),
# NVIDIA's OpenCL ran each double-buffered candidate 0.4-15 % faster in i32, the fastest
# (reg_8x16_vec_db16_sq) 41.7 -> 47.9 TFLOP/s, CUDA's figure; and every single-buffered one slower
# (reg_8x8_vec 37.3 -> 25.2: more registers a unit, half the cubes an SM), so those keep u32.
# CUDA (int either way) and Vulkan changed by less than 0.5 %.
REG_8X8_DB = RegBlock(128, 128, 8, 8, 8, False, stages=2, index="i32")
REG_8X8_VEC_DB = RegBlock(128, 128, 8, 8, 8, True, stages=2, stage_a="scalar", index="i32")
# BK = 16: half the steps (and barriers) of BK = 8; 32 KiB of shared memory in f32. The BK = 16
# candidates stage A in lanes: on the H200 (matmul-vs-hand-h200-lanes-2026-11-26.json, 2048^3) this
# one ran 37.9 TFLOP/s with lanes and 38.2 with squares under CUDA, 40.2 and 34.7 under NVIDIA
# OpenCL, 25.5 and 25.2 on Vulkan; reg_8x16_vec_db16 40.3 and 39.1, 40.0 and 39.0, 28.2 and 28.1.
# reg_8x8_vec_db keeps scalar loads: with lanes it ran 39.2 / 39.3 / 26.0 against 37.8 / 36.5 /
# 31.1 (then Vulkan's fastest; its lanes twin is a candidate of its own now, below).
REG_8X8_VEC_DB16 = RegBlock(128, 128, 16, 8, 8, True, stages=2, stage_a="lanes", index="i32")
# 8 x 16 per unit (a 128 x 256 block): 6 vectors of shared memory read for 128 multiply-adds, where
# 8 x 8 reads 4 for 64. 48 KiB of shared memory in f32 (CUDA's static limit). On the H200 at 4096^3
# (bench/probes/matmul_blocks.py): 41.1 TFLOP/s, 0.80x cuBLAS, where reg_8x8_vec_db16 gave 38.7.
REG_8X16_VEC_DB16 = RegBlock(128, 256, 16, 8, 16, True, stages=2, stage_a="lanes", index="i32")
# The same staging A in 4 x 4 squares. Since CUDA's shared-memory indices are int arithmetic
# (lang/codegen_c.py, CGen.signed_index) it is CUDA's fastest at 4096^3 on the H100: 47.9 TFLOP/s
# against 45.1 with lanes (bench/probes/matmul_blocks.py, matmul-blocks-cuda-h100-2026-11-26.json);
# on Vulkan 37.5 against 36.2 (both before Vulkan's struct buffers and read-only bindings, with
# which reg_8x16_vec_db16 is Vulkan's fastest in f32: 44.95 TFLOP/s, reg_8x8_vec_db16 31.3;
# matmul-vulkan-readonly-h100-2026-11-26.json).
REG_8X16_VEC_DB16_SQ = dataclasses.replace(REG_8X16_VEC_DB16, stage_a="squares")
# reg_8x8_vec_db staging A in lanes: Vulkan's fastest in f16 once the inputs are bound read-only
# (webgpu/compiler.py): on the H100 at 4096^3 f16, 39.9 TFLOP/s (bench/probes/matmul_blocks.py
# 4096 webgpu 3 --dtype=f16, its "8x8 bk8 lanes") against 38.3 for the best of std's other
# candidates (reg_8x16_vec_db16_sq, --std --dtype=f16; matmul-vulkan-readonly-h100-2026-11-26.json).
REG_8X8_VEC_DB_LANES = dataclasses.replace(REG_8X8_VEC_DB, stage_a="lanes")

#: Every candidate's plan by name (the benchmarks launch them one by one).
PLANS = {
    "naive": NAIVE,
    "tiled_8": tiled(8),
    "tiled_16": tiled(16),
    "tiled_32": tiled(32),
    "reg_4x4": reg(REG_4X4),
    "reg_8x8": reg(REG_8X8),
    "reg_4x4_vec": reg(REG_4X4_VEC),
    "reg_8x8_vec": reg(REG_8X8_VEC),
    "reg_8x8_db": reg(REG_8X8_DB),
    "reg_8x8_vec_db": reg(REG_8X8_VEC_DB),
    "reg_8x8_vec_db16": reg(REG_8X8_VEC_DB16),
    "reg_8x16_vec_db16": reg(REG_8X16_VEC_DB16),
    "reg_8x16_vec_db16_sq": reg(REG_8X16_VEC_DB16_SQ),
    "reg_8x8_vec_db_lanes": reg(REG_8X8_VEC_DB_LANES),
}
#: Not candidates: std's candidates with another staging of their tiles than the one they use,
#: ``candidate@staging`` (``RegBlock.stage_a``; ``tiled(unrolled=True)``). The tests check them and
#: ``bench/bench_matmul_vs_hand.py --variants`` times them against the candidate's hand twin.
STAGING_VARIANTS = {
    "tiled_32@unrolled": tiled(32, unrolled=True),
    **{
        f"{name}@{staging}": reg(dataclasses.replace(rb, stage_a=staging))
        for name, rb in (("reg_4x4_vec", REG_4X4_VEC), ("reg_8x8_vec", REG_8X8_VEC),
                         ("reg_8x8_vec_db", REG_8X8_VEC_DB), ("reg_8x8_vec_db16", REG_8X8_VEC_DB16),
                         ("reg_8x16_vec_db16", REG_8X16_VEC_DB16))
        for staging in A_STAGING
        if staging != rb.stage_a and reg(dataclasses.replace(rb, stage_a=staging)) not in PLANS.values()
    },
}  # fmt: skip
_PRIORITY = {"naive": 0, "tiled_8": 0, "tiled_16": 1, "tiled_32": 1}

#: The tunable set of matmul, every dtype (the key holds it; see the module docstring).
MATMUL = TunableSet(
    "std.matmul",
    [
        Tunable(name, strategy(plan), priority=_PRIORITY.get(name, 2), applicable=plan.fits)
        for name, plan in PLANS.items()
    ],
    matmul_key,
    compare=_compare,
    reference=_reference,
)


def matmul(
    client: Any, a: Handle, b: Handle, m: int, n: int, k: int, out: Handle | None = None, dtype: Any = "f32"
) -> Handle:
    """``C = A @ B`` of row-major matrices of ``dtype`` (A: m x k, B: k x n) as a new handle (or
    into ``out``); f16 accumulates in f32, integers wrap (autotuned)."""
    name = element_type(client, dtype, "matmul")
    m, n, k = (checks.count(v, what, MAX_DIM) for v, what in ((m, "m"), (n, "n"), (k, "k")))
    for count, what in ((m * k, "m * k"), (k * n, "k * n"), (m * n, "m * n")):
        if count > checks.MAX_ELEMENTS:
            raise ValidationError(
                f"matmul: {what} = {count} elements exceeds {checks.MAX_ELEMENTS}; "
                f"split the product into blocks"
            )
    size = DTYPES[name].itemsize
    checks.buffer(client, a, size * m * k, "matmul: a")
    checks.buffer(client, b, size * k * n, "matmul: b")
    if out is not None:
        checks.buffer(client, out, size * m * n, "matmul: out")
    if m == 0 or n == 0:
        return out if out is not None else client.empty(0)
    if k == 0:
        # Every kernel writes its zero accumulators when k is 0; the naive one needs no tuning.
        zeros: Handle = strategy(NAIVE)(client, a, b, m, n, k, out, name)
        return zeros
    result: Handle = autotune(client, MATMUL, a, b, m, n, k, out, name)
    return result
