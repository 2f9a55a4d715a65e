"""Is it the binding or the memory? atax on several pooled and own-page sets, allocated alternately.

    python bench/probes/subbuffer_placement.py [selector] [--n 2048] [--sets 3] [--rounds 21]
        [--own-first]

Makes ``--sets`` pairs of input sets for the ATAX kernels of ``subbuffer_penalty.py``: one set of
pooled handles (the first set's matrix at the start of a page, bound as the page, the next ones
inside it, bound as sub-buffers) and one set of handles alone in pages of their own
(``client.persistent_memory()``), allocated pooled, own, pooled, own... (``--own-first``: own,
pooled, ...). Each round runs every set once, in an order rotated per round; each set's figure is
the median over rounds of its time over the first own set's in the same round. If the binding
cost something, every pooled set would be slower than every own set; if where the memory lies
matters, the sets differ by allocation order whatever their binding.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from subbuffer_penalty import ATAX1, ATAX2

import cubeplug
from cubeplug import CubeCount


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("selector", nargs="?", default=os.environ.get("CUBEPLUG_TEST_OPENCL", "opencl:0"))
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--sets", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--own-first", action="store_true")
    args = ap.parse_args()
    client = cubeplug.client(args.selector)
    n = args.n
    rng = np.random.default_rng(0)
    a, x = rng.random((n, n), np.float32), rng.random(n, np.float32)
    sets: list[tuple[str, list[Any]]] = []
    kinds = ("own", "pooled") if args.own_first else ("pooled", "own")
    for i in range(args.sets):
        for kind in kinds:
            if kind == "own":
                with client.persistent_memory():
                    hs = [client.create(a), client.create(x), client.empty(4 * n), client.empty(4 * n)]
            else:
                hs = [client.create(a), client.create(x), client.empty(4 * n), client.empty(4 * n)]
            sets.append((f"{kind}{i}", hs))
    count = CubeCount(-(-n // 64))

    def run(hs: list[Any], reps: int = 2) -> float:
        t0 = time.perf_counter()
        for _ in range(reps):
            client.launch(ATAX1, count, [hs[0], hs[1], hs[2]], [n])
            client.launch(ATAX2, count, [hs[0], hs[2], hs[3]], [n])
        client.sync()
        return (time.perf_counter() - t0) / reps * 1e3

    want = a.T @ (a @ x)
    for _, hs in sets:
        run(hs, 1)
        np.testing.assert_allclose(client.to_numpy(hs[3], "f32"), want, rtol=2e-3)
    times: dict[str, list[float]] = {name: [] for name, _ in sets}
    for r in range(args.rounds):
        for name, hs in sets[r % len(sets) :] + sets[: r % len(sets)]:
            times[name].append(run(hs))
    dev = client.server.storage.ctx.device
    print(f"{str(dev.name).strip()} [{str(dev.driver_version).strip()}] atax n={n}, {args.rounds} rounds")
    ref = times["own0"]
    for name, hs in sets:
        regions = [(h.memory().storage.id, h.memory().storage.offset) for h in hs]
        ratio = statistics.median(t / r for t, r in zip(times[name], ref, strict=True))
        ms = statistics.median(times[name])
        print(f"{name:8s} {ms:8.2f} ms  x{ratio:.3f} of own0  (page, offset): {regions}")


if __name__ == "__main__":
    main()
