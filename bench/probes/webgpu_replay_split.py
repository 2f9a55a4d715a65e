"""Where a WebGPU replay's time goes: host encoding + submit against the wait, beside raw wgpu.

    python bench/probes/webgpu_replay_split.py [launches] [rounds]
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

import cubeplug
from cubeplug.bench.raw import TINY_N
from cubeplug.bench.raw_webgpu import WgpuRaw
from cubeplug.bench.suite import TINY

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 15
c = cubeplug.client("webgpu")
x = c.create(np.zeros(TINY_N, np.float32))
with c.capture() as g:
    for _ in range(n):
        c.launch(TINY, 1, [x], [1.0, TINY_N])
raw = WgpuRaw(c)
device, pipeline, bg = raw.device, raw.pipeline, raw.bind_group


def raw_encode() -> None:
    raw.batch(n)


run = g._native.tasks[0]  # type: ignore[union-attr]  # (RUN, pipeline, bind_group, block, groups)


def raw_with_ours() -> None:
    """Raw wgpu calls with our pipeline and bind group (a pooled page, the scalar arena at a
    dynamic offset): isolates what the binding costs from what our encoding loop costs."""
    enc = device.create_command_encoder()
    p = enc.begin_compute_pass()
    p.set_pipeline(run[1])
    p.set_bind_group(0, run[2], [0])
    d = p.dispatch_workgroups
    for _ in range(n):
        d(1)
    p.end()
    device.queue.submit([enc.finish()])


def ours_encode() -> None:
    g.replay()
    c.flush()


def eager_encode() -> None:
    for _ in range(n):
        c.launch(TINY, 1, [x], [1.0, TINY_N])
    c.flush()


rows: dict[str, list[tuple[float, float]]] = {"raw": [], "raw+ours": [], "replay": [], "eager": []}
for _ in range(rounds):
    for name, enc, wait in (("raw", raw_encode, raw.wait), ("raw+ours", raw_with_ours, raw.wait),
                            ("replay", ours_encode, c.sync),
                            ("eager", eager_encode, c.sync)):  # fmt: skip
        t0 = time.perf_counter()
        enc()
        t1 = time.perf_counter()
        wait()
        t2 = time.perf_counter()
        rows[name].append(((t1 - t0) / n * 1e6, (t2 - t1) / n * 1e6))
for name, r in rows.items():
    e = statistics.median(a for a, _ in r)
    w = statistics.median(b for _, b in r)
    print(f"{name:8s} host {e:6.2f} us/kernel  wait {w:6.2f} us/kernel  total {e + w:6.2f}")
