"""The CUDA backend against CuPy on the same device, in the same run (issue 6).

    python bench/bench_cuda.py [--json bench/results/cuda-<gpu>.json] [--quick]

Measures, each next to CuPy doing the same work:

1. launch overhead: ``client.launch`` (checked) and ``launch_unchecked`` vs ``cupy.RawKernel`` launching
   the same kernel (1M floats, and a one-cube kernel); N async launches then one sync, per launch.
   Goal: cubeplug / RawKernel <= 1.15.
2. reserve + release of 1 MiB: ``client.empty`` + drop vs CuPy's default pool (``malloc`` + drop).
   Goal: <= 1.5x.
3. a 256 MiB upload: ``client.create`` of a ``reserve_staging`` buffer vs CuPy from pinned memory
   (goal >= 0.9x the throughput), and of a pageable numpy array vs CuPy from pageable memory.
4. a float4 copy kernel's bandwidth as a fraction of the device-to-device copy peak (goal >= 90 %),
   with the same kernel through RawKernel for reference.
5. 4 threads on 4 streams launching small independent kernels: throughput vs one stream (goal >= 2x),
   and CuPy with 4 streams from 4 threads.
6. a 256 MiB download: ``client.read_one`` (a fresh bytearray each time; a read above 4 MiB is
   copied on the device and downloaded by the driver's pageable path off the caller's thread) vs
   CuPy's ``ndarray.get()`` (a fresh numpy array each time), goal >= 0.9x the throughput; with a
   16 MiB and a 2 MiB read (the latter through a pinned block) for reference and ``cudaMemcpy`` into
   an already-touched host buffer (no page faults) as the ceiling.

``--only download`` (or any step names, comma-separated) runs only those steps.

Runs in well under two minutes on an H100/H200. Without CuPy or a device it says so and writes a JSON
file with the reason.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from paired import paired

import cubeplug
from cubeplug import Buffer, CubeCount, Kernel, Scalar

MIB = 1 << 20

SCALE_SRC = """
KERNEL scale(GLOBAL float* x, float s, unsigned int n) {
  unsigned int i = ABSOLUTE_POS_X;
  if (i < n) x[i] = x[i] * s;
}
"""
SCALE_CUDA = """
extern "C" __global__ void scale(float* x, float s, unsigned int n) {
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * s;
}
"""
COPY_SRC = """
KERNEL copy4(GLOBAL const float4* src, GLOBAL float4* dst, unsigned int n) {
  unsigned int i = ABSOLUTE_POS_X;
  if (i < n) dst[i] = src[i];
}
"""
COPY_CUDA = """
extern "C" __global__ void copy4(const float4* src, float4* dst, unsigned int n) {
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = src[i];
}
"""
SPIN_SRC = """
KERNEL spin(GLOBAL float* out, unsigned int iters) {
  float v = (float)ABSOLUTE_POS_X;
  for (unsigned int k = 0; k < iters; ++k) v = v * 0.9999f + 0.5f;
  out[ABSOLUTE_POS_X] = v;
}
"""
SPIN_CUDA = """
extern "C" __global__ void spin(float* out, unsigned int iters) {
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = (float)i;
  for (unsigned int k = 0; k < iters; ++k) v = v * 0.9999f + 0.5f;
  out[i] = v;
}
"""

SCALE = Kernel("scale", [Buffer("x", "f32"), Scalar("s", "f32"), Scalar("n", "u32")], {"c": SCALE_SRC}, 256)
COPY = Kernel(
    "copy4",
    [Buffer("src", "f32", "read", vector=4), Buffer("dst", "f32", "write", vector=4), Scalar("n", "u32")],
    {"c": COPY_SRC},
    256,
)
SPIN = Kernel("spin", [Buffer("out", "f32", "write"), Scalar("iters", "u32")], {"c": SPIN_SRC}, 128)


def per_call_us(fn: Callable[[int], None], n: int, repeats: int = 3) -> float:
    """Best microseconds per iteration over ``repeats`` runs of ``fn(n)`` (after a warm-up)."""
    fn(max(1, n // 20))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(n)
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else float("nan")


def make_client(cfg_launch: str | None = None) -> Any:
    from cubeplug.backends.cuda.server import CudaServer
    from cubeplug.backends.cuda.storage import CudaStorage
    from cubeplug.backends.cuda.stream import CudaStreams
    from cubeplug.core.client import ComputeClient
    from cubeplug.core.config import Config

    config = Config()
    if cfg_launch:
        config.backends["cuda"] = {"launch": cfg_launch}
    return ComputeClient(CudaServer(CudaStorage(0), CudaStreams(0), config, 0))


# ---------------------------------------------------------------------------- 1. launches
def bench_launch(cp: Any, client: Any, n: int) -> dict[str, Any]:
    out: dict[str, Any] = {"launches": n, "launch_path": client.properties["launch_path"]}
    elems = 1 << 20
    other = make_client("cupy")  # the same launches through CuPy's Function call, for comparison
    try:
        for label, grid, count in (("1M floats", (elems // 256,), elems), ("one cube", (1,), 256)):
            out[label] = launch_row(cp, client, n, elems, grid, count)
            out[label]["cubeplug_launch_cupy_path_us"] = round(
                launch_row(cp, other, n, elems, grid, count, only_checked=True), 3
            )
    finally:
        other.close()
    return out


def launch_row(
    cp: Any, client: Any, n: int, elems: int, grid: tuple[int], count: int, only_checked: bool = False
) -> Any:
    from cubeplug.core.stream import current_stream_id

    x_cp = cp.ones(elems, dtype=cp.float32)
    rk = cp.RawKernel(SCALE_CUDA, "scale")
    s32, n32 = np.float32(1.0), np.uint32(count)
    ptr = np.uint64(x_cp.data.ptr)
    block = (256,)
    stream = cp.cuda.Stream(non_blocking=True)

    def cupy_array(k: int) -> None:
        with stream:
            for _ in range(k):
                rk(grid, block, (x_cp, s32, n32))
            stream.synchronize()

    def cupy_ptr(k: int) -> None:
        with stream:
            for _ in range(k):
                rk(grid, block, (ptr, s32, n32))
            stream.synchronize()

    h = client.create(np.ones(elems, dtype=np.float32))
    cc = CubeCount(grid[0])
    launch, unchecked, sync = client.launch, client.launch_unchecked, client.sync

    def ours_checked(k: int) -> None:
        for _ in range(k):
            launch(SCALE, cc, [h], [1.0, count])
        sync()

    def ours_unchecked(k: int) -> None:
        for _ in range(k):
            unchecked(SCALE, cc, [h], [s32, n32])
        sync()

    if only_checked:
        return per_call_us(ours_checked, n)
    server = client.server
    sid = server.stream_id(current_stream_id())
    client.launch_unchecked(SCALE, cc, [h], [s32, n32])
    compiled = client.launcher.compiled_for(SCALE, checked=False)

    def server_execute(k: int) -> None:
        execute = server.execute
        for _ in range(k):
            execute(sid, compiled, cc, [h], [s32, n32])
        sync()

    row = {
        "cupy_rawkernel_ndarray_us": per_call_us(cupy_array, n),
        "cupy_rawkernel_uint64_us": per_call_us(cupy_ptr, n),
        "cubeplug_launch_us": per_call_us(ours_checked, n),
        "cubeplug_launch_unchecked_us": per_call_us(ours_unchecked, n),
        "cubeplug_server_execute_us": per_call_us(server_execute, n),
    }
    row["ratio_launch_vs_rawkernel"] = ratio(row["cubeplug_launch_us"], row["cupy_rawkernel_ndarray_us"])
    row["ratio_unchecked_vs_rawkernel"] = ratio(
        row["cubeplug_launch_unchecked_us"], row["cupy_rawkernel_ndarray_us"]
    )
    out: dict[str, Any] = {k: round(v, 3) for k, v in row.items()}
    # The same two loops in alternation, a ratio per round (bench/paired.py): robust to host drift.
    out["paired_launch_vs_rawkernel"] = paired(ours_checked, cupy_array, max(1, n // 10))
    return out


# ---------------------------------------------------------------------------- 2. reserve + release
def bench_alloc(cp: Any, client: Any, n: int) -> dict[str, Any]:
    pool = cp.get_default_memory_pool()

    def cupy_pool(k: int) -> None:
        malloc = pool.malloc
        for _ in range(k):
            p = malloc(MIB)
            del p

    def cupy_empty(k: int) -> None:
        empty, u8 = cp.empty, cp.uint8
        for _ in range(k):
            a = empty(MIB, dtype=u8)
            del a

    def ours(k: int) -> None:
        empty = client.empty
        for _ in range(k):
            h = empty(MIB)
            del h

    row = {
        "cupy_pool_malloc_us": per_call_us(cupy_pool, n, 5),
        "cupy_empty_us": per_call_us(cupy_empty, n, 5),
        "cubeplug_empty_drop_us": per_call_us(ours, n, 5),
    }
    row["ratio_vs_cupy_pool"] = ratio(row["cubeplug_empty_drop_us"], row["cupy_pool_malloc_us"])
    out: dict[str, Any] = {k: round(v, 3) for k, v in row.items()}
    out["paired_vs_cupy_pool"] = paired(ours, cupy_pool, max(1, n // 10))
    return out


# ---------------------------------------------------------------------------- 3. uploads
def bench_upload(cp: Any, client: Any, nbytes: int, repeats: int) -> dict[str, Any]:
    data = np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8)
    staging = client.reserve_staging([nbytes])[0]
    staging[:] = data
    pinned = cp.cuda.alloc_pinned_memory(nbytes)
    pinned_np = np.frombuffer(pinned, dtype=np.uint8, count=nbytes)
    pinned_np[:] = data
    dev = cp.empty(nbytes, dtype=cp.uint8)

    def timed(fn: Callable[[], Any]) -> float:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return nbytes / min(times) / 1e9

    def ours_pinned() -> None:
        h = client.create(staging)
        client.sync()
        del h

    def ours_pageable() -> None:
        h = client.create(data)
        client.sync()
        del h

    def cupy_pinned() -> None:
        dev.set(pinned_np)
        cp.cuda.Device().synchronize()

    def cupy_pageable() -> None:
        dev.set(data)
        cp.cuda.Device().synchronize()

    def cupy_asarray_pageable() -> None:
        a = cp.asarray(data)
        cp.cuda.Device().synchronize()
        del a

    for fn in (ours_pinned, ours_pageable, cupy_pinned, cupy_pageable):
        fn()  # warm up (pools, pinned staging)
    row = {
        "bytes": nbytes,
        "cubeplug_create_staging_GBps": timed(ours_pinned),
        "cupy_from_pinned_GBps": timed(cupy_pinned),
        "cubeplug_create_pageable_GBps": timed(ours_pageable),
        "cupy_from_pageable_GBps": timed(cupy_pageable),
        "cupy_asarray_pageable_GBps": timed(cupy_asarray_pageable),
    }
    row["ratio_pinned"] = ratio(row["cubeplug_create_staging_GBps"], row["cupy_from_pinned_GBps"])
    row["ratio_pageable"] = ratio(row["cubeplug_create_pageable_GBps"], row["cupy_from_pageable_GBps"])
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}


# ---------------------------------------------------------------------------- 4. copy bandwidth
def bench_copy(cp: Any, client: Any, nbytes: int, repeats: int) -> dict[str, Any]:
    n4 = nbytes // 16
    src = client.create(np.ones(nbytes // 4, dtype=np.float32))
    dst = client.empty(nbytes)
    grid = CubeCount(-(-n4 // 256))

    def ours() -> float:
        _, d = client.profile(lambda: client.launch(COPY, grid, [src, dst], [n4]))
        return d.seconds()

    a = cp.ones(nbytes // 4, dtype=cp.float32)
    b = cp.empty_like(a)
    rk = cp.RawKernel(COPY_CUDA, "copy4")
    start, end = cp.cuda.Event(), cp.cuda.Event()

    def cupy_timed(fn: Callable[[], None]) -> float:
        start.record()
        fn()
        end.record()
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) / 1e3

    def memcpy() -> float:
        return cupy_timed(lambda: b.data.copy_from_device_async(a.data, nbytes))

    def raw() -> float:
        return cupy_timed(lambda: rk((-(-n4 // 256),), (256,), (a, b, np.uint32(n4))))

    results = {}
    timers = (("cubeplug_copy_kernel", ours), ("cupy_memcpy_d2d", memcpy), ("cupy_rawkernel_copy", raw))
    for name, fn in timers:
        fn()
        best = min(fn() for _ in range(repeats))
        results[f"{name}_GBps"] = 2 * nbytes / best / 1e9
    results["fraction_of_d2d_peak"] = results["cubeplug_copy_kernel_GBps"] / results["cupy_memcpy_d2d_GBps"]
    np.testing.assert_array_equal(client.to_numpy(dst.offset_end(nbytes - 64), "f32"), 1.0)
    return {"bytes_per_buffer": nbytes, **{k: round(v, 3) for k, v in results.items()}}


# ---------------------------------------------------------------------------- 5. streams
def bench_streams(cp: Any, client: Any, kernels: int, target_us: float = 100.0) -> dict[str, Any]:
    threads = 4
    cube = 128
    cubes = 2
    outs = [client.empty(4 * cube * cubes)]
    iters = 20000
    client.launch(SPIN, cubes, [outs[0]], [iters])  # compile first: calibration must not time NVRTC
    client.sync()

    def calibrate(n_iters: int, n: int = 50) -> float:
        """Microseconds per back-to-back spin kernel of ``n_iters`` on one stream."""
        t0 = time.perf_counter()
        for _ in range(n):
            client.launch(SPIN, cubes, [outs[0]], [n_iters])
        client.sync()
        return (time.perf_counter() - t0) / n * 1e6

    iters = max(1000, int(iters * target_us / max(calibrate(iters), 1.0)))
    kernel_us = calibrate(iters)

    def one_stream() -> float:
        t0 = time.perf_counter()
        for _ in range(kernels):
            client.launch(SPIN, cubes, [outs[0]], [iters])
        client.sync(all_streams=True)
        return time.perf_counter() - t0

    def many_streams() -> float:
        barrier = threading.Barrier(threads + 1)

        def work(i: int) -> None:
            out = client.empty(4 * cube * cubes)  # this thread's stream owns its buffer
            client.launch(SPIN, cubes, [out], [1])
            client.sync()
            barrier.wait(timeout=120)
            for _ in range(kernels // threads):
                client.launch(SPIN, cubes, [out], [iters])

        ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for t in ts:
            t.start()
        barrier.wait(timeout=120)
        t0 = time.perf_counter()
        for t in ts:
            t.join()
        client.sync(all_streams=True)
        return time.perf_counter() - t0

    rk = cp.RawKernel(SPIN_CUDA, "spin")
    bufs = [cp.empty(cube * cubes, dtype=cp.float32) for _ in range(threads)]
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(threads)]
    it32 = np.uint32(iters)

    def cupy_one() -> float:
        t0 = time.perf_counter()
        with streams[0]:
            for _ in range(kernels):
                rk((cubes,), (cube,), (bufs[0], it32))
        streams[0].synchronize()
        return time.perf_counter() - t0

    def cupy_many() -> float:
        barrier = threading.Barrier(threads + 1)

        def work(i: int) -> None:
            barrier.wait(timeout=120)
            with streams[i]:
                for _ in range(kernels // threads):
                    rk((cubes,), (cube,), (bufs[i], it32))

        ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for t in ts:
            t.start()
        barrier.wait(timeout=120)
        t0 = time.perf_counter()
        for t in ts:
            t.join()
        for s in streams:
            s.synchronize()
        return time.perf_counter() - t0

    row: dict[str, Any] = {"kernels": kernels, "kernel_us": round(kernel_us, 2), "iters": iters}
    for name, fn in (
        ("cubeplug_1x1", one_stream),
        ("cubeplug_4x4", many_streams),
        ("cupy_1x1", cupy_one),
        ("cupy_4x4", cupy_many),
    ):
        fn()
        row[f"{name}_s"] = round(min(fn() for _ in range(3)), 5)
    row["cubeplug_speedup_4_streams"] = ratio(row["cubeplug_1x1_s"], row["cubeplug_4x4_s"])
    row["cupy_speedup_4_streams"] = ratio(row["cupy_1x1_s"], row["cupy_4x4_s"])
    return row


# ---------------------------------------------------------------------------- 6. downloads
def bench_download(cp: Any, client: Any, nbytes: int, repeats: int) -> dict[str, Any]:
    """``client.read_one`` vs ``cupy.ndarray.get()``, both into fresh host memory, at two sizes."""
    out: dict[str, Any] = {}
    for label, size in (("large", nbytes), ("16 MiB", min(nbytes, 16 * MIB)), ("2 MiB", 2 * MIB)):
        out[label] = download_row(cp, client, size, repeats)
    return out


def download_row(cp: Any, client: Any, nbytes: int, repeats: int) -> dict[str, Any]:
    from cubeplug.backends.cuda.server import _SNAPSHOT_MIN

    data = np.random.default_rng(1).integers(0, 255, nbytes, dtype=np.uint8)
    h = client.create(data)
    dev = cp.asarray(data)
    touched = np.ones(nbytes, dtype=np.uint8)  # already faulted in: the copy alone
    memcpy = cp.cuda.runtime.memcpy
    client.sync()

    def timed(fn: Callable[[], Any]) -> float:
        fn()  # warm up (pinned pool, driver staging buffers)
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            result = fn()
            best = min(best, time.perf_counter() - t0)
            del result  # freed outside the timing, on both sides
        return nbytes / best / 1e9

    got = client.read_one(h)
    if (
        len(got) != nbytes
        or bytes(got[:64]) != data[:64].tobytes()
        or bytes(got[-64:]) != data[-64:].tobytes()
    ):
        raise AssertionError(f"read_one of {nbytes} B returned wrong bytes")
    del got
    row = {
        "bytes": nbytes,
        "path": "device copy" if nbytes > _SNAPSHOT_MIN else "pinned",
        "cubeplug_read_GBps": timed(lambda: client.read_one(h)),
        "cupy_get_GBps": timed(lambda: dev.get()),
        "cupy_memcpy_touched_GBps": timed(lambda: memcpy(touched.ctypes.data, dev.data.ptr, nbytes, 2)),
    }
    row["ratio_read_vs_get"] = ratio(row["cubeplug_read_GBps"], row["cupy_get_GBps"])
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}


# ---------------------------------------------------------------------------- main
def environment(cp: Any | None, client: Any | None) -> dict[str, Any]:
    env: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "cubeplug": cubeplug.__version__,
        "host": platform.node(),
    }
    if cp is not None:
        env["cupy"] = cp.__version__
    if client is not None:
        p = client.properties
        env.update(
            device=p["name"],
            compute_capability=p["compute_capability"],
            sm_count=p["sm_count"],
            total_memory=p["total_memory"],
            cuda_driver=p["driver_version"],
            cuda_runtime=p["runtime_version"],
            launch_path=p["launch_path"],
        )
    return env


def goals(r: dict[str, Any]) -> dict[str, Any]:
    figures: dict[str, tuple[str, Callable[[], Any], Callable[[Any], bool]]] = {
        "launch_ratio<=1.15": (
            "launch",
            lambda: r["launch"]["1M floats"]["paired_launch_vs_rawkernel"]["ratio_median"],
            lambda v: v <= 1.15,
        ),
        "alloc_ratio<=1.5": (
            "alloc", lambda: r["alloc"]["paired_vs_cupy_pool"]["ratio_median"], lambda v: v <= 1.5
        ),
        "upload_pinned>=0.9": ("upload", lambda: r["upload"]["ratio_pinned"], lambda v: v >= 0.9),
        "copy_fraction>=0.9": ("copy", lambda: r["copy"]["fraction_of_d2d_peak"], lambda v: v >= 0.9),
        "streams_speedup>=2": (
            "streams",
            lambda: r["streams"]["cubeplug_speedup_4_streams"],
            lambda v: v >= 2,
        ),
        "download_ratio>=0.9": (
            "download",
            lambda: r["download"]["large"]["ratio_read_vs_get"],
            lambda v: v >= 0.9,
        ),
    }
    out = {}
    for name, (step, value, test) in figures.items():
        if step in r:  # steps left out with --only have no goal
            v = value()
            out[name] = {"value": v, "met": bool(test(v))}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    parser.add_argument("--launches", type=int, help="launches per launch measurement")
    parser.add_argument("--mib", type=int, help="MiB of the upload and of each copy buffer")
    parser.add_argument("--launch", choices=("auto", "driver", "cupy"), help="[backends.cuda] launch path")
    parser.add_argument(
        "--only", help="comma-separated steps to run (launch, alloc, upload, copy, streams, download)"
    )
    args = parser.parse_args(argv)

    from cubeplug.backends.cuda.device import probe

    result = probe()
    if not result.ok:
        report = {
            "environment": environment(None, None),
            "skipped": f"CuPy not installed / no CUDA device: {result.reason}",
        }
        print(report["skipped"])
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=2)
        return 0

    import cupy as cp

    t_start = time.perf_counter()
    client = make_client(args.launch)
    quick = args.quick
    launches = args.launches or (2000 if quick else 20000)
    upload_mib = args.mib or (32 if quick else 256)
    copy_mib = args.mib or (64 if quick else 512)
    results: dict[str, Any] = {}
    steps: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("launch", lambda: bench_launch(cp, client, launches)),
        ("alloc", lambda: bench_alloc(cp, client, 2000 if quick else 20000)),
        ("upload", lambda: bench_upload(cp, client, upload_mib * MIB, 3 if quick else 5)),
        ("copy", lambda: bench_copy(cp, client, copy_mib * MIB, 5 if quick else 20)),
        ("streams", lambda: bench_streams(cp, client, 80 if quick else 400)),
        ("download", lambda: bench_download(cp, client, upload_mib * MIB, 3 if quick else 5)),
    ]
    if args.only:
        wanted = {name.strip() for name in args.only.split(",")}
        unknown = wanted - {name for name, _ in steps}
        if unknown:
            parser.error(f"unknown steps {sorted(unknown)}")
        steps = [(name, step) for name, step in steps if name in wanted]
    for name, step in steps:
        t0 = time.perf_counter()
        try:
            results[name] = step()
        except Exception as e:  # keep the other figures
            results[name] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc(limit=-4)}
        results[name]["seconds"] = round(time.perf_counter() - t0, 2)
        print(f"{name}: {json.dumps(results[name])}", flush=True)
    report: dict[str, Any] = {"environment": environment(cp, client), "results": results}
    try:
        report["goals"] = goals(results)
    except (KeyError, TypeError) as e:
        report["goals"] = {"error": f"missing figure: {e}"}
    report["total_seconds"] = round(time.perf_counter() - t_start, 1)
    print(json.dumps(report["goals"], indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
