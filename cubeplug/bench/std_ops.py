"""The ``std_ops`` section of ``cubeplug bench``: every std op beside the array library, per backend.

Each row (:mod:`cubeplug.bench.std_cases`) is run once and checked against NumPy (a wrong result is
the row's error, never a figure), calibrated, then measured paired against the array library in
alternation (:mod:`cubeplug.bench.paired`): CuPy on ``cuda`` (CUDA events on both sides), NumPy on
``cpu``. OpenCL and WebGPU have no library for these ops: their yardstick is the CUDA figure of the
same GPU in the same run (:func:`attach_yardsticks`, matched by device name), and a row without
one says so (``yardstick_note``) instead of borrowing another figure. ``transpose`` also reports
the backend library's own device-to-device copy of the same bytes (the issue's goal: >= 85 %).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Mapping
from math import isqrt
from typing import Any

from cubeplug.bench.paired import paired
from cubeplug.bench.raw_arrays import ArrayLibrary
from cubeplug.bench.std_cases import OPS, Case, Inputs, cases
from cubeplug.bench.suite import BackendBench
from cubeplug.bench.timing import Figure
from cubeplug.core.errors import ConfigError
from cubeplug.registry.selector import parse_selector

#: Elements of the vector rows and side of the matrix rows, by device kind and mode.
SIZES = {
    ("gpu", False): (256 << 20, 16384),
    ("gpu", True): (16 << 20, 4096),
    ("cpu", False): (16 << 20, 4096),
    ("cpu", True): (1 << 20, 1024),
}


def sizes(gpu: bool, quick: bool, max_alloc_bytes: int, n: int | None = None) -> tuple[int, int]:
    """``(n, side)``: the vector length and the matrix side, each buffer within the device's largest
    allocation; ``n`` given sets both (``side = isqrt(n)``)."""
    default_n, default_side = SIZES[("gpu" if gpu else "cpu", quick)]
    n, side = (n, isqrt(n)) if n else (default_n, default_side)
    words = max(1, max_alloc_bytes // 4)
    return min(n, words), min(side, isqrt(words))


def parse_ops(text: str) -> tuple[str, ...]:
    """``"fill,scan"`` as ops of :data:`OPS`; an unknown name raises ``ValueError`` naming the known ones."""
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [name for name in names if name not in OPS]
    if unknown or not names:
        raise ValueError(
            f"unknown op(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(OPS)}"
        )
    return names


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 5)


def _rate(case: Case, seconds: float | None) -> float | None:
    if seconds is None or seconds <= 0:
        return None
    # Four significant digits, not four decimals: a small matmul on the cpu backend's interpreter
    # runs at about 1e-5 TFLOP/s, which four decimals would report as 0.
    return float(f"{case.work / seconds / (1e12 if case.unit == 'TFLOP/s' else 1e9):.4g}")


def _rate_key(case: Case) -> str:
    return "tflops" if case.unit == "TFLOP/s" else "gbps"


def measure(
    bench: BackendBench,
    arrays: ArrayLibrary | None,
    case: Case,
    no_library: str | None = None,
    device_pass: bool = False,
) -> dict[str, Any]:
    """One row: checked first result, then our time paired with the library's (when there is one;
    ``no_library`` says why there is none); ``device_pass``: a backend timed on the host whose device
    has timers also times the loop on the device, for a CUDA yardstick of the same run
    (:func:`cuda_in_run`)."""
    row: dict[str, Any] = {
        "op": case.op,
        "row": case.row,
        "dtype": case.dtype,
        "shape": list(case.shape),
        "unit": case.unit,
    }
    if case.skipped:
        row["skipped"] = case.skipped
        return row
    client = bench.client
    t0 = time.perf_counter()
    first = case.ours()
    client.sync()
    row["first_call_s"] = round(time.perf_counter() - t0, 3)  # compiling and autotuning included
    problem = case.check(first)
    if problem:
        raise AssertionError(f"{case.row} {case.dtype} {list(case.shape)} differs from NumPy: {problem}")
    del first
    iters = bench.calibrate(case.ours)
    theirs = case.theirs
    raw_side = (lambda: arrays.time(theirs, iters, 1)) if arrays is not None and theirs is not None else None
    pair = paired(lambda: bench.ours(case.ours, iters, 1), raw_side, bench.plan.repeats)
    key = _rate_key(case)
    ours = pair.ours_figure
    row["cubeplug_ms"] = _ms(ours.median)
    row["cubeplug_rounds_ms"] = [_ms(s) for s in pair.ours]
    row[f"cubeplug_{key}"] = _rate(case, ours.median)
    base = pair.theirs_figure
    if base is None:
        row["raw_call"] = None
        row["raw_note"] = (
            (no_library or f"no array library for the std ops on {client.backend}")
            if arrays is None
            else "the library has no such op"
        )
    else:
        row["raw_call"] = case.raw_call
        row["raw_ms"] = _ms(base.median)
        row[f"raw_{key}"] = _rate(case, base.median)
        row["ratio_time_cubeplug_over_raw"] = pair.ratio()
        row["spread_ratio_time_cubeplug_over_raw"] = pair.spread()
    if device_pass and not bench.device_timing and client.capabilities.device_timing:
        # Host time (above) is what back-to-back calls cost, submission included; a backend timed on
        # the host against a device-timed yardstick (WebGPU vs CUDA) also gets the device's own time
        # of the same loop, so that the kernels compare like with like. Only then: the pass doubles
        # the row's time, and without a CUDA figure no ratio reads it.
        device = bench.ours(case.ours, iters, device=True)
        row["cubeplug_device_ms"] = _ms(device.median)
        row["cubeplug_device_best_ms"] = _ms(device.best)
    if case.op == "transpose" and bench.raw is not None:
        # The bandwidth goal of a transpose: the library's device copy of the same bytes.
        peak: Figure = bench.raw.copy(int(case.work) // 2, iters, bench.plan.repeats)
        row["copy_peak_gbps"] = round(case.work / peak.median / 1e9, 4) if peak.median > 0 else None
        mine = row["cubeplug_gbps"]
        row["ratio_gbps_over_copy_peak"] = (
            round(mine / row["copy_peak_gbps"], 4) if mine and row["copy_peak_gbps"] else None
        )
    return row


def bench_ops(
    bench: BackendBench,
    arrays: ArrayLibrary | None,
    ops: tuple[str, ...],
    n: int,
    side: int,
    progress: Any = None,
    no_library: str | None = None,
    device_pass: bool = False,
) -> dict[str, Any]:
    """The ``std_ops`` section of one backend: the rows of ``ops`` (a row that fails is its error);
    ``no_library``: why ``arrays`` is None, told in every row; ``device_pass``: as :func:`measure`'s."""
    client = bench.client
    inputs = Inputs(client, arrays, n, side, bench.plan.matmul_n)
    out: dict[str, Any] = {
        "n": n,
        "side": side,
        "matmul_n": bench.plan.matmul_n,
        "library": arrays.name if arrays is not None else None,
        "rows": [],
    }
    try:
        for op in ops:
            if progress is not None:
                progress(op)
            try:
                built = cases(inputs, op)
            except Exception as exc:
                out["rows"].append({"op": op, "row": op, "error": f"{type(exc).__name__}: {exc}"})
                continue
            for case in built:
                try:
                    out["rows"].append(measure(bench, arrays, case, no_library, device_pass))
                except Exception as exc:
                    out["rows"].append(
                        {
                            "op": op,
                            "row": case.row,
                            "dtype": case.dtype,
                            "error": f"{type(exc).__name__}: {exc}",
                        }
                    )
    finally:
        inputs.close()
        if arrays is not None:
            arrays.close()
        client.memory_cleanup()
    return out


