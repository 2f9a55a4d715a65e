"""std.matmul written in cubeplug.lang against the hand-written kernels it replaced, and against cuBLAS.

    PYTHONPATH=. python bench/bench_matmul_vs_hand.py OUT.json [--backends cuda,opencl,webgpu] [--quick]
        [--variants] [--only NAME,...] [--no-autotuned]
    PYTHONPATH=. python bench/bench_matmul_vs_hand.py --sources DIR [--only NAME,...]

Per backend:

* ``candidates``: every f32 candidate of ``std.matmul.MATMUL`` (the lang kernel, launched as std
  launches it) against its hand twin (``bench/reference/hand_matmul.py``, the kernels std had
  before; the double-buffered candidates, new, against ``reg_8x8``/``reg_8x8_vec``) at ``--size``
  cubed (default 2048, ``--quick`` 128). Both results are checked against
  numpy first, then timed in paired alternating loops (``bench/paired.py``). ``speed`` is hand
  time / lang time (goal >= 0.97).
* ``autotuned``: ``std.matmul`` (autotuned into a fresh cache) at ``--big`` cubed (default 4096,
  ``--quick`` 256) in f32, and in f16 (f32 accumulation) where the device declares f16: TFLOP/s,
  the candidate chosen, and, where CuPy and a CUDA device are present, ``cupy.matmul`` of the same
  matrices timed in the same paired loops (cuBLAS; goal for f32 >= 0.80 of its TFLOP/s). For
  OpenCL and WebGPU the cuBLAS figure is the yardstick of the same GPU.

``--variants`` adds the bench-only candidates of ``mm.STAGING_VARIANTS`` (another staging of A than
std's, each against the hand twin of its candidate). ``--sources DIR`` runs nothing: it writes the CUDA
sources NVRTC compiles for the candidates (``--only``, default: ``SOURCES``; f32, unchecked, as std
launches them) and their hand twins, ``DIR/NAME.lang.cu`` and ``DIR/NAME.hand.cu`` (``@`` in a
variant's name written ``-``), prelude and defines included. No GPU is needed: compare them line
by line, or build them with ``nvcc -cubin -arch=sm_90 -Xptxas -v`` for the registers and spills.

``--quick`` is for CPU devices (PoCL, lavapipe): a proof that the script works, not figures to tune on.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from paired import each_backend, paired, repeat, run_header, versus
from reference import hand_matmul

import cubeplug
from cubeplug import std
from cubeplug.core import cdialect
from cubeplug.core.kernel import DTYPES
from cubeplug.core.tune import tuner_for

mm = importlib.import_module("cubeplug.std.matmul")  # the module (``std.matmul`` is the function)


def all_plans(variants: bool = True) -> dict[str, Any]:
    """std's candidates by name, then (``variants``) the bench-only ones: std's candidates with
    another staging of their tiles (``mm.STAGING_VARIANTS``, ``candidate@staging``), each paired
    with the candidate's hand twin, so that one run compares the staging std uses with the others."""
    return {**mm.PLANS, **(mm.STAGING_VARIANTS if variants else {})}


#: The candidates ``--sources`` writes by default: the five float4 ones, tiled_32, the variants.
SOURCES = ("reg_4x4_vec", "reg_8x8_vec", "reg_8x8_vec_db", "reg_8x8_vec_db16", "reg_8x16_vec_db16",
           "tiled_32", *mm.STAGING_VARIANTS)


def write_sources(out: str, names: Any) -> None:
    """The full CUDA sources of candidates ``names`` (f32, as std launches them) and their hand
    twins, into ``out``."""
    os.makedirs(out, exist_ok=True)
    plans = all_plans()
    for name in names:
        plan = plans[name]
        # Every dtype, as the cuda backend declares (its capabilities' dtypes are DTYPES').
        spec = plan.kernel.specialize_for("c", frozenset(DTYPES), plan.cube, False, mm.comptime(plan, "f32"))
        texts = {"lang": cdialect.full_source(spec.kernel, spec.source, "cuda", fp16=True)}
        if name in hand_matmul.PLANS:
            kernel = hand_matmul.PLANS[name]().kernel
            texts["hand"] = cdialect.full_source(kernel, kernel.sources["c"], "cuda", fp16=True)
        for what, text in texts.items():
            # '-' for '@': names of letters, digits, '.', '_' and '-' copy anywhere.
            path = os.path.join(out, f"{name.replace('@', '-')}.{what}.cu")
            with open(path, "w") as f:
                f.write(text)
            print(path)


