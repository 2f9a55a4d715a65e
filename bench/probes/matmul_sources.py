"""The CUDA sources NVRTC compiles for std.matmul's candidates and their hand twins (a probe).

    PYTHONPATH=. python bench/probes/matmul_sources.py OUTDIR [NAME ...]

Writes ``OUTDIR/NAME.lang.cu`` (the lang kernel, f32, as ``std.matmul`` launches it: unchecked,
its cube) and ``OUTDIR/NAME.hand.cu`` (the hand kernel of ``bench/reference/hand_matmul.py``), each
with the CUDA prelude and defines NVRTC sees, for the candidates named (default: tiled_32,
reg_4x4_vec, reg_8x8_vec, reg_8x8_vec_db, reg_8x16_vec_db16, and the bench-only variants of
``bench_matmul_vs_hand.VARIANTS``). No GPU needed: compare them line by line, or build them with
``nvcc -cubin -arch=sm_90 -Xptxas -v`` for registers and spills. A candidate with no hand twin
gets only its lang source.
"""

from __future__ import annotations

import importlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_matmul_vs_hand import VARIANTS, all_plans
from reference import hand_matmul

from cubeplug.core import cdialect

mm = importlib.import_module("cubeplug.std.matmul")  # the module (``std.matmul`` is the function)

DEFAULT = ["tiled_32", "reg_4x4_vec", "reg_8x8_vec", "reg_8x8_vec_db", "reg_8x16_vec_db16", *VARIANTS]
#: The dtypes of a CUDA device (the lang kernels specialize on them).
CUDA_DTYPES = frozenset({"f16", "f32", "f64", "i32", "u32", "i64", "u64"})


def lang_source(name: str) -> str:
    """The full CUDA source of candidate ``name`` (f32)."""
    plan = all_plans()[name]
    spec = plan.kernel.specialize_for("c", CUDA_DTYPES, plan.cube, False, mm.comptime(plan, "f32"))
    return cdialect.full_source(spec.kernel, spec.source, "cuda", fp16=True)


def hand_source(name: str) -> str | None:
    """The full CUDA source of the hand twin of ``name`` (None: no twin)."""
    if name not in hand_matmul.PLANS:
        return None
    kernel = hand_matmul.PLANS[name]().kernel
    return cdialect.full_source(kernel, kernel.sources["c"], "cuda", fp16=True)


def main() -> None:
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name in sys.argv[2:] or DEFAULT:
        for what, text in (("lang", lang_source(name)), ("hand", hand_source(name))):
            if text is not None:
                path = os.path.join(out, f"{name}.{what}.cu")
                with open(path, "w") as f:
                    f.write(text)
                print(path)


if __name__ == "__main__":
    main()
