"""Every f16 (f32-accumulating) candidate of ``std.matmul`` timed on each backend (a probe).

    PYTHONPATH=. python bench/probes/matmul_f16.py [size] [backend ...] [--variants]

Vulkan's f16 matmul ran at 1.45x CUDA's time on the H200 where its f32 matmul ran at 1.07x: this
times every candidate that takes f16 (device timestamps, rounds alternating the candidates, median
ms per call and TFLOP/s) on each backend, f32 beside it, so that the candidate each backend's
tuner picks and the gap of each can be read off. ``--variants`` adds std's bench-only stagings
(``STAGING_VARIANTS``).
"""

from __future__ import annotations

import importlib
import json
import sys
from datetime import datetime, timezone
from typing import Any

import numpy as np

import cubeplug

mm = importlib.import_module("cubeplug.std.matmul")
SKIP = ("naive", "tiled_8")  # far slower at this size: minutes of device time for nothing


def per_backend(selector: str, size: int, variants: bool, rounds: int = 5) -> dict[str, Any]:
    client = cubeplug.client(selector)
    out: dict[str, Any] = {"device": str(client.device)}
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
        plans = {n: p for n, p in every.items() if n not in SKIP and p.fits(client, key)}
        want = a.astype(np.float64) @ b.astype(np.float64)
        for name, plan in plans.items():
            mm.launch(client, plan, ha, hb, hc, size, size, size, dtype)
            got = client.to_numpy(hc, dtype).reshape(size, size).astype(np.float64)
            err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
            assert err < 5e-3, f"{selector} {dtype} {name}: relative error {err}"
        args = (ha, hb, hc, size, size, size, dtype)
        times: dict[str, list[float]] = {n: [] for n in plans}
        for _ in range(rounds):
            for name, plan in plans.items():
                def loop(plan: Any = plan, args: tuple[Any, ...] = args) -> None:
                    for _ in range(5):
                        mm.launch(client, plan, *args)
                _, duration = client.profile(loop)
                times[name].append(duration.seconds() / 5)
        flops = 2.0 * size**3
        out[dtype] = {
            n: {"median_ms": round(float(np.median(t)) * 1e3, 4),
                "tflops": round(flops / float(np.median(t)) / 1e12, 2)}
            for n, t in sorted(times.items(), key=lambda kv: float(np.median(kv[1])))
        }  # fmt: skip
    client.close()
    return out


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--variants"]
    size = int(args[0]) if args else 4096
    backends = args[1:] or ["cuda", "webgpu"]
    variants = "--variants" in sys.argv
    out = {s: per_backend(s, size, variants) for s in backends}
    date = datetime.now(timezone.utc).isoformat(timespec="seconds")
    print(json.dumps({"date": date, "argv": sys.argv, "size": size, "backends": out}, indent=1))


if __name__ == "__main__":
    main()
