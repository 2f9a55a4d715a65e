"""Core overheads on the reference CPU backend (issue 2): allocation and launch paths.

    python bench/bench_core.py [--json bench/results/core-cpu.json]

Reports microseconds per 1 MiB reserve + release pair through the pools alone and through
``client.empty`` + drop, and the Python overhead of ``client.launch`` with an empty kernel
(launches queued, then one sync; the worker thread's run of each empty kernel is included).
Each figure is the best of several repeats.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import time
from collections.abc import Callable

import numpy as np

import cubeplug
from cubeplug.backends.cpu.server import CpuServer
from cubeplug.backends.cpu.storage import CpuStorage, memory_properties
from cubeplug.core.client import ComputeClient
from cubeplug.core.memory import MemoryManagement

MIB = 1 << 20


def best_us(fn: Callable[[int], None], n: int, repeats: int = 7) -> float:
    """Best per-iteration time in microseconds over ``repeats`` runs of ``fn(n)``."""
    fn(min(n, 1000))  # warm up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(n)
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def pools_pair(n: int, mm: MemoryManagement) -> None:
    reserve = mm.reserve
    for _ in range(n):
        token = reserve(MIB)
        del token


def client_pair(n: int, client: ComputeClient) -> None:
    empty = client.empty
    for _ in range(n):
        h = empty(MIB)
        del h


def launches(n: int, client: ComputeClient, kernel: cubeplug.Kernel) -> None:
    launch = client.launch
    for _ in range(n):
        launch(kernel, 1)
    client.sync()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("-n", type=int, default=20000)
    args = ap.parse_args()

    mm = MemoryManagement(CpuStorage(), memory_properties())
    client = ComputeClient(CpuServer(CpuStorage()))
    noop = cubeplug.Kernel("noop", [], {"python": lambda launch: None})
    figures = {
        "pools_reserve_release_1mib_us": best_us(lambda n: pools_pair(n, mm), args.n),
        "client_empty_drop_1mib_us": best_us(lambda n: client_pair(n, client), args.n),
        "client_launch_empty_kernel_us": best_us(lambda n: launches(n, client, noop), args.n),
    }
    goals = {"client_empty_drop_1mib_us": 5.0, "client_launch_empty_kernel_us": 10.0}
    for key, value in figures.items():
        goal = goals.get(key)
        verdict = "" if goal is None else f"  (goal < {goal} us: {'met' if value < goal else 'MISSED'})"
        print(f"{key:<36} {value:8.3f} us{verdict}")
    client.close()
    if args.json:
        result = {
            "bench": "core",
            "backend": "cpu",
            "machine": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "cubeplug": cubeplug.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "figures": figures,
            "goals_us": goals,
        }
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
