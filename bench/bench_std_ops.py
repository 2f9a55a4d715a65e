"""The lang-written std ops (issue 20) against the raw library, paired, per backend.

Ops (f32): ``reduce`` sum and max, ``argmax``, inclusive ``scan`` (sum), ``transpose``. Each
sample runs the op once and waits (``client.sync()``); figures are medians over paired rounds
(each round samples every side once, in an order rotated round by round:
cubeplug/bench/paired.py), with the spread of the per-round ratios ``ours / raw`` (time; < 1 is
faster). Raw side: CuPy on ``cuda`` (``cupy.sum``, ``cupy.max``, ``cupy.argmax``, ``cupy.cumsum``,
``cupy.ascontiguousarray(x.T)``), numpy on ``cpu``; ``opencl`` and ``webgpu`` have none (the
issue's yardstick there is the CUDA figure of the same GPU: with ``--backend cuda`` in the same
run, their rows get ``ours_over_cuda`` and ``ours_over_cupy``). ``transpose`` also
reports the device-to-device copy of the same bytes by the raw library (``copy_us``) and
``copy / transpose`` (the issue's goal: >= 0.85).

Sizes: reduce and scan 256M elements, transpose 16k x 16k; ``--quick``: 1M and 1k x 1k.

    python bench/bench_std_ops.py --backend cuda [--backend opencl ...] [--quick] [--rounds 9] [--json FILE]
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import cubeplug
from cubeplug import std
from cubeplug.bench.paired import paired_set
from cubeplug.bench.timing import Figure


def timed(run: Callable[[], Any], wait: Callable[[], None]) -> Callable[[], Figure]:
    def sample() -> Figure:
        t0 = time.perf_counter()
        run()
        wait()
        s = time.perf_counter() - t0
        return Figure(s, s)

    return sample


class Raw:
    """The raw library's ops on the same data: CuPy on cuda, numpy on cpu."""

    def __init__(self, backend: str, x: np.ndarray, m: np.ndarray) -> None:
        if backend == "cuda":
            import cupy as cp

            self.xp: Any = cp
            self.wait: Callable[[], None] = cp.cuda.Device().synchronize
            self.x, self.m = cp.asarray(x), cp.asarray(m)
        else:
            self.xp, self.wait, self.x, self.m = np, (lambda: None), x, m
        self.copy_out = self.xp.empty_like(self.m)

    def ops(self) -> dict[str, Callable[[], Any]]:
        xp = self.xp
        return {
            "reduce_sum": lambda: xp.sum(self.x),
            "reduce_max": lambda: xp.max(self.x),
            "argmax": lambda: xp.argmax(self.x),
            "scan": lambda: xp.cumsum(self.x),
            "transpose": lambda: xp.ascontiguousarray(self.m.T),
        }

    def copy(self) -> None:
        self.copy_out[...] = self.m


def measure(selector: str, n: int, side: int, rounds: int) -> list[dict[str, Any]]:
    client = cubeplug.client(selector)
    backend = client.backend
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n).astype(np.float32)
    m = rng.standard_normal((side, side)).astype(np.float32)
    hx, hm = client.create(x), client.create(m)
    ours: dict[str, Callable[[], Any]] = {
        "reduce_sum": lambda: std.reduce(client, hx, n, "sum"),
        "reduce_max": lambda: std.reduce(client, hx, n, "max"),
        "argmax": lambda: std.argmax(client, hx, n),
        "scan": lambda: std.scan(client, hx, n),
        "transpose": lambda: std.transpose(client, hm, side, side),
    }
    raw = Raw(backend, x, m) if backend in ("cuda", "cpu") else None
    theirs = raw.ops() if raw is not None else {}
    sync = client.sync
    for run in ours.values():  # compile and autotune outside the samples
        run()
    sync()
    results = []
    for op, run in ours.items():
        raw_sample = timed(theirs[op], raw.wait) if raw is not None else None
        if raw_sample is not None:
            raw_sample()
        pairs = paired_set({op: timed(run, sync)}, raw_sample, rounds)
        pair = pairs[op]
        moved = (2 if op in ("scan", "transpose") else 1) * (side * side if op == "transpose" else n) * 4
        row: dict[str, Any] = {
            "backend": selector, "device": client.device.name, "op": op, "dtype": "f32",
            "n": side * side if op == "transpose" else n, "rounds": rounds,
            "ours_us": round(pair.ours_figure.median * 1e6, 2),
            "ours_gbps": round(moved / pair.ours_figure.median / 1e9, 2),
        }
        theirs_fig = pair.theirs_figure
        if theirs_fig is not None:
            row["raw"] = "cupy" if backend == "cuda" else "numpy"
            row["raw_us"] = round(theirs_fig.median * 1e6, 2)
            row["ours_over_raw"] = pair.ratio()
            row["ours_over_raw_spread"] = pair.spread()
        if op == "transpose" and raw is not None:
            copy = paired_set({"t": timed(run, sync)}, timed(raw.copy, raw.wait), rounds)["t"]
            copy_fig = copy.theirs_figure
            if copy_fig is not None:
                row["copy_us"] = round(copy_fig.median * 1e6, 2)
                row["copy_over_transpose"] = round(copy_fig.median / copy.ours_figure.median, 3)
        print(json.dumps(row), flush=True)
        results.append(row)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", action="append", required=True, help="selector; repeat for several")
    ap.add_argument("--quick", action="store_true", help="1M elements, 1k x 1k transpose")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    n, side = ((1 << 20), 1024) if a.quick else ((1 << 28), 16384)
    results = []
    for selector in a.backend:
        results += measure(selector, n, side, a.rounds)
    # The yardstick for OpenCL and WebGPU: the CUDA figures of the same run (same GPU).
    cuda = {r["op"]: r for r in results if r["backend"].split(":")[0] == "cuda"}
    for r in results:
        ref = cuda.get(r["op"])
        if ref is not None and r is not ref:
            r["ours_over_cuda"] = round(r["ours_us"] / ref["ours_us"], 3)
            if "raw_us" in ref:
                r["ours_over_cupy"] = round(r["ours_us"] / ref["raw_us"], 3)
            print(json.dumps({k: r[k] for k in ("backend", "op", "ours_over_cuda")}), flush=True)
    if a.json:
        meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "host": platform.node(), "python": platform.python_version(), "quick": a.quick}
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
