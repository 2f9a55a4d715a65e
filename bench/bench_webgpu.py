"""WebGPU backend against raw wgpu in the same run (issue 5).

    python bench/bench_webgpu.py [--json bench/results/webgpu-lavapipe.json] [--device N] [--quick]

Figures, each the best (and the median) of several interleaved repeats:

* dispatch: microseconds per dispatch of 1000 small dispatches (256 f32, 4 workgroups, one u32
  scalar), wall time from the first call until the device finished (execution included), for
  cubeplug ``launch`` (checked) and ``launch_unchecked``, raw wgpu with one submit per dispatch and
  raw wgpu with all 1000 in one encoder. Goals: raw one-submit / cubeplug >= 3, cubeplug / raw
  batched <= 1.3 (on the GPU machine). The host-only issue time of each loop is reported too.
* alloc: microseconds per ``client.empty(1 MiB)`` + drop against ``device.create_buffer(1 MiB)``
  (+ ``destroy()``, and + drop). Goal: raw / cubeplug >= 10.
* copy: bandwidth (bytes read + written per second) of a vec4<f32> copy kernel launched through
  cubeplug, as a fraction of ``copy_buffer_to_buffer`` on the same device, both timed with
  timestamp queries where the adapter has them. Goal >= 80 % (on the GPU machine, Vulkan).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from paired import paired

import cubeplug
from cubeplug import Buffer, CubeCount, Kernel, Scalar
from cubeplug.core.client import ComputeClient
from cubeplug.core.config import Config

MIB = 1 << 20
N_DISPATCH = 1000
INC_WGSL = """
@compute @workgroup_size(CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z)
fn inc(@builtin(global_invocation_id) g: vec3<u32>) { if (g.x < scalars.n) { y[g.x] = y[g.x] + 1.0; } }
"""
INC = Kernel("inc", [Buffer("y", "f32"), Scalar("n", "u32")], {"wgsl": INC_WGSL}, cube_dim=64)
COPY_WGSL = """
@compute @workgroup_size(CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z)
fn copy4(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>) {
    let i = g.x + g.y * n.x * CUBE_DIM_X;
    if (i < scalars.n) { dst[i] = src[i]; }
}
"""
COPY4 = Kernel(
    "copy4",
    [Buffer("src", "f32", "read", vector=4), Buffer("dst", "f32", "write", vector=4), Scalar("n", "u32")],
    {"wgsl": COPY_WGSL},
    cube_dim=256,
)


def make_client(device: int) -> ComputeClient:
    """A WebGPU client built through the plugin's hooks."""
    from cubeplug.backends.webgpu import plugin

    config = Config()
    storage = plugin.cubeplug_compute_storage(backend="webgpu", device=device, config=config)
    server = plugin.cubeplug_compute_server(
        backend="webgpu", device=device, config=config, storage=storage, streams=None
    )
    return ComputeClient(server)


class Raw:
    """Raw wgpu on the client's GPUDevice: the same kernel, a bind group made once, a map fence."""

    def __init__(self, device: Any) -> None:
        import wgpu

        self.wgpu = wgpu
        self.device = device
        u = wgpu.BufferUsage
        code = (
            "struct S { n: u32 }\n"
            "@group(0) @binding(0) var<storage, read_write> y: array<f32>;\n"
            "@group(0) @binding(1) var<storage, read> scalars: S;\n"
            "const CUBE_DIM_X: u32 = 64u; const CUBE_DIM_Y: u32 = 1u; const CUBE_DIM_Z: u32 = 1u;\n"
            + INC_WGSL
        )
        module = device.create_shader_module(code=code)
        self.pipeline = device.create_compute_pipeline(
            layout="auto", compute={"module": module, "entry_point": "inc"}
        )
        self.y = device.create_buffer(size=256 * 4, usage=u.STORAGE | u.COPY_SRC | u.COPY_DST)
        device.queue.write_buffer(self.y, 0, np.zeros(256, np.float32))
        self.scalars = device.create_buffer_with_data(data=np.array([256], np.uint32), usage=u.STORAGE)
        self.bind_group = device.create_bind_group(
            layout=self.pipeline.get_bind_group_layout(0),
            entries=[
                {"binding": 0, "resource": {"buffer": self.y, "offset": 0, "size": 1024}},
                {"binding": 1, "resource": {"buffer": self.scalars, "offset": 0, "size": 4}},
            ],
        )
        self._fence_src = device.create_buffer(size=4, usage=u.COPY_SRC)
        self._fence_dst = device.create_buffer(size=4, usage=u.COPY_DST | u.MAP_READ)

    def wait(self) -> None:
        """Block until the device ran everything submitted (a 4-byte copy mapped back)."""
        enc = self.device.create_command_encoder()
        enc.copy_buffer_to_buffer(self._fence_src, 0, self._fence_dst, 0, 4)
        self.device.queue.submit([enc.finish()])
        self._fence_dst.map_async(self.wgpu.MapMode.READ).sync_wait()
        self._fence_dst.unmap()

    def per_submit(self, n: int) -> None:
        """One command encoder, pass and submit per dispatch."""
        device, pipeline, bg = self.device, self.pipeline, self.bind_group
        submit = device.queue.submit
        for _ in range(n):
            enc = device.create_command_encoder()
            p = enc.begin_compute_pass()
            p.set_pipeline(pipeline)
            p.set_bind_group(0, bg)
            p.dispatch_workgroups(4)
            p.end()
            submit([enc.finish()])

    def batched(self, n: int) -> None:
        """All dispatches in one encoder and one compute pass, one submit."""
        enc = self.device.create_command_encoder()
        p = enc.begin_compute_pass()
        pipeline, bg = self.pipeline, self.bind_group
        for _ in range(n):
            p.set_pipeline(pipeline)
            p.set_bind_group(0, bg)
            p.dispatch_workgroups(4)
        p.end()
        self.device.queue.submit([enc.finish()])

    def check(self, expected: float) -> None:
        """The raw loops really ran: every element was incremented ``expected`` times."""
        got = np.frombuffer(self.device.queue.read_buffer(self.y), np.float32)
        assert (got == expected).all(), (got[:4], expected)


