"""Where std's ``tiled_32`` loses to its hand twin: edits of its generated C source, timed (a probe).

    PYTHONPATH=. python bench/probes/tiled32_variants.py [backend] [size] [rounds]

The lang kernel ``tiled_32`` ran at 0.965x its hand twin under CUDA on the H200 with the same
registers a unit. Its generated source differs from the hand kernel's in a few ways; each variant
below undoes one of them in the generated text, launched as a plain ``Kernel`` (as the hand kernel
is) so that every variant takes the same launch path:

* ``lang``: the generated source as it is;
* ``int_loops``: the staging and product loops count in ``int`` (the hand kernel's), not ``unsigned int``;
* ``ternary``: the guarded loads as ``cond ? load : 0.0f`` expressions (the hand kernel's), not
  if/else into a temporary;
* ``all``: both together; ``hand``: the hand kernel.

(The first run, ``../results/tiled32-variants-h100-2026-11-26.json``, also had ``no_copies``: no
``m = m_`` copies of the scalars, 0.968. std's kernels read their parameters since, so that
edit has nothing left to undo.)

Each is checked against numpy, then timed with device timestamps in rounds that alternate the
variants (median and best per call, ms), with the ratio hand time / variant time.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import cubeplug
from cubeplug import CubeCount, Kernel
from cubeplug.bench.suite import BackendBench, plan_for
from cubeplug.core.handle import Handle

sys.path.insert(0, "bench")
from paired import run_header
from reference import hand_matmul

mm = importlib.import_module("cubeplug.std.matmul")


def _int_loops(src: str) -> str:
    src = src.replace("unsigned int r = 0u;", "int r = 0;").replace("unsigned int p = 0u;", "int p = 0;")
    src = src.replace("for (r = 0u; r < 4u; r += 1u)", "for (r = 0; r < 4; r += 1)")
    return src.replace("for (p = 0u; p < 32u; p += 1u)", "for (p = 0; p < 32; p += 1)")


_SELECT = re.compile(
    r"if \((?P<cond>.+?)\) \{\n(?:#line[^\n]*\n)?\s*(?P<var>t_sel\w*) = (?P<load>[^;]+);\n"
    r"(?:#line[^\n]*\n)?\s*\} else \{\n(?:#line[^\n]*\n)?\s*(?P=var) = 0\.0f;\n\s*\}"
)


def _ternary(src: str) -> str:
    out, n = _SELECT.subn(lambda m: f"{m['var']} = ({m['cond']}) ? {m['load']} : 0.0f;", src)
    assert n == 2, f"expected the two guarded loads, found {n}"
    return out


def variants(client: Any) -> dict[str, Kernel]:
    plan = mm.PLANS["tiled_32"]
    lang = mm.matmul_tiled.source(client, plan.cube, checked=False, **mm.comptime(plan, "f32"))
    edits: dict[str, Callable[[str], str]] = {
        "lang": lambda s: s,
        "int_loops": _int_loops,
        "ternary": _ternary,
        "all": lambda s: _ternary(_int_loops(s)),
    }
    kernels = {}
    for name, edit in edits.items():
        entry = f"tiled32_{name}"
        src = edit(lang).replace("matmul_tiled_kernel(", f"{entry}(")
        kernels[name] = Kernel(entry, hand_matmul._params(False), {"c": src}, cube_dim=plan.cube)
    kernels["hand"] = hand_matmul.tiled_plan(32).kernel
    return kernels


def time_variants(
    client: Any, kernels: dict[str, Kernel], size: int, rounds: int
) -> dict[str, dict[str, float]]:
    """Each of ``kernels`` (a ``size``-square f32 matmul each, one of them ``hand``) checked against
    numpy, then timed on the device's clock in ``rounds`` rounds that alternate them: per kernel the
    median and best ms per call and ``hand_over_variant``, the hand kernel's median / its own."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    ha, hb = client.create(a), client.create(b)
    hc: Handle = client.empty(4 * size * size)
    count = CubeCount(size // 32, size // 32)
    for name, kernel in kernels.items():
        client.launch_unchecked(kernel, count, [ha, hb, hc], [size, size, size])
        got = client.to_numpy(hc, "f32").reshape(size, size)
        err = float(np.max(np.abs(got - want)))
        assert err < 1e-3 * size, f"{name}: max error {err}"
    iters = 20 if size >= 1024 else 5
    bench = BackendBench(client, None, plan_for(client, quick=True))
    times: dict[str, list[float]] = {name: [] for name in kernels}
    for _ in range(rounds):  # one device-timed loop of each variant a round: drift hits them all
        for name, kernel in kernels.items():
            def launch(kernel: Kernel = kernel) -> None:
                client.launch_unchecked(kernel, count, [ha, hb, hc], [size, size, size])
            times[name].append(bench.ours(launch, iters, 1, device=True).median * 1e3)
    hand = float(np.median(times["hand"]))
    return {
        name: {"median_ms": round(float(np.median(t)), 4), "best_ms": round(min(t), 4),
               "hand_over_variant": round(hand / float(np.median(t)), 4)}
        for name, t in times.items()
    }  # fmt: skip


def main() -> None:
    backend = sys.argv[1] if len(sys.argv) > 1 else "cuda"
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 9
    client = cubeplug.client(backend)
    rows = time_variants(client, variants(client), size, rounds)
    print(json.dumps(run_header(device=str(client.device), size=size, rounds=rounds, rows=rows), indent=1))


if __name__ == "__main__":
    main()
