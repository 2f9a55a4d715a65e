"""Graph replay against eager launches and against the raw library's own batching (issue 19).

Each sample runs ``--launches`` launches of the bench's tiny kernel (64 units, ``x = x * a + 1``
over 64 floats: the work of every raw baseline's ``tiny``) and waits for them; figures are
microseconds per kernel, medians over paired rounds (each round samples every side once, in an
order rotated round by round: cubeplug/bench/paired.py), with the per-round ratios' spread:

- ``eager``: ``client.launch`` N times, then ``client.sync()``;
- ``replay``: ``graph.replay()`` of the same N launches captured once, then ``client.sync()``;
- ``raw``: CUDA: the same N ``RawKernel`` launches captured by CuPy into a ``cupy.cuda.Graph``
  and launched (CuPy's own graph replay); WebGPU: N dispatches in one pass of one encoder, one
  submit, state set once (wgpu's floor). OpenCL has no raw side (the issue's OpenCL figure is
  replay against eager).

Ratios: ``eager / replay`` (how many times cheaper a replayed kernel is; goals: CUDA >= 6, WebGPU
>= 3, OpenCL >= 2 where command buffers exist) and ``replay / raw`` (goals: CUDA <= 1.1 against
CuPy's graph, WebGPU <= 1.0 against raw batching).

    python bench/bench_graphs.py --backend cuda [--launches 1000] [--rounds 15] [--json FILE]
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
from cubeplug.bench.paired import paired_set
from cubeplug.bench.raw import TINY_N
from cubeplug.bench.suite import TINY
from cubeplug.bench.timing import Figure


def timed(run: Callable[[], None], wait: Callable[[], None], n: int) -> Callable[[], Figure]:
    def sample() -> Figure:
        t0 = time.perf_counter()
        run()
        wait()
        s = (time.perf_counter() - t0) / n
        return Figure(s, s)

    return sample


def raw_side(client: Any, n: int) -> tuple[str, Callable[[], None], Callable[[], None]] | None:
    """The raw library's N tiny kernels: (what, run, wait), on the client's device."""
    backend = client.backend
    if backend == "cuda":
        from cubeplug.bench.raw_cuda import CupyRaw

        raw = CupyRaw(client)
        cp = raw.cp
        with raw.dev:
            stream = cp.cuda.Stream(non_blocking=True)
            args = (raw.x, np.float32(1.0), np.uint32(TINY_N))
            stream.begin_capture()
            for _ in range(n):
                raw.kernel((1,), (TINY_N,), args, stream=stream)
            graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
        what = f"cupy {cp.__version__} cupy.cuda.Graph replay"
        return what, lambda: graph.launch(stream), stream.synchronize
    if backend == "webgpu":
        from cubeplug.bench.raw_webgpu import WgpuRaw

        wraw = WgpuRaw(client)
        device, pipeline, bg = wraw.device, wraw.pipeline, wraw.bind_group

        def encode() -> None:
            enc = device.create_command_encoder()
            p = enc.begin_compute_pass()
            p.set_pipeline(pipeline)
            p.set_bind_group(0, bg)
            dispatch = p.dispatch_workgroups
            for _ in range(n):
                dispatch(1)
            p.end()
            device.queue.submit([enc.finish()])

        return f"{wraw.library} one encoder, one submit", encode, wraw.wait
    return None


def measure(selector: str, n: int, rounds: int) -> dict[str, Any]:
    client = cubeplug.client(selector)
    x = client.create(np.zeros(TINY_N, np.float32))
    args = ([x], [1.0, TINY_N])
    launch = client.launch

    def eager() -> None:
        for _ in range(n):
            launch(TINY, 1, *args)

    with client.capture() as graph:
        eager()
    sync = client.sync
    eager()
    graph.replay()
    sync()
    ours = {"eager": timed(eager, sync, n), "replay": timed(graph.replay, sync, n)}
    raw = raw_side(client, n)
    theirs = timed(raw[1], raw[2], n) if raw is not None else None
    pairs = paired_set(ours, theirs, rounds)
    # eager / replay from the same rounds' samples (each round sampled both).
    e, r = pairs["eager"].ours, pairs["replay"].ours
    per_round = sorted(a / b for a, b in zip(e, r, strict=True))
    mid = per_round[len(per_round) // 2]
    out: dict[str, Any] = {
        "backend": selector,
        "device": client.device.name,
        "replayed_by": graph.replayed_by,
        "launches": n,
        "rounds": rounds,
        "eager_us": round(pairs["eager"].ours_figure.median * 1e6, 3),
        "replay_us": round(pairs["replay"].ours_figure.median * 1e6, 3),
        "eager_over_replay": round(mid, 3),
        "eager_over_replay_range": [round(per_round[0], 3), round(per_round[-1], 3)],
    }
    if raw is not None:
        out["raw"] = raw[0]
        theirs_fig = pairs["replay"].theirs_figure
        out["raw_us"] = round(theirs_fig.median * 1e6, 3) if theirs_fig is not None else None
        out["replay_over_raw"] = pairs["replay"].ratio()
        out["replay_over_raw_spread"] = pairs["replay"].spread()
        out["eager_over_raw"] = pairs["eager"].ratio()
    graph.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", action="append", required=True, help="selector; repeat for several")
    ap.add_argument("--launches", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    results = []
    for selector in a.backend:
        r = measure(selector, a.launches, a.rounds)
        print(json.dumps(r), flush=True)
        results.append(r)
    if a.json:
        meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "host": platform.node(), "python": platform.python_version()}  # fmt: skip
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
