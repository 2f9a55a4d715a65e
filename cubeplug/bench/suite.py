"""The figures of one backend: each cubeplug figure beside the raw library's, measured in the same run.

Every figure is paired (:mod:`cubeplug.bench.paired`): rounds of one cubeplug sample and one raw
sample in alternation; the ratio is the median of the per-round ratios, kept with its spread
(``spread_<ratio key>``: IQR, minimum, maximum, rounds). Launch and reserve figures are host times per
call (queued work drained inside the timing); transfers are host times of blocking copies; copies,
reduce_sum and matmul use device events on both sides when the raw library times on the device
(CuPy), else host time around a loop of calls followed by a sync on both sides.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from cubeplug.bench.clients import is_gpu
from cubeplug.bench.paired import Paired, paired, paired_set
from cubeplug.bench.raw import MIB, TINY_N, RawLibrary
from cubeplug.bench.timing import Figure, iterations, per_call, ratio
from cubeplug.core.kernel import Buffer, CubeCount, Kernel, Scalar
from cubeplug.core.tune import tuner_for
from cubeplug.std import MATMUL, REDUCE_SUM, matmul, reduce_sum
from cubeplug.std import copy as std_copy

_TINY_C = (
    "KERNEL bench_tiny(GLOBAL float* x, float a, unsigned int n) "
    "{ unsigned int i = ABSOLUTE_POS_X; if (i < n) x[i] = x[i] * a + 1.0f; }"
)
_TINY_WGSL = """\
@compute @workgroup_size(CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z)
fn bench_tiny(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < scalars.n) { x[gid.x] = x[gid.x] * scalars.a + 1.0; }
}
"""


def _tiny_py(launch: Any, x: np.ndarray, a: Any, n: Any) -> None:
    k = int(n)
    x[:k] = x[:k] * a + 1


#: The launch-overhead kernel: the same computation as every raw baseline's ``tiny``.
TINY = Kernel(
    "bench_tiny",
    [Buffer("x", "f32"), Scalar("a", "f32"), Scalar("n", "u32")],
    {"c": _TINY_C, "wgsl": _TINY_WGSL, "python": _tiny_py},
    cube_dim=TINY_N,
)


@dataclass(frozen=True)
class Plan:
    """How much to measure on one device."""

    launches: int
    allocs: int
    #: Rounds of every paired figure (one sample of each side a round).
    repeats: int
    sizes: tuple[int, ...]
    reduce_n: int
    matmul_n: int
    target_seconds: float


def plan_for(client: Any, quick: bool, reduce_n: int | None = None, matmul_n: int | None = None) -> Plan:
    """Sizes by device kind (GPU or CPU) and mode (quick or full), capped by the device's largest buffer."""
    gpu = is_gpu(client)
    max_bytes = int(client.capabilities.max_alloc_bytes) or (1 << 30)
    sizes: tuple[int, ...]
    if gpu:
        sizes = (MIB, 16 * MIB, 64 * MIB) if quick else (64 << 10, MIB, 16 * MIB, 256 * MIB)
        red, mm = (64 << 20, 2048) if quick else (256 << 20, 4096)
    else:
        sizes = (MIB, 16 * MIB) if quick else (64 << 10, MIB, 8 * MIB, 64 * MIB)
        # The CPU backend interprets std.matmul's lang kernels (numpy per statement, no BLAS):
        # tuning its 11 candidates and timing at 256^3 took 70 s here, at 128^3 about 10 s.
        red, mm = (4 << 20, 128) if quick else (16 << 20, 256)
    red = reduce_n or red
    red = min(red, (max_bytes // 4) // 1024 * 1024)
    return Plan(
        launches=1000 if quick else 2000,
        allocs=2000 if quick else 5000,
        repeats=5 if quick else 9,
        sizes=tuple(s for s in sizes if s <= max_bytes),
        reduce_n=red,
        matmul_n=matmul_n or mm,
        target_seconds=0.05 if quick else 0.1,
    )


def _gbps(nbytes: float, fig: Figure | None) -> float | None:
    return None if fig is None or fig.median <= 0 else round(nbytes / fig.median / 1e9, 3)


def _with_spread(out: dict[str, Any], key: str, pair: Paired, invert: bool = False) -> None:
    """``out[key]``: the paired ratio; ``out["spread_" + key]``: its spread over the rounds."""
    out[key] = pair.ratio(invert)
    out[f"spread_{key}"] = pair.spread(invert)


class BackendBench:
    """Measures one client against its raw baseline (raw may be None for third-party backends)."""

    def __init__(self, client: Any, raw: RawLibrary | None, plan: Plan) -> None:
        self.client = client
        self.raw = raw
        self.plan = plan
        self.device_timing = raw is not None and raw.timing == "device" and client.capabilities.device_timing
        self.timing = {
            "cubeplug": "device" if self.device_timing else "host",
            "raw": raw.timing if raw else "-",
        }

    # ------------------------------------------------------------------ timing
    def ours(
        self, op: Callable[[], object], iters: int, repeats: int | None = None, device: bool | None = None
    ) -> Figure:
        """Seconds per ``op()`` over ``iters`` calls: device events or host time ending in a sync.

        ``device`` overrides the bench's choice (``device_timing``); device time needs a client whose
        capabilities have ``device_timing``."""
        client = self.client
        repeats = repeats or self.plan.repeats
        on_device = self.device_timing if device is None else device

        def loop() -> None:
            for _ in range(iters):
                op()

        op()
        client.sync()
        samples = []
        for _ in range(repeats):
            if on_device:
                _, duration = client.profile(loop)
                samples.append(duration.seconds() / iters)
            else:
                t0 = time.perf_counter()
                loop()
                client.sync()
                samples.append((time.perf_counter() - t0) / iters)
        samples.sort()
        return Figure(samples[len(samples) // 2], samples[0])

    def calibrate(self, op: Callable[[], object]) -> int:
        """Iterations of ``op`` that take about the plan's target time (one warm run first)."""
        op()
        self.client.sync()
        t0 = time.perf_counter()
        op()
        self.client.sync()
        return iterations(time.perf_counter() - t0, self.plan.target_seconds, 1, 200)

    # ------------------------------------------------------------------ figures
    def _pair(self, ours: Callable[[], Figure], theirs: Callable[[], Figure | None] | None) -> Paired:
        return paired(ours, theirs, self.plan.repeats)

    def launch(self) -> dict[str, Any]:
        """Microseconds per launch of a tiny kernel: checked, unchecked, and the raw library's."""
        client, n, raw = self.client, self.plan.launches, self.raw
        x = client.create(np.zeros(TINY_N, np.float32))
        count = CubeCount(1)
        launch, unchecked = client.launch, client.launch_unchecked

        def checked_calls(k: int) -> None:
            for _ in range(k):
                launch(TINY, count, [x], [1.0, TINY_N])

        def unchecked_calls(k: int) -> None:
            for _ in range(k):
                unchecked(TINY, count, [x], [1.0, TINY_N])

        theirs = (lambda: raw.launch(n, 1)) if raw else None
        sides = {"checked": lambda: per_call(checked_calls, n, 1, client.sync),
                 "unchecked": lambda: per_call(unchecked_calls, n, 1, client.sync)}  # fmt: skip
        pairs = paired_set(sides, theirs, self.plan.repeats)
        checked, bare = pairs["checked"], pairs["unchecked"]
        base = checked.theirs_figure
        out: dict[str, Any] = {
            "launches": n,
            "cubeplug_launch_us": round(checked.ours_figure.us(), 3),
            "cubeplug_launch_unchecked_us": round(bare.ours_figure.us(), 3),
            "raw_launch_us": round(base.us(), 3) if base else None,
        }
        _with_spread(out, "ratio_launch_us_cubeplug_over_raw", checked)
        _with_spread(out, "ratio_launch_unchecked_us_cubeplug_over_raw", bare)
        return out

    def alloc(self) -> dict[str, Any]:
        """Microseconds per reserve + release of 1 MiB, against the raw library's allocator."""
        empty = self.client.empty

        def calls(k: int) -> None:
            for _ in range(k):
                h = empty(MIB)
                del h

        n, raw = self.plan.allocs, self.raw
        theirs = (lambda: raw.alloc(n, 1)) if raw else None
        pair = self._pair(lambda: per_call(calls, n, 1, lambda: None), theirs)
        base = pair.theirs_figure
        out: dict[str, Any] = {
            "bytes": MIB,
            "cubeplug_us": round(pair.ours_figure.us(), 3),
            "raw_us": round(base.us(), 3) if base else None,
            "raw_call": raw.alloc_call if raw else None,
        }
        _with_spread(out, "ratio_us_cubeplug_over_raw", pair)
        return out

    def transfers(self, size: int) -> dict[str, Any]:
        """Upload (pageable, staged), download and device copy bandwidth at one size, both sides
        (``copy``: ``client.copy``; ``copy_std_kernel``: the ``std.copy`` kernel)."""
        client, raw = self.client, self.raw
        host = np.ones(size // 4, np.float32)
        out: dict[str, Any] = {"bytes": size}

        def host_time(op: Callable[[], object], iters: int) -> Figure:
            op()
            client.sync()
            t0 = time.perf_counter()
            for _ in range(iters):
                op()
            client.sync()
            seconds = (time.perf_counter() - t0) / iters
            return Figure(seconds, seconds)

        iters = max(1, min(50, (64 * MIB) // size))
        handle = client.create(host)
        dst = client.empty(size)
        words = size // 4
        copy_iters = self.calibrate(lambda: client.copy(handle, dst))
        std_iters = self.calibrate(lambda: std_copy(client, handle, words, out=dst))
        rows: dict[str, tuple[int, Callable[[], Figure] | None, Callable[[], Figure | None] | None]] = {
            "upload_pageable": (size, lambda: host_time(lambda: client.create(host), iters),
                                (lambda: raw.upload(host, False, iters, 1)) if raw else None),
            "upload_staged": (size, None, (lambda: raw.upload(host, True, iters, 1)) if raw else None),
            "download_pageable": (size, lambda: host_time(lambda: client.read_one(handle), iters),
                                  (lambda: raw.download(size, False, iters, 1)) if raw else None),
            # client.copy (the backend's own device copy) against the library's; std.copy, the
            # compute kernel, beside the same baseline.
            "copy": (2 * size, lambda: self.ours(lambda: client.copy(handle, dst), copy_iters, 1),
                     (lambda: raw.copy(size, copy_iters, 1)) if raw else None),
            "copy_std_kernel": (2 * size, lambda: self.ours(lambda: std_copy(client, handle, words, out=dst),
                                                           std_iters, 1),
                                (lambda: raw.copy(size, std_iters, 1)) if raw else None),
        }  # fmt: skip
        if client.capabilities.staging:
            stage = client.reserve_staging([size])[0]
            stage[:] = host.view(np.uint8)
            rows["upload_staged"] = (size, lambda: host_time(lambda: client.create(stage), iters),
                                     rows["upload_staged"][2])  # fmt: skip
        for name, (nbytes, ours, theirs) in rows.items():
            if ours is None:
                base = theirs() if theirs else None
                out[name] = {"cubeplug_gbps": None, "raw_gbps": _gbps(nbytes, base),
                             "ratio_gbps_cubeplug_over_raw": None}  # fmt: skip
                continue
            pair = self._pair(ours, theirs)
            out[name] = {
                "cubeplug_gbps": _gbps(nbytes, pair.ours_figure),
                "raw_gbps": _gbps(nbytes, pair.theirs_figure),
            }
            _with_spread(out[name], "ratio_gbps_cubeplug_over_raw", pair, invert=True)
        got = client.to_numpy(dst.offset_end(size - 16), "f32")
        if not np.array_equal(got, host[:4]):
            raise AssertionError(f"client.copy / std.copy of {size} B produced {got}, expected {host[:4]}")
        out["download_staged"] = {
            "cubeplug_gbps": None,
            "note": "the client API reads into fresh host memory",
        }
        return out

    def reduce(self) -> dict[str, Any]:
        """reduce_sum (autotuned) of ``plan.reduce_n`` f32 against the library's sum and the copy peak."""
        client, n = self.client, self.plan.reduce_n
        host = np.random.default_rng(1).random(n, dtype=np.float32)
        x = client.create(host)
        t0 = time.perf_counter()
        first = float(client.to_numpy(reduce_sum(client, x, n), "f32")[0])
        tune_seconds = time.perf_counter() - t0
        tuner = tuner_for(client, REDUCE_SUM)
        result = tuner.results.get(REDUCE_SUM.key(client, tuner.level, x, n))
        expected = float(host.sum(dtype=np.float64))
        iters = self.calibrate(lambda: reduce_sum(client, x, n))
        raw = self.raw
        pair = self._pair(lambda: self.ours(lambda: reduce_sum(client, x, n), iters, 1),
                          (lambda: raw.reduce(host, iters, 1)) if raw else None)  # fmt: skip
        ours, base = pair.ours_figure, pair.theirs_figure
        peak = raw.copy(4 * n, max(1, iters // 2), self.plan.repeats) if raw else None
        read = _gbps(4 * n, ours)
        peak_gbps = _gbps(8 * n, peak)
        out: dict[str, Any] = {
            "n": n,
            "chosen": result.fastest if result else None,
            "choice_from": result.source if result else "memory",
            "tune_seconds": round(tune_seconds, 3),
            "relative_error": abs(first - expected) / max(abs(expected), 1e-30),
            "cubeplug_ms": round(ours.median * 1e3, 4),
            "baseline": self.raw.reduce_call if self.raw else None,
            "baseline_ms": round(base.median * 1e3, 4) if base else None,
            "cubeplug_read_gbps": read,
            "copy_peak_gbps": peak_gbps,
            "ratio_read_gbps_over_copy_peak_gbps": ratio(read, peak_gbps),
        }
        _with_spread(out, "ratio_time_cubeplug_over_baseline", pair)
        return out

    def matmul(self) -> dict[str, Any]:
        """matmul (autotuned) of two ``plan.matmul_n`` square f32 matrices against the library's."""
        client, size = self.client, self.plan.matmul_n
        rng = np.random.default_rng(2)
        a = rng.random((size, size), dtype=np.float32) - 0.5
        b = rng.random((size, size), dtype=np.float32) - 0.5
        ha, hb = client.create(a), client.create(b)
        t0 = time.perf_counter()
        product = matmul(client, ha, hb, size, size, size)
        rows = sorted({0, size // 2, size - 1})
        got = client.to_numpy(product, "f32", (size, size))[rows]
        tune_seconds = time.perf_counter() - t0
        want = a[rows].astype(np.float64) @ b.astype(np.float64)
        error = float(np.max(np.abs(got - want)))
        del product
        tuner = tuner_for(client, MATMUL)
        result = tuner.results.get(MATMUL.key(client, tuner.level, ha, hb, size, size, size, None))
        iters = self.calibrate(lambda: matmul(client, ha, hb, size, size, size))
        raw = self.raw
        pair = self._pair(lambda: self.ours(lambda: matmul(client, ha, hb, size, size, size), iters, 1),
                          (lambda: raw.matmul(a, b, iters, 1)) if raw else None)  # fmt: skip
        ours, base = pair.ours_figure, pair.theirs_figure
        flops = 2.0 * size**3
        mine = round(flops / ours.median / 1e12, 4)
        theirs = round(flops / base.median / 1e12, 4) if base else None
        out: dict[str, Any] = {
            "m": size, "n": size, "k": size,
            "chosen": result.fastest if result else None,
            "choice_from": result.source if result else "memory",
            "tune_seconds": round(tune_seconds, 3),
            "max_abs_error": error,
            "cubeplug_ms": round(ours.median * 1e3, 4),
            "cubeplug_tflops": mine,
            "baseline": self.raw.matmul_call if self.raw else None,
            "baseline_tflops": theirs,
        }  # fmt: skip
        _with_spread(out, "ratio_tflops_cubeplug_over_baseline", pair, invert=True)
        return out
