"""Graph replay against eager launches (issue 19): microseconds per kernel of 1000 tiny launches.

    python bench/bench_graphs.py [--backend opencl:0] [--json bench/results/graphs-opencl-pocl.json]
                                 [--launches 1000] [--rounds 15] [--repeats 3] [--quick]

One kernel of 32 units (``x[i] = x[i] * 0.5 + 1``, one cube of 32) launched ``--launches`` times:

- eager: ``client.launch`` x N, then ``client.sync()``;
- each replay the backend has: the same N launches captured once (``client.capture()``), then
  ``graph.replay()`` + ``client.sync()``. OpenCL has two native replays, each on a client of its own
  (``[backends.opencl] command_buffers``): the ``cl_khr_command_buffer`` where the device has it,
  and the pre-bound kernels; every backend also has the core's ``recorded`` replay (each step
  through the launch path), forced on a client whose server offers no native replay.

Two figures: ``total`` times the queueing and the sync (what a program pays, device execution
included), ``queue`` the queueing alone (the host's cost, which a replay saves; the sync follows,
untimed). Each is paired (:mod:`cubeplug.bench.paired`): each round samples eager and every replay
in a rotated order, a sample being the median of ``--repeats`` timed passes (after one untimed
warm-up pass); the ratio replay / eager is taken per round and its median, interquartile range,
minimum and maximum reported (lower is better: 0.5 is a replay twice cheaper than eager). The
issue's goal: a command-buffer replay at most 0.5x eager. The JSON holds the device, driver, date,
the per-kernel medians and the ratios.

Beside them, where the raw library batches launches itself, its own floor is sampled in the same
rounds (``raw``) and each replay's ratio to it is taken per round (``ratio_vs_raw``): on CUDA the
same N launches of a ``RawKernel`` (32 units, ``x * 0.5 + 1``) captured by CuPy into a
``cupy.cuda.Graph`` and launched (goal: a CUDA-graph replay <= 1.1x it, and >= 6x cheaper than
eager); on WebGPU N dispatches in one pass of one encoder, one submit, state set once (wgpu's
floor; goal <= 1.0x, and >= 3x cheaper than eager); OpenCL's goal is replay <= 0.5x eager where
command buffers exist. :func:`variants` names the clients of each backend.
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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cubeplug
from cubeplug import Buffer, Kernel, Scalar
from cubeplug.bench.paired import paired_set
from cubeplug.bench.timing import Figure

TINY = Kernel(
    "tiny",
    [Buffer("x", "f32"), Scalar("n", "u32")],
    {
        "c": "KERNEL tiny(GLOBAL float* x, unsigned int n) "
        "{ unsigned int i = ABSOLUTE_POS_X; if (i < n) x[i] = x[i] * 0.5f + 1.0f; }",
        "wgsl": "@compute @workgroup_size(CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z)\n"
        "fn tiny(@builtin(global_invocation_id) g: vec3<u32>) "
        "{ if (g.x < scalars.n) { x[g.x] = x[g.x] * 0.5 + 1.0; } }\n",
    },
    cube_dim=32,
)
UNITS = 32


def variants(backend: str) -> dict[str, dict[str, Any]]:
    """The replays measured on ``backend``: name -> the client's config overrides."""
    if backend == "opencl":
        return {
            "command_buffer": {"backends": {"opencl": {"command_buffers": True}}},
            "prebound": {"backends": {"opencl": {"command_buffers": False}}},
        }
    return {"native": {}}