def timed(run: Callable[[], None], wait: Callable[[], None]) -> tuple[float, float]:
    """(issue seconds, total seconds until the device finished) of one run."""
    wait()
    t0 = time.perf_counter()
    run()
    t1 = time.perf_counter()
    wait()
    return t1 - t0, time.perf_counter() - t0


def bench_dispatch(client: ComputeClient, raw: Raw, repeats: int) -> dict[str, Any]:
    """Per-dispatch cost of 1000 small dispatches, cubeplug against raw wgpu, interleaved repeats."""
    y = client.create(np.zeros(256, np.float32))
    count = CubeCount(4)
    launch, unchecked = client.launch, client.launch_unchecked

    def checked_loop() -> None:
        for _ in range(N_DISPATCH):
            launch(INC, count, [y], [256])

    def unchecked_loop() -> None:
        for _ in range(N_DISPATCH):
            unchecked(INC, count, [y], [256])

    def cub_wait() -> None:
        client.sync()

    cases: dict[str, tuple[Callable[[], None], Callable[[], None]]] = {
        "cubeplug_launch": (checked_loop, cub_wait),
        "cubeplug_launch_unchecked": (unchecked_loop, cub_wait),
        "raw_one_submit_per_dispatch": (lambda: raw.per_submit(N_DISPATCH), raw.wait),
        "raw_batched_one_encoder": (lambda: raw.batched(N_DISPATCH), raw.wait),
    }
    for run, wait in cases.values():  # warm up (compiles, bind groups, staging)
        timed(run, wait)
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
    for _ in range(repeats):
        for name, (run, wait) in cases.items():
            samples[name].append(timed(run, wait))
    runs_cub = 2 * (repeats + 1) * N_DISPATCH
    got = client.to_numpy(y, "f32")
    assert (got == runs_cub).all(), (got[:4], runs_cub)
    raw.check(2 * (repeats + 1) * N_DISPATCH)
    out: dict[str, Any] = {}
    for name, s in samples.items():
        total = [t / N_DISPATCH * 1e6 for _, t in s]
        issue = [i / N_DISPATCH * 1e6 for i, _ in s]
        out[name] = {
            "total_us_min": min(total),
            "total_us_median": statistics.median(total),
            "issue_us_min": min(issue),
            "issue_us_median": statistics.median(issue),
        }
    out["submits_per_1000_launches"] = -(-N_DISPATCH // client.server.scheduler.max_tasks)  # type: ignore[attr-defined]
    cub = out["cubeplug_launch"]["total_us_median"]
    out["ratio_raw_per_submit_over_cubeplug"] = out["raw_one_submit_per_dispatch"]["total_us_median"] / cub
    out["ratio_cubeplug_over_raw_batched"] = cub / out["raw_batched_one_encoder"]["total_us_median"]
    out["ratio_cubeplug_unchecked_over_raw_batched"] = (
        out["cubeplug_launch_unchecked"]["total_us_median"]
        / out["raw_batched_one_encoder"]["total_us_median"]
    )
    return out


def bench_alloc(client: ComputeClient, device: Any, repeats: int, n: int) -> dict[str, Any]:
    """Per-pair cost of reserve + release of 1 MiB against raw create_buffer."""
    import wgpu

    u = wgpu.BufferUsage
    usage = u.STORAGE | u.COPY_SRC | u.COPY_DST
    empty = client.empty

    def cub(k: int) -> None:
        for _ in range(k):
            h = empty(MIB)
            del h

    def raw_destroy(k: int) -> None:
        create = device.create_buffer
        for _ in range(k):
            create(size=MIB, usage=usage).destroy()

    def raw_drop(k: int) -> None:
        create = device.create_buffer
        for _ in range(k):
            b = create(size=MIB, usage=usage)
            del b

    def best(fn: Callable[[int], None], k: int) -> tuple[float, float]:
        fn(min(k, 100))
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn(k)
            times.append((time.perf_counter() - t0) / k * 1e6)
        return min(times), statistics.median(times)

    out: dict[str, Any] = {}
    for name, fn, k in (
        ("cubeplug_empty_drop", cub, n),
        ("raw_create_buffer_destroy", raw_destroy, max(100, n // 20)),
        ("raw_create_buffer_drop", raw_drop, max(100, n // 20)),
    ):
        lo, med = best(fn, k)
        out[name] = {"us_min": lo, "us_median": med}
    cub_med = out["cubeplug_empty_drop"]["us_median"]
    out["ratio_raw_destroy_over_cubeplug"] = out["raw_create_buffer_destroy"]["us_median"] / cub_med
    out["ratio_raw_drop_over_cubeplug"] = out["raw_create_buffer_drop"]["us_median"] / cub_med
    # The loops in alternation, a ratio per round (bench/paired.py), with equal time on each side.
    k = max(100, n // 20)
    pair = paired(raw_destroy, lambda m: cub(m * 10), k, rounds=20)
    out["paired_raw_destroy_over_cubeplug"] = {
        **pair,
        "b_us": round(pair["b_us"] / 10, 3),
        "ratio_median": round(pair["ratio_median"] * 10, 3),
        "ratio_iqr": [round(q * 10, 3) for q in pair["ratio_iqr"]],
    }
    return out


def bench_copy(client: ComputeClient, nbytes: int, repeats: int) -> dict[str, Any]:
    """Copy-kernel bandwidth through cubeplug as a fraction of copy_buffer_to_buffer on the device."""
    import wgpu

    server = client.server
    device = server.gpu  # type: ignore[attr-defined]
    n4 = nbytes // 16
    src = client.create(np.arange(nbytes // 4, dtype=np.float32))
    dst = client.empty(nbytes)
    groups = -(-n4 // 256)
    gx = min(groups, 4096)
    count = CubeCount(gx, -(-groups // gx))
    iters = 10

    def kernel_run() -> None:
        for _ in range(iters):
            client.launch(COPY4, count, [src, dst], [n4])

    client.launch(COPY4, count, [src, dst], [n4])
    client.sync()
    assert client.read_one(dst.offset_start(nbytes - 64)) == client.read_one(src.offset_start(nbytes - 64))
    kernel = []
    method = "system"
    for _ in range(repeats):
        _, d = client.profile(kernel_run)
        kernel.append(d.seconds() / iters)
        method = d.method
    # Raw copy_buffer_to_buffer of the same size, on two buffers of their own, same timing method.
    u = wgpu.BufferUsage
    a = device.create_buffer(size=nbytes, usage=u.COPY_SRC | u.COPY_DST | u.STORAGE)
    b = device.create_buffer(size=nbytes, usage=u.COPY_SRC | u.COPY_DST | u.STORAGE)
    copies = []
    timestamps = "timestamp-query" in device.features
    if timestamps:
        qs = device.create_query_set(type="timestamp", count=2)
        resolve = device.create_buffer(size=256, usage=u.QUERY_RESOLVE | u.COPY_SRC)
        read = device.create_buffer(size=16, usage=u.MAP_READ | u.COPY_DST)
    for _ in range(repeats):
        enc = device.create_command_encoder()
        if timestamps:
            p = enc.begin_compute_pass(timestamp_writes={"query_set": qs, "end_of_pass_write_index": 0})
            p.end()
        t0 = time.perf_counter()
        for _ in range(iters):
            enc.copy_buffer_to_buffer(a, 0, b, 0, nbytes)
        if timestamps:
            p = enc.begin_compute_pass(timestamp_writes={"query_set": qs, "end_of_pass_write_index": 1})
            p.end()
            enc.resolve_query_set(qs, 0, 2, resolve, 0)
            enc.copy_buffer_to_buffer(resolve, 0, read, 0, 16)
        device.queue.submit([enc.finish()])
        if timestamps:
            read.map_async(wgpu.MapMode.READ).sync_wait()
            t = np.frombuffer(read.read_mapped(), np.uint64).copy()
            read.unmap()
            copies.append(float(t[1] - t[0]) * 1e-9 / iters)
        else:
            client.server.queue.wait_idle()  # type: ignore[attr-defined]
            copies.append((time.perf_counter() - t0) / iters)
    a.destroy()
    b.destroy()
    k_med, c_med = statistics.median(kernel), statistics.median(copies)
    return {
        "bytes": nbytes,
        "timing": method if timestamps else "system",
        "kernel_gbps": 2 * nbytes / k_med / 1e9,
        "kernel_gbps_best": 2 * nbytes / min(kernel) / 1e9,
        "copy_buffer_to_buffer_gbps": 2 * nbytes / c_med / 1e9,
        "copy_buffer_to_buffer_gbps_best": 2 * nbytes / min(copies) / 1e9,
        "fraction_of_copy_peak": c_med / k_med,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("--device", type=int, default=0, help="adapter index (webgpu:N)")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument(
        "--copy-mib", type=int, default=0, help="copy size (default: 32 MiB on CPU adapters, 256 MiB)"
    )
    ap.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = ap.parse_args()
    repeats = 3 if args.quick else args.repeats

    import wgpu

    client = make_client(args.device)
    props = client.properties
    cpu_adapter = props["adapter_type"] == "CPU"
    copy_mib = args.copy_mib or (32 if cpu_adapter else 256)
    nbytes = min(copy_mib * MIB, client.capabilities.max_alloc_bytes // 2 // 16 * 16)
    raw = Raw(client.server.gpu)  # type: ignore[attr-defined]

    t0 = time.perf_counter()
    results = {
        "dispatch": bench_dispatch(client, raw, repeats),
        "alloc": bench_alloc(client, client.server.gpu, repeats, 2000 if args.quick else 20000),  # type: ignore[attr-defined]
        "copy": bench_copy(client, nbytes, repeats),
    }
    elapsed = time.perf_counter() - t0
    d, a, c = results["dispatch"], results["alloc"], results["copy"]
    goals = {
        "raw_per_submit_over_cubeplug >= 3": d["ratio_raw_per_submit_over_cubeplug"] >= 3,
        "cubeplug_over_raw_batched <= 1.3": d["ratio_cubeplug_over_raw_batched"] <= 1.3,
        "raw_create_buffer_over_cubeplug >= 10": a["paired_raw_destroy_over_cubeplug"]["ratio_median"] >= 10,
        "copy_kernel_fraction >= 0.8": c["fraction_of_copy_peak"] >= 0.8,
    }
    report = {
        "bench": "bench_webgpu",
        "command": " ".join(["python", "bench/bench_webgpu.py", *sys.argv[1:]]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": props["name"],
        "adapter_type": props["adapter_type"],
        "backend_type": props["backend_type"],
        "driver": props["description"],
        "versions": {
            "cubeplug": cubeplug.__version__,
            "wgpu": wgpu.__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
        },
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "repeats": repeats,
        "seconds": round(elapsed, 1),
        "results": results,
        "goals_met": goals,
    }
    print(
        f"device: {props['name']} ({props['adapter_type']}, {props['backend_type']}), wgpu {wgpu.__version__}"
    )
    print(f"dispatch, us per dispatch of {N_DISPATCH} (median total incl. execution | median host issue):")
    for name in (
        "cubeplug_launch",
        "cubeplug_launch_unchecked",
        "raw_one_submit_per_dispatch",
        "raw_batched_one_encoder",
    ):
        r = d[name]
        print(
            f"  {name:<30} {r['total_us_median']:8.2f} | {r['issue_us_median']:8.2f}"
            f"   (min {r['total_us_min']:.2f})"
        )
    print(f"  raw one-submit / cubeplug    {d['ratio_raw_per_submit_over_cubeplug']:.2f}x (goal >= 3)")
    print(f"  cubeplug / raw batched       {d['ratio_cubeplug_over_raw_batched']:.2f}x (goal <= 1.3)")
    print("alloc, us per 1 MiB pair (median):")
    for name in ("cubeplug_empty_drop", "raw_create_buffer_destroy", "raw_create_buffer_drop"):
        print(f"  {name:<30} {a[name]['us_median']:8.2f}   (min {a[name]['us_min']:.2f})")
    pa = a["paired_raw_destroy_over_cubeplug"]
    print(f"  raw create+destroy / cubeplug {a['ratio_raw_destroy_over_cubeplug']:.1f}x; paired "
          f"{pa['ratio_median']:.2f}x (IQR {pa['ratio_iqr']}) (goal >= 10)")
    print(
        f"copy {c['bytes'] >> 20} MiB ({c['timing']} timing): kernel {c['kernel_gbps']:.1f} GB/s, "
        f"copy_buffer_to_buffer {c['copy_buffer_to_buffer_gbps']:.1f} GB/s, "
        f"fraction {c['fraction_of_copy_peak']:.2f} (goal >= 0.8)"
    )
    print("goals:", ", ".join(f"{k}: {'met' if v else 'MISSED'}" for k, v in goals.items()))
    print(f"({elapsed:.0f} s)")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    client.close()


if __name__ == "__main__":
    main()
