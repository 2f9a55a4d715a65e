"""Launch overhead of a cubeplug.lang kernel against the same hand-written Kernel, per backend.

Both sides launch the same device work: ``lang`` calls ``axpy.launch(client, count, dim, x, y, a)``
(the cached launcher: a dict lookup, splitting buffers from scalars, the hidden lengths), ``hand``
calls ``client.launch(kernel, count, [x, y], [a, len_x, len_y])`` with the specialized Kernel the
language produced, so the difference is the language's own per-launch cost. Paired alternating
loops (bench/paired.py); the first specialization time of a 40-line kernel is reported too.
``comptime_checked`` times a kernel with a comptime parameter (a shared-memory block sum) the same
way: its dispatcher calls the remembered specialization's launcher.

On the CPU backend, ``elementwise`` also times the interpreter's throughput: ``axpy`` over
``--elements`` floats (one launch of 256-unit cubes) against a hand-written ``python``-dialect
Kernel doing ``y[:n] += a * x[:n]`` (best of rounds, ms per launch, launch and sync).

    PYTHONPATH=. python bench/bench_lang.py [--backends cpu,opencl,webgpu] [--elements 1048576] [--json FILE]

(``PYTHONPATH=.``: a script's own folder, not the working directory, starts ``sys.path``, so
without it the cubeplug installed in the environment is timed, not this checkout's.)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from paired import paired

import cubeplug
from cubeplug import lang as cl
from cubeplug.lang import Array, Comptime, f32, u32


@cl.kernel
def axpy(x: Array[f32], y: Array[f32], a: f32):  # type: ignore[no-untyped-def]
    i = cl.ABSOLUTE_POS
    if i < len(y):
        y[i] += a * x[i]


@cl.kernel
def block_sum(x: Array[f32], out: Array[f32], B: Comptime[int]):  # type: ignore[no-untyped-def]
    buf = cl.shared(f32, B)
    u = cl.UNIT_POS_X
    i = cl.ABSOLUTE_POS_X
    buf[u] = x[i] if i < len(x) else 0.0
    cl.sync_cube()
    s = u32(B // 2)
    while s > 0:
        if u < s:
            buf[u] += buf[u + s]
        cl.sync_cube()
        s = s >> 1
    if u == 0:
        out[cl.CUBE_POS_X] = buf[0]


@cl.kernel
def matmul(a: Array[f32], b: Array[f32], c: Array[f32], M: u32, N: u32, K: u32, T: Comptime[int]):  # type: ignore[no-untyped-def]
    As = cl.shared(f32, T * T)
    Bs = cl.shared(f32, T * T)
    tx = cl.UNIT_POS_X
    ty = cl.UNIT_POS_Y
    row = cl.CUBE_POS_Y * T + ty
    col = cl.CUBE_POS_X * T + tx
    acc = f32(0)
    for k0 in range(0, K, T):
        if row < M and k0 + tx < K:
            As[ty * T + tx] = a[row * K + k0 + tx]
        else:
            As[ty * T + tx] = 0.0
        if k0 + ty < K and col < N:
            Bs[ty * T + tx] = b[(k0 + ty) * N + col]
        else:
            Bs[ty * T + tx] = 0.0
        cl.sync_cube()
        for k in cl.unroll(range(T)):
            acc += As[ty * T + k] * Bs[k * T + tx]
        cl.sync_cube()
    if row < M and col < N:
        c[row * N + col] = acc


def measure(backend: str, n: int, rounds: int) -> dict[str, Any]:
    client = cubeplug.client(backend)
    x = client.create(np.ones(256, np.float32))
    y = client.create(np.zeros(256, np.float32))
    count = cubeplug.CubeCount(1)
    out: dict[str, Any] = {"device": str(client.device)}
    for mode in ("checked", "unchecked"):
        checked = mode == "checked"
        spec = axpy.specialized(client, 256, checked=checked)
        kernel = spec.kernel
        lens = [256] * len(spec.ir.hidden_lengths)

        # Both sides look their launch up on every call, as user code does (``axpy.launch(...)``,
        # ``client.launch(...)``): a bound ``axpy.launch`` taken before the first launch is the
        # class's method, which forwards to the generated dispatcher (one frame more).
        def lang(k: int, checked: bool = checked) -> None:
            if checked:
                for _ in range(k):
                    axpy.launch(client, count, 256, x, y, 1.0)
            else:
                for _ in range(k):
                    axpy.launch_unchecked(client, count, 256, x, y, 1.0)

        def hand(k: int, kernel: Any = kernel, checked: bool = checked, lens: Any = lens) -> None:
            if checked:
                for _ in range(k):
                    client.launch(kernel, count, [x, y], [1.0, *lens])
            else:
                for _ in range(k):
                    client.launch_unchecked(kernel, count, [x, y], [1.0, *lens])

        out[mode] = paired(lang, hand, n, rounds, drain=client.sync)
    # A kernel with a comptime parameter (its dispatcher calls the remembered specialization's
    # launcher), checked: the same against its Kernel launched by hand.
    sums = client.create(np.zeros(1, np.float32))
    spec = block_sum.specialized(client, 256, checked=True, B=256)
    sum_lens = [256] * len(spec.ir.hidden_lengths)

    def lang_ct(k: int) -> None:
        for _ in range(k):
            block_sum.launch(client, count, 256, x, sums, B=256)

    def hand_ct(k: int, kernel: Any = spec.kernel) -> None:
        for _ in range(k):
            client.launch(kernel, count, [x, sums], sum_lens)

    out["comptime_checked"] = paired(lang_ct, hand_ct, n, rounds, drain=client.sync)
    matmul._specs.clear()  # time a first specialization, not a cache hit
    t0 = time.perf_counter()
    matmul.specialize_for("c", None, (16, 16, 1), True, {"T": 16})
    out["specialize_matmul_c_ms"] = round((time.perf_counter() - t0) * 1e3, 2)
    client.close()
    return out


def elementwise(n: int, rounds: int = 7, reps: int = 10) -> dict[str, Any]:
    """axpy over ``n`` floats on the CPU backend: the interpreter against hand-written numpy."""

    def axpy_py(launch: Any, x: Any, y: Any, a: Any, n: Any) -> None:
        y[:n] += a * x[:n]

    client = cubeplug.client("cpu")
    x = client.create(np.ones(n, np.float32))
    y = client.create(np.zeros(n, np.float32))
    hand = cubeplug.Kernel(
        "axpy_hand",
        [cubeplug.Buffer("x", "f32", "read"), cubeplug.Buffer("y", "f32"), cubeplug.Scalar("a", "f32"),
         cubeplug.Scalar("n", "u32")],
        {"python": axpy_py}, cube_dim=256,
    )
    count = cubeplug.CubeCount((n + 255) // 256)
    runs = {
        "lang_checked_ms": lambda: axpy.launch(client, count, 256, x, y, 2.0),
        "lang_unchecked_ms": lambda: axpy.launch_unchecked(client, count, 256, x, y, 2.0),
        "hand_ms": lambda: client.launch(hand, count, [x, y], [2.0, n]),
    }
    best = dict.fromkeys(runs, float("inf"))
    for fn in runs.values():
        fn()
    client.sync()
    for _ in range(rounds):  # alternate, so drift on a busy host hits every side
        for name, fn in runs.items():
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            client.sync()
            best[name] = min(best[name], (time.perf_counter() - t0) / reps * 1e3)
    client.close()
    out: dict[str, Any] = {"elements": n, **{k: round(v, 3) for k, v in best.items()}}
    out["ratio_checked"] = round(best["lang_checked_ms"] / best["hand_ms"], 2)
    out["ratio_unchecked"] = round(best["lang_unchecked_ms"] / best["hand_ms"], 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="cpu,opencl,webgpu")
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--elements", type=int, default=1 << 20, help="elementwise size on cpu (0: skip)")
    parser.add_argument("--json")
    args = parser.parse_args()
    results: dict[str, Any] = {
        "host": platform.node(), "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "argv": sys.argv[1:],
    }
    for backend in args.backends.split(","):
        try:
            results[backend] = measure(backend, args.n, args.rounds)
        except cubeplug.CubeplugError as e:
            results[backend] = {"error": str(e)}
        print(backend, json.dumps(results[backend]), flush=True)
    if "cpu" in args.backends.split(",") and args.elements:
        results["cpu_elementwise"] = elementwise(args.elements)
        print("cpu_elementwise", json.dumps(results["cpu_elementwise"]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
