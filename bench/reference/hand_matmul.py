"""The hand-written matmul kernels that ``cubeplug.std.matmul`` had before it was written in
``cubeplug.lang``: kept unchanged, as plain ``Kernel``s, only as the reference figure of
``bench/bench_matmul_vs_hand.py`` (each lang candidate against its hand twin). Not used by std.

Each kernel is f32 only, in three dialects (``c`` for CUDA and OpenCL through the prelude, ``wgsl``,
and ``python``: numpy's matmul for the CPU backend).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from cubeplug.core.handle import Handle
from cubeplug.core.kernel import Buffer, CubeCount, Kernel, Scalar
from cubeplug.std import checks

_Q = "xyzw"


def _matmul_py(launch: Any, a: np.ndarray, b: np.ndarray, c: np.ndarray, m: Any, n: Any, k: Any) -> None:
    m, n, k = int(m), int(n), int(k)
    lhs = a.reshape(-1)[: m * k].reshape(m, k)
    rhs = b.reshape(-1)[: k * n].reshape(k, n)
    c.reshape(-1)[: m * n] = (lhs @ rhs).ravel()


def _params(vec: bool) -> list[Buffer | Scalar]:
    w = 4 if vec else 1
    return [
        Buffer("a", "f32", "read", vector=w),
        Buffer("b", "f32", "read", vector=w),
        Buffer("c", "f32", "write", vector=w),
        Scalar("m", "u32"),
        Scalar("n", "u32"),
        Scalar("k", "u32"),
    ]


_C_SIG = (
    "KERNEL @NAME@(GLOBAL const {t}* a, GLOBAL const {t}* b, GLOBAL {t}* c, "
    "unsigned int m, unsigned int n, unsigned int k)"
)
_W_SIG = (
    "@compute @workgroup_size(CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z)\n"
    "fn @NAME@(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {\n"
    "    let m = scalars.m; let n = scalars.n; let k = scalars.k;\n"
)

# ---------------------------------------------------------------------------------------- naive
_NAIVE_C = (
    _C_SIG.format(t="float")
    + """ {
    unsigned int col = ABSOLUTE_POS_X;
    unsigned int row = ABSOLUTE_POS_Y;
    if (row < m && col < n) {
        float acc = 0.0f;
        for (unsigned int p = 0u; p < k; ++p) acc += a[row * k + p] * b[p * n + col];
        c[row * n + col] = acc;
    }
}
"""
)
_NAIVE_WGSL = """\
@compute @workgroup_size(CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z)
fn @NAME@(@builtin(global_invocation_id) gid: vec3<u32>) {
    let m = scalars.m; let n = scalars.n; let k = scalars.k;
    let col = gid.x; let row = gid.y;
    if (row < m && col < n) {
        var acc = 0.0;
        for (var p = 0u; p < k; p += 1u) { acc += a[row * k + p] * b[p * n + col]; }
        c[row * n + col] = acc;
    }
}
"""

# ---------------------------------------------------------------------------------------- tiled
_TILED_C = (
    _C_SIG.format(t="float")
    + """ {
    LOCAL float As[TILE][TILE];
    LOCAL float Bs[TILE][TILE];
    unsigned int tx = UNIT_POS_X, ty = UNIT_POS_Y;
    unsigned int col = CUBE_POS_X * TILE + tx;
    unsigned int row0 = CUBE_POS_Y * TILE;
    float acc[RPT];
    for (int r = 0; r < RPT; ++r) acc[r] = 0.0f;
    for (unsigned int t = 0u; t < k; t += TILE) {
        for (int r = 0; r < RPT; ++r) {
            unsigned int rr = ty + r * ROWS;
            unsigned int row = row0 + rr;
            As[rr][tx] = (row < m && t + tx < k) ? a[row * k + t + tx] : 0.0f;
            Bs[rr][tx] = (t + rr < k && col < n) ? b[(t + rr) * n + col] : 0.0f;
        }
        SYNC_CUBE();
        for (int p = 0; p < TILE; ++p) {
            float bv = Bs[p][tx];
            for (int r = 0; r < RPT; ++r) acc[r] += As[ty + r * ROWS][p] * bv;
        }
        SYNC_CUBE();
    }
    for (int r = 0; r < RPT; ++r) {
        unsigned int row = row0 + ty + r * ROWS;
        if (row < m && col < n) c[row * n + col] = acc[r];
    }
}
"""
)
_TILED_WGSL = (
    """\
