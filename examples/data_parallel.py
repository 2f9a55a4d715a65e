"""Data parallel: each device sums the squares of its shard with a kernel, then all_reduce.

The per-device function ``work(rank, client, peers, ...)`` is the same in every setting; only how
it is started changes:

    python examples/data_parallel.py cpu --devices 2          # 2 cpu devices, one thread each
    python examples/data_parallel.py opencl --devices 2       # 2 clients of the OpenCL device
    python examples/data_parallel.py cpu --ray 2              # 2 Ray actors (a local cluster)
    python examples/data_parallel.py cuda --devices 2         # 2 GPUs, NCCL, one process
    python examples/data_parallel.py cuda --ray 2 --gpus 1    # 2 GPUs, NCCL, one actor per GPU

It prints the total, numpy's, and the time per step (the median of ``--steps`` steps).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

import cubeplug
from cubeplug import lang as cl
from cubeplug.collectives import run_threads
from cubeplug.lang import Array, f32

#: Units per cube, and cubes per device: the partial sums are one per unit.
CUBE = 256
CUBES = 64


@cl.kernel
def sum_squares(x: Array[f32], partial: Array[f32]) -> None:
    """Unit i sums the squares of x[i], x[i + stride], ... into partial[i]."""
    stride = cl.CUBE_DIM * cl.CUBE_COUNT
    acc = f32(0)
    for j in range(cl.ABSOLUTE_POS, len(x), stride):
        acc += x[j] * x[j]
    partial[cl.ABSOLUTE_POS] = acc


def shard(rank: int, world: int, n: int) -> np.ndarray:
    """The part of the data set device ``rank`` holds (made where it lives: nothing is shipped)."""
    values = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    return np.array_split(values, world)[rank]


def work(rank: int, client: Any, peers: Any, n: int, steps: int) -> tuple[float, list[float]]:
    """One device: upload its shard, then per step a kernel for the partial sums and an all_reduce."""
    world = peers.world if hasattr(peers, "world") else len(peers)
    x = client.asarray(shard(rank, world, n))
    partial = client.empty_array(CUBE * CUBES, "f32")
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        sum_squares.launch(client, CUBES, CUBE, x.handle, partial.handle)
        client.all_reduce(partial, partial, "sum", devices=peers)
        total = float(partial.numpy().sum(dtype=np.float64))  # waits for the step
        times.append(time.perf_counter() - start)
    return total, times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("backend", nargs="?", default="cpu")
    parser.add_argument("--devices", type=int, default=2, help="clients in this process (threads)")
    parser.add_argument("--ray", type=int, default=0, metavar="N", help="N Ray actors instead")
    parser.add_argument("--gpus", type=float, default=0, help="GPUs per Ray actor (1 on a GPU cluster)")
    parser.add_argument("--n", type=int, default=1 << 20, help="elements in the whole data set")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args(argv)
    if args.ray:
        import ray

        import cubeplug.ray as cpray

        # The actors import this module by name (a kernel travels as its module, not pickled) and
        # this checkout of cubeplug.
        here = os.path.dirname(os.path.abspath(__file__))
        path = os.pathsep.join([here, os.path.dirname(here), os.environ.get("PYTHONPATH", "")])
        # With --gpus, the local cluster offers that many GPUs per actor (ray.init(num_gpus=2) for
        # 2 actors of 1 GPU each); each actor then sees its own GPU as cuda:0.
        gpus = {"num_gpus": int(args.ray * args.gpus)} if args.gpus else {}
        # The actors get this process's NCCL settings too (e.g. NCCL_NVLS_ENABLE=0 where a machine
        # must not use NVLink multicast), whatever environment the cluster's workers start with.
        env = {"PYTHONPATH": path, **{k: v for k, v in os.environ.items() if k.startswith("NCCL_")}}
        ray.init(num_cpus=max(2, args.ray), include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": env}, **gpus)  # fmt: skip
        import data_parallel

        workers = cpray.Workers(args.ray, args.backend, num_gpus=args.gpus)
        try:
            results = workers.run(data_parallel.work, args.n, args.steps)
        finally:
            workers.shutdown()
            ray.shutdown()
        how = f"{args.ray} Ray actors"
    else:
        if args.backend == "cpu":  # the cpu backend offers as many devices as asked for
            os.environ.setdefault("CUBEPLUG_BACKENDS_CPU_DEVICES", str(args.devices))
        count = cubeplug.device_count(args.backend)
        if count >= args.devices:
            clients = [cubeplug.client(f"{args.backend}:{i}") for i in range(args.devices)]
        else:  # several clients of one device (cubeplug caches a client per overrides: one each)
            clients = [cubeplug.client(args.backend, streaming={"max_streams": 4 + i})
                       for i in range(args.devices)]  # fmt: skip
        results = run_threads(work, clients, args.n, args.steps)
        how = f"{args.devices} clients ({', '.join(str(c.device) for c in clients)})"
    data = np.random.default_rng(0).standard_normal(args.n).astype(np.float32)
    want = float(np.sum(data.astype(np.float64) ** 2))
    totals = [r[0] for r in results]
    step = statistics.median(statistics.median(r[1]) for r in results)
    print(f"{args.backend}, {how}: total {totals[0]:.6g} on every rank: {len(set(totals)) == 1}; "
          f"numpy {want:.6g}; {step * 1e3:.3f} ms per step")  # fmt: skip
    ok = len(set(totals)) == 1 and abs(totals[0] - want) <= 1e-4 * want
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
