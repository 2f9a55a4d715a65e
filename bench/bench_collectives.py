"""Collectives and peer copies between two devices, beside the raw library in the same run (issue 21).

    python bench/bench_collectives.py OUT.json [--backend cuda] [--quick]
    python bench/bench_collectives.py OUT.json --ray [--backend cuda] [--gpus 1] [--quick]

On cuda with two GPUs (``--backend cuda``, the default when CuPy sees two devices):

1. ``all_reduce`` of f32 in place, 4 KiB, 1 MiB and 256 MiB: cubeplug (``client.all_reduce`` from one
   thread per client, NCCL underneath) vs ``cupy.cuda.nccl`` called directly (one thread, the two
   ``allReduce`` calls in ``groupStart``/``groupEnd``), paired rounds in alternation: per-call time
   (medians), the ratio's median and spread, and the bus bandwidth ``2 (n-1)/n * bytes / time``.
   Goals: 256 MiB bus bandwidth >= 0.95x raw; 4 KiB latency <= 1.2x raw. ``raw_threads`` pairs
   cubeplug with a second raw variant, each rank's persistent thread calling its own ``allReduce``
   (no group, no rendezvous): what the one-thread-per-rank contract costs by itself.
2. a 256 MiB peer copy: ``client.copy_to`` (into a preallocated handle) and ``client.to_client`` (a new
   handle each time, from the pool) vs ``cupy.cuda.runtime.memcpyPeerAsync``: GB/s; goal >= 0.9x.

On any other backend (``--backend cpu|opencl|webgpu``) it times the portable path: ``all_reduce`` of
f32 between two clients (two cpu devices; two clients of the one OpenCL or WebGPU device here), and
``copy_to`` between them, with no raw counterpart.

With ``--ray`` it times ``examples/data_parallel.py``'s ``work`` (per step: a kernel, an
``all_reduce`` of 16,384 f32, a read), on 2 actors of a local Ray cluster (``num_gpus=1`` each on
cuda: NCCL, the unique id through Ray) vs 2 clients on threads of this process: the median time per
step of each and their ratio (the issue's figure).

The JSON holds the device, the date, the cubeplug version and every figure.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import queue
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paired import paired

import cubeplug

SIZES = {"4KiB": 4 << 10, "1MiB": 1 << 20, "256MiB": 256 << 20}


class Ranks:
    """One persistent thread per client, as a data-parallel program keeps them: each rank's data is
    made and used on its own thread's stream (data made on another thread's stream is ordered and
    kept reserved at every use, which a program's hot loop does not pay)."""

    def __init__(self, clients: list[Any]) -> None:
        self.clients = clients
        self.jobs: list[queue.Queue[Any]] = [queue.Queue() for _ in clients]
        self.done: queue.Queue[Any] = queue.Queue()
        for rank in range(len(clients)):
            threading.Thread(target=self._serve, args=(rank,), daemon=True, name=f"rank-{rank}").start()

    def _serve(self, rank: int) -> None:
        while True:
            fn = self.jobs[rank].get()
            try:
                self.done.put((rank, fn(rank, self.clients[rank]), None))
            except BaseException as exc:  # reported by run()
                self.done.put((rank, None, exc))

    def run(self, fn: Callable[[int, Any], Any]) -> list[Any]:
        """``fn(rank, client)`` on every rank's thread; the results by rank (the first error raised)."""
        for q in self.jobs:
            q.put(fn)
        results: list[Any] = [None] * len(self.clients)
        errors = []
        for _ in self.clients:
            rank, value, exc = self.done.get()
            results[rank] = value
            if exc is not None:
                errors.append(exc)
        if errors:
            raise errors[0]
        return results


def both(ranks: Ranks, step: Callable[[int, Any], None], n: int) -> None:
    """``step(rank, client)`` ``n`` times on each rank's thread, then every stream synced."""

    def work(rank: int, client: Any) -> None:
        for _ in range(n):
            step(rank, client)
        client.sync()

    ranks.run(work)


