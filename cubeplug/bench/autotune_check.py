"""Autotune checks: the tuner's choice against every candidate measured exhaustively, and a second
process that must reuse the persisted choice without benchmarking anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cubeplug import std
from cubeplug.core.tune import DB_NAME, TunableSet, new_tuner


def op_inputs(client: Any, op: str, size: int) -> tuple[TunableSet, tuple[Any, ...]]:
    """The tunable set of ``op`` ("reduce_sum" or "matmul") and inputs of ``size``, filled on the device."""
    if op == "reduce_sum":
        x = std.fill(client, client.empty(4 * size), size, 1.0)
        return std.REDUCE_SUM, (x, size)
    if op == "matmul":
        a = std.fill(client, client.empty(4 * size * size), size * size, 0.5)
        b = std.fill(client, client.empty(4 * size * size), size * size, 0.25)
        return std.MATMUL, (a, b, size, size, size, None)
    raise ValueError(f"unknown op {op!r}; use reduce_sum or matmul")


def check(client: Any, selector: str, op: str, size: int, samples: int = 10) -> dict[str, Any]:
    """Tune ``op`` at ``size`` into a fresh cache, measure every candidate, then ask a second process."""
    tunables, inputs = op_inputs(client, op, size)
    folder = tempfile.mkdtemp(prefix="cubeplug-autotune-check-")
    tuner = new_tuner(client, tunables.name, cache_path=Path(folder) / DB_NAME)
    t0 = time.perf_counter()
    tuner.execute(tunables, client, *inputs)
    client.sync()
    tune_seconds = time.perf_counter() - t0
    key = tunables.key(client, tuner.level, *inputs)
    chosen = tuner.results[key].fastest
    runs_tuning = tuner.stats.runs
    outcomes = [o for o in tuner.measure_all(tunables, client, *inputs, samples=samples) if o.samples]
    best = min(outcomes, key=lambda o: o.median)
    picked = next(o for o in outcomes if o.name == chosen)
    second = second_process(selector, tuner.level, op, size, folder)
    return {
        "op": op,
        "size": size,
        "level": tuner.level,
        "key": str(key),
        "chosen": chosen,
        "tune_seconds": round(tune_seconds, 3),
        "benchmark_runs_while_tuning": runs_tuning,
        "exhaustive_best": best.name,
        "exhaustive_ms": {o.name: round(o.median * 1e3, 5) for o in sorted(outcomes, key=lambda o: o.median)},
        "ratio_chosen_over_exhaustive_best_median": round(picked.median / best.median, 4),
        "ratio_chosen_over_exhaustive_best_min": round(picked.best / best.best, 4),
        "within_5_percent": picked.median <= 1.05 * best.median,
        "second_process": second,
        "second_process_reused": bool(
            second.get("tunings") == 0
            and second.get("persistent_hits") == 1
            and second.get("fastest") == chosen
        ),
    }


def second_process(selector: str, level: str, op: str, size: int, cache_dir: str) -> dict[str, Any]:
    """Run ``op`` once in a fresh interpreter sharing ``cache_dir``; what its tuner did, as a mapping."""
    env = {**os.environ, "CUBEPLUG_CACHE_DIR": cache_dir, "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, "-m", "cubeplug.bench.reuse", selector, level, op, str(size)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-6:]
        return {"error": f"exit status {proc.returncode}", "output": tail}
    out: dict[str, Any] = json.loads(lines[-1])
    out["process_seconds"] = round(time.perf_counter() - t0, 3)
    return out
