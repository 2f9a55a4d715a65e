"""Memory pools alone: microseconds per reserve + release pair through MemoryManagement.

    python bench/bench_memory_pools.py [--json bench/results/memory-pools.json] [-n 200000]

The storage is trivial (no memory behind the pages), so the figures are the pools' own cost: the
steady state of reserving 1 MiB and dropping the token (the headline figure, goal < 2 us), the
same with 64 other slices live in the page, two sizes alternating, a size-0 reservation and a
600 MiB reservation served by the exclusive tail. Each figure is the best of several repeats.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cubeplug.core.memory import MemoryManagement
from cubeplug.core.storage import (
    ComputeStorage,
    MemoryProperties,
    StorageHandle,
    next_storage_id,
)

MIB = 1 << 20
GOAL_US = 2.0


class NullStorage(ComputeStorage):
    """Pages with no memory behind them: ids and sizes only."""

    alignment = 256

    def alloc(self, size: int) -> StorageHandle:
        return StorageHandle(next_storage_id(), 0, size)

    def dealloc(self, id: int) -> None:
        pass

    def get(self, handle: StorageHandle) -> StorageHandle:
        return handle


def best_us(fn: Callable[[int], None], n: int, repeats: int = 7) -> float:
    """Best per-iteration time in microseconds over ``repeats`` runs of ``fn(n)``."""
    fn(min(n, 1000))  # warm up: pages allocated, routes cached
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(n)
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def pairs(mm: MemoryManagement, size: int) -> Callable[[int], None]:
    reserve = mm.reserve

    def run(n: int) -> None:
        for _ in range(n):
            token = reserve(size)
            del token

    return run


def alternating(mm: MemoryManagement, a: int, b: int) -> Callable[[int], None]:
    reserve = mm.reserve

    def run(n: int) -> None:
        for _ in range(n // 2):
            token = reserve(a)
            del token
            token = reserve(b)
            del token

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("-n", type=int, default=200_000, help="pairs per repeat")
    args = ap.parse_args()

    props = MemoryProperties(max_page_size=4 << 30, alignment=256)

    def fresh() -> MemoryManagement:
        return MemoryManagement(NullStorage(), props)

    crowded = fresh()
    others = [crowded.reserve(16 << 10) for _ in range(64)]
    figures = {
        "pools_reserve_release_1mib_us": best_us(pairs(fresh(), MIB), args.n),
        "pools_1mib_with_64_live_slices_us": best_us(pairs(crowded, MIB), args.n),
        "pools_alternating_1mib_4kib_us": best_us(alternating(fresh(), MIB, 4096), args.n),
        "pools_reserve_release_0b_us": best_us(pairs(fresh(), 0), args.n),
        "pools_reserve_release_600mib_exclusive_us": best_us(pairs(fresh(), 600 * MIB), args.n),
    }
    del others
    headline = "pools_reserve_release_1mib_us"
    for key, value in figures.items():
        verdict = ""
        if key == headline:
            verdict = f"  (goal < {GOAL_US} us: {'met' if value < GOAL_US else 'MISSED'})"
        print(f"{key:<44} {value:8.3f} us{verdict}")
    if args.json:
        result = {
            "bench": "memory-pools",
            "machine": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "pairs_per_repeat": args.n,
            "figures": figures,
            "goals_us": {headline: GOAL_US},
        }
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
