"""Host cost per call of the lang std fill/copy/axpy against the hand launchers they replaced (a probe).

    PYTHONPATH=. python bench/probes/std_host_cost.py [--backends opencl,webgpu] [--n 4096]
        [--calls 200] [--rounds 15] [--json PATH]

Three sides per op (f32, aligned handles: the vector kernels), each ``--calls`` calls back to back
with no sync (what the host spends queuing them; the sync after each sample is not timed):

- ``lang``: ``std.fill`` / ``std.copy`` / ``std.axpy`` (checks, then the lang kernel's launch);
- ``wrapper``: the std op as it was before the port (``git show cb5067a^:cubeplug/std/fill.py``):
  the same checks (dtype, count, buffers, the scalar's conversion), then the hand launcher;
- ``hand``: the hand launcher alone (``bench/reference/hand_elementwise.py``), the floor.

Each round runs every side once, in an order rotated round by round; per side the median over
rounds of microseconds per call with its interquartile range, and per pair the median of the
per-round ratios (``lang/hand``, ``lang/wrapper``) with theirs. Two clocks: ``wall``
(``perf_counter``) and ``cpu`` (``thread_time``, the calling thread's CPU time). On PoCL and
lavapipe the device is this machine's CPU: its worker threads run the kernels on the cores the host
thread needs, so wall time per call there includes waiting for them; the CPU clock leaves that out
(it still counts waking them). On the 2-core shared machine the wall figures drift by tens of
percent between runs; read the paired ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from paired import each_backend, run_header
from reference import hand_elementwise

import cubeplug
from cubeplug import std
from cubeplug.core.errors import ValidationError
from cubeplug.core.kernel import DTYPES, Scalar, dtype_of, to_scalar
from cubeplug.std import checks

CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.thread_time}


def sides(client: Any, n: int) -> dict[str, dict[str, Callable[[], Any]]]:
    """Per op, the three sides' calls on ``n`` f32 elements of fresh handles."""
    rng = np.random.default_rng(0)
    x = client.create(rng.standard_normal(n).astype(np.float32))
    y = client.create(rng.standard_normal(n).astype(np.float32))
    z = client.empty(4 * n)
    fill_hand = hand_elementwise.fill_launcher("f32")
    copy_hand, axpy_hand = hand_elementwise.copy_launcher(), hand_elementwise.axpy_launcher()

    # The pre-port std ops, line for line (their hand launchers lived in cubeplug.std then).
    def fill_wrapper(handle: Any, count: int, value: Any, dtype: Any = "f32") -> Any:
        name = dtype_of(dtype)
        if name not in hand_elementwise.C_TYPES:
            raise ValidationError(f"fill supports {', '.join(hand_elementwise.C_TYPES)}, not {name}")
        count = checks.count(count)
        checks.buffer(client, handle, count * DTYPES[name].itemsize, "fill: handle")
        typed = to_scalar(Scalar("value", name), value, "fill")
        hand_elementwise.fill_launcher(name)(client, (handle,), (typed,), count)
        return handle

    def copy_wrapper(src: Any, count: int, out: Any) -> Any:
        count = checks.count(count)
        checks.buffer(client, src, 4 * count, "copy: src")
        checks.buffer(client, out, 4 * count, "copy: out")
        hand_elementwise.copy_launcher()(client, (src, out), (), count)
        return out

    def axpy_wrapper(a: float, xs: Any, ys: Any, count: int) -> Any:
        count = checks.count(count)
        checks.buffer(client, xs, 4 * count, "axpy: x")
        checks.buffer(client, ys, 4 * count, "axpy: y")
        hand_elementwise.axpy_launcher()(client, (xs, ys), (to_scalar(Scalar("a", "f32"), a, "axpy"),), count)
        return ys

    return {
        "fill": {
            "lang": lambda: std.fill(client, z, n, 1.5),
            "wrapper": lambda: fill_wrapper(z, n, 1.5),
            "hand": lambda: fill_hand(client, (z,), (np.float32(1.5),), n),
        },
        "copy": {
            "lang": lambda: std.copy(client, x, n, out=z),
            "wrapper": lambda: copy_wrapper(x, n, z),
            "hand": lambda: copy_hand(client, (x, z), (), n),
        },
        "axpy": {
            "lang": lambda: std.axpy(client, 0.5, x, y, n),
            "wrapper": lambda: axpy_wrapper(0.5, x, y, n),
            "hand": lambda: axpy_hand(client, (x, y), (np.float32(0.5),), n),
        },
    }


def _summary(values: list[float], digits: int) -> dict[str, Any]:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return {"median": round(statistics.median(values), digits),
            "iqr": [round(q[0], digits), round(q[2], digits)]}


def measure_op(
    calls: dict[str, Callable[[], Any]], sync: Callable[[], None], k: int, rounds: int
) -> dict[str, Any]:
    """The op's sides timed in rotated rounds of ``k`` calls each, on both clocks."""
    names = list(calls)
    for fn in calls.values():  # warm: compile, plans, dispatchers
        for _ in range(max(1, k // 4)):
            fn()
    sync()
    us: dict[str, dict[str, list[float]]] = {c: {s: [] for s in names} for c in CLOCKS}
    for r in range(rounds):
        for s in names[r % len(names):] + names[: r % len(names)]:
            fn = calls[s]
            w0, c0 = time.perf_counter(), time.thread_time()
            for _ in range(k):
                fn()
            c1, w1 = time.thread_time(), time.perf_counter()
            sync()
            us["wall"][s].append((w1 - w0) / k * 1e6)
            us["cpu"][s].append((c1 - c0) / k * 1e6)
    out: dict[str, Any] = {}
    for clock, per in us.items():
        row: dict[str, Any] = {f"{s}_us": _summary(v, 2) for s, v in per.items()}
        for a, b in (("lang", "hand"), ("lang", "wrapper"), ("wrapper", "hand")):
            row[f"{a}/{b}"] = _summary([p / q for p, q in zip(per[a], per[b])], 3)
        out[clock] = row
    return out


def measure(backend: str, n: int, k: int, rounds: int) -> dict[str, Any]:
    client = cubeplug.client(backend)
    try:
        result: dict[str, Any] = {"device": str(client.device)}
        for op, calls in sides(client, n).items():
            result[op] = measure_op(calls, client.sync, k, rounds)
            brief = {c: {key: v["median"] for key, v in row.items()} for c, row in result[op].items()}
            print(backend, op, json.dumps(brief), flush=True)
        return result
    finally:
        client.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backends", default="opencl,webgpu", help="comma-separated client selectors")
    ap.add_argument("--n", type=int, default=4096, help="f32 elements per call")
    ap.add_argument("--calls", type=int, default=200, help="calls back to back per side per round")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", help="write the results here (after each backend)")
    args = ap.parse_args()
    results: dict[str, Any] = run_header(n=args.n, calls=args.calls, rounds=args.rounds, dtype="f32")
    each_backend(args.backends, lambda b: measure(b, args.n, args.calls, args.rounds), results, args.json)

if __name__ == "__main__":
    main()
