"""Why std's ``tiled_32`` lost 3 % to its hand twin under CUDA: the form of its shared-memory indices.

    PYTHONPATH=. python bench/probes/index_forms.py OUT.json [backend] [size] [rounds]

The hand kernel (``bench/reference/hand_matmul.py``) indexes 2-D shared arrays, ``As[row][p]``; the
language has 1-D ones, indexed ``a_tile[row * 32 + p]`` in ``u32``. Each variant below edits the
hand kernel's text one way towards the generated source (or indexes its 1-D arrays another way),
launched as a plain ``Kernel`` like the hand one, checked against numpy, then timed with device
timestamps in rounds that alternate the variants (median and best ms per call, and hand time /
variant time):

* ``h_uint``, ``h_ifelse``, ``h_store``, ``h_accplus``, ``h_init``: unsigned loop counters, guarded
  loads as if/else, the stores unrolled, ``acc = acc + x`` for ``+=``, the accumulators' start
  unrolled: the generated source's other differences, one at a time;
* ``h_1d``: 1-D shared arrays indexed in ``unsigned int`` (the language's arithmetic);
* ``f_u64``: the same index converted to 64 bits after the ``u32`` arithmetic;
* ``f_int``, ``f_size_t``, ``f_rowptr``: 1-D arrays indexed in ``int``, in ``size_t``, and as a
  row pointer plus a column (``(As + row * 32u)[p]``): arithmetic that need not wrap at 2**32;
* ``h_1d_u8``, ``hand_u4``: ``#pragma unroll 8`` on ``h_1d``'s product loop, ``unroll 4`` on the
  hand kernel's (the unroll factors NVRTC chose for the two);
* ``lang``: std's ``tiled_32`` as the language generates it now.

Result (H100, 2048^3, ``../results/index-forms-h100-2026-11-26.json``): only the ``u32`` 1-D forms
(``h_1d``, ``f_u64``, and ``lang`` before the change) ran at 0.97x; the other edits and the
forms that need not wrap ran as the hand kernel. The ``c`` generator now indexes shared and local
arrays in ``int`` under CUDA (``CGen.signed_index``).
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable
from typing import Any

import cubeplug
from cubeplug import Kernel

sys.path.insert(0, "bench")
from paired import run_header
from reference import hand_matmul
from tiled32_variants import time_variants  # this script's folder, first on sys.path

mm = importlib.import_module("cubeplug.std.matmul")

SIG = ("KERNEL @NAME@(GLOBAL const float* a, GLOBAL const float* b, GLOBAL float* c, unsigned int m, "
       "unsigned int n, unsigned int k) {\n")
#: The hand kernel's tiled_32 with its macros written out (TILE 32, RPT 4, ROWS 8).
HAND = """    LOCAL float As[32][32];
    LOCAL float Bs[32][32];
    unsigned int tx = UNIT_POS_X, ty = UNIT_POS_Y;
    unsigned int col = CUBE_POS_X * 32 + tx;
    unsigned int row0 = CUBE_POS_Y * 32;
    float acc[4];
    for (int r = 0; r < 4; ++r) acc[r] = 0.0f;
    for (unsigned int t = 0u; t < k; t += 32) {
        for (int r = 0; r < 4; ++r) {
            unsigned int rr = ty + r * 8;
            unsigned int row = row0 + rr;
            As[rr][tx] = (row < m && t + tx < k) ? a[row * k + t + tx] : 0.0f;
            Bs[rr][tx] = (t + rr < k && col < n) ? b[(t + rr) * n + col] : 0.0f;
        }
        SYNC_CUBE();
        for (int p = 0; p < 32; ++p) {
            float bv = Bs[p][tx];
            for (int r = 0; r < 4; ++r) acc[r] += As[ty + r * 8][p] * bv;
        }
        SYNC_CUBE();
    }
    for (int r = 0; r < 4; ++r) {
        unsigned int row = row0 + ty + r * 8;
        if (row < m && col < n) c[row * n + col] = acc[r];
    }
}
"""
_PRODUCT_LOOP = "        for (int p = 0;"


def one_d(src: str, form: Callable[[str, str, str], str]) -> str:
    """``src`` with 1-D shared arrays, each ``X[row][col]`` written ``form(X, row, col)``."""
    src = src.replace("As[32][32];", "As[1024];").replace("Bs[32][32];", "Bs[1024];")
    places = (("As", "rr", "tx"), ("Bs", "rr", "tx"), ("Bs", "p", "tx"), ("As", "ty + r * 8", "p"))
    for arr, row, col in places:
        src = src.replace(f"{arr}[{row}][{col}]", form(arr, row, col))
    return src


def _u32(a: str, r: str, c: str) -> str:
    return f"{a}[({r}) * 32u + {c}]"


def _edit(src: str, old: str, new: str) -> str:
    out = src.replace(old, new)
    assert out != src, f"edit not applied: {old!r}"
    return out


def hand_sources() -> dict[str, str]:
    """The hand kernel and its edits, by variant name."""
    stores = "\n".join(f"    {{ unsigned int row = (row0 + ty) + {8 * r}u; if ((row < m) && (col < n)) "
                       f"{{ c[((row * n) + col)] = acc[{r}u]; }} }}" for r in range(4))
    loads = {"As": ("row < m && t + tx < k", "a[row * k + t + tx]"),
             "Bs": ("t + rr < k && col < n", "b[(t + rr) * n + col]")}
    ifelse = HAND
    for arr, (cond, load) in loads.items():
        ifelse = _edit(ifelse, f"{arr}[rr][tx] = ({cond}) ? {load} : 0.0f;",
                       f"float s{arr}; if ({cond}) {{ s{arr} = {load}; }} else {{ s{arr} = 0.0f; }}\n"
                       f"            {arr}[rr][tx] = s{arr};")
    uint = _edit(HAND, "for (int p = 0; p < 32; ++p)", "for (unsigned int p = 0u; p < 32u; p += 1u)")
    uint = _edit(uint, "for (int r = 0; r < 4; ++r) {\n            unsigned int rr",
                 "for (unsigned int r = 0u; r < 4u; r += 1u) {\n            unsigned int rr")
    store_loop = HAND[HAND.index("    for (int r = 0; r < 4; ++r) {\n        unsigned int row = row0 + ty"):
                      HAND.rindex("}")]
    return {
        "hand_text": HAND,
        "h_uint": uint,
        "h_ifelse": ifelse,
        "h_store": _edit(HAND, store_loop, stores + "\n"),
        "h_accplus": _edit(HAND, "acc[r] += As[ty + r * 8][p] * bv;",
                           "acc[r] = (acc[r] + (As[ty + r * 8][p] * bv));"),
        "h_init": _edit(HAND, "for (int r = 0; r < 4; ++r) acc[r] = 0.0f;",
                        "acc[0u] = 0.0f; acc[1u] = 0.0f; acc[2u] = 0.0f; acc[3u] = 0.0f;"),
        "h_1d": one_d(HAND, _u32),
        "f_u64": one_d(HAND, lambda a, r, c: f"{a}[(unsigned long long)(({r}) * 32u + {c})]"),
        "f_int": one_d(HAND, lambda a, r, c: f"{a}[(int)({r}) * 32 + (int)({c})]"),
        "f_size_t": one_d(HAND, lambda a, r, c: f"{a}[(size_t)({r}) * 32u + (size_t)({c})]"),
        "f_rowptr": one_d(HAND, lambda a, r, c: f"({a} + ({r}) * 32u)[{c}]"),
        "h_1d_u8": _edit(one_d(HAND, _u32), _PRODUCT_LOOP, '        _Pragma("unroll 8")\n' + _PRODUCT_LOOP),
        "hand_u4": _edit(HAND, _PRODUCT_LOOP, '        _Pragma("unroll 4")\n' + _PRODUCT_LOOP),
    }


def variants(client: Any) -> dict[str, Kernel]:
    plan = mm.PLANS["tiled_32"]
    params = hand_matmul._params(False)
    kernels = {name: Kernel(f"t32_{name}", params, {"c": SIG.replace("@NAME@", f"t32_{name}") + body},
                            cube_dim=plan.cube) for name, body in hand_sources().items()}
    lang = mm.matmul_tiled.source(client, plan.cube, checked=False, **mm.comptime(plan, "f32"))
    kernels["lang"] = Kernel("t32_lang", params, {"c": lang.replace("matmul_tiled_kernel(", "t32_lang(")},
                             cube_dim=plan.cube)
    kernels["hand"] = hand_matmul.tiled_plan(32).kernel
    return kernels


def main() -> None:
    out = sys.argv[1]
    backend = sys.argv[2] if len(sys.argv) > 2 else "cuda"
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 2048
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 9
    client = cubeplug.client(backend)
    rows = time_variants(client, variants(client), size, rounds)
    result = run_header(device=str(client.device), size=size, rounds=rounds, rows=rows)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    for name, row in rows.items():
        print(f"{name:10s} {row['median_ms']:.4f} ms  hand/variant {row['hand_over_variant']:.4f}")


if __name__ == "__main__":
    main()