def raw_side(client: Any, launches: int) -> tuple[str, Callable[[], None], Callable[[], None]] | None:
    """The raw library's own batching of ``launches`` tiny kernels on the client's device:
    (what, run, wait), or None where it has none to compare with."""
    backend = client.backend
    if backend == "cuda":
        from cubeplug.bench.raw_cuda import CupyRaw

        raw = CupyRaw(client)
        cp = raw.cp
        with raw.dev:
            stream = cp.cuda.Stream(non_blocking=True)
            args = (raw.x, np.float32(0.5), np.uint32(UNITS))
            stream.begin_capture()
            for _ in range(launches):
                raw.kernel((1,), (UNITS,), args, stream=stream)
            graph = stream.end_capture()
        what = f"cupy {cp.__version__}: cupy.cuda.Graph of {launches} RawKernel launches"
        return what, lambda: graph.launch(stream), stream.synchronize
    if backend == "webgpu":
        from cubeplug.bench.raw_webgpu import WgpuRaw

        wraw = WgpuRaw(client)  # its shader's workgroup is 64 units

        def encode() -> None:
            wraw.batch(launches)

        return f"{wraw.library}: {launches} dispatches in one encoder, one submit", encode, wraw.wait
    return None


def record_only(client: Any) -> None:
    """Make ``client`` replay its graphs through the core's recorded replay (no native one)."""
    client.server.new_replay = lambda steps: None


#: The figures: seconds per kernel of queueing and waiting (``total``: what a program pays), and of
#: the queueing alone (``queue``: the host's cost, which a replay is for; the sync is not timed).
FIGURES = ("total", "queue")


def sampler(
    run: Callable[[], None], sync: Callable[[], None], launches: int, repeats: int, figure: str
) -> Callable[[], Figure]:
    """A paired sample: seconds per kernel of ``run`` (+ ``sync`` for the ``total`` figure), the
    median of ``repeats`` passes after an untimed one."""

    def sample() -> Figure:
        run()
        sync()
        passes = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            run()
            if figure == "total":
                sync()
            passes.append((time.perf_counter() - t0) / launches)
            sync()
        return Figure(statistics.median(passes), min(passes))

    return sample


def replay_side(client: Any, launches: int) -> tuple[Any, Any]:
    """A buffer and the graph of ``launches`` launches of TINY on it (launched once eagerly first,
    so that the capture and the eager side start from the same compiled kernel)."""
    x = client.create(np.zeros(UNITS, np.float32))
    client.launch(TINY, 1, [x], [UNITS])
    client.sync()
    with client.capture() as graph:
        for _ in range(launches):
            client.launch(TINY, 1, [x], [UNITS])
    return x, graph


def check(client: Any, x: Any, graph: Any) -> bool:
    """The replay computes what eager launches compute (a fixed point of x*0.5+1 aside: 5 steps)."""
    client.write(x, np.zeros(UNITS, np.float32))
    graph.replay()
    expected = np.zeros(UNITS, np.float32)
    for _ in range(len(graph)):
        expected = expected * np.float32(0.5) + np.float32(1.0)
    return bool(np.allclose(client.to_numpy(x, "f32"), expected))