def cuda_in_run(selectors: Iterable[str | None]) -> bool:
    """Whether the run benches a ``cuda`` backend, the yardstick of the others' device times
    (:func:`attach_yardsticks`); None (auto-selection) is the run's only backend, no yardstick."""
    for selector in selectors:
        if selector is None:
            continue
        try:
            if parse_selector(selector).backend == "cuda":
                return True
        except ConfigError:  # the bench reports a bad selector as that backend's error
            continue
    return False


def _same_gpu(a: str, b: str) -> bool:
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


def attach_yardsticks(backends: Mapping[str, Any]) -> None:
    """Give every row without a library figure the CUDA figure of the same GPU, when this run benched
    CUDA on a device of the same name (the same host: one run); else a ``yardstick_note`` saying why
    there is none. The ratio is unpaired (the two backends ran one after the other): its spread is
    that of our rounds over the CUDA median."""
    cuda = [
        (name, r)
        for name, r in backends.items()
        if isinstance(r, Mapping)
        and r.get("device", {}).get("backend") == "cuda"
        and isinstance(r.get("std_ops"), Mapping)
    ]
    for result in backends.values():
        section = result.get("std_ops") if isinstance(result, Mapping) else None
        if not isinstance(section, Mapping) or result.get("device", {}).get("backend") == "cuda":
            continue
        device = str(result["device"].get("name", "?"))
        ref = next(((n, r) for n, r in cuda if _same_gpu(str(r["device"].get("name", "")), device)), None)
        for row in section["rows"]:
            if "cubeplug_ms" not in row or row.get("raw_ms") is not None:
                continue
            if ref is None:
                row["yardstick"] = None
                row["yardstick_note"] = (
                    f"no yardstick: this run benched no cuda device named {device!r} "
                    "(bench cuda in the same run on this GPU for one)"
                )
                continue
            name, other = ref
            match = next(
                (
                    r
                    for r in other["std_ops"]["rows"]
                    if r.get("row") == row["row"]
                    and r.get("dtype") == row["dtype"]
                    and r.get("shape") == row["shape"]
                    and "cubeplug_ms" in r
                ),
                None,
            )
            if match is None:
                row["yardstick"] = None
                row["yardstick_note"] = f"no yardstick: {name} has no figure of this row at this size"
                continue
            cuda_ms = float(match["cubeplug_ms"])
            cuda_timing = other.get("timing", {}).get("cubeplug")
            ratios = sorted(ms / cuda_ms for ms in row["cubeplug_rounds_ms"])
            q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive") if ratios[1:] else ratios * 3
            row["yardstick"] = {
                "backend": name,
                "device": device,
                "match": "same device name, same run (same host)",
                "cuda_ms": cuda_ms,
                "ratio_time_over_cuda": round(float(row["cubeplug_ms"]) / cuda_ms, 4),
                "spread_ratio_time_over_cuda": {
                    "iqr": [round(q1, 4), round(q3, 4)],
                    "min": round(ratios[0], 4),
                    "max": round(ratios[-1], 4),
                    "rounds": len(ratios),
                    "paired": False,
                },
                "cuda_timing": cuda_timing,
                "ratio_device_time_over_cuda": (
                    round(float(row["cubeplug_device_ms"]) / cuda_ms, 4)
                    if "cubeplug_device_ms" in row and cuda_timing == "device"
                    else None
                ),
                "raw_call": match.get("raw_call"),
                "raw_ms": match.get("raw_ms"),
                "ratio_time_over_raw": (
                    round(float(row["cubeplug_ms"]) / float(match["raw_ms"]), 4)
                    if match.get("raw_ms")
                    else None
                ),
            }
