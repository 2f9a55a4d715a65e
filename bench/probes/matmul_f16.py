"""Every f16 (f32-accumulating) candidate of ``std.matmul`` timed on each backend (a probe).

    PYTHONPATH=. python bench/probes/matmul_f16.py [size] [backend ...] [--variants]
        [--only NAME,NAME] [--before FILE]

Vulkan's f16 matmul ran at 1.45x CUDA's time on the H200 where its f32 matmul ran at 1.07x: this
times every candidate that takes f16 (device timestamps, rounds alternating the candidates, median
ms per call, TFLOP/s and the spread of the rounds) on each backend, f32 beside it, so that the
candidate each backend's tuner picks and the gap of each can be read off. ``--variants`` adds
std's bench-only stagings (``STAGING_VARIANTS``); ``--only`` keeps the named plans.

``--before FILE`` pairs each register-blocked plan with the kernel of another commit's
``matmul_reg.py`` (``git show COMMIT:cubeplug/std/matmul_reg.py > FILE``), timed as
``NAME@before`` in the same rounds, with the ratio this tree / FILE per plan (``after_over_before``).
The f32 sources of both are the same when a change touches only f16, so the f32 ratios show the
run's noise.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import json
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import cubeplug
from cubeplug.bench.suite import BackendBench, plan_for
from cubeplug.core.kernel import CubeCount

sys.path.insert(0, "bench")  # run from the repository root
from paired import run_header

mm = importlib.import_module("cubeplug.std.matmul")
SKIP = ("naive", "tiled_8")  # far slower at this size: minutes of device time for nothing


def load_before(path: str) -> Any:
    """The ``matmul_reg`` kernel of another commit's ``matmul_reg.py`` at ``path``."""
    spec = importlib.util.spec_from_file_location("matmul_reg_before", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.matmul_reg


def before_launch(client: Any, kernel: Any, plan: Any, args: tuple[Any, ...]) -> Callable[[], None]:
    """A launch of ``plan`` through the other commit's ``kernel``: this tree's comptime values, less
    those the kernel does not take (the handles are exactly m*k, k*n, m*n elements, so they need
    none of ``mm.launch``'s prefix views)."""
    ha, hb, hc, m, n, k, name = args
    taken = inspect.signature(kernel.fn).parameters
    comptime = {key: v for key, v in mm.comptime(plan, name).items() if key in taken}
    count = CubeCount(-(-n // plan.block_n), -(-m // plan.block_m))

    def go() -> None:
        kernel.launch_unchecked(client, count, plan.cube, ha, hb, hc, m, n, k, **comptime)

    return go


def per_backend(
    selector: str, size: int, variants: bool, only: set[str] | None, before: Any, rounds: int = 5
) -> dict[str, Any]:
    client = cubeplug.client(selector)
    out: dict[str, Any] = {"device": str(client.device)}
    bench = BackendBench(client, None, plan_for(client, quick=True))
    rng = np.random.default_rng(0)
    for dtype in ("f16", "f32"):
        if dtype not in client.capabilities.dtypes:
            out[dtype] = "no f16 on this device"
            continue
        a = rng.standard_normal((size, size)).astype(dtype.replace("f", "float"))
        b = rng.standard_normal((size, size)).astype(dtype.replace("f", "float"))
        ha, hb = client.create(a), client.create(b)
        hc = client.empty(a.itemsize * size * size)
        key = mm.matmul_key(client, "balanced", ha, hb, size, size, size, hc, dtype)
        every = {**mm.PLANS, **(mm.STAGING_VARIANTS if variants else {})}
        plans = {n: p for n, p in every.items()
                 if n not in SKIP and p.fits(client, key) and (only is None or n in only)}
        args = (ha, hb, hc, size, size, size, dtype)
        calls: dict[str, Callable[[], None]] = {
            n: functools.partial(mm.launch, client, p, *args) for n, p in plans.items()
        }
        if before is not None:
            calls.update({f"{n}@before": before_launch(client, before, p, args)
                          for n, p in plans.items() if p.kernel is mm.matmul_reg})
        want = a.astype(np.float64) @ b.astype(np.float64)
        for name, call in calls.items():
            call()
            got = client.to_numpy(hc, dtype).reshape(size, size).astype(np.float64)
            err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
            assert err < 5e-3, f"{selector} {dtype} {name}: relative error {err}"
        times: dict[str, list[float]] = {n: [] for n in calls}
        for _ in range(rounds):  # one device-timed loop of each candidate a round: drift hits them all
            for name, call in calls.items():
                times[name].append(bench.ours(call, 5, 1, device=True).median)
        flops = 2.0 * size**3
        medians = {n: float(np.median(t)) for n, t in times.items()}
        out[dtype] = {
            n: {"median_ms": round(medians[n] * 1e3, 4), "tflops": round(flops / medians[n] / 1e12, 2),
                "spread_pct": round((max(times[n]) - min(times[n])) / medians[n] * 100, 1)}
            for n in sorted(times, key=medians.__getitem__)
        }  # fmt: skip
        if before is not None:
            out[f"{dtype}_after_over_before"] = {
                n: round(medians[n] / medians[f"{n}@before"], 3) for n in calls if f"{n}@before" in medians
            }
    client.close()
    return out


def main() -> None:
    argv = sys.argv[1:]
    options: dict[str, str] = {}
    for flag in ("--only", "--before"):
        if flag in argv:
            at = argv.index(flag)
            options[flag] = argv[at + 1]
            del argv[at : at + 2]
    args = [a for a in argv if a != "--variants"]
    size = int(args[0]) if args else 4096
    backends = args[1:] or ["cuda", "webgpu"]
    variants = "--variants" in argv
    only = set(options["--only"].split(",")) if "--only" in options else None
    unknown = (only or set()) - set(mm.PLANS) - set(mm.STAGING_VARIANTS)
    if unknown:
        names = [*mm.PLANS, *mm.STAGING_VARIANTS]
        sys.exit(f"--only: no plans {sorted(unknown)}; the plans: {', '.join(names)}")
    before = load_before(options["--before"]) if "--before" in options else None
    out = {s: per_backend(s, size, variants, only, before) for s in backends}
    print(json.dumps(run_header(size=size, backends=out), indent=1))


if __name__ == "__main__":
    main()