def _cupy() -> Any:
    """CuPy when it and a CUDA device are present, else None."""
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
        return cupy
    except Exception:
        return None


def candidates(
    client: Any, size: int, n: int, rounds: int, variants: bool = False, only: set[str] | None = None
) -> dict[str, Any]:
    """Every f32 candidate: lang against hand at size^3 (a multiple of 128: every candidate runs)."""
    rng = np.random.default_rng(20)
    a = rng.standard_normal((size, size)).astype(np.float32)
    b = rng.standard_normal((size, size)).astype(np.float32)
    ha, hb = client.create(a), client.create(b)
    rows = sorted({0, size // 3, size - 1})
    want = a[rows].astype(np.float64) @ b.astype(np.float64)
    tol = 1e-4 * np.sqrt(size) * (1 + float(np.max(np.abs(want))))
    out: dict[str, Any] = {}
    key = std.MATMUL.key(client, "full", ha, hb, size, size, size, None, "f32")
    for name, plan in all_plans(variants).items():
        if only is not None and name not in only:
            continue
        if not plan.fits(client, key):  # e.g. 32 KiB of shared memory where WebGPU gives 16
            out[name] = {"skipped": f"needs {4 * plan.shared} B of shared memory (float4: {plan.vec})"}
            continue
        c_lang, c_hand = client.empty(4 * size * size), client.empty(4 * size * size)

        def lang(plan: Any = plan, c: Any = c_lang) -> None:
            mm.launch(client, plan, ha, hb, c, size, size, size, "f32")

        # A new candidate (no hand twin) is paired with the hand kernel it improves on.
        base = name.split("@")[0]
        twin = base if base in hand_matmul.PLANS else ("reg_8x8_vec" if plan.vec else "reg_8x8")

        def hand(twin: str = twin, c: Any = c_hand) -> None:
            hand_matmul.launch(client, twin, ha, hb, c, size, size, size)

        lang()
        hand()
        for what, c in (("lang", c_lang), ("hand", c_hand)):
            got = client.to_numpy(c, "f32", (size, size))[rows]
            err = float(np.max(np.abs(got - want)))
            if not err <= tol:
                raise AssertionError(f"{name} {what}: max abs error {err:.3g} above {tol:.3g}")
        reps = n if name != "naive" else max(1, n // 4)
        fig = paired(repeat(lang), repeat(hand), reps, rounds, drain=client.sync)
        flops = 2.0 * size**3
        out[name] = {
            "hand": twin, **versus(fig),
            "lang_tflops": round(flops / fig["a_us"] / 1e6, 3),
            "hand_tflops": round(flops / fig["b_us"] / 1e6, 3),
        }
        print(client.backend, name, json.dumps(out[name]), flush=True)
    return out


def autotuned(client: Any, size: int, dtype: str, n: int, rounds: int, cupy: Any) -> dict[str, Any]:
    """std.matmul (autotuned) at size^3 in ``dtype``, with cupy.matmul paired where present."""
    npdt = np.dtype(np.float16 if dtype == "f16" else np.float32)
    rng = np.random.default_rng(4)
    a = (rng.random((size, size)) - 0.5).astype(npdt)
    b = (rng.random((size, size)) - 0.5).astype(npdt)
    ha, hb = client.create(a), client.create(b)
    hc = client.empty(npdt.itemsize * size * size)
    t0 = time.perf_counter()
    std.matmul(client, ha, hb, size, size, size, out=hc, dtype=dtype)
    client.sync()
    tune_seconds = time.perf_counter() - t0
    rows = sorted({0, size // 2, size - 1})
    want = mm.host_matmul(a[rows], b)
    got = client.to_numpy(hc, dtype, (size, size))[rows]
    error = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
    tuner = tuner_for(client, std.MATMUL)
    key = std.MATMUL.key(client, tuner.level, ha, hb, size, size, size, hc, dtype)
    result = tuner.results.get(key)
    chosen = result.fastest if result else None

    def ours() -> None:
        std.matmul(client, ha, hb, size, size, size, out=hc, dtype=dtype)

    flops = 2.0 * size**3
    row: dict[str, Any] = {"m": size, "dtype": dtype, "key": str(key), "chosen": chosen,
                           "tune_seconds": round(tune_seconds, 3), "max_abs_error": error}
    if cupy is not None:
        da, db = cupy.asarray(a), cupy.asarray(b)
        dc = cupy.empty((size, size), npdt)
        cupy.matmul(da, db, out=dc)

        def drain() -> None:
            client.sync()
            cupy.cuda.Device().synchronize()

        fig = paired(repeat(ours), repeat(lambda: cupy.matmul(da, db, out=dc)), n, rounds, drain=drain)
        ratio = fig["ratio_median"]
        row.update({
            "cubeplug_tflops": round(flops / fig["a_us"] / 1e6, 3),
            "cupy_tflops": round(flops / fig["b_us"] / 1e6, 3),
            "ratio_tflops_cubeplug_over_cupy": round(1 / ratio, 3) if ratio else None,
            "time_ratio_iqr": fig["ratio_iqr"], "baseline": "cupy.matmul (cuBLAS)",
        })  # fmt: skip
    else:
        t0 = time.perf_counter()
        repeat(ours)(n)
        client.sync()
        row["cubeplug_tflops"] = round(flops * n / (time.perf_counter() - t0) / 1e12, 4)
        row["baseline"] = None
    print(client.backend, "autotuned", json.dumps(row), flush=True)
    return row


def measure(backend: str, args: argparse.Namespace, cupy: Any) -> dict[str, Any]:
    client = cubeplug.client(backend)
    result: dict[str, Any] = {"device": str(client.device)}
    try:
        only = set(args.only.split(",")) if args.only else None
        result["candidates"] = candidates(client, args.size, args.n, args.rounds, args.variants, only)
        if args.no_autotuned:
            return result
        result["autotuned"] = [autotuned(client, args.big, "f32", args.n, args.rounds, cupy)]
        if "f16" in client.capabilities.dtypes:
            result["autotuned"].append(autotuned(client, args.big, "f16", args.n, args.rounds, cupy))
        else:
            result["f16"] = f"the {backend} device does not declare f16"
    finally:
        client.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", help="the JSON file to write")
    parser.add_argument("--sources", metavar="DIR", help="write the CUDA sources into DIR; run nothing")
    parser.add_argument("--backends", default="cuda,opencl,webgpu")
    parser.add_argument("--quick", action="store_true", help="small problems (a CPU-side device)")
    parser.add_argument("--size", type=int, default=None, help="candidates at size^3 (2048; --quick 128)")
    parser.add_argument("--big", type=int, default=None, help="autotuned at big^3 (4096; --quick 256)")
    parser.add_argument("--n", type=int, default=None, help="launches per loop (default 10, --quick 2)")
    parser.add_argument("--rounds", type=int, default=None, help="paired rounds (default 20, --quick 5)")
    parser.add_argument("--variants", action="store_true",
                        help="also the bench-only stagings of A (std.matmul's STAGING_VARIANTS), each "
                             "against its hand twin")
    parser.add_argument("--only", default=None,
                        help="comma-separated candidate names (default: all, --variants too)")
    parser.add_argument("--no-autotuned", action="store_true", help="the candidates alone (no autotuned)")
    args = parser.parse_args()
    if args.sources:
        write_sources(args.sources, args.only.split(",") if args.only else SOURCES)
        return
    if not args.out:
        parser.error("the JSON file to write is needed (or --sources DIR)")
    args.size = args.size or (128 if args.quick else 2048)
    args.big = args.big or (256 if args.quick else 4096)
    args.n = args.n or (2 if args.quick else 10)
    args.rounds = args.rounds or (5 if args.quick else 20)
    # A fresh autotune cache: the figure is what tuning picks now, not a choice remembered from before.
    os.environ["CUBEPLUG_CACHE_DIR"] = tempfile.mkdtemp(prefix="cubeplug-bench-matmul-")
    cupy = _cupy()
    results = run_header(
        size=args.size, big=args.big, launches_per_loop=args.n, rounds=args.rounds,
        cupy=cupy.__version__ if cupy is not None else None,
    )
    each_backend(args.backends, lambda backend: measure(backend, args, cupy), results, args.out)

if __name__ == "__main__":
    main()
