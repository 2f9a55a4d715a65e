"""The lang-written reduce_sum candidates, fill, copy and axpy against the hand-written kernels they
replaced (``bench/reference/``), and against CuPy on CUDA (issue 20).

Per backend, paired alternating rounds (bench/paired.py: ``--iters`` calls, then a sync, per side
per round; the median of the per-round time ratios and its interquartile range):

* ``candidates``: each lang candidate of ``std.REDUCE_SUM`` against its hand-written twin on the
  same ``--n`` f32 elements (``time_ratio`` = lang / hand; ``speed`` = hand / lang, the issue's goal
  >= 0.97). Twins: the same name, except that the hand ``tree_x16`` and ``atomic_x16`` (whose loops
  kept four loads in flight) are the lang ``tree_x16_ilp4`` and ``atomic_x16_ilp4``. Every result
  is checked against numpy first.
* ``reduce_sum``: the public, autotuned ``std.reduce_sum`` (the candidate it chose is reported)
  against the hand set's best candidate (the fastest in the rows above) and, on CUDA, against
  ``cupy.sum`` of the same data (goal <= 1.05x its time).
* ``elementwise``: ``std.fill``, ``std.copy``, ``std.axpy`` (f32, aligned: the vector kernels) of
  ``--elements`` elements against the hand-written ones and, on CUDA, against CuPy (``x.fill``,
  ``cupy.copyto``, an ``ElementwiseKernel`` ``y += a * x``), with GB/s (fill writes 4 B per
  element, copy moves 8 B, axpy 12 B). ``vs_hand`` is host time (the calls, then a sync), which
  is what a caller waits for; where the client has ``device_timing``, ``vs_hand_device`` pairs the
  same loops on the device's clock (``client.profile`` around them), the kernels' own time: on
  WebGPU the scheduler encodes up to 64 launches before it submits, so host time there adds the
  host's cost per call to the device's.

    PYTHONPATH=. python bench/bench_reduce_vs_hand.py OUT.json [--backends cuda,opencl,webgpu] [--quick]
        [--only reduce|elementwise]

``--quick`` (1M elements, few rounds) runs here on PoCL and lavapipe: a proof that the script works,
not figures to tune on. Without it: 256M f32 (1 GiB) for the reduction, 64M for the elementwise ops.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from paired import each_backend, paired, repeat, run_header, versus
from reference import hand_elementwise, hand_reduce

import cubeplug
from cubeplug import std
from cubeplug.core.tune import tuner_for

#: Lang candidate -> its hand-written twin.
TWINS = {
    "tree": "tree", "tree_x16_ilp4": "tree_x16", "vec4": "vec4", "vec4_x4": "vec4_x4",
    "vec4_x16": "vec4_x16", "vec4_x64": "vec4_x64", "vec4_resident": "vec4_resident",
    "atomic_x16_ilp4": "atomic_x16", "atomic_vec4_x16": "atomic_vec4_x16",
}


class Cupy:
    """The CuPy side on CUDA (None elsewhere): the same data, its sync."""

    def __init__(self, backend: str) -> None:
        self.cp: Any = None
        if backend == "cuda":
            import cupy

            self.cp = cupy
            self.axpy_kernel = cupy.ElementwiseKernel("T x, T a", "T y", "y += a * x", "cubeplug_bench_axpy")

    def sync(self) -> None:
        if self.cp is not None:
            self.cp.cuda.Device().synchronize()


def _value(client: Any, h: Any) -> float:
    return float(client.to_numpy(h, "f32")[0])


def reduce_rows(client: Any, raw: Cupy, n: int, iters: int, rounds: int) -> dict[str, Any]:
    """Every lang candidate against its hand twin; reduce_sum against the hand best and cupy.sum."""
    host = np.random.default_rng(20).random(n, dtype=np.float32) - 0.25
    want = float(host.sum(dtype=np.float64))
    tol = 1e-4 * float(np.abs(host).sum(dtype=np.float64)) + 1e-6
    x = client.create(host)

    def drain() -> None:
        client.sync()
        raw.sync()

    rows: dict[str, Any] = {}
    key = std.REDUCE_SUM.key(client, "full", x, n)
    hand_key = hand_reduce.REDUCE_SUM.key(client, "full", x, n)
    for lang_name, hand_name in TWINS.items():
        lang, hand = std.REDUCE_SUM.by_name[lang_name], hand_reduce.REDUCE_SUM.by_name[hand_name]
        if not (lang.can_run(client, key) and hand.can_run(client, hand_key)):
            continue
        for who, t in (("lang", lang), ("hand", hand)):
            got = _value(client, t.fn(client, x, n))
            if abs(got - want) > tol:
                raise AssertionError(f"{who} {t.name}: sum {got}, numpy {want} (tolerance {tol:.3g})")
        fig = paired(repeat(lambda t=lang: t.fn(client, x, n)), repeat(lambda t=hand: t.fn(client, x, n)),
                     iters, rounds, drain=drain)
        rows[lang_name] = {"hand": hand_name, **versus(fig, "lang", "hand")}
        print(client.backend, "candidate", lang_name, json.dumps(rows[lang_name]), flush=True)

    out: dict[str, Any] = {"n": n, "candidates": rows}
    got = _value(client, std.reduce_sum(client, x, n))
    if abs(got - want) > tol:
        raise AssertionError(f"std.reduce_sum: {got}, numpy {want}")
    tuner = tuner_for(client, std.REDUCE_SUM)
    chosen = tuner.results.get(std.REDUCE_SUM.key(client, tuner.level, x, n))
    out["chosen"] = getattr(chosen, "fastest", None)
    if rows:
        best = min(rows, key=lambda name: rows[name]["hand_us"])
        hand_best = hand_reduce.REDUCE_SUM.by_name[TWINS[best]]
        fig = paired(repeat(lambda: std.reduce_sum(client, x, n)),
                     repeat(lambda: hand_best.fn(client, x, n)), iters, rounds, drain=drain)
        out["vs_hand_best"] = {"hand": hand_best.name, **versus(fig, "lang", "hand")}
        print(client.backend, "reduce_sum vs hand", json.dumps(out["vs_hand_best"]), flush=True)
    if raw.cp is not None:
        xc = raw.cp.asarray(host)
        if abs(float(raw.cp.sum(xc)) - want) > tol:
            raise AssertionError("cupy.sum disagrees with numpy")
        fig = paired(repeat(lambda: std.reduce_sum(client, x, n)), repeat(lambda: raw.cp.sum(xc)),
                     iters, rounds, drain=drain)
        out["vs_cupy_sum"] = versus(fig, "lang", "cupy")
        out["vs_cupy_sum"]["goal"] = "time_ratio <= 1.05"
        print(client.backend, "reduce_sum vs cupy.sum", json.dumps(out["vs_cupy_sum"]), flush=True)
    return out


def elementwise_rows(client: Any, raw: Cupy, n: int, iters: int, rounds: int) -> dict[str, Any]:
    """fill, copy, axpy (f32, aligned) against the hand-written kernels and CuPy, with GB/s."""
    rng = np.random.default_rng(21)
    hx, hy = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    x, y, z = client.create(hx), client.create(hy), client.empty(4 * n)
    fill_hand = hand_elementwise.fill_launcher("f32")
    copy_hand, axpy_hand = hand_elementwise.copy_launcher(), hand_elementwise.axpy_launcher()
    lang: dict[str, Callable[[], Any]] = {
        "fill": lambda: std.fill(client, z, n, 1.5),
        "copy": lambda: std.copy(client, x, n, out=z),
        "axpy": lambda: std.axpy(client, 0.5, x, y, n),
    }
    hand: dict[str, Callable[[], Any]] = {
        "fill": lambda: fill_hand(client, (z,), (np.float32(1.5),), n),
        "copy": lambda: copy_hand(client, (x, z), (), n),
        "axpy": lambda: axpy_hand(client, (x, y), (np.float32(0.5),), n),
    }
    moved = {"fill": 4 * n, "copy": 8 * n, "axpy": 12 * n}
    # Correctness first (axpy on a scratch copy, then y is restored).
    std.fill(client, z, n, 1.5)
    assert (client.to_numpy(z, "f32") == 1.5).all(), "std.fill"
    std.copy(client, x, n, out=z)
    assert (client.to_numpy(z, "f32") == hx).all(), "std.copy"
    std.axpy(client, 0.5, x, y, n)
    np.testing.assert_allclose(client.to_numpy(y, "f32"), hy + np.float32(0.5) * hx, rtol=1e-5, atol=1e-6)

    def drain() -> None:
        client.sync()
        raw.sync()

    rows: dict[str, Any] = {"n": n}
    cupy_ops: dict[str, Callable[[], Any]] = {}
    if raw.cp is not None:
        cp = raw.cp
        cx, cy, cz = cp.asarray(hx), cp.asarray(hy), cp.empty(n, cp.float32)
        a = np.float32(0.5)
        cupy_ops = {
            "fill": lambda: cz.fill(1.5),
            "copy": lambda: cp.copyto(cz, cx),
            "axpy": lambda: raw.axpy_kernel(cx, a, cy),
        }
    for op in ("fill", "copy", "axpy"):
        fig = paired(repeat(lang[op]), repeat(hand[op]), iters, rounds, drain=drain)
        row = {"vs_hand": versus(fig, "lang", "hand")}
        row["lang_gbps"] = round(moved[op] / (fig["a_us"] * 1e3), 1) if fig["a_us"] else None
        row["hand_gbps"] = round(moved[op] / (fig["b_us"] * 1e3), 1) if fig["b_us"] else None
        if client.capabilities.device_timing:
            fig = paired(repeat(lang[op]), repeat(hand[op]), iters, rounds, device=client)
            row["vs_hand_device"] = versus(fig, "lang", "hand")
            row["lang_device_gbps"] = round(moved[op] / (fig["a_us"] * 1e3), 1) if fig["a_us"] else None
            row["hand_device_gbps"] = round(moved[op] / (fig["b_us"] * 1e3), 1) if fig["b_us"] else None
        if op in cupy_ops:
            fig = paired(repeat(lang[op]), repeat(cupy_ops[op]), iters, rounds, drain=drain)
            row["vs_cupy"] = versus(fig, "lang", "cupy")
            row["cupy_gbps"] = round(moved[op] / (fig["b_us"] * 1e3), 1) if fig["b_us"] else None
        rows[op] = row
        print(client.backend, op, json.dumps(row), flush=True)
    return rows


def measure(backend: str, sizes: dict[str, int], iters: int, rounds: int,
            parts: tuple[str, ...] = ("reduce", "elementwise")) -> dict[str, Any]:
    client = cubeplug.client(backend)
    raw = Cupy(backend)
    result: dict[str, Any] = {"device": str(client.device)}
    try:
        if "reduce" in parts:
            result["reduce"] = reduce_rows(client, raw, sizes["reduce"], iters, rounds)
        if "elementwise" in parts:
            result["elementwise"] = elementwise_rows(client, raw, sizes["elementwise"], iters, rounds)
    finally:
        client.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the JSON file to write")
    parser.add_argument("--backends", default="cuda,opencl,webgpu")
    parser.add_argument("--quick", action="store_true", help="1M elements, few rounds (a CPU-side device)")
    parser.add_argument("--iters", type=int, default=None,
                        help="calls per side per round (default 20, --quick 3)")
    parser.add_argument("--rounds", type=int, default=None, help="paired rounds (default 15, --quick 4)")
    parser.add_argument("--only", choices=("reduce", "elementwise"), default=None,
                        help="one part only (default both)")
    args = parser.parse_args()
    parts = (args.only,) if args.only else ("reduce", "elementwise")
    if args.quick:
        sizes = {"reduce": 1 << 20, "elementwise": 1 << 20}
        iters, rounds = args.iters or 3, args.rounds or 4
    else:
        sizes = {"reduce": 1 << 28, "elementwise": 1 << 26}
        iters, rounds = args.iters or 20, args.rounds or 15
    results = run_header(sizes=sizes, iters=iters, rounds=rounds, parts=parts)
    each_backend(args.backends, lambda b: measure(b, sizes, iters, rounds, parts), results, args.out)

if __name__ == "__main__":
    main()