def us(figure: Figure) -> dict[str, float]:
    """A figure's median and minimum in microseconds."""
    return {"median": round(figure.us(), 3), "min": round(figure.best * 1e6, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="opencl:0", help="a device selector (opencl:0, cuda:0, ...)")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    parser.add_argument("--launches", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="5 rounds of 1 pass (a smoke run)")
    args = parser.parse_args()
    rounds, repeats = (5, 1) if args.quick else (args.rounds, args.repeats)
    launches = args.launches
    backend = args.backend.split(":")[0]

    eager_client = cubeplug.client(args.backend)
    props = eager_client.properties
    info = eager_client.server.info
    x_eager = eager_client.create(np.zeros(UNITS, np.float32))

    def eager() -> None:
        launch = eager_client.launch
        for _ in range(launches):
            launch(TINY, 1, [x_eager], [UNITS])

    ours: dict[str, dict[str, Callable[[], Figure]]] = {f: {} for f in FIGURES}
    clients: dict[str, Any] = {}
    replayed_by: dict[str, str] = {}
    correct: dict[str, bool] = {}
    for name, overrides in {**variants(backend), "recorded": {}}.items():
        c = cubeplug.client(args.backend, **overrides)
        if name == "recorded":
            record_only(c)
        x, graph = replay_side(c, launches)
        clients[name] = (c, x, graph)
        replayed_by[name] = graph.replayed_by
        correct[name] = check(c, x, graph)
        for f in FIGURES:
            ours[f][name] = sampler(graph.replay, c.sync, launches, repeats, f)
    raw = raw_side(eager_client, launches)
    if raw is not None:
        for f in FIGURES:
            ours[f]["raw"] = sampler(raw[1], raw[2], launches, repeats, f)
    load_before = os.getloadavg()
    results = {
        f: paired_set(ours[f], sampler(eager, eager_client.sync, launches, repeats, f), rounds)
        for f in FIGURES
    }

    report: dict[str, Any] = {
        "benchmark": "bench_graphs",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "selector": args.backend,
        "device": info.name,
        "vendor": info.vendor,
        "driver": info.driver,
        "platform_version": props.get("platform_version"),
        "host": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        # Other processes' load (1-minute average) before and after: a loaded host inflates both
        # sides, and a ratio taken on one is less reliable (the spread says by how much).
        "load_average": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "versions": {"cubeplug": cubeplug.__version__, "numpy": np.__version__,
                     "python": platform.python_version()},
        "launches": launches, "units_per_launch": UNITS, "rounds": rounds, "repeats_per_sample": repeats,
        "figures": {},
    }
    print(f"device: {info.name} ({info.vendor}), driver {info.driver}; {launches} launches of "
          f"{UNITS} units, {rounds} rounds", flush=True)
    for f, result in results.items():
        eager_figure = next(iter(result.values())).theirs_figure
        assert eager_figure is not None
        section: dict[str, Any] = {"eager_us_per_kernel": us(eager_figure), "replays": {}}
        raw_rounds = result["raw"].ours if "raw" in result else None
        if raw_rounds is not None:
            section["raw"] = {"what": raw[0] if raw else None, "us_per_kernel": us(result["raw"].ours_figure)}
        for name, p in result.items():
            if name == "raw":
                continue
            section["replays"][name] = {
                "replayed_by": replayed_by[name],
                "result_checked": correct[name],
                "us_per_kernel": us(p.ours_figure),
                "ratio_vs_eager": p.ratio(),
                "ratio_spread": p.spread(),
            }
            if raw_rounds is not None:  # replay / raw, round by round (the same rounds' samples)
                per_round = sorted(a / b for a, b in zip(p.ours, raw_rounds, strict=True) if b > 0)
                entry = section["replays"][name]
                entry["ratio_vs_raw"] = round(statistics.median(per_round), 4)
                entry["ratio_vs_raw_range"] = [round(per_round[0], 4), round(per_round[-1], 4)]
        report["figures"][f] = section
        print(f"{f} (us per kernel, median; ratio: median of per-round replay/eager):", flush=True)
        print(f"  eager {'':<40} {section['eager_us_per_kernel']['median']:8.3f}", flush=True)
        if "raw" in section:
            raw_us = section["raw"]["us_per_kernel"]["median"]
            print(f"  raw   {section['raw']['what']}: {raw_us:8.3f}", flush=True)
        for name, r in section["replays"].items():
            spread = r["ratio_spread"]
            print(f"  {name:<14} {'(' + r['replayed_by'] + ')':<26} {r['us_per_kernel']['median']:8.3f}  "
                  f"{r['ratio_vs_eager']:.3f}x eager (IQR {spread['iqr']}, min {spread['min']}, max "
                  f"{spread['max']}), result ok: {r['result_checked']}"
                  + (f", {r['ratio_vs_raw']:.3f}x raw" if "ratio_vs_raw" in r else ""), flush=True)
    for c, _, graph in clients.values():
        graph.close()
        c.close()
    eager_client.close()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