def iterations(nbytes: int, quick: bool) -> int:
    base = 200 if nbytes <= 1 << 20 else 10
    return max(2, base // (4 if quick else 1))


def bus_gbps(nbytes: int, seconds: float, world: int = 2) -> float:
    return round(2 * (world - 1) / world * nbytes / seconds / 1e9, 2)


# ---------------------------------------------------------------------------------------- cuda
def cuda_figures(quick: bool) -> dict[str, Any]:
    import cupy
    from cupy.cuda import nccl

    a, b = cubeplug.client("cuda:0"), cubeplug.client("cuda:1")
    clients = [a, b]
    ranks = Ranks(clients)
    comms = nccl.NcclCommunicator.initAll([0, 1])
    streams = []
    for d in (0, 1):
        with cupy.cuda.Device(d):
            streams.append(cupy.cuda.Stream(non_blocking=True))
    out: dict[str, Any] = {"device": str(a.device), "nccl_version": nccl.get_version(), "all_reduce": {}}
    rounds = 10 if quick else 30
    for label, nbytes in SIZES.items():
        count = nbytes // 4
        ours = ranks.run(lambda rank, c, count=count: c.asarray(np.ones(count, np.float32)))
        raw = []
        for d in (0, 1):
            with cupy.cuda.Device(d):
                raw.append(cupy.ones(count, cupy.float32))

        def cubeplug_all_reduce(n: int, ours: list[Any] = ours) -> None:
            def step(rank: int, client: Any) -> None:
                client.all_reduce(ours[rank], ours[rank], devices=clients)

            both(ranks, step, n)

        def raw_all_reduce(n: int, raw: list[Any] = raw, count: int = count) -> None:
            for _ in range(n):
                nccl.groupStart()
                for d in (0, 1):
                    with cupy.cuda.Device(d):
                        comms[d].allReduce(raw[d].data.ptr, raw[d].data.ptr, count, nccl.NCCL_FLOAT32,
                                           nccl.NCCL_SUM, streams[d].ptr)  # fmt: skip
                nccl.groupEnd()
            for s in streams:
                s.synchronize()

        def raw_threads_all_reduce(n: int, raw: list[Any] = raw, count: int = count) -> None:
            def work(rank: int, _client: Any) -> None:  # each rank thread its own call, no group
                with cupy.cuda.Device(rank):
                    for _ in range(n):
                        ptr = raw[rank].data.ptr
                        comms[rank].allReduce(ptr, ptr, count, nccl.NCCL_FLOAT32, nccl.NCCL_SUM,
                                              streams[rank].ptr)  # fmt: skip
                    streams[rank].synchronize()

            ranks.run(work)

        fig = paired(cubeplug_all_reduce, raw_all_reduce, iterations(nbytes, quick), rounds)
        fig["cubeplug_bus_GBps"] = bus_gbps(nbytes, fig["a_us"] / 1e6)
        fig["raw_bus_GBps"] = bus_gbps(nbytes, fig["b_us"] / 1e6)
        # How much of the gap is the contract itself (one thread per rank, as in the seed): the raw
        # calls made the same way, from the same two persistent rank threads, with no rendezvous.
        threads = paired(cubeplug_all_reduce, raw_threads_all_reduce, iterations(nbytes, quick), rounds)
        fig["raw_threads"] = {"us": threads["b_us"], "cubeplug_us": threads["a_us"],
                              "ratio_median": threads["ratio_median"],
                              "ratio_iqr": threads["ratio_iqr"]}  # fmt: skip
        out["all_reduce"][label] = fig
    nbytes = 256 << 20
    src = a.empty(nbytes)
    dst = b.empty(nbytes)
    with cupy.cuda.Device(0):
        rsrc = cupy.empty(nbytes, cupy.uint8)
    with cupy.cuda.Device(1):
        rdst = cupy.empty(nbytes, cupy.uint8)
        rstream = cupy.cuda.Stream(non_blocking=True)

    def copy_to(n: int) -> None:
        for _ in range(n):
            a.copy_to(src, b, dst)
        b.sync()

    def to_client(n: int) -> None:
        for _ in range(n):
            a.to_client(src, b)
        b.sync()

    def raw_peer(n: int) -> None:
        with cupy.cuda.Device(1):
            for _ in range(n):
                cupy.cuda.runtime.memcpyPeerAsync(rdst.data.ptr, 1, rsrc.data.ptr, 0, nbytes, rstream.ptr)
            rstream.synchronize()

    out["peer_copy_256MiB"] = {}
    for name, fn in (("copy_to", copy_to), ("to_client", to_client)):
        fig = paired(fn, raw_peer, 5 if quick else 10, rounds)
        fig["cubeplug_GBps"] = round(nbytes / (fig["a_us"] / 1e6) / 1e9, 1)
        fig["raw_GBps"] = round(nbytes / (fig["b_us"] / 1e6) / 1e9, 1)
        out["peer_copy_256MiB"][name] = fig
    return out


# ---------------------------------------------------------------------------------------- portable
def portable_figures(backend: str, quick: bool) -> dict[str, Any]:
    if backend == "cpu":
        os.environ.setdefault("CUBEPLUG_BACKENDS_CPU_DEVICES", "2")
    if cubeplug.device_count(backend) >= 2:
        clients = [cubeplug.client(f"{backend}:{i}") for i in (0, 1)]
    else:  # two clients of one device (a client is cached per overrides)
        clients = [cubeplug.client(backend, streaming={"max_streams": 4 + i}) for i in (0, 1)]
    ranks = Ranks(clients)
    out: dict[str, Any] = {"device": [str(c.device) for c in clients], "all_reduce": {}, "copy_to": {}}
    sizes = {"4KiB": 4 << 10, "1MiB": 1 << 20, "16MiB": 16 << 20}
    for label, nbytes in sizes.items():
        count = nbytes // 4
        arrays = ranks.run(lambda rank, c, count=count: c.asarray(np.ones(count, np.float32)))
        n = max(2, (50 if nbytes <= 1 << 20 else 4) // (4 if quick else 1))
        samples = []
        for _ in range(3 if quick else 7):
            t0 = time.perf_counter()
            both(ranks, lambda r, c, arrays=arrays: c.all_reduce(arrays[r], arrays[r], devices=clients), n)
            samples.append((time.perf_counter() - t0) / n)
        med = statistics.median(samples)
        spread = [round(min(samples) * 1e6, 1), round(max(samples) * 1e6, 1)]
        figure = {"us": round(med * 1e6, 1), "spread_us": spread, "bus_GBps": bus_gbps(nbytes, med)}
        out["all_reduce"][label] = figure
        src, dst = clients[0].empty(nbytes), clients[1].empty(nbytes)
        samples = []
        for _ in range(3 if quick else 7):
            t0 = time.perf_counter()
            for _ in range(n):
                clients[0].copy_to(src, clients[1], dst)
            clients[1].sync()
            samples.append((time.perf_counter() - t0) / n)
        med = statistics.median(samples)
        out["copy_to"][label] = {"us": round(med * 1e6, 1), "GBps": round(nbytes / med / 1e9, 2)}
    return out


# ---------------------------------------------------------------------------------------- ray
def ray_figures(backend: str, quick: bool, gpus: float, world: int = 2) -> dict[str, Any]:
    """The data-parallel example's time per step: ``world`` Ray actors (a local cluster, one client
    each, NCCL ids through Ray on cuda) vs ``world`` clients on threads of this process."""
    import ray

    import cubeplug.ray as cpray
    from cubeplug.collectives import run_threads

    examples = Path(__file__).resolve().parents[1] / "examples"
    sys.path.insert(0, str(examples))
    import data_parallel

    n, steps = 1 << 20, 20 if quick else 100
    if backend == "cpu":
        os.environ.setdefault("CUBEPLUG_BACKENDS_CPU_DEVICES", str(world))
    if cubeplug.device_count(backend) >= world:
        clients = [cubeplug.client(f"{backend}:{i}") for i in range(world)]
    else:  # several clients of one device (a client is cached per overrides)
        clients = [cubeplug.client(backend, streaming={"max_streams": 4 + i}) for i in range(world)]
    one = run_threads(data_parallel.work, clients, n, steps)
    # The actors import data_parallel by name and this checkout of cubeplug.
    path = os.pathsep.join([str(examples), str(examples.parent), os.environ.get("PYTHONPATH", "")])
    options: dict[str, Any] = {"num_gpus": int(world * gpus)} if gpus else {}
    env = {"PYTHONPATH": path, **{k: v for k, v in os.environ.items() if k.startswith("NCCL_")}}
    ray.init(num_cpus=max(2, world), include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": env}, **options)  # fmt: skip
    try:
        workers = cpray.Workers(world, backend, num_gpus=gpus)
        try:
            several = workers.run(data_parallel.work, n, steps)
        finally:
            workers.shutdown()
    finally:
        ray.shutdown()

    def per_step(results: list[Any]) -> dict[str, Any]:
        medians = [statistics.median(times[1:]) for _, times in results]  # the first step compiles
        return {"step_ms": round(statistics.median(medians) * 1e3, 3),
                "spread_ms": [round(min(min(t[1:]) for _, t in results) * 1e3, 3),
                              round(max(max(t[1:]) for _, t in results) * 1e3, 3)],
                "total": results[0][0], "ranks_agree": len({r[0] for r in results}) == 1}  # fmt: skip

    single, actors = per_step(one), per_step(several)
    return {
        "device": [str(c.device) for c in clients],
        "ray": ray.__version__,
        "example": {"n": n, "steps": steps, "world": world, "gpus_per_actor": gpus},
        "single_process": single,
        "ray_actors": actors,
        "ray_over_single": round(actors["step_ms"] / single["step_ms"], 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", help="the JSON file to write")
    parser.add_argument("--backend", default=None, help="cuda (default with two GPUs), cpu, opencl, webgpu")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--ray", action="store_true",
                        help="the data-parallel example: 2 Ray actors vs 2 clients here")  # fmt: skip
    parser.add_argument("--gpus", type=float, default=None,
                        help="GPUs per Ray actor (default: 1 on cuda, else 0)")  # fmt: skip
    args = parser.parse_args(argv)
    backend = args.backend
    if backend is None:
        backend = "cuda" if cubeplug.device_count("cuda") >= 2 else "cpu"
    result: dict[str, Any] = {
        "bench": "collectives",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cubeplug": cubeplug.__version__,
        "host": platform.node(),
        "backend": backend,
    }
    try:
        if args.ray:
            gpus = args.gpus if args.gpus is not None else (1.0 if backend == "cuda" else 0.0)
            result["bench"] = "collectives-ray"
            result.update(ray_figures(backend, args.quick, gpus))
        elif backend == "cuda":
            if cubeplug.device_count("cuda") < 2:
                raise RuntimeError("needs two CUDA devices")
            result.update(cuda_figures(args.quick))
        else:
            result.update(portable_figures(backend, args.quick))
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main())