var<workgroup> As: array<f32, TILE * TILE>;
var<workgroup> Bs: array<f32, TILE * TILE>;

"""
    + _W_SIG
    + """\
    let tx = lid.x; let ty = lid.y;
    let col = wid.x * TILE + tx;
    let row0 = wid.y * TILE;
    var acc: array<f32, RPT>;
    for (var t = 0u; t < k; t += TILE) {
        for (var r = 0u; r < RPT; r += 1u) {
            let rr = ty + r * ROWS;
            let row = row0 + rr;
            var av = 0.0;
            if (row < m && t + tx < k) { av = a[row * k + t + tx]; }
            As[rr * TILE + tx] = av;
            var bv = 0.0;
            if (t + rr < k && col < n) { bv = b[(t + rr) * n + col]; }
            Bs[rr * TILE + tx] = bv;
        }
        workgroupBarrier();
        for (var p = 0u; p < TILE; p += 1u) {
            let bv = Bs[p * TILE + tx];
            for (var r = 0u; r < RPT; r += 1u) { acc[r] += As[(ty + r * ROWS) * TILE + p] * bv; }
        }
        workgroupBarrier();
    }
    for (var r = 0u; r < RPT; r += 1u) {
        let row = row0 + ty + r * ROWS;
        if (row < m && col < n) { c[row * n + col] = acc[r]; }
    }
}
"""
)


# ---------------------------------------------------------------------------------------- register blocked
@dataclass(frozen=True)
class RegBlock:
    """A register-blocked kernel's shape: block BM x BN, step BK, per-unit TM x TN, float4 global I/O."""

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    vec: bool

    @property
    def cube(self) -> tuple[int, int]:
        """Units per cube (x, y)."""
        return (self.bn // self.tn, self.bm // self.tm)

    def defines(self) -> dict[str, int]:
        """The constants the sources use."""
        tx, ty = self.cube
        return {
            "BM": self.bm, "BN": self.bn, "BK": self.bk, "TM": self.tm, "TN": self.tn,
            "TX": tx, "TY": ty, "NT": tx * ty, "GN": self.tn // 4,
        }  # fmt: skip


def _reg_c(rb: RegBlock) -> str:
    """The register-blocked kernel's C source. One long function on purpose: its lines read as the
    kernel they generate, in order; splitting them would scatter one kernel over helpers (std moves
    onto cubeplug.lang, where this becomes one kernel function)."""
    gm, gn = rb.tm // 4, rb.tn // 4
    t = "float4" if rb.vec else "float"
    zero = "v.x = 0.0f; v.y = 0.0f; v.z = 0.0f; v.w = 0.0f;"
    lines = [
        "#if defined(__OPENCL_VERSION__)",
        "#define LOCAL_PTR __local",
        "#else",
        "#define LOCAL_PTR",
        "#endif",
        _C_SIG.format(t=t) + " {",
        "    LOCAL float4 As4[BK * (BM / 4)];",
        "    LOCAL float4 Bs4[BK * (BN / 4)];",
        "    LOCAL_PTR float* As = (LOCAL_PTR float*)As4;",
        "    LOCAL_PTR float* Bs = (LOCAL_PTR float*)Bs4;",
        "    const unsigned int tx = UNIT_POS_X, ty = UNIT_POS_Y;",
        "    const unsigned int tid = ty * TX + tx;",
        "    const unsigned int row0 = CUBE_POS_Y * BM, col0 = CUBE_POS_X * BN;",
        f"    float4 acc[{rb.tm * gn}];",
        f"    for (int z = 0; z < {rb.tm * gn}; ++z) {{",
        "        acc[z].x = 0.0f; acc[z].y = 0.0f; acc[z].z = 0.0f; acc[z].w = 0.0f;",
        "    }",
        "    for (unsigned int t = 0u; t < k; t += BK) {",
    ]
    if rb.vec:
        lines += [
            "        for (unsigned int e = tid; e < BM * (BK / 4); e += NT) {",
            "            unsigned int r = e / (BK / 4), q = e % (BK / 4);",
            "            unsigned int gr = row0 + r, gc = t + 4u * q;",
            "            float4 v;",
            f"            if (gr < m && gc < k) {{ v = a[(gr * k + gc) >> 2]; }} else {{ {zero} }}",
            "            As[(4u * q) * BM + r] = v.x; As[(4u * q + 1u) * BM + r] = v.y;",
            "            As[(4u * q + 2u) * BM + r] = v.z; As[(4u * q + 3u) * BM + r] = v.w;",
            "        }",
            "        for (unsigned int e = tid; e < BK * (BN / 4); e += NT) {",
            "            unsigned int r = e / (BN / 4), q = e % (BN / 4);",
            "            unsigned int gr = t + r, gc = col0 + 4u * q;",
            "            float4 v;",
            f"            if (gr < k && gc < n) {{ v = b[(gr * n + gc) >> 2]; }} else {{ {zero} }}",
            "            Bs4[r * (BN / 4) + q] = v;",
            "        }",
        ]
    else:
        lines += [
            "        for (unsigned int e = tid; e < BM * BK; e += NT) {",
            "            unsigned int r = e / BK, q = e % BK;",
            "            unsigned int gr = row0 + r, gc = t + q;",
            "            As[q * BM + r] = (gr < m && gc < k) ? a[gr * k + gc] : 0.0f;",
            "        }",
            "        for (unsigned int e = tid; e < BK * BN; e += NT) {",
            "            unsigned int r = e / BN, q = e % BN;",
            "            unsigned int gr = t + r, gc = col0 + q;",
            "            Bs[r * BN + q] = (gr < k && gc < n) ? b[gr * n + gc] : 0.0f;",
            "        }",
        ]
    lines += ["        SYNC_CUBE();", "#pragma unroll", "        for (unsigned int p = 0u; p < BK; ++p) {"]
    lines += [f"            float4 a{gi} = As4[p * (BM / 4) + {gi} * TY + ty];" for gi in range(gm)]
    lines += [f"            float4 b{gj} = Bs4[p * (BN / 4) + {gj} * TX + tx];" for gj in range(gn)]
    for gi in range(gm):
        for q in range(4):
            for gj in range(gn):
                z = (gi * 4 + q) * gn + gj
                s = f"a{gi}.{_Q[q]}"
                lines.append("            " + " ".join(f"acc[{z}].{c} += {s} * b{gj}.{c};" for c in _Q))
    lines += ["        }", "        SYNC_CUBE();", "    }"]
    for gi in range(gm):
        for q in range(4):
            lines.append(
                f"    {{ unsigned int row = row0 + {gi * (rb.bm // gm)}u + ty * 4u + {q}u; if (row < m) {{"
            )
            for gj in range(gn):
                z = (gi * 4 + q) * gn + gj
                col = f"col0 + {gj * (rb.bn // gn)}u + tx * 4u"
                if rb.vec:
                    lines.append(
                        f"        {{ unsigned int col = {col}; "
                        f"if (col < n) c[(row * n + col) >> 2] = acc[{z}]; }}"
                    )
                else:
                    stores = " ".join(
                        f"if (col + {j}u < n) c[row * n + col + {j}u] = acc[{z}].{_Q[j]};" for j in range(4)
                    )
                    lines.append(f"        {{ unsigned int col = {col}; {stores} }}")
            lines.append("    } }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _reg_wgsl(rb: RegBlock) -> str:
    """The register-blocked kernel's WGSL source; one long function for the reason ``_reg_c`` gives."""
    gm, gn = rb.tm // 4, rb.tn // 4
    lines = [
        "var<workgroup> As: array<vec4<f32>, BK * BM / 4>;",
        "var<workgroup> Bs: array<vec4<f32>, BK * BN / 4>;",
        "",
        _W_SIG.rstrip("\n"),
        "    let tx = lid.x; let ty = lid.y;",
        "    let tid = ty * TX + tx;",
        "    let row0 = wid.y * BM; let col0 = wid.x * BN;",
        "    var acc: array<vec4<f32>, TM * GN>;",
        "    for (var t = 0u; t < k; t += BK) {",
    ]
    if rb.vec:
        lines += [
            "        for (var e = tid; e < BM * (BK / 4); e += NT) {",
            "            let r = e / (BK / 4); let q = e % (BK / 4);",
            "            let gr = row0 + r; let gc = t + 4u * q;",
            "            var v = vec4<f32>(0.0);",
            "            if (gr < m && gc < k) { v = a[(gr * k + gc) >> 2u]; }",
            "            let f = q * BM + r / 4u; let j = r % 4u;",
            "            As[f][j] = v.x; As[f + BM / 4][j] = v.y;",
            "            As[f + 2 * (BM / 4)][j] = v.z; As[f + 3 * (BM / 4)][j] = v.w;",
            "        }",
            "        for (var e = tid; e < BK * (BN / 4); e += NT) {",
            "            let r = e / (BN / 4); let q = e % (BN / 4);",
            "            let gr = t + r; let gc = col0 + 4u * q;",
            "            var v = vec4<f32>(0.0);",
            "            if (gr < k && gc < n) { v = b[(gr * n + gc) >> 2u]; }",
            "            Bs[r * (BN / 4) + q] = v;",
            "        }",
        ]
    else:
        lines += [
            "        for (var e = tid; e < BM * BK; e += NT) {",
            "            let r = e / BK; let q = e % BK;",
            "            let gr = row0 + r; let gc = t + q;",
            "            var v = 0.0;",
            "            if (gr < m && gc < k) { v = a[gr * k + gc]; }",
            "            let f = q * BM + r;",
            "            As[f / 4u][f % 4u] = v;",
            "        }",
            "        for (var e = tid; e < BK * BN; e += NT) {",
            "            let r = e / BN; let q = e % BN;",
            "            let gr = t + r; let gc = col0 + q;",
            "            var v = 0.0;",
            "            if (gr < k && gc < n) { v = b[gr * n + gc]; }",
            "            let f = r * BN + q;",
            "            Bs[f / 4u][f % 4u] = v;",
            "        }",
        ]
    lines += ["        workgroupBarrier();", "        for (var p = 0u; p < BK; p += 1u) {"]
    lines += [f"            let a{gi} = As[p * (BM / 4) + {gi}u * TY + ty];" for gi in range(gm)]
    lines += [f"            let b{gj} = Bs[p * (BN / 4) + {gj}u * TX + tx];" for gj in range(gn)]
    for gi in range(gm):
        for q in range(4):
            lines.append(
                "            "
                + " ".join(f"acc[{(gi * 4 + q) * gn + gj}] += a{gi}.{_Q[q]} * b{gj};" for gj in range(gn))
            )
    lines += ["        }", "        workgroupBarrier();", "    }"]
    for gi in range(gm):
        for q in range(4):
            lines.append(f"    {{ let row = row0 + {gi * (rb.bm // gm)}u + ty * 4u + {q}u; if (row < m) {{")
            for gj in range(gn):
                z = (gi * 4 + q) * gn + gj
                col = f"col0 + {gj * (rb.bn // gn)}u + tx * 4u"
                if rb.vec:
                    lines.append(
                        f"        {{ let col = {col}; "
                        f"if (col < n) {{ c[(row * n + col) >> 2u] = acc[{z}]; }} }}"
                    )
                else:
                    stores = " ".join(
                        f"if (col + {j}u < n) {{ c[row * n + col + {j}u] = acc[{z}].{_Q[j]}; }}"
                        for j in range(4)
                    )
                    lines.append(f"        {{ let col = {col}; {stores} }}")
            lines.append("    } }")
    lines.append("}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------- kernels
@dataclass(frozen=True)
class Plan:
    """A matmul candidate's kernel and its block: output rows and columns per cube."""

    kernel: Kernel
    block_m: int
    block_n: int
    vec: bool


def _kernel(
    name: str, c: str, wgsl: str, cube: tuple[int, int], defines: dict[str, int], vec: bool
) -> Kernel:
    return Kernel(
        name,
        _params(vec),
        {"c": c.replace("@NAME@", name), "wgsl": wgsl.replace("@NAME@", name), "python": _matmul_py},
        cube_dim=cube,
        defines=defines,
    )


@functools.cache
def naive_plan() -> Plan:
    """The naive kernel: one unit per output."""
    return Plan(_kernel("matmul_naive", _NAIVE_C, _NAIVE_WGSL, (16, 16), {}, False), 16, 16, False)


@functools.cache
def tiled_plan(tile: int) -> Plan:
    """A shared-memory tiled kernel of ``tile`` x ``tile`` (four rows per unit for tiles above 16)."""
    rpt = 4 if tile > 16 else 1
    rows = tile // rpt
    kernel = _kernel(
        f"matmul_tiled_{tile}",
        _TILED_C,
        _TILED_WGSL,
        (tile, rows),
        {"TILE": tile, "RPT": rpt, "ROWS": rows},
        False,
    )
    return Plan(kernel, tile, tile, False)


@functools.cache
def reg_plan(rb: RegBlock) -> Plan:
    """A register-blocked kernel."""
    name = f"matmul_reg_{rb.bm}x{rb.bn}x{rb.bk}_{rb.tm}x{rb.tn}" + ("_vec" if rb.vec else "")
    kernel = _kernel(name, _reg_c(rb), _reg_wgsl(rb), rb.cube, rb.defines(), rb.vec)
    return Plan(kernel, rb.bm, rb.bn, rb.vec)


REG_4X4 = RegBlock(64, 64, 16, 4, 4, False)
REG_8X8 = RegBlock(128, 128, 8, 8, 8, False)

#: The hand plans by the name of the std candidate each is the twin of.
PLANS: dict[str, Any] = {
    "naive": naive_plan,
    "tiled_8": lambda: tiled_plan(8),
    "tiled_16": lambda: tiled_plan(16),
    "tiled_32": lambda: tiled_plan(32),
    "reg_4x4": lambda: reg_plan(REG_4X4),
    "reg_8x8": lambda: reg_plan(REG_8X8),
    "reg_4x4_vec": lambda: reg_plan(RegBlock(64, 64, 16, 4, 4, True)),
    "reg_8x8_vec": lambda: reg_plan(RegBlock(128, 128, 8, 8, 8, True)),
}


def launch(client: Any, name: str, a: Handle, b: Handle, c: Handle, m: int, n: int, k: int) -> None:
    """Launch the hand kernel twin of the std candidate ``name`` (f32; as std launched it)."""
    plan: Plan = PLANS[name]()
    if plan.vec:
        a, b, c = checks.prefix(a, 4 * m * k), checks.prefix(b, 4 * k * n), checks.prefix(c, 4 * m * n)
    count = CubeCount(-(-n // plan.block_n), -(-m // plan.block_m))
    client.launch_unchecked(plan.kernel, count, [a, b, c], [m, n, k])
