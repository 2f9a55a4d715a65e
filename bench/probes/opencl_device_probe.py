"""What the device probe adds to the first ``cubeplug.client("opencl")`` of a process.

    python3 bench/probes/opencl_device_probe.py [rounds]      (default 15)

Each round starts three fresh processes, in rotating order, each timing its first OpenCL client:
- ``disk``: as usual, after an earlier process left the probe's outcomes on disk (probe_cache.py);
- ``build``: with an empty cache directory, so the probe kernel is built on every device (PoCL's own
  kernel cache is warm after the warm-up);
- ``none``: the probe replaced by "compiles", which is what a client took before the probe existed.
Prints the medians, the spread, and the paired differences against ``none``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
mode = sys.argv[1]
from cubeplug.backends.opencl import devices
if mode == "none":
    devices.compile_error = lambda device: None
import pyopencl  # imported before the clock starts in every mode
t0 = time.perf_counter()
import cubeplug
client = cubeplug.client("opencl")
t1 = time.perf_counter()
labels = [s.label + (" offered" if s.usable else " left out") for s in devices.survey()]
print(json.dumps({"ms": (t1 - t0) * 1e3, "devices": labels}))
"""


def run(mode: str, cache: str) -> dict[str, object]:
    env = dict(os.environ)
    env["CUBEPLUG_CACHE_DIR"] = tempfile.mkdtemp() if mode == "build" else cache
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True, env=env
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def spread(xs: list[float]) -> str:
    q = statistics.quantiles(xs, n=4)
    low, high, mid = min(xs), max(xs), statistics.median(xs)
    return f"median {mid:6.1f} ms  [IQR {q[0]:.1f}, {q[2]:.1f}; min {low:.1f}, max {high:.1f}]"


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    cache = tempfile.mkdtemp()
    modes = ("disk", "build", "none")
    for mode in modes:  # warm-up: PoCL's kernel cache, the disk cache, the OS page cache
        run(mode, cache)
    times: dict[str, list[float]] = {m: [] for m in modes}
    seen: object = None
    for i in range(rounds):
        for mode in modes[i % 3 :] + modes[: i % 3]:
            got = run(mode, cache)
            times[mode].append(float(got["ms"]))  # type: ignore[arg-type]
            seen = got["devices"]
    print(f"devices: {seen}")
    for mode in modes:
        print(f"first client, {mode:5}: {spread(times[mode])}")
    for mode in ("disk", "build"):
        diffs = [a - b for a, b in zip(times[mode], times["none"])]
        print(f"added by the probe, {mode:5} (paired): {spread(diffs)}")


if __name__ == "__main__":
    main()
